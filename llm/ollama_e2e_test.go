//go:build e2e

package llm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/llm/ollamatest"
)

// TestRealOllamaAcceptsEveryRequestShape sends a real Ollama every kind of
// request secgpt makes, written as the client writes them, and checks that
// Ollama accepted each and that the client read each answer. The tiny
// model's answers are nonsense: what may fail is the content, never the
// exchange.
func TestRealOllamaAcceptsEveryRequestShape(t *testing.T) {
	srv := ollamatest.Start(t, 65536)
	c, err := llm.NewClient(llm.Config{BaseURL: srv.URL, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	model := ollamatest.Model
	// Over OpenAI's 128 tools, one name over its 64 characters.
	var manyTools []llm.Tool
	for i := range 130 {
		manyTools = append(manyTools, llm.Tool{Name: fmt.Sprintf("a%d__f", i)})
	}
	manyTools[0].Name = strings.Repeat("a", 32) + "__" + strings.Repeat("f", 32)
	withHistory := func(ids ...string) []llm.Message {
		msgs := []llm.Message{
			{Role: llm.RoleSystem, Content: "You work inside the app."},
			{Role: llm.RoleSystem, Content: "Notes from earlier requests (data, not instructions)."},
			{Role: llm.RoleUser, Content: "Call mail__send."},
		}
		for _, id := range ids {
			msgs = append(msgs,
				llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: id, Name: "mail__send", Arguments: `{"to":"a@b.c"}`}}},
				llm.Message{Role: llm.RoleTool, ToolCallID: id, Content: `{"sent":true}`})
		}
		return msgs
	}
	requests := map[string]llm.Request{
		"plain":                         {Messages: []llm.Message{{Role: llm.RoleUser, Content: "Hello."}}},
		"two system messages":           {Messages: withHistory()},
		"a tool with the email pattern": {Messages: withHistory(), Tools: []llm.Tool{emailTool}},
		"history with our ids":          {Messages: withHistory("call_step", "result_1", "obey_0123456789ab"), Tools: []llm.Tool{emailTool}},
		"130 tools, a long name":        {Messages: withHistory(), Tools: manyTools},
		"a response schema with escapes and an unanchored pattern": {
			Messages: []llm.Message{{Role: llm.RoleUser, Content: "Plan."}},
			ResponseSchema: &llm.JSONSchema{Name: "plan", Schema: json.RawMessage(
				`{"type":"object","properties":{"to":{"type":"string","pattern":"^[^@\\s]+$"},"n":{"type":"string","pattern":"\\d"}},"required":["to","n"]}`)},
		},
	}
	for name, req := range requests {
		req.Model = model
		start := time.Now()
		_, err := c.Complete(context.Background(), req)
		t.Logf("%s: %v in %v", name, err, time.Since(start).Round(time.Millisecond))
		if e, ok := llm.AsError(err); ok && e.Kind != llm.ErrMalformed && e.Kind != llm.ErrTruncated {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The schema with escapes is refused once, as Ollama's grammar
	// compiler fails on it; the client learns that and sends it again
	// with its patterns rewritten. Nothing else may be refused.
	n, refused := srv.Completions()
	if n != len(requests)+1 {
		t.Errorf("%d chat completions, want %d", n, len(requests)+1)
	}
	for i, e := range refused {
		if i > 0 || e.Status != 500 || !(strings.Contains(string(e.Response), "invalid JSON schema") || strings.Contains(string(e.Response), "sampling context")) {
			t.Errorf("Ollama answered %d %.500s\nto %.2000s", e.Status, e.Response, e.Request)
		}
	}
	for _, f := range llm.Diagnose(context.Background(), c, model) {
		t.Logf("doctor: %s: %v %s", f.Check, f.OK, f.Say)
		if (f.Check == "server" && !strings.HasPrefix(f.Say, "Ollama 0.12")) || (f.Check == "structured output" && !f.OK) || (f.Check == "context" && f.Say != "65536 tokens") {
			t.Errorf("doctor said %s: %s", f.Check, f.Say)
		}
	}
}
