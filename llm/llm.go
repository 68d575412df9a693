// Package llm talks to OpenAI-compatible chat-completion endpoints (OpenAI,
// Ollama, vLLM, llama.cpp's server) and provides the simulated models used by
// tests and demos (package llm/simulator).
//
// It owns the wire types shared by the hub and the spokes, and what the
// servers people run do differently from OpenAI: a caller builds every
// request one way and reads every answer one way, and the client writes and
// reads them as each server needs (prepare, readAnswer, errorRules). It also
// routes each role's model to its endpoint (Router) and checks an endpoint
// for what secgpt needs (Diagnose). It must never decide anything about
// security: it neither filters tool calls nor trusts what a model returns;
// the names and ids it rewrites for a server it maps back, and the hub
// checks what comes back as always. Only the hub holds a Client, and so the
// API key.
package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Role is the author of a chat message.
type Role string

const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one chat message.
type Message struct {
	Role    Role   `json:"role"`
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls an assistant message asks for.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID links a tool message to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// ToolCall is one function call requested by the model.
type ToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Arguments is the JSON text the model produced; it may be invalid JSON.
	Arguments string `json:"arguments"`
}

// Tool is a function offered to the model.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// JSONSchema asks for structured output conforming to Schema.
type JSONSchema struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
}

// Request is one chat completion request.
type Request struct {
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
	Tools    []Tool    `json:"tools,omitempty"`
	// ResponseSchema, when set, asks for a JSON answer conforming to it.
	ResponseSchema *JSONSchema `json:"response_schema,omitempty"`
	// MaxTokens bounds the completion; 0 means the endpoint's default.
	MaxTokens int `json:"max_tokens,omitempty"`
}

// PromptBytes is the size of what a model reads of messages and tools:
// the messages' contents, their tool calls' names and arguments, and the
// tools' names, descriptions and parameter schemas.
func PromptBytes(msgs []Message, tools []Tool) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
		for _, tc := range m.ToolCalls {
			n += len(tc.Name) + len(tc.Arguments)
		}
	}
	for _, t := range tools {
		n += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	return n
}

// Usage counts tokens as reported by the endpoint, or as estimated from
// bytes (see EstimateTokens) where it reported none.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// Estimated says the counts are an estimate from bytes.
	Estimated bool `json:"estimated,omitempty"`
}

// Response is one chat completion.
type Response struct {
	Message Message `json:"message"`
	Usage   Usage   `json:"usage"`
	// TextToolCalls says the tool calls were read from the answer's text,
	// where a server whose tool-call parser does not match the model
	// leaves them.
	TextToolCalls bool `json:"text_tool_calls,omitempty"`
}

// ErrorKind classifies endpoint failures so callers can branch on meaning.
type ErrorKind string

const (
	ErrTimeout     ErrorKind = "timeout"
	ErrRateLimited ErrorKind = "rate_limited"
	ErrUnavailable ErrorKind = "unavailable" // 5xx, connection refused
	ErrAuth        ErrorKind = "auth"        // 401, 403
	ErrBadRequest  ErrorKind = "bad_request" // 400, 404, 422
	ErrMalformed   ErrorKind = "malformed"   // the endpoint's answer could not be used
	// ErrQuota is a 429 that waiting does not clear: the account has no
	// quota left (OpenAI's insufficient_quota).
	ErrQuota ErrorKind = "quota"
	// ErrTruncated is an answer the endpoint cut off at its length limit
	// (finish_reason "length"): asking again with the same limit cannot
	// help.
	ErrTruncated ErrorKind = "truncated"
	// ErrRefused is a model declining to answer (OpenAI's refusal, a
	// content filter).
	ErrRefused ErrorKind = "refused"
	// ErrMisconfigured is an endpoint that works but is not set up for what
	// the request needs (tool calls, a context window large enough); Fix
	// says what the operator must change.
	ErrMisconfigured ErrorKind = "misconfigured"
)

// Error is an endpoint failure with a message fit for the user.
type Error struct {
	Kind   ErrorKind
	Status int // HTTP status, 0 when none
	Err    error
	// Fix tells the operator how to set the endpoint up, when the failure
	// is one of set-up; "" otherwise.
	Fix string
	// RetryAfter is how long the endpoint asked us to wait, when it said.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("llm %s: %v", e.Kind, e.Err)
	if e.Status != 0 {
		msg = fmt.Sprintf("llm %s (HTTP %d): %v", e.Kind, e.Status, e.Err)
	}
	if e.Fix != "" {
		msg += " (fix: " + e.Fix + ")"
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// UserMessage says in plain words what went wrong, without internals.
func (e *Error) UserMessage() string {
	switch e.Kind {
	case ErrTimeout:
		return "the language model did not answer in time"
	case ErrRateLimited:
		if e.RetryAfter >= time.Second {
			return fmt.Sprintf("the language model endpoint is rate limiting us; try again in %d seconds", int(e.RetryAfter.Round(time.Second)/time.Second))
		}
		return "the language model endpoint is rate limiting us; try again shortly"
	case ErrQuota:
		return "the language model account has no quota left; trying again will not help until the operator adds credit or changes the key"
	case ErrUnavailable:
		return "the language model endpoint is unavailable"
	case ErrAuth:
		return "the language model endpoint refused our credentials"
	case ErrBadRequest:
		return "the language model endpoint rejected the request"
	case ErrTruncated:
		return "the language model's answer was cut off at its length limit"
	case ErrRefused:
		return "the language model declined to answer"
	case ErrMisconfigured:
		if e.Fix != "" {
			return "the language model endpoint is not set up for this request; the operator can fix it: " + e.Fix
		}
		return "the language model endpoint is not set up for this request"
	default:
		return "the language model returned an answer that could not be used"
	}
}

// Retryable reports whether trying again later may succeed.
func (e *Error) Retryable() bool {
	return e.Kind == ErrTimeout || e.Kind == ErrRateLimited || e.Kind == ErrUnavailable
}

// AsError returns the *Error in err's chain, if any.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
