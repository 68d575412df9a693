package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The chat-completions wire format, as OpenAI documents it and the
// compatible servers (Ollama, vLLM, llama.cpp's server, LM Studio) speak it,
// with the fields those servers add that matter here.

type wireRequest struct {
	Model          string              `json:"model"`
	Messages       []wireMessage       `json:"messages"`
	Tools          []wireTool          `json:"tools,omitempty"`
	ResponseFormat *wireResponseFormat `json:"response_format,omitempty"`
	MaxTokens      int                 `json:"max_tokens,omitempty"`
	// ReasoningEffort "none" turns a thinking model's reasoning off where
	// the endpoint supports it: recent Ollama's /v1 (ollama/ollama#14820;
	// 0.12.3 refuses it, 400 "invalid think value"), OpenAI's gpt-5.1.
	ReasoningEffort string `json:"reasoning_effort,omitempty"`
}

type wireMessage struct {
	Role string `json:"role"`
	// Content is nil only for an assistant message that only calls tools.
	Content    *string        `json:"content,omitempty"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string        `json:"name"`
	Arguments wireArguments `json:"arguments"`
}

// wireArguments are a tool call's arguments: a string of JSON text, as
// OpenAI sends them, or, from a server that decodes them first, the JSON
// value itself, kept as its text.
type wireArguments string

func (a *wireArguments) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*a = wireArguments(s)
		return nil
	}
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		*a = ""
		return nil
	}
	if len(b) == 0 || (b[0] != '{' && b[0] != '[') {
		return errors.New("tool call arguments are neither a string nor a JSON object")
	}
	*a = wireArguments(b)
	return nil
}

type wireTool struct {
	Type     string           `json:"type"`
	Function wireToolFunction `json:"function"`
}

type wireToolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

type wireResponseFormat struct {
	Type       string         `json:"type"`
	JSONSchema wireJSONSchema `json:"json_schema"`
}

type wireJSONSchema struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	// Strict mode accepts only a subset of JSON schema (every property
	// required); our schemas have optional properties.
	Strict bool `json:"strict"`
}

type wireResponse struct {
	Choices []wireChoice `json:"choices"`
	Usage   *Usage       `json:"usage"`
}

type wireChoice struct {
	Message      *wireAnswer `json:"message"`
	FinishReason *string     `json:"finish_reason"`
}

type wireAnswer struct {
	Content wireText `json:"content"`
	// Refusal is OpenAI's: the model declined, and Content is empty.
	Refusal wireText `json:"refusal"`
	// Reasoning is a thinking model's reasoning: Ollama and LM Studio
	// call it reasoning, llama.cpp's server and vLLM reasoning_content.
	Reasoning        wireText       `json:"reasoning"`
	ReasoningContent wireText       `json:"reasoning_content"`
	ToolCalls        []wireToolCall `json:"tool_calls"`
}

// wireText is a string field that may be null.
type wireText string

func (t *wireText) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		*t = ""
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("a text field is not a string")
	}
	*t = wireText(s)
	return nil
}

// decodeResponse reads a 2xx body.
func decodeResponse(body []byte) (wireResponse, error) {
	var w wireResponse
	if err := json.Unmarshal(body, &w); err != nil {
		return wireResponse{}, fmt.Errorf("failed to decode the answer: %w", err)
	}
	return w, nil
}

// wireError is an error body: OpenAI's {"error": {"message", "type",
// "code"}}, Ollama's native {"error": "text"}, FastAPI's (vLLM's 422)
// {"detail": …} or a bare {"message": …}.
type wireError struct {
	Message string
	Type    string
	Code    string
}

// decodeError reads an error body, keeping whatever the endpoint said when
// it is not in one of the known shapes.
func decodeError(body []byte) wireError {
	var shaped struct {
		Error   json.RawMessage `json:"error"`
		Detail  json.RawMessage `json:"detail"`
		Message json.RawMessage `json:"message"`
	}
	raw := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &shaped) != nil {
		return wireError{Message: raw}
	}
	var inner struct {
		Message json.RawMessage `json:"message"`
		Type    json.RawMessage `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	switch {
	case json.Unmarshal(shaped.Error, &inner) == nil && inner.Message != nil:
		return wireError{Message: jsonText(inner.Message), Type: jsonText(inner.Type), Code: jsonText(inner.Code)}
	case shaped.Error != nil && !isNull(shaped.Error):
		return wireError{Message: jsonText(shaped.Error)}
	case shaped.Detail != nil:
		return wireError{Message: jsonText(shaped.Detail)}
	case shaped.Message != nil:
		return wireError{Message: jsonText(shaped.Message)}
	}
	return wireError{Message: raw}
}

// jsonText is a JSON string's value, or any other JSON value's text.
func jsonText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if isNull(raw) {
		return ""
	}
	return strings.TrimSpace(string(raw))
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }
