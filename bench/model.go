package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/llm/simulator"
)

// model is the benchmark's simulated model: a capable model that serves
// each benchmark query as its table entry says, the same way in both
// modes, so that the modes differ only by the system around the model.
//
//   - As a planner (the plan response format) it writes the query's plan;
//     a query needing no app it answers itself where the format lets it.
//   - As the assistant of vanilla mode (tools offered, the query itself as
//     the last user message) it makes the plan's calls: each as soon as
//     the results it needs are in, so a chain of n links takes n rounds,
//     independent calls one round together; then it answers.
//   - Anywhere else (an app's spoke, whose task wraps the query; the
//     combiner; the no-app assistant; an annotation app) it answers.
//
// Its answers are the obedient model's (one line per result), which the
// benchmark's apps give no instruction to change.
type model struct {
	queries []*Query // longest text first, so a query inside another's text is not taken for it
	answer  simulator.Behaviour
}

var _ simulator.Behaviour = (*model)(nil)

func newModel(queries []Query) *model {
	m := &model{answer: simulator.Obedient()}
	for i := range queries {
		m.queries = append(m.queries, &queries[i])
	}
	slices.SortStableFunc(m.queries, func(a, b *Query) int { return len(b.Text) - len(a.Text) })
	return m
}

func (m *model) Reply(ctx context.Context, req *simulator.ChatRequest) (simulator.Reply, error) {
	q := m.find(req)
	switch {
	case q != nil && simulator.ResponseFormatNamed(simulator.PlanSchemaName)(req) && len(q.Steps) > 0:
		b, err := json.Marshal(map[string]any{"steps": q.Steps})
		if err != nil {
			return simulator.Reply{}, fmt.Errorf("failed to encode the plan: %w", err)
		}
		return simulator.Reply{Content: string(b)}, nil
	case simulator.ResponseFormatNamed(simulator.PlanSchemaName)(req):
		// Nothing to plan: the obedient planner plans nothing here and
		// answers where the format lets it.
		return m.answer.Reply(ctx, req)
	case q != nil && len(req.Tools) > 0 && simulator.LastUser(req) == q.Text:
		if calls := nextCalls(req, q); len(calls) > 0 {
			return simulator.Reply{ToolCalls: calls}, nil
		}
	}
	return m.answer.Reply(ctx, &simulator.ChatRequest{Model: req.Model, Messages: req.Messages})
}

// find returns the benchmark query a request serves: the one whose text a
// user message holds (a spoke's task quotes it), or nil.
func (m *model) find(req *simulator.ChatRequest) *Query {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		msg := req.Messages[i]
		if msg.Role != llm.RoleUser {
			continue
		}
		for _, q := range m.queries {
			if strings.Contains(msg.Content, q.Text) {
				return q
			}
		}
	}
	return nil
}

// nextCalls are the plan's calls that can be made now: not made yet, and
// every result they take an input from in.
func nextCalls(req *simulator.ChatRequest, q *Query) []llm.ToolCall {
	offered := map[string]bool{}
	for _, t := range req.Tools {
		offered[t.Name] = true
	}
	results := map[string]json.RawMessage{} // tool name → the content of its result
	callTool := map[string]string{}         // call ID → tool name
	for _, msg := range req.Messages {
		for _, tc := range msg.ToolCalls {
			callTool[tc.ID] = tc.Name
			results[tc.Name] = nil
		}
		if msg.Role == llm.RoleTool {
			if tool, ok := callTool[msg.ToolCallID]; ok {
				results[tool] = json.RawMessage(msg.Content)
			}
		}
	}
	byID := map[string]Step{}
	for _, s := range q.Steps {
		byID[s.ID] = s
	}
	var calls []llm.ToolCall
	for _, s := range q.Steps {
		tool := s.App + "__" + s.Function
		if _, made := results[tool]; made || !offered[tool] {
			continue
		}
		args := map[string]any{}
		for k, v := range s.Args {
			args[k] = v
		}
		ready := true
		for arg, src := range s.InputsFrom {
			from, field, _ := strings.Cut(src, ".")
			dep := byID[from]
			var out map[string]any
			if json.Unmarshal(results[dep.App+"__"+dep.Function], &out) != nil {
				ready = false
				break
			}
			args[arg] = out[field]
		}
		if !ready {
			continue
		}
		b, err := json.Marshal(args)
		if err != nil {
			continue
		}
		calls = append(calls, llm.ToolCall{ID: "bench_" + s.ID, Name: tool, Arguments: string(b)})
	}
	return calls
}
