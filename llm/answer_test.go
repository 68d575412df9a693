package llm

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestToolCallsWrittenAsText reads the chat formats' own tool calls from
// the content, as servers with the wrong parser leave them: only calls of
// offered tools, never shown to the user as an answer.
func TestToolCallsWrittenAsText(t *testing.T) {
	req := Request{Model: "m", Messages: []Message{{Role: RoleUser, Content: "go"}},
		Tools: []Tool{{Name: "mail__send"}, {Name: strings.Repeat("a", 40) + "__" + strings.Repeat("b", 40)}}}
	out, err := prepare(req, wireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	long := out.wireName(req.Tools[1].Name)
	tests := []struct {
		content   string
		calls     string // name:args, …
		rest      string
		wantError bool
	}{
		{content: "Sending.\n<tool_call>\n{\"name\": \"mail__send\", \"arguments\": {\"to\": \"a@b.c\"}}\n</tool_call>", calls: `mail__send:{"to": "a@b.c"}`, rest: "Sending."},
		{content: "<tool_call>{\"name\":\"mail__send\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"" + long + "\",\"arguments\":{\"x\":1}}</tool_call>",
			calls: `mail__send:{},` + req.Tools[1].Name + `:{"x":1}`},
		{content: `[TOOL_CALLS][{"name": "mail__send", "arguments": {"to": "x"}}]`, calls: `mail__send:{"to": "x"}`},
		{content: `<|python_tag|>{"name": "mail__send", "parameters": {"to": "y"}}`, calls: `mail__send:{"to": "y"}`},
		{content: `{"name": "mail__send", "parameters": {"to": "z"}}`, calls: `mail__send:{"to": "z"}`},
		{content: `{"name": "Alice", "age": 30}`, rest: `{"name": "Alice", "age": 30}`},
		{content: "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>", wantError: true},
		{content: "<tool_call>not json</tool_call>", wantError: true},
		{content: "Just an answer.", rest: "Just an answer."},
	}
	for _, tt := range tests {
		calls, rest, err := out.textToolCalls(tt.content)
		if tt.wantError {
			if err == nil || err.Fix == "" {
				t.Errorf("%q: got %+v, %v; want an error with a fix", tt.content, calls, err)
			}
			continue
		}
		var got []string
		for _, c := range calls {
			if !toolCallIDPattern.MatchString(c.ID) {
				t.Errorf("%q: call id %q", tt.content, c.ID)
			}
			got = append(got, c.Name+":"+c.Arguments)
		}
		if err != nil || strings.Join(got, ",") != tt.calls || rest != tt.rest {
			t.Errorf("%q: got %q, rest %q, %v; want %q, rest %q", tt.content, got, rest, err, tt.calls, tt.rest)
		}
	}
}

func TestReadAnswer(t *testing.T) {
	out, err := prepare(Request{Model: "m", Messages: []Message{{Role: RoleUser, Content: "go"}}}, wireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		body    string
		content string
		kind    ErrorKind
	}{
		{body: `{"choices":[{"message":{"content":"<think>hmm</think>\n\nHi."},"finish_reason":"stop"}]}`, content: "Hi."},
		{body: `{"choices":[{"message":{"content":"Hi.","reasoning_content":"thinking"},"finish_reason":"stop"}]}`, content: "Hi."},
		{body: `{"choices":[{"message":{"content":"","reasoning":"all of it"},"finish_reason":"stop"}]}`, kind: ErrMalformed},
		{body: `{"choices":[{"message":{"content":"<think>never closed"},"finish_reason":"stop"}]}`, kind: ErrMalformed},
		{body: `{"choices":[{"message":{"content":"Hal"},"finish_reason":"length"}]}`, kind: ErrTruncated},
		{body: `{"choices":[{"message":{"content":null,"refusal":"No."},"finish_reason":"stop"}]}`, kind: ErrRefused},
		{body: `{"choices":[{"message":{"content":"x"},"finish_reason":"content_filter"}]}`, kind: ErrRefused},
		{body: `{"choices":[{"message":{"role":"system","content":"Hi."},"finish_reason":"stop"}]}`, content: "Hi."},
	}
	for _, tt := range tests {
		w, err := decodeResponse([]byte(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, rerr := out.readAnswer(w)
		switch {
		case tt.kind != "" && (rerr == nil || rerr.Kind != tt.kind):
			t.Errorf("%s: got %+v, %v; want %s", tt.body, resp, rerr, tt.kind)
		case tt.kind == "" && (rerr != nil || resp.Message.Content != tt.content || resp.Message.Role != RoleAssistant):
			t.Errorf("%s: got %+v, %v; want %q", tt.body, resp.Message, rerr, tt.content)
		}
	}
	// A prompt the endpoint cut to fit its context.
	big := Request{Model: "m", Messages: []Message{{Role: RoleSystem, Content: strings.Repeat("catalogue ", 4000)}, {Role: RoleUser, Content: "go"}}}
	out, err = prepare(big, wireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := decodeResponse(json.RawMessage(`{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4096,"completion_tokens":1}}`))
	if _, rerr := out.readAnswer(w); rerr == nil || rerr.Kind != ErrMisconfigured || !strings.Contains(rerr.Fix, "OLLAMA_CONTEXT_LENGTH") {
		t.Errorf("a cut prompt gave %v", rerr)
	}
	w, _ = decodeResponse(json.RawMessage(`{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12000,"completion_tokens":1}}`))
	if _, rerr := out.readAnswer(w); rerr != nil {
		t.Errorf("a whole prompt gave %v", rerr)
	}
}
