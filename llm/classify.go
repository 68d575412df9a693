package llm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// errorRule recognises one documented failure of a server by its status
// and its own words, and says what it means and, for a set-up failure, how
// the operator fixes it. The words are the servers' error messages, which
// is the only way they tell these failures apart; a failure no rule
// recognises is classified by its status alone.
type errorRule struct {
	status int      // 0: any error status
	code   string   // the error's type or code, exactly; "" when any
	says   []string // words of the message (lower case), any of which
	kind   ErrorKind
	fix    string
}

// errorRules, first match wins. Each entry names where the behaviour is
// documented.
var errorRules = []errorRule{
	// OpenAI: a 429 whose code is insufficient_quota never clears by
	// waiting. platform.openai.com/docs/guides/error-codes/api-errors;
	// langchain-ai/langchainjs#1929.
	{status: http.StatusTooManyRequests, code: "insufficient_quota", kind: ErrQuota,
		fix: "add credit to the model account, or use another key"},
	// vLLM started without tool calling: 400 `"auto" tool choice requires
	// --enable-auto-tool-choice and --tool-call-parser to be set`.
	// docs.vllm.ai features/tool_calling; vllm-project/vllm#9986.
	{status: http.StatusBadRequest, says: []string{"--enable-auto-tool-choice", "--tool-call-parser"}, kind: ErrMisconfigured,
		fix: "vLLM: start it with --enable-auto-tool-choice --tool-call-parser NAME (hermes for Qwen and Hermes models, llama3_json for Llama 3.1 and later, mistral for Mistral)"},
	// llama.cpp's server without --jinja: 500 "tools param requires
	// --jinja flag". ggml-org/llama.cpp#11016 (docs/function-calling.md);
	// defilantech/LLMKube#126.
	{status: http.StatusInternalServerError, says: []string{"requires --jinja"}, kind: ErrMisconfigured,
		fix: "llama.cpp: start llama-server with --jinja"},
	// Ollama, a model whose template has no tools: 400 "MODEL does not
	// support tools". ollama/ollama#6027 (server/images.go errCapabilities).
	{status: http.StatusBadRequest, says: []string{"does not support tools"}, kind: ErrMisconfigured,
		fix: "Ollama: this model cannot call tools; give the spoke role one that can (ollama.com/search?c=tools)"},
	// A prompt over the context window. vLLM: 400 "This model's maximum
	// context length is N tokens. However, you requested M tokens"
	// (entrypoints/openai/serving_engine.py); llama.cpp: 400 "the request
	// exceeds the available context size" (tools/server).
	{says: []string{"maximum context length", "exceeds the available context size"}, kind: ErrMisconfigured,
		fix: contextFix},
}

// contextFix is how each server's context window is raised.
const contextFix = "raise the model's context window: Ollama: OLLAMA_CONTEXT_LENGTH=32768 (or PARAMETER num_ctx in a Modelfile); vLLM: --max-model-len; llama.cpp: --ctx-size"

// schemaWords are what a server says when it cannot use a request's
// response schema: llama.cpp's "failed to parse grammar" (a 400,
// ggml-org/llama.cpp#27580); Ollama's 500s "invalid JSON schema in format"
// (ollama/ollama#8185), and from its runners, when the grammar does not
// parse, "failed to load model vocabulary required for format" and
// "unable to create sampling context" (runner/ollamarunner,
// runner/llamarunner); vLLM's and OpenAI's 400s naming response_format or
// json_schema.
var schemaWords = []string{"grammar", "json schema", "json_schema", "response_format", "response format",
	"structured output", "required for format", "sampling context"}

func (r errorRule) matches(status int, we wireError) bool {
	if r.status != 0 && r.status != status {
		return false
	}
	if r.code != "" && r.code != we.Code && r.code != we.Type {
		return false
	}
	if len(r.says) == 0 {
		return true
	}
	text := strings.ToLower(we.Message)
	for _, w := range r.says {
		if strings.Contains(text, w) {
			return true
		}
	}
	return false
}

// statusError classifies an error status with its body.
func statusError(status int, header http.Header, body []byte) *Error {
	we := decodeError(body)
	text := we.Message
	if text == "" {
		text = "no error message"
	}
	if len(text) > maxErrorDetail {
		text = text[:maxErrorDetail] + "…"
	}
	e := &Error{Status: status, Err: fmt.Errorf("endpoint answered %d: %s", status, strconv.Quote(text))}
	for _, r := range errorRules {
		if r.matches(status, we) {
			e.Kind, e.Fix = r.kind, r.fix
			return e
		}
	}
	switch {
	case status == http.StatusTooManyRequests:
		e.Kind = ErrRateLimited
		e.RetryAfter = retryAfter(header)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Kind = ErrAuth
	case status == http.StatusRequestTimeout:
		e.Kind = ErrTimeout
	case status >= 500 && mentionsSchema(we.Message):
		// The server could not use the request's schema: asking again
		// will not help, asking without it may (Complete's fallback).
		e.Kind = ErrBadRequest
	case status >= 500:
		e.Kind = ErrUnavailable
		e.RetryAfter = retryAfter(header)
	case status >= 400:
		e.Kind = ErrBadRequest
	default:
		e.Kind = ErrMalformed
	}
	return e
}

// grammarWords are what a server says when its grammar compiler failed on
// a schema: llama.cpp's 400s "Failed to initialize samplers: failed to
// parse grammar" and "JSON schema conversion failed" (#27580, #27397);
// Ollama's 500s, from its converter "invalid JSON schema in format"
// (#8185), from its runners "unable to create sampling context" and
// "failed to load model vocabulary required for format".
var grammarWords = []string{"grammar", "json schema conversion", "invalid json schema", "sampling context", "required for format"}

// failsGrammar reports whether err is the endpoint's grammar compiler
// failing on a schema of the request.
func failsGrammar(err error) bool {
	e, ok := AsError(err)
	if !ok || e.Kind != ErrBadRequest || e.Status == 0 {
		return false
	}
	text := strings.ToLower(e.Err.Error())
	for _, w := range grammarWords {
		if strings.Contains(text, w) {
			return true
		}
	}
	return false
}

func mentionsSchema(text string) bool {
	text = strings.ToLower(text)
	for _, w := range schemaWords {
		if strings.Contains(text, w) {
			return true
		}
	}
	return false
}

// rejectsResponseFormat reports whether err is the endpoint refusing the
// request's response schema, as opposed to any other bad request.
func rejectsResponseFormat(err error) bool {
	e, ok := AsError(err)
	return ok && e.Kind == ErrBadRequest && e.Status != 0 && mentionsSchema(e.Err.Error())
}

// rejectsCallIDs reports whether err is the endpoint refusing our
// tool-call ids: Mistral's tokenizer raises "Tool call id was X but must
// be a-z, A-Z, 0-9, with a length of 9", vLLM's Mistral template "Tool
// call IDs should be alphanumeric strings with length 9"
// (vllm-project/vllm#9019, PR #12332); vLLM answers 400 with the text.
func rejectsCallIDs(err error) bool {
	e, ok := AsError(err)
	if !ok || e.Kind != ErrBadRequest || e.Status == 0 {
		return false
	}
	text := strings.ToLower(e.Err.Error())
	return strings.Contains(text, "tool call id") || strings.Contains(text, "tool_call_id")
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

// maxHonoredWait bounds a Retry-After we report, so that a hostile
// endpoint cannot make us tell the user to come back next year.
const maxHonoredWait = time.Hour

// retryAfter reads how long the endpoint asks us to wait: retry-after-ms
// (OpenAI's, in milliseconds) or Retry-After (seconds or an HTTP date); 0
// when absent or unusable.
func retryAfter(h http.Header) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return min(time.Duration(min(ms, maxHonoredWait.Seconds()*1000)*float64(time.Millisecond)), maxHonoredWait)
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if !(secs > 0) { // also rejects NaN
			return 0
		}
		d = time.Duration(min(secs, maxHonoredWait.Seconds()) * float64(time.Second))
	} else if t, err := http.ParseTime(v); err == nil {
		d = time.Until(t)
	}
	return min(max(d, 0), maxHonoredWait)
}
