package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// An endpoint that says it read fewer tokens of a prompt than any
// tokenizer makes of it cut the prompt to fit its context window: Ollama
// does so silently, keeping the system messages and the last message and
// dropping the rest (server/prompt.go chatPrompt), then cuts the start of
// what is left. No tokenizer makes fewer than one token of six bytes of
// our prompts (English and JSON run at three to five bytes a token); a
// short prompt is not judged, as an endpoint's count of it may leave out
// what its template adds.
const (
	minBytesPerToken = 6
	minJudgedPrompt  = 8 << 10
)

// errOnlyReasoning is a thinking model that put its whole answer in its
// reasoning and none in its content (ollama/ollama#15288).
var errOnlyReasoning = errors.New("the model answered only in its reasoning, with no content")

// readAnswer reads the first choice as the common servers write it:
//
//   - finish_reason "length" is an answer cut at the length limit
//     (ErrTruncated), "content_filter" and OpenAI's refusal a refusal
//     (ErrRefused);
//   - reasoning is never the answer: a leading <think>…</think> block is
//     dropped from the content (Qwen3 and DeepSeek-R1 without a reasoning
//     parser); the reasoning fields are ignored (reasoning from Ollama and
//     LM Studio, reasoning_content from llama.cpp and vLLM); an answer
//     with nothing but reasoning is errOnlyReasoning;
//   - tool names are mapped back to the caller's, calls of the dispatcher
//     to the folded tool they name;
//   - a tool call written as text in the content, which a server with the
//     wrong tool-call parser leaves there, is read as a tool call
//     (textToolCalls);
//   - an answer from a prompt the endpoint cut to fit its context is
//     ErrMisconfigured.
func (o *outgoing) readAnswer(w wireResponse) (Response, *Error) {
	malformed := func(format string, args ...any) *Error {
		return &Error{Kind: ErrMalformed, Status: http.StatusOK, Err: fmt.Errorf(format, args...)}
	}
	if len(w.Choices) == 0 || w.Choices[0].Message == nil {
		return Response{}, malformed("the answer has no choices")
	}
	choice := w.Choices[0]
	a := choice.Message
	finish := ""
	if choice.FinishReason != nil {
		finish = *choice.FinishReason
	}
	var usage Usage
	if w.Usage != nil {
		usage = *w.Usage
	}
	switch {
	case finish == "length":
		return Response{}, &Error{Kind: ErrTruncated, Status: http.StatusOK,
			Err: fmt.Errorf("the answer was cut at the length limit after %d tokens", usage.CompletionTokens)}
	case finish == "content_filter" || (a.Refusal != "" && strings.TrimSpace(string(a.Content)) == "" && len(a.ToolCalls) == 0):
		return Response{}, &Error{Kind: ErrRefused, Status: http.StatusOK, Err: fmt.Errorf("the model refused: %.300q", a.Refusal)}
	}
	if o.promptBytes >= minJudgedPrompt && usage.PromptTokens > 0 && usage.PromptTokens*minBytesPerToken < o.promptBytes {
		return Response{}, &Error{Kind: ErrMisconfigured, Status: http.StatusOK, Fix: contextFix,
			Err: fmt.Errorf("the endpoint read %d tokens of a %d-byte prompt: it cut the prompt to fit its context window", usage.PromptTokens, o.promptBytes)}
	}
	content, thought := dropThinking(string(a.Content))
	// The role is always assistant, whatever the endpoint claims: an
	// answer must never enter a history as system or user text.
	msg := Message{Role: RoleAssistant, Content: content}
	for _, tc := range a.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, o.callerCall(ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: string(tc.Function.Arguments)}))
	}
	if len(msg.ToolCalls) == 0 && len(o.offered) > 0 {
		calls, rest, err := o.textToolCalls(content)
		if err != nil {
			return Response{}, err
		}
		msg.Content, msg.ToolCalls = rest, calls
		if len(calls) > 0 {
			return Response{Message: msg, Usage: usage, TextToolCalls: true}, nil
		}
	}
	if strings.TrimSpace(msg.Content) == "" && len(msg.ToolCalls) == 0 {
		if thought || strings.TrimSpace(string(a.Reasoning)+string(a.ReasoningContent)) != "" {
			return Response{}, &Error{Kind: ErrMalformed, Status: http.StatusOK, Err: errOnlyReasoning}
		}
		return Response{}, malformed("the answer's message is empty")
	}
	return Response{Message: msg, Usage: usage}, nil
}

// dropThinking removes a leading <think>…</think> block. An unclosed
// block is all thinking. It reports whether there was any.
func dropThinking(content string) (string, bool) {
	rest, ok := strings.CutPrefix(strings.TrimLeft(content, " \t\r\n"), "<think>")
	if !ok {
		return content, false
	}
	_, after, closed := strings.Cut(rest, "</think>")
	if !closed {
		return "", true
	}
	return strings.TrimLeft(after, " \t\r\n"), true
}

// callerCall maps a tool call of the answer back to the caller's names:
// a call of the dispatcher becomes a call of the folded tool it names. A
// name the request did not offer is left as the model wrote it.
func (o *outgoing) callerCall(tc ToolCall) ToolCall {
	if tc.Name == dispatcherName && len(o.folded) > 0 {
		var d struct {
			Function  string          `json:"function"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if json.Unmarshal([]byte(tc.Arguments), &d) == nil && o.folded[d.Function] {
			tc.Name, tc.Arguments = d.Function, string(d.Arguments)
			if len(d.Arguments) == 0 {
				tc.Arguments = "{}"
			}
		}
	}
	if name, ok := o.names[tc.Name]; ok {
		tc.Name = name
	}
	return tc
}

// Tool calls written as text, as the models' own chat formats write them,
// which reach the content when the server's tool-call parser does not
// match the model (vLLM's --tool-call-parser, docs.vllm.ai
// features/tool_calling) or when it has none (llama.cpp without --jinja).
const (
	hermesOpen  = "<tool_call>" // Hermes, Qwen 2.5 and 3: <tool_call>{"name":…,"arguments":…}</tool_call>
	hermesClose = "</tool_call>"
	mistralOpen = "[TOOL_CALLS]" // Mistral: [TOOL_CALLS][{"name":…,"arguments":…}]
	pythonTag   = "<|python_tag|>"
)

// textToolCalls reads the tool calls written as text in content. Only a
// call of an offered tool counts; a call that cannot be read is an error
// that says what to fix, never an answer shown to the user. It returns the
// content before the first call.
func (o *outgoing) textToolCalls(content string) ([]ToolCall, string, *Error) {
	trimmed := strings.TrimSpace(content)
	var bodies []string
	rest := content
	switch {
	case strings.Contains(content, hermesOpen):
		i := strings.Index(content, hermesOpen)
		rest = content[:i]
		for s := content[i:]; ; {
			start := strings.Index(s, hermesOpen)
			if start < 0 {
				break
			}
			s = s[start+len(hermesOpen):]
			body, after, _ := strings.Cut(s, hermesClose)
			bodies = append(bodies, body)
			s = after
		}
	case strings.Contains(content, mistralOpen):
		i := strings.Index(content, mistralOpen)
		rest = content[:i]
		bodies = append(bodies, content[i+len(mistralOpen):])
	case strings.HasPrefix(trimmed, pythonTag):
		rest = ""
		bodies = append(bodies, strings.TrimPrefix(trimmed, pythonTag))
	case strings.HasPrefix(trimmed, "{") && strings.Contains(trimmed, `"name"`):
		// Llama 3.1's bare {"name":…,"parameters":…}: a call only when it
		// names an offered tool, else it is a JSON answer.
		calls := o.decodeTextCalls(trimmed)
		if len(calls) == 0 {
			return nil, content, nil
		}
		return calls, "", nil
	default:
		return nil, content, nil
	}
	var calls []ToolCall
	for _, b := range bodies {
		calls = append(calls, o.decodeTextCalls(b)...)
	}
	if len(calls) == 0 {
		return nil, "", &Error{Kind: ErrMalformed, Status: http.StatusOK,
			Err: errors.New("the answer holds a tool call written as text that names no offered tool or cannot be read"),
			Fix: "the server's tool-call parser does not match the model: vLLM: --tool-call-parser (hermes for Qwen); llama.cpp: --jinja"}
	}
	return calls, strings.TrimSpace(rest), nil
}

// decodeTextCalls reads one JSON call or a JSON array of calls, each
// {"name", "arguments" or "parameters"}, keeping the calls of offered
// tools, with ids of their own.
func (o *outgoing) decodeTextCalls(text string) []ToolCall {
	type textCall struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	text = strings.TrimSpace(text)
	dec := json.NewDecoder(strings.NewReader(text))
	var list []textCall
	if strings.HasPrefix(text, "[") {
		if dec.Decode(&list) != nil {
			return nil
		}
	} else {
		var one textCall
		if dec.Decode(&one) != nil {
			return nil
		}
		list = []textCall{one}
	}
	var calls []ToolCall
	for _, c := range list {
		if !o.offered[c.Name] {
			continue
		}
		args := c.Arguments
		if len(args) == 0 {
			args = c.Parameters
		}
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		calls = append(calls, o.callerCall(ToolCall{
			ID: fmt.Sprintf("text%05d", len(calls)+1), Name: c.Name, Arguments: string(args),
		}))
	}
	return calls
}
