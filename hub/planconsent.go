package hub

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/rs/zerolog"
)

// The consents a plan needs before it runs: data the user did not type
// (one question per step), and running each app (one question per app,
// showing every call). Both are asked before any spoke starts.

// planApps lists the plan's apps in order of first use.
func planApps(steps []PlanStep) []string {
	var out []string
	for _, s := range steps {
		if !slices.Contains(out, s.App) {
			out = append(out, s.App)
		}
	}
	return out
}

// execRequest asks to run app for every step of the plan that uses it,
// showing each step's function and arguments, which arguments the app
// will complete itself and which come from another step's result, and
// that the app reads the user's request.
func (h *Hub) execRequest(q *query, steps []PlanStep, app string) ConsentRequest {
	req := ConsentRequest{Category: CategoryExec, App: app, InPlan: true}
	byID := map[string]PlanStep{}
	for _, s := range steps {
		byID[s.ID] = s
	}
	var fns []string
	for _, s := range steps {
		if s.App != app {
			continue
		}
		fns = append(fns, s.Function)
		call := PlannedCall{Function: s.Function, Args: s.Args, Completes: h.missingArgs(s)}
		for _, arg := range sortedKeys(s.InputsFrom) {
			from, field, _ := strings.Cut(s.InputsFrom[arg], ".")
			if call.From == nil {
				call.From = map[string]string{}
			}
			call.From[arg] = byID[from].App + "." + field
			call.Completes = slices.DeleteFunc(call.Completes, func(a string) bool { return a == arg })
		}
		req.Calls = append(req.Calls, call)
		req.Irreversible = req.Irreversible || h.catalog.irreversible(app, s.Function)
	}
	req.Function = strings.Join(fns, ", ")
	if len(req.Calls) == 1 {
		req.Args = req.Calls[0].Args
	}
	// Each step's app reads the whole request to write its part of the
	// answer, also the words meant for the plan's other apps.
	req.Data = []DataItem{{Field: requestField, Value: q.text}}
	return req
}

// requestField names the user's request among the data an exec consent
// shows the app receives.
const requestField = "your request"

// missingArgs are the required top-level arguments the plan left out: the
// app completes them.
func (h *Hub) missingArgs(s PlanStep) []string {
	spec, _ := h.catalog.spec(s.App)
	fn, _ := spec.Function(s.Function)
	var schema struct {
		Required []string `json:"required"`
	}
	_ = json.Unmarshal(fn.Request, &schema)
	args, _ := decodeObject(s.Args)
	var out []string
	for _, r := range schema.Required {
		if _, ok := args[r]; !ok {
			out = append(out, r)
		}
	}
	return out
}

// checkProvenance asks before an app receives any argument value the user
// did not type in this request. A refusal is the step's error: the step
// does not run, rather than run without what the plan meant it to have.
func (h *Hub) checkProvenance(ctx context.Context, q *query, s PlanStep) error {
	spec, _ := h.catalog.spec(s.App)
	fn, _ := spec.Function(s.Function)
	items := foreignValues(s.Args, fn.Request, q.text)
	if len(items) == 0 {
		return nil
	}
	req := ConsentRequest{
		Category: CategoryData, App: s.App, Function: s.Function, Data: items, Args: s.Args,
		Warning: "These values were not in your request: they come from your conversation history or were added by the planner.",
	}
	if h.decide(ctx, q, req).allows() {
		return nil
	}
	zerolog.Ctx(ctx).Info().Str("app", s.App).Msg("A step did not run: the user did not allow sharing its arguments")
	return userError(nil, "%s.%s was not run: you did not allow sharing data you had not typed in this request", s.App, s.Function)
}
