package hub

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/spoke"
)

// combine writes the cross-app part of an answer (compare, choose, total)
// once every step's output is known, while the apps still write their own
// parts. Its model, on the user's vanilla spoke, sees the user's request
// and, per app, the typed fields of its result keyed by app, function and
// field names: never a string an app wrote, so no app can tell it what to
// say about another. It runs only when at least two apps share a typed
// field; the summary is nil otherwise.
func (h *Hub) combine(ctx context.Context, q *query, runs []*stepRun) (*Summary, error) {
	for _, r := range runs {
		select {
		case <-r.known:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var results []spoke.StepOutput
	holders := map[string][]string{} // field name → apps with it
	var read []string
	for _, r := range runs {
		if r.output == nil {
			continue
		}
		spec, _ := h.catalog.spec(r.App)
		fn, _ := spec.Function(r.Function)
		fields := typedFields(r.output, fn.Response)
		if fields == nil || len(fields.keys) == 0 {
			continue
		}
		content, err := json.Marshal(fields)
		if err != nil {
			return nil, err
		}
		results = append(results, spoke.StepOutput{Tool: apps.ToolName(r.App, r.Function), Args: json.RawMessage("{}"), Result: content})
		for _, f := range fields.keys {
			if !slices.Contains(holders[f], r.App) {
				holders[f] = append(holders[f], r.App)
			}
		}
		if !slices.Contains(read, r.App) {
			read = append(read, r.App)
		}
	}
	shared := false
	for _, list := range holders {
		shared = shared || len(list) >= 2
	}
	if !shared {
		return nil, nil
	}
	text, err := h.answerVanilla(ctx, q, spoke.Step{ID: "combine", Query: q.text, Results: results})
	if err != nil {
		return nil, err
	}
	slices.Sort(read)
	return &Summary{Text: text, Apps: read}, nil
}
