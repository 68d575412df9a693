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
// and, per app, the typed fields its result has in common with another
// app's (see commonFields), keyed by app, function and field names: never
// a string an app wrote, nor a name or an enum member that only one app
// declared, so no app can tell it what to say about another. It runs only
// when at least two apps have such fields; the summary is nil otherwise.
func (h *Hub) combine(ctx context.Context, q *query, runs []*stepRun) (*Summary, error) {
	for _, r := range runs {
		select {
		case <-r.known:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var results []spoke.StepOutput
	var read []string
	for _, c := range h.commonFields(runs) {
		content, err := json.Marshal(c.fields)
		if err != nil {
			return nil, err
		}
		results = append(results, spoke.StepOutput{Tool: apps.ToolName(c.run.App, c.run.Function), Args: json.RawMessage("{}"), Result: content})
		if !slices.Contains(read, c.run.App) {
			read = append(read, c.run.App)
		}
	}
	if len(read) < 2 {
		return nil, nil
	}
	text, err := h.answerVanilla(ctx, q, spoke.Step{ID: "combine", Query: q.text, Results: results})
	if err != nil {
		return nil, err
	}
	slices.Sort(read)
	return &Summary{Text: text, Apps: read}, nil
}

// runFields are the fields of one step's result the combiner may read.
type runFields struct {
	run    *stepRun
	fields *ordered
}

// commonFields returns, per step with an output, the top-level typed
// fields of its result (typedFields) that the cross-app part may use:
// those another app's result has too, and of a string (an enum member)
// only a value that every app holding the field declares in its own
// schema there. What one app alone names or declares (a field called
// "metro_hail_fare", a currency "metro_hail_is_down") is that app's
// words; the app's own part says it.
func (h *Hub) commonFields(runs []*stepRun) []runFields {
	var all []runFields
	holders := map[string][]*stepRun{} // field name → the steps whose results have it
	for _, r := range runs {
		if r.output == nil {
			continue
		}
		fields := typedFields(r.output, h.response(r.App, r.Function))
		if fields == nil || len(fields.keys) == 0 {
			continue
		}
		all = append(all, runFields{run: r, fields: fields})
		for _, f := range fields.keys {
			holders[f] = append(holders[f], r)
		}
	}
	var out []runFields
	for _, rf := range all {
		common := &ordered{}
		for _, f := range rf.fields.keys {
			if h.sharedValue(holders[f], f, rf.fields.vals[f]) {
				common.set(f, rf.fields.vals[f])
			}
		}
		if len(common.keys) > 0 {
			out = append(out, runFields{run: rf.run, fields: common})
		}
	}
	return out
}

// sharedValue reports whether v, the value of field in one of holders'
// results, may reach the combiner: at least two apps' results have the
// field, and a string is a typed enum member at field in every holder's
// response schema.
func (h *Hub) sharedValue(holders []*stepRun, field string, v any) bool {
	var holderApps []string
	for _, r := range holders {
		if !slices.Contains(holderApps, r.App) {
			holderApps = append(holderApps, r.App)
		}
	}
	if len(holderApps) < 2 {
		return false
	}
	s, isString := v.(string)
	if !isString {
		return true
	}
	for _, r := range holders {
		if !typedEnumMember(s, h.catalog.responseAt(r.App, r.Function, field)) {
			return false
		}
	}
	return true
}

// response returns app's function's response schema.
func (h *Hub) response(app, fn string) json.RawMessage {
	spec, _ := h.catalog.spec(app)
	f, _ := spec.Function(fn)
	return f.Response
}
