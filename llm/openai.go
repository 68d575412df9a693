package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Structured output modes of Config.StructuredOutput.
const (
	// StructuredAuto sends response_format json_schema until the endpoint
	// rejects it once, then describes the schema in a system message.
	StructuredAuto = "auto"
	// StructuredOn always sends response_format json_schema.
	StructuredOn = "on"
	// StructuredOff never sends response_format; the schema is described in
	// a system message.
	StructuredOff = "off"
)

const (
	defaultTimeout = 2 * time.Minute
	// maxRetryAfter caps how long one Retry-After may hold a call. An
	// endpoint that asks for longer is not retried: the caller learns how
	// long it asked for (Error.RetryAfter).
	maxRetryAfter = 10 * time.Second
	// baseBackoff is the first wait before a retry when the endpoint gave
	// no Retry-After; it doubles with each attempt.
	baseBackoff = 500 * time.Millisecond
	// maxResponseBytes bounds what we read from an endpoint, so a broken or
	// hostile endpoint cannot exhaust the hub's memory.
	maxResponseBytes = 16 << 20
	// maxErrorDetail bounds how much of an endpoint's error text we keep.
	maxErrorDetail = 300
	// defaultConns is how many connections to the endpoint stay open for
	// reuse: every spoke of every concurrent request may be waiting on a
	// model call at once (100 users arriving at once are 100 calls), and
	// a new connection per call costs a handshake (a round trip or two
	// with TLS) and, on both ends, a dozen system calls, two goroutines
	// and fresh buffers. An idle connection costs some 30 KiB, and ends
	// after 90 s unused.
	defaultConns = 256
)

// Config configures a Client.
type Config struct {
	// BaseURL is the endpoint's API root, e.g. https://api.openai.com/v1 or
	// http://127.0.0.1:11434/v1. Required.
	BaseURL string
	// APIKey is sent as a bearer token. It comes from the environment and
	// may be empty for local endpoints.
	APIKey string
	// Timeout bounds each HTTP attempt; 0 means 2 minutes.
	Timeout time.Duration
	// StructuredOutput is StructuredAuto (also when empty), StructuredOn or
	// StructuredOff: whether requests with a ResponseSchema send
	// response_format json_schema.
	StructuredOutput string
	// MaxRetries is how many times a call is retried after a 429, a 5xx or
	// a connection failure, honoring Retry-After (capped at 10 s) within the
	// caller's context. 0 means 1; a negative value disables retries.
	MaxRetries int
	// MaxConns is how many idle connections to the endpoint are kept for
	// reuse; 0 means 256.
	MaxConns int
}

// Client talks to one OpenAI-compatible endpoint. It is safe for concurrent
// use.
type Client struct {
	base       string // the API root, …/v1
	url        string // …/chat/completions
	apiKey     string
	http       *http.Client
	timeout    time.Duration
	mode       string
	maxRetries int
	// lacksStructured is set once the endpoint rejected response_format in
	// auto mode; from then on schemas go into a system message.
	lacksStructured atomic.Bool
	// thinksOnly holds the models that answered only in their reasoning:
	// their requests ask for no reasoning (reasoning_effort "none").
	thinksOnly sync.Map
	// strictIDs is set once the endpoint refused our tool-call ids.
	strictIDs atomic.Bool
	// compilesGrammars is set once the endpoint's grammar compiler failed
	// on a schema.
	compilesGrammars atomic.Bool
	// toldTextCalls is set once a tool call written as text was logged.
	toldTextCalls atomic.Bool
}

// NewClient returns a client for cfg's endpoint. It does not contact it.
func NewClient(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("failed to parse llm base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("llm base URL %q is not an http(s) URL", cfg.BaseURL)
	}
	mode := cfg.StructuredOutput
	switch mode {
	case "":
		mode = StructuredAuto
	case StructuredAuto, StructuredOn, StructuredOff:
	default:
		return nil, fmt.Errorf("llm structured output mode %q is not one of auto, on, off", cfg.StructuredOutput)
	}
	if cfg.Timeout < 0 || cfg.MaxConns < 0 {
		return nil, fmt.Errorf("llm timeout %v or connection count %d is negative", cfg.Timeout, cfg.MaxConns)
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = defaultTimeout
	}
	retries := cfg.MaxRetries
	switch {
	case retries == 0:
		retries = 1
	case retries < 0:
		retries = 0
	}
	conns := cfg.MaxConns
	if conns == 0 {
		conns = defaultConns
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConns = conns
	transport.MaxIdleConnsPerHost = conns
	base := strings.TrimRight(cfg.BaseURL, "/")
	return &Client{
		base:       base,
		url:        base + "/chat/completions",
		apiKey:     cfg.APIKey,
		http:       &http.Client{Transport: transport},
		timeout:    timeout,
		mode:       mode,
		maxRetries: retries,
	}, nil
}

// Complete sends one chat completion request and returns the first choice.
// A request with a ResponseSchema asks for structured output as configured
// (see Config.StructuredOutput) but its answer is not checked; use
// CompleteJSON for that.
//
// The request goes out in the form every common server accepts, whatever
// the caller built (see prepare): one system message, first; tool names
// within the strictest servers' rules, mapped back in the answer; and, once
// the endpoint showed it needs them (see adapt), tool-call ids of Mistral's
// form and schemas without the regular-expression escapes grammar
// compilers reject. The answer is read as those servers write it (see
// readAnswer).
//
// Every failure is an *Error: a timeout (also HTTP 408) or the end of ctx
// is ErrTimeout (wrapping the context's error), 429 ErrRateLimited (or
// ErrQuota when the account is out of quota), a 5xx or a failed connection
// ErrUnavailable, 401 and 403 ErrAuth, other 4xx and a request that cannot
// be built ErrBadRequest, an endpoint not set up for the request (see
// errorRules) ErrMisconfigured, an answer cut at the length limit
// ErrTruncated, a refusal ErrRefused, and an answer that cannot be decoded,
// has no choices or an empty message ErrMalformed.
func (c *Client) Complete(ctx context.Context, req Request) (Response, error) {
	_, quiet := c.thinksOnly.Load(req.Model)
	opts := wireOptions{
		structured:  req.ResponseSchema != nil && c.mode != StructuredOff && !(c.mode == StructuredAuto && c.lacksStructured.Load()),
		quiet:       quiet,
		strictIDs:   c.strictIDs.Load(),
		grammarSafe: c.compilesGrammars.Load(),
	}
	quieted := false // this request was just asked again with reasoning off
	for {
		resp, err := c.completeOnce(ctx, req, opts)
		if e, ok := AsError(err); ok && quieted && e.Kind == ErrBadRequest && !rejectsCallIDs(err) && !rejectsResponseFormat(err) {
			// An endpoint that refuses reasoning_effort cannot serve a
			// model that answers only in its reasoning.
			c.thinksOnly.Delete(req.Model)
			return Response{}, &Error{Kind: ErrMisconfigured, Status: e.Status,
				Err: fmt.Errorf("%w, and the endpoint refused reasoning_effort \"none\": %v", errOnlyReasoning, e.Err),
				Fix: "give this role a model that does not think, or a server that takes reasoning_effort \"none\" (a recent Ollama; 0.12 refuses it)"}
		}
		next, again := c.adapt(ctx, req, opts, err)
		if !again {
			return resp, err
		}
		quieted = next.quiet && !opts.quiet
		opts = next
	}
}

// wireOptions are what the client has learnt about the endpoint that
// changes how a request is written.
type wireOptions struct {
	// structured sends the response schema as response_format.
	structured bool
	// quiet asks for no reasoning (reasoning_effort "none").
	quiet bool
	// strictIDs writes every tool-call id as nine letters or digits.
	strictIDs bool
	// grammarSafe writes schema patterns for grammar compilers.
	grammarSafe bool
}

// adapt learns from a failure that the endpoint needs requests written
// otherwise, remembers it for the requests to come, and says how to write
// this one again. Each lesson is learnt once, so a request is sent at
// most five times:
//
//   - an endpoint whose grammar compiler failed on a schema's pattern
//     (llama.cpp's, Ollama's; failsGrammar) gets every schema with its
//     patterns rewritten for it (grammarSafe); the others get the
//     schemas as the apps wrote them;
//   - an endpoint that cannot use the response schema (rejectsResponseFormat)
//     in auto mode gets the schema described in the system message;
//   - a model that answered only in its reasoning (ollama/ollama#15288) is
//     asked with reasoning_effort "none", which a recent Ollama's /v1
//     honours;
//   - an endpoint that refuses our tool-call ids (Mistral models on vLLM,
//     vllm-project/vllm#9019) gets ids of nine letters or digits.
func (c *Client) adapt(ctx context.Context, req Request, opts wireOptions, err error) (wireOptions, bool) {
	var lesson string
	switch {
	case err == nil:
		return opts, false
	case !opts.grammarSafe && failsGrammar(err):
		c.compilesGrammars.Store(true)
		lesson = "LLM endpoint's grammar compiler failed on a schema; rewriting schema patterns for it from now on"
		opts.grammarSafe = true
	case opts.structured && c.mode == StructuredAuto && rejectsResponseFormat(err):
		c.lacksStructured.Store(true)
		lesson = "LLM endpoint rejected response_format; describing schemas in the system message from now on"
		opts.structured = false
	case !opts.quiet && errors.Is(err, errOnlyReasoning):
		c.thinksOnly.Store(req.Model, true)
		lesson = "The model answered only in its reasoning; asking it with reasoning_effort none from now on"
		opts.quiet = true
	case !opts.strictIDs && rejectsCallIDs(err):
		c.strictIDs.Store(true)
		lesson = "LLM endpoint rejected our tool-call ids; sending ids of nine letters or digits from now on"
		opts.strictIDs = true
	default:
		return opts, false
	}
	zerolog.Ctx(ctx).Info().Err(err).Str("model", req.Model).Msg(lesson)
	return opts, true
}

// completeOnce is one request (with retries) and its answer.
func (c *Client) completeOnce(ctx context.Context, req Request, opts wireOptions) (Response, error) {
	out, err := prepare(req, opts)
	if err != nil {
		return Response{}, err
	}
	body, err := json.Marshal(out.body)
	if err != nil {
		return Response{}, &Error{Kind: ErrBadRequest, Err: fmt.Errorf("failed to encode the request: %w", err)}
	}
	w, serr := c.send(ctx, body)
	if serr != nil {
		return Response{}, serr
	}
	// An answer is billed whether or not it can be used.
	cost := billed(w, out.promptBytes)
	meter(ctx, cost)
	resp, rerr := out.readAnswer(w)
	if rerr != nil {
		return Response{}, rerr
	}
	resp.Usage = cost
	if resp.TextToolCalls && !c.toldTextCalls.Swap(true) {
		zerolog.Ctx(ctx).Warn().Str("model", req.Model).
			Msg("The endpoint left the model's tool calls as text in its answer; secgpt reads them, but the server's tool-call parser does not match the model (vLLM: --tool-call-parser)")
	}
	return resp, nil
}

// send runs attempts until one succeeds, the error is not worth retrying,
// the retries are spent, the endpoint asks for a longer wait than a call
// is held, or waiting would outlive ctx.
func (c *Client) send(ctx context.Context, body []byte) (wireResponse, *Error) {
	for attempt := 0; ; attempt++ {
		w, err := c.attempt(ctx, body)
		if err == nil {
			return w, nil
		}
		if !(err.Kind == ErrRateLimited || err.Kind == ErrUnavailable) || attempt >= c.maxRetries || err.RetryAfter > maxRetryAfter {
			return wireResponse{}, err
		}
		wait := err.RetryAfter
		if wait <= 0 {
			wait = baseBackoff << attempt
			wait += time.Duration(rand.Int64N(int64(wait) / 4))
		}
		wait = min(wait, maxRetryAfter)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return wireResponse{}, err
		}
		zerolog.Ctx(ctx).Warn().Str("kind", string(err.Kind)).Int("status", err.Status).
			Int("attempt", attempt+1).Dur("wait", wait).Msg("Retrying LLM call")
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return wireResponse{}, err
		case <-timer.C:
		}
	}
}

var errResponseTooLarge = fmt.Errorf("the answer is over %d bytes", maxResponseBytes)

// attempt makes one HTTP call, bounded by the per-attempt timeout.
func (c *Client) attempt(ctx context.Context, body []byte) (wireResponse, *Error) {
	actx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return wireResponse{}, &Error{Kind: ErrBadRequest, Err: fmt.Errorf("failed to build the request: %w", err)}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	if c.apiKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	hresp, err := c.http.Do(hreq)
	if err != nil {
		return wireResponse{}, transportError(actx, err)
	}
	defer hresp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(hresp.Body, maxResponseBytes+1))
	if err != nil {
		return wireResponse{}, transportError(actx, err)
	}
	if len(data) > maxResponseBytes {
		return wireResponse{}, &Error{Kind: ErrMalformed, Status: hresp.StatusCode, Err: errResponseTooLarge}
	}
	if hresp.StatusCode < 200 || hresp.StatusCode > 299 {
		return wireResponse{}, statusError(hresp.StatusCode, hresp.Header, data)
	}
	w, err := decodeResponse(data)
	if err != nil {
		return wireResponse{}, &Error{Kind: ErrMalformed, Status: hresp.StatusCode, Err: err}
	}
	return w, nil
}
