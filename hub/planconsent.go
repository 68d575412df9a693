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
	req.Data = []DataItem{{Field: RequestField, Value: q.text}}
	return req
}

// RequestField names the user's request among the data an exec consent
// shows the app receives.
const RequestField = "your request"

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

// dataRequest asks before an app receives any argument value the user did
// not type in this request; ok is false when the step has none.
func (h *Hub) dataRequest(q *query, s PlanStep) (req ConsentRequest, ok bool) {
	spec, _ := h.catalog.spec(s.App)
	fn, _ := spec.Function(s.Function)
	items := foreignValues(s.Args, fn.Request, q.text)
	if len(items) == 0 {
		return ConsentRequest{}, false
	}
	return ConsentRequest{
		Category: CategoryData, App: s.App, Function: s.Function, Data: items, Args: s.Args,
		Warning: "These values were not in your request: they come from your conversation history or were added by the planner.",
	}, true
}

// askPlan asks, before any spoke starts, every question the plan needs up
// front, together: sharing each step's values the user did not type, and
// for each app running every step that uses it, showing each call. A
// once-answer covers exactly those calls (see capabilities.approve); a
// session or always answer covers the app's planned functions with any
// arguments. A step whose data or app the user did not allow does not
// run: rather than run without what the plan meant it to have.
func (h *Hub) askPlan(ctx context.Context, q *query, runs []*stepRun) {
	var reqs []ConsentRequest
	// dataOf[i] is the run whose values reqs[i] shares; nil for an exec
	// question, whose app is reqs[i].App.
	var dataOf []*stepRun
	var steps []PlanStep
	for _, r := range runs {
		if r.partErr != nil {
			continue
		}
		steps = append(steps, r.PlanStep)
		if req, ok := h.dataRequest(q, r.PlanStep); ok {
			reqs, dataOf = append(reqs, req), append(dataOf, r)
		}
	}
	for _, app := range planApps(steps) {
		reqs, dataOf = append(reqs, h.execRequest(q, steps, app)), append(dataOf, nil)
	}
	verdicts := h.decideAll(ctx, q, reqs)
	for i, v := range verdicts {
		if r := dataOf[i]; r != nil && !v.decision.allows() {
			zerolog.Ctx(ctx).Info().Str("app", r.App).Msg("A step did not run: the user did not allow sharing its arguments")
			why := "you did not allow sharing data you had not typed in this request"
			if v.timedOut() {
				why = "you did not answer in time about sharing data you had not typed in this request"
			}
			r.fail(userError(nil, "%s.%s was not run: %s", r.App, r.Function, why))
		}
	}
	for i, v := range verdicts {
		if dataOf[i] != nil {
			continue
		}
		app := reqs[i].App
		for _, r := range runs {
			if r.App != app || r.partErr != nil {
				continue
			}
			if !v.decision.allows() {
				why := "you did not allow " + app + " to run"
				if v.timedOut() {
					why = "you did not answer in time"
				}
				r.fail(userError(nil, "%s was not run: %s", app, why))
				continue
			}
			if v.decision.durable() && !reqs[i].Irreversible {
				q.caps.open(app)
			}
			// A step that takes values from another step's result is
			// approved once they are copied in, as their own consent
			// showed them (runPlanStep): the approval binds them too.
			if len(r.InputsFrom) == 0 {
				h.approveStep(q, r.PlanStep, r.Args)
			}
		}
	}
}
