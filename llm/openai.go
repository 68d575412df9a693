package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	openai "github.com/sashabaranov/go-openai"
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
	// maxRetryAfter caps how long one Retry-After may hold a call.
	maxRetryAfter = 10 * time.Second
	// baseBackoff is the first wait before a retry when the endpoint gave
	// no Retry-After; it doubles with each attempt.
	baseBackoff = 500 * time.Millisecond
	// maxResponseBytes bounds what we read from an endpoint, so a broken or
	// hostile endpoint cannot exhaust the hub's memory.
	maxResponseBytes = 16 << 20
	// maxErrorDetail bounds how much of an endpoint's error text we keep.
	maxErrorDetail = 300
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
}

// Client talks to one OpenAI-compatible endpoint. It is safe for concurrent
// use.
type Client struct {
	api        *openai.Client
	timeout    time.Duration
	mode       string
	maxRetries int
	// lacksStructured is set once the endpoint rejected response_format in
	// auto mode; from then on schemas go into a system message.
	lacksStructured atomic.Bool
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
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("llm timeout %v is negative", cfg.Timeout)
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

	oc := openai.DefaultConfig(cfg.APIKey)
	oc.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	transport := http.DefaultTransport
	if t, ok := transport.(*http.Transport); ok {
		transport = t.Clone()
	}
	oc.HTTPClient = &recordingDoer{client: &http.Client{Transport: transport}}
	return &Client{
		api:        openai.NewClientWithConfig(oc),
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
// Every failure is an *Error: a timeout (also HTTP 408) or the end of ctx is ErrTimeout
// (wrapping the context's error), 429 ErrRateLimited, a 5xx or a failed
// connection ErrUnavailable, 401 and 403 ErrAuth, other 4xx and a request
// that cannot be built ErrBadRequest, and an answer that cannot be decoded,
// has no choices or an empty message ErrMalformed.
func (c *Client) Complete(ctx context.Context, req Request) (Response, error) {
	structured := req.ResponseSchema != nil && c.mode != StructuredOff &&
		!(c.mode == StructuredAuto && c.lacksStructured.Load())
	resp, err := c.completeWithRetries(ctx, req, structured)
	if structured && c.mode == StructuredAuto && rejectsResponseFormat(err) {
		c.lacksStructured.Store(true)
		zerolog.Ctx(ctx).Info().Err(err).
			Msg("LLM endpoint rejected response_format; describing schemas in the system message from now on")
		resp, err = c.completeWithRetries(ctx, req, false)
	}
	return resp, err
}

// completeWithRetries runs attempts until one succeeds, the error is not
// worth retrying, the retries are spent, or waiting would outlive ctx.
func (c *Client) completeWithRetries(ctx context.Context, req Request, structured bool) (Response, error) {
	oreq, err := toOpenAIRequest(req, structured)
	if err != nil {
		return Response{}, err
	}
	for attempt := 0; ; attempt++ {
		resp, asked, err := c.attempt(ctx, oreq)
		if err == nil {
			return resp, nil
		}
		if !(err.Kind == ErrRateLimited || err.Kind == ErrUnavailable) || attempt >= c.maxRetries {
			return Response{}, err
		}
		wait := asked
		if wait <= 0 {
			wait = baseBackoff << attempt
			wait += time.Duration(rand.Int64N(int64(wait) / 4))
		}
		wait = min(wait, maxRetryAfter)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return Response{}, err
		}
		zerolog.Ctx(ctx).Warn().Str("kind", string(err.Kind)).Int("status", err.Status).
			Int("attempt", attempt+1).Dur("wait", wait).Msg("Retrying LLM call")
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return Response{}, err
		case <-timer.C:
		}
	}
}

// attempt makes one HTTP call. It returns the endpoint's Retry-After, if
// any, with the error.
func (c *Client) attempt(ctx context.Context, oreq openai.ChatCompletionRequest) (Response, time.Duration, *Error) {
	rec := &callRecord{}
	actx, cancel := context.WithTimeout(context.WithValue(ctx, callRecordKey{}, rec), c.timeout)
	defer cancel()
	oresp, err := c.api.CreateChatCompletion(actx, oreq)
	if err != nil {
		return Response{}, retryAfter(rec.header), classify(actx, rec, err)
	}
	resp, cerr := fromOpenAIResponse(oresp)
	if cerr != nil {
		return Response{}, 0, cerr
	}
	return resp, 0, nil
}

func toOpenAIRequest(req Request, structured bool) (openai.ChatCompletionRequest, error) {
	oreq := openai.ChatCompletionRequest{
		Model:     req.Model,
		MaxTokens: req.MaxTokens,
	}
	messages := req.Messages
	if req.ResponseSchema != nil {
		if !json.Valid(req.ResponseSchema.Schema) {
			return oreq, &Error{Kind: ErrBadRequest, Err: fmt.Errorf("response schema %q is not valid JSON", req.ResponseSchema.Name)}
		}
		if structured {
			oreq.ResponseFormat = &openai.ChatCompletionResponseFormat{
				Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
				JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{
					Name:   req.ResponseSchema.Name,
					Schema: req.ResponseSchema.Schema,
					// Strict mode accepts only a subset of JSON schema (every
					// property required); our schemas use optional fields.
					Strict: false,
				},
			}
		} else {
			messages = withSchemaInstruction(messages, *req.ResponseSchema)
		}
	}
	oreq.Messages = make([]openai.ChatCompletionMessage, 0, len(messages))
	for _, m := range messages {
		om := openai.ChatCompletionMessage{Role: string(m.Role), Content: m.Content, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			om.ToolCalls = append(om.ToolCalls, openai.ToolCall{
				ID:       tc.ID,
				Type:     openai.ToolTypeFunction,
				Function: openai.FunctionCall{Name: tc.Name, Arguments: tc.Arguments},
			})
		}
		oreq.Messages = append(oreq.Messages, om)
	}
	for _, t := range req.Tools {
		params := t.Parameters
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		} else if !json.Valid(params) {
			return oreq, &Error{Kind: ErrBadRequest, Err: fmt.Errorf("parameters of tool %q are not valid JSON", t.Name)}
		}
		oreq.Tools = append(oreq.Tools, openai.Tool{
			Type: openai.ToolTypeFunction,
			Function: &openai.FunctionDefinition{
				Name:        t.Name,
				Description: t.Description,
				Parameters:  params,
			},
		})
	}
	return oreq, nil
}

// withSchemaInstruction describes schema in the system message, for
// endpoints without structured output. It appends to a leading system
// message rather than adding a second one, because some chat templates
// accept only one system message, first.
func withSchemaInstruction(messages []Message, schema JSONSchema) []Message {
	text := fmt.Sprintf("Answer with exactly one JSON document and nothing else: no prose, no code fence. "+
		"It must conform to this JSON schema (named %q):\n%s", schema.Name, schema.Schema)
	out := make([]Message, 0, len(messages)+1)
	if len(messages) > 0 && messages[0].Role == RoleSystem {
		first := messages[0]
		first.Content = strings.TrimRight(first.Content, "\n") + "\n\n" + text
		out = append(out, first)
		return append(out, messages[1:]...)
	}
	out = append(out, Message{Role: RoleSystem, Content: text})
	return append(out, messages...)
}

func fromOpenAIResponse(oresp openai.ChatCompletionResponse) (Response, *Error) {
	if len(oresp.Choices) == 0 {
		return Response{}, &Error{Kind: ErrMalformed, Status: http.StatusOK, Err: errors.New("the answer has no choices")}
	}
	om := oresp.Choices[0].Message
	// The role is always assistant, whatever the endpoint claims: an
	// answer must never enter a history as system or user text.
	msg := Message{Role: RoleAssistant, Content: om.Content}
	for _, tc := range om.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	if strings.TrimSpace(msg.Content) == "" && len(msg.ToolCalls) == 0 {
		return Response{}, &Error{Kind: ErrMalformed, Status: http.StatusOK, Err: errors.New("the answer's message is empty")}
	}
	return Response{
		Message: msg,
		Usage:   Usage{PromptTokens: oresp.Usage.PromptTokens, CompletionTokens: oresp.Usage.CompletionTokens},
	}, nil
}

// rejectsResponseFormat reports whether err is the endpoint refusing
// response_format, as opposed to any other bad request.
func rejectsResponseFormat(err error) bool {
	e, ok := AsError(err)
	if !ok || e.Kind != ErrBadRequest || (e.Status != http.StatusBadRequest && e.Status != http.StatusUnprocessableEntity) {
		return false
	}
	text := strings.ToLower(e.Err.Error())
	for _, hint := range []string{"response_format", "response format", "json_schema", "structured output"} {
		if strings.Contains(text, hint) {
			return true
		}
	}
	return false
}

// callRecord notes what happened on the wire during one attempt, so that a
// failure can be classified by fact (was a status received? did the body
// fail to arrive?) rather than by go-openai's error types.
type callRecord struct {
	sent    bool
	status  int
	header  http.Header
	readErr error // a failure reading the body, other than EOF and our size limit
}

type callRecordKey struct{}

// recordingDoer is the HTTP client handed to go-openai: it fills the
// attempt's callRecord and bounds the response body.
type recordingDoer struct {
	client *http.Client
}

var _ openai.HTTPDoer = (*recordingDoer)(nil)

func (d *recordingDoer) Do(req *http.Request) (*http.Response, error) {
	rec, _ := req.Context().Value(callRecordKey{}).(*callRecord)
	if rec == nil {
		rec = &callRecord{}
	}
	rec.sent = true
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, err
	}
	rec.status = resp.StatusCode
	rec.header = resp.Header
	resp.Body = &limitedBody{rc: resp.Body, left: maxResponseBytes, rec: rec}
	return resp, nil
}

var errResponseTooLarge = fmt.Errorf("the answer is over %d bytes", maxResponseBytes)

type limitedBody struct {
	rc   io.ReadCloser
	left int64
	rec  *callRecord
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errResponseTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if err != nil && err != io.EOF {
		b.rec.readErr = err
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// classify turns a failed attempt into an *Error.
func classify(ctx context.Context, rec *callRecord, err error) *Error {
	switch {
	case !rec.sent:
		// go-openai refused to build the request (model not for this
		// endpoint, parameters invalid for a reasoning model, ...).
		return &Error{Kind: ErrBadRequest, Err: fmt.Errorf("failed to build the request: %w", err)}
	case rec.status == 0:
		return transportError(ctx, err)
	case rec.status < 200 || rec.status > 299:
		return statusError(rec.status, err)
	case rec.readErr != nil:
		return transportError(ctx, rec.readErr)
	default:
		return &Error{Kind: ErrMalformed, Status: rec.status, Err: fmt.Errorf("failed to decode the answer: %w", err)}
	}
}

func transportError(ctx context.Context, err error) *Error {
	var netErr net.Error
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		(errors.As(err, &netErr) && netErr.Timeout()) {
		cause := ctx.Err()
		if cause == nil {
			cause = err
		}
		return &Error{Kind: ErrTimeout, Err: fmt.Errorf("failed to get an answer: %w", cause)}
	}
	return &Error{Kind: ErrUnavailable, Err: fmt.Errorf("failed to reach the endpoint: %w", err)}
}

func statusError(status int, err error) *Error {
	detail := errorDetail(err)
	e := &Error{Status: status, Err: fmt.Errorf("endpoint answered %d: %s", status, detail)}
	switch {
	case status == http.StatusTooManyRequests:
		e.Kind = ErrRateLimited
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Kind = ErrAuth
	case status == http.StatusRequestTimeout:
		e.Kind = ErrTimeout
	case status >= 500:
		e.Kind = ErrUnavailable
	case status >= 400:
		e.Kind = ErrBadRequest
	default:
		e.Kind = ErrMalformed
	}
	return e
}

// errorDetail extracts the endpoint's own words from a go-openai error,
// bounded, without the request.
func errorDetail(err error) string {
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	var text string
	switch {
	case errors.As(err, &apiErr):
		text = apiErr.Message
	case errors.As(err, &reqErr):
		text = strings.TrimSpace(string(reqErr.Body))
	default:
		text = err.Error()
	}
	if text == "" {
		text = "no error message"
	}
	if len(text) > maxErrorDetail {
		text = text[:maxErrorDetail] + "…"
	}
	return strconv.Quote(text)
}

// retryAfter reads a Retry-After header (seconds or HTTP date), capped at
// maxRetryAfter; 0 when absent or unusable.
func retryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if !(secs > 0) { // also rejects NaN
			return 0
		}
		d = maxRetryAfter
		if secs < maxRetryAfter.Seconds() {
			d = time.Duration(secs * float64(time.Second))
		}
	} else if t, err := http.ParseTime(v); err == nil {
		d = time.Until(t)
	}
	return min(max(d, 0), maxRetryAfter)
}
