package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/store"
)

// runSpec is one function run on an app's spoke.
type runSpec struct {
	step     string // plan step ID; empty for app-to-app calls
	app      string
	function string
	args     json.RawMessage
	answer   bool   // this spoke writes the final answer
	caller   string // the app that asked, for app-to-app calls
	chain    []string
}

// stepOutcome is what one plan step produced.
type stepOutcome struct {
	output json.RawMessage
	answer string
	err    error
}

// execute runs the plan and returns the answer for the user.
func (h *Hub) execute(ctx context.Context, q *query, plan Plan, history []store.MemoryEntry) (string, error) {
	if len(plan.Steps) == 0 {
		return h.answerVanilla(ctx, q, spoke.Step{ID: "answer", Query: q.text, History: historyMessages(history)})
	}
	steps := make([]PlanStep, len(plan.Steps))
	copy(steps, plan.Steps)
	denied := map[string]bool{}
	for i := range steps {
		h.checkProvenance(ctx, q, &steps[i])
	}
	for _, app := range planApps(steps) {
		if !h.decide(ctx, q, h.execRequest(q, steps, app)) {
			denied[app] = true
		}
	}
	outcomes := h.runSteps(ctx, q, steps, denied)

	if len(steps) == 1 {
		o := outcomes[steps[0].ID]
		if o.err != nil {
			return "", o.err
		}
		return o.answer, nil
	}
	var results []spoke.StepOutput
	var notes []string
	for _, s := range steps {
		o := outcomes[s.ID]
		if o.err != nil {
			notes = append(notes, o.err.Error())
			continue
		}
		results = append(results, spoke.StepOutput{Tool: apps.ToolName(s.App, s.Function), Args: s.Args, Result: o.output})
	}
	if len(results) == 0 {
		return "", userError(nil, "none of the apps could complete your request: %s", strings.Join(notes, "; "))
	}
	answer, err := h.answerVanilla(ctx, q, spoke.Step{ID: "answer", Query: q.text, Results: results})
	if err != nil {
		return "", err
	}
	if len(notes) > 0 {
		answer += "\n\nNot everything worked: " + strings.Join(notes, "; ")
	}
	return answer, nil
}

// planApps lists the plan's apps in order of first use.
func planApps(steps []PlanStep) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range steps {
		if !seen[s.App] {
			seen[s.App] = true
			out = append(out, s.App)
		}
	}
	return out
}

// execRequest asks to run app for every step of the plan that uses it.
func (h *Hub) execRequest(q *query, steps []PlanStep, app string) ConsentRequest {
	var fns []string
	var args json.RawMessage
	irreversible := false
	for _, s := range steps {
		if s.App == app {
			fns = append(fns, s.Function)
			irreversible = irreversible || h.catalog.irreversible(app, s.Function)
			if args == nil {
				args = s.Args
			}
		}
	}
	req := ConsentRequest{Category: CategoryExec, App: app, Function: strings.Join(fns, ", "), Args: args, InPlan: true, Irreversible: irreversible}
	if len(steps) == 1 {
		req.Warning = ""
		req.Data = []DataItem{{Field: "your request", Value: q.text}}
	}
	return req
}

// checkProvenance asks before an app receives any argument value the user
// did not type in this request; refused values are removed.
func (h *Hub) checkProvenance(ctx context.Context, q *query, s *PlanStep) {
	spec, _ := h.catalog.spec(s.App)
	fn, _ := spec.Function(s.Function)
	items := foreignValues(s.Args, fn.Request, q.text)
	if len(items) == 0 {
		return
	}
	req := ConsentRequest{
		Category: CategoryData, App: s.App, Function: s.Function, Data: items,
		Warning: "These values were not in your request: they come from your conversation history or were added by the planner.",
	}
	if h.decide(ctx, q, req) {
		return
	}
	zerolog.Ctx(ctx).Info().Str("app", s.App).Strs("args", topArgs(items)).Msg("Removed arguments the user did not allow to share")
	s.Args = withoutArgs(s.Args, items)
}

// runSteps runs the plan: each step once its dependencies are done,
// independent steps in parallel.
func (h *Hub) runSteps(ctx context.Context, q *query, steps []PlanStep, denied map[string]bool) map[string]stepOutcome {
	var mu sync.Mutex
	outcomes := map[string]stepOutcome{}
	done := map[string]chan struct{}{}
	apps := map[string]string{}
	for _, s := range steps {
		done[s.ID] = make(chan struct{})
		apps[s.ID] = s.App
	}
	var wg sync.WaitGroup
	for _, s := range steps {
		wg.Add(1)
		go func(s PlanStep) {
			defer wg.Done()
			defer close(done[s.ID])
			o := h.runPlanStep(ctx, q, s, len(steps) == 1, denied, func(id string) (stepOutcome, bool) {
				select {
				case <-done[id]:
				case <-ctx.Done():
					return stepOutcome{}, false
				}
				mu.Lock()
				defer mu.Unlock()
				return outcomes[id], true
			}, apps)
			mu.Lock()
			outcomes[s.ID] = o
			mu.Unlock()
		}(s)
	}
	wg.Wait()
	return outcomes
}

// runPlanStep waits for the step's inputs, copies them in with consent, and
// runs the step on its app's spoke.
func (h *Hub) runPlanStep(ctx context.Context, q *query, s PlanStep, answer bool, denied map[string]bool, wait func(string) (stepOutcome, bool), stepApps map[string]string) stepOutcome {
	if denied[s.App] {
		return stepOutcome{err: userError(nil, "you did not allow %s to run", s.App)}
	}
	for _, d := range s.deps() {
		o, ok := wait(d)
		if !ok {
			return stepOutcome{err: userError(ctx.Err(), "%s was not run: the request was cancelled", s.App)}
		}
		if o.err != nil {
			return stepOutcome{err: userError(nil, "%s was not run because %s failed", s.App, stepApps[d])}
		}
	}
	args := s.Args
	if len(s.InputsFrom) > 0 {
		var err error
		if args, err = h.fillInputs(ctx, q, s, wait, stepApps); err != nil {
			return stepOutcome{err: err}
		}
	}
	res, err := h.runApp(ctx, q, runSpec{step: s.ID, app: s.App, function: s.Function, args: args, answer: answer})
	if err != nil {
		return stepOutcome{err: err}
	}
	return stepOutcome{output: res.Output, answer: res.Answer}
}

// fillInputs copies typed values from earlier results into the step's
// arguments. Each source app's result going to this app is a collab consent
// showing exactly the values copied.
func (h *Hub) fillInputs(ctx context.Context, q *query, s PlanStep, wait func(string) (stepOutcome, bool), stepApps map[string]string) (json.RawMessage, error) {
	var args map[string]json.RawMessage
	if err := json.Unmarshal(s.Args, &args); err != nil {
		args = map[string]json.RawMessage{}
	}
	bySource := map[string]map[string]json.RawMessage{}
	for _, arg := range sortedKeys(s.InputsFrom) {
		from, field, _ := strings.Cut(s.InputsFrom[arg], ".")
		o, _ := wait(from)
		v, err := fieldValue(o.output, field)
		if err != nil {
			return nil, userError(err, "%s could not get %q from %s's result", s.App, field, stepApps[from])
		}
		if bySource[from] == nil {
			bySource[from] = map[string]json.RawMessage{}
		}
		bySource[from][arg] = v
		args[arg] = v
	}
	for _, from := range sortedKeys(bySource) {
		shown, _ := json.Marshal(bySource[from])
		if !h.decide(ctx, q, ConsentRequest{Category: CategoryCollab, App: s.App, Source: stepApps[from], Function: s.Function, Result: shown, InPlan: true}) {
			return nil, userError(nil, "you did not allow %s's result to go to %s", stepApps[from], s.App)
		}
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("failed to encode arguments: %w", err)
	}
	return b, nil
}

// fieldValue reads a dotted path from a JSON object.
func fieldValue(doc json.RawMessage, path string) (json.RawMessage, error) {
	cur := doc
	for _, part := range strings.Split(path, ".") {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(cur, &obj); err != nil {
			return nil, fmt.Errorf("not an object at %q", part)
		}
		v, ok := obj[part]
		if !ok {
			return nil, fmt.Errorf("no field %q", part)
		}
		cur = v
	}
	return cur, nil
}

// runApp runs one function on an app's spoke and checks its result against
// the function's response schema before anything else sees it.
func (h *Hub) runApp(ctx context.Context, q *query, r runSpec) (spoke.Result, error) {
	spec, _ := h.catalog.spec(r.app)
	fn, _ := spec.Function(r.function)
	memory, err := h.store.SpokeMemory(ctx, q.user, r.app, h.opts.MemoryEntries)
	if err != nil {
		return spoke.Result{}, userError(err, "I could not read %s's memory", r.app)
	}
	step := spoke.Step{
		ID: r.step, Function: r.function, Args: r.args, Answer: r.answer,
		OtherTools: h.catalog.otherTools(r.app), MaxLLMCalls: h.opts.MaxLLMCallsPerStep,
	}
	if step.ID == "" {
		step.ID = "call"
	}
	if r.answer {
		step.Query = q.text
	}
	for _, m := range memory {
		step.Memory = append(step.Memory, m.Content)
	}
	res, info, err := h.run(ctx, q, r.app, step, &broker{h: h, q: q, app: r.app, chain: r.chain})
	call := CallRecord{Step: r.step, App: r.app, Function: r.function, Caller: r.caller, Args: r.args, SpokePID: info.PID, Source: "hub"}
	if err == nil && res.Output != nil {
		if verr := apps.ValidateDocument(fn.Response, res.Output); verr != nil {
			zerolog.Ctx(ctx).Warn().Err(verr).Str("app", r.app).Msg("Discarded a result that does not match its schema")
			res.Output = nil
			err = userError(verr, "%s returned a result that does not match its declared format, so it was discarded", r.app)
		}
	}
	if err == nil && res.Output != nil {
		res.Output = compactJSON(res.Output)
	}
	if err == nil && res.Output == nil {
		if !r.answer {
			err = userError(nil, "%s did not produce a result for %s", r.app, r.function)
		} else if !spec.IsAnnotation() {
			// The spoke's model answered without the planned result; the
			// user hears it from the hub, not only in the app's words.
			res.Answer += fmt.Sprintf("\n\n(secgpt: %s did not produce a valid result for %s.)", r.app, r.function)
		}
	}
	call.Result = res.Output
	if err != nil {
		call.Error = err.Error()
	}
	q.recordCall(call)
	for _, c := range res.Calls {
		appName, fnName, _ := apps.SplitToolName(c.Tool)
		if appName == r.app && fnName == r.function && bytes.Equal(compactJSON(c.Args), compactJSON(r.args)) && c.Error == "" {
			continue // the planned call itself, recorded above
		}
		q.recordCall(CallRecord{Step: r.step, App: appName, Function: fnName, Caller: r.app, Args: c.Args, Result: c.Result, Error: c.Error, SpokePID: info.PID, Source: "spoke"})
	}
	return res, err
}

// answerVanilla has the user's vanilla spoke write the answer.
func (h *Hub) answerVanilla(ctx context.Context, q *query, step spoke.Step) (string, error) {
	step.MaxLLMCalls = 1
	res, _, err := h.run(ctx, q, "", step, &broker{h: h, q: q})
	if err != nil {
		return "", err
	}
	return res.Answer, nil
}

// run runs a step on the spoke of (user, app, session), turning faults
// into messages that name the app.
func (h *Hub) run(ctx context.Context, q *query, app string, step spoke.Step, b *broker) (spoke.Result, spoke.Info, error) {
	res, info, err := h.runner.Run(ctx, spoke.Key{User: q.user, App: app, Session: q.session}, step, b)
	if info.PID != 0 {
		name := app
		if name == "" {
			name = "vanilla"
		}
		q.recordSpoke(name, info)
	}
	if err != nil {
		var f *spoke.Failure
		if errors.As(err, &f) {
			zerolog.Ctx(ctx).Warn().Err(err).Str("app", appLabel(app)).Int("spoke_pid", info.PID).Msg("Spoke failed")
			return res, info, userError(err, "%s %s", appLabel(app), f.Message)
		}
		return res, info, userError(err, "%s could not be run", appLabel(app))
	}
	if res.Error != "" {
		return res, info, userError(nil, "%s failed: %s", appLabel(app), res.Error)
	}
	if step.Answer || step.Query != "" && app == "" {
		if strings.TrimSpace(res.Answer) == "" {
			return res, info, userError(nil, "%s gave no answer", appLabel(app))
		}
	}
	return res, info, nil
}

func appLabel(app string) string {
	if app == "" {
		return "the assistant"
	}
	return app
}

func compactJSON(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}
