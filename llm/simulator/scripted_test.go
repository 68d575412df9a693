package simulator

import (
	"context"
	"testing"

	"github.com/secgpt/secgpt/llm"
)

func TestScriptedMatchers(t *testing.T) {
	plain := &ChatRequest{Messages: []llm.Message{user("first"), asst("x"), user("second question")}}
	rich := &ChatRequest{
		Messages:       []llm.Message{user("go"), calls(call("a", "x__y", "{}")), toolMsg("a", "r")},
		Tools:          tools(rides...),
		ResponseFormat: &ResponseFormat{Type: "json_schema", JSONSchema: &llm.JSONSchema{Name: "verdict"}},
	}
	tests := []struct {
		name  string
		match func(*ChatRequest) bool
		req   *ChatRequest
		want  bool
	}{
		{"last user contains", LastUserContains("second"), plain, true},
		{"only the last user message", LastUserContains("first"), plain, false},
		{"has tools", HasTools, rich, true},
		{"has no tools", HasTools, plain, false},
		{"response format named", ResponseFormatNamed("verdict"), rich, true},
		{"other response format", ResponseFormatNamed("plan"), rich, false},
		{"no response format", ResponseFormatNamed("verdict"), plain, false},
		{"has tool result", HasToolResult, rich, true},
		{"has no tool result", HasToolResult, plain, false},
	}
	for _, tt := range tests {
		if got := tt.match(tt.req); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestScriptedFirstMatchWins(t *testing.T) {
	b := Scripted(
		Rule{Name: "tools", When: HasTools, Then: Text("tools")},
		Rule{Name: "go", When: LastUserContains("go"), Then: Text("go")},
		Rule{Name: "fallback", Then: Text("fallback")},
	)
	for req, want := range map[*ChatRequest]string{
		{Messages: []llm.Message{user("go")}, Tools: tools(rides...)}: "tools",
		{Messages: []llm.Message{user("go")}}:                         "go",
		{Messages: []llm.Message{user("stop")}}:                       "fallback",
	} {
		r, err := b.Reply(context.Background(), req)
		if err != nil || r.Content != want {
			t.Errorf("got %q, %v; want %q", r.Content, err, want)
		}
	}
	if _, err := Scripted().Reply(context.Background(), &ChatRequest{Messages: []llm.Message{user("x")}}); err == nil {
		t.Error("an empty script answered")
	}
}
