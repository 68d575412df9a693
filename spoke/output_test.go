package spoke_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/spoke"
)

// outputHandler is a handler that takes early outputs.
type outputHandler struct {
	handler
	mu      sync.Mutex
	outputs []string
}

func (h *outputHandler) Output(_ context.Context, out spoke.Output) {
	h.note("output")
	h.mu.Lock()
	h.outputs = append(h.outputs, string(out.Output))
	h.mu.Unlock()
}

// TestAnAnsweringStepReportsItsOutputFirst: a step that writes its app's
// part sends its planned result to the hub before its model writes the
// answer, and its model is offered only the functions the step allows.
func TestAnAnsweringStepReportsItsOutputFirst(t *testing.T) {
	m := newManager(t, spoke.Options{})
	var offered []string
	h := &outputHandler{}
	h.complete = func(req spoke.LLMRequest) (spoke.LLMReply, error) {
		for _, tool := range req.Tools {
			offered = append(offered, tool.Name)
		}
		return spoke.LLMReply{Message: llm.Message{Role: llm.RoleAssistant, Content: "said it"}}, nil
	}
	step := spoke.Step{ID: "s1", Function: "say", Args: json.RawMessage(`{"text":"hi"}`), Answer: true, Query: "say hi", MaxLLMCalls: 2, OtherTools: []string{"faulty__ok"}}
	res, _, err := m.Run(context.Background(), spoke.Key{User: "@a:x", App: "echo", Session: "s"}, step, h)
	if err != nil || res.Answer != "said it" || string(res.Output) != `{"text":"hi"}` {
		t.Fatalf("Run() = %+v, %v", res, err)
	}
	if len(h.outputs) != 1 || h.outputs[0] != `{"text":"hi"}` {
		t.Fatalf("outputs = %v, want the result once", h.outputs)
	}
	first := -1
	for i, r := range h.requests {
		if r == "output" || r == "llm" {
			if first < 0 {
				first = i
			}
		}
	}
	if first < 0 || h.requests[first] != "output" {
		t.Fatalf("requests = %v, want the output before the model call", h.requests)
	}
	if len(offered) != 2 || offered[0] != "echo__say" || offered[1] != "faulty__ok" {
		t.Fatalf("offered %v, want the step's function and the other app's allowed one", offered)
	}
}
