package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"unicode"

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
			continue
		}
		// The user saw each irreversible step's arguments: that is one run
		// with exactly those, and nothing more (see broker.admit).
		for _, s := range steps {
			if s.App == app && h.catalog.irreversible(app, s.Function) {
				q.caps.approve("", app, s.Function, s.Args)
			}
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

// namedApps returns the installed apps the query names. A name counts as a
// whole word, compared case-insensitively, where a word is a run of
// letters, digits and underscores, the characters app names are made of:
// "metro_hail's" and "Use EMAIL." name metro_hail and email; "emails" and
// "metro_hailing" name nothing.
func (c *catalog) namedApps(query string) map[string]bool {
	named := map[string]bool{}
	words := strings.FieldsFunc(strings.ToLower(query), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_'
	})
	for _, w := range words {
		if _, ok := c.specs[w]; ok {
			named[w] = true
		}
	}
	return named
}

// followNamedApps enforces the user's explicit choice of apps (DESIGN §9):
// when the query names installed apps, steps of any other app are dropped,
// and so is every step that waits on a dropped one. The planner read
// third-party text (app descriptions, the user's history), so a step for an
// app the user did not name is what an injection looks like, whatever the
// planner's reasons.
func followNamedApps(p Plan, named map[string]bool) (Plan, []PlanStep) {
	if len(named) == 0 {
		return p, nil
	}
	gone := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for _, s := range p.Steps {
			if gone[s.ID] {
				continue
			}
			drop := !named[s.App]
			for _, d := range s.deps() {
				drop = drop || gone[d]
			}
			if drop {
				gone[s.ID], changed = true, true
			}
		}
	}
	kept := Plan{Steps: []PlanStep{}}
	var dropped []PlanStep
	for _, s := range p.Steps {
		if gone[s.ID] {
			dropped = append(dropped, s)
		} else {
			kept.Steps = append(kept.Steps, s)
		}
	}
	return kept, dropped
}

// droppedNote tells the user, in the hub's own words, which planned calls
// did not run because the query named other apps.
func droppedNote(dropped []PlanStep) string {
	if len(dropped) == 0 {
		return ""
	}
	var calls []string
	for _, s := range dropped {
		calls = append(calls, s.App+"."+s.Function)
	}
	return fmt.Sprintf("\n\n(secgpt: not run, because your message named other apps: %s.)", strings.Join(calls, ", "))
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

// execRequest asks to run app for every step of the plan that uses it,
// showing each step's function and arguments.
func (h *Hub) execRequest(q *query, steps []PlanStep, app string) ConsentRequest {
	req := ConsentRequest{Category: CategoryExec, App: app, InPlan: true}
	var fns []string
	for _, s := range steps {
		if s.App == app {
			fns = append(fns, s.Function)
			req.Calls = append(req.Calls, PlannedCall{Function: s.Function, Args: s.Args})
			req.Irreversible = req.Irreversible || h.catalog.irreversible(app, s.Function)
		}
	}
	req.Function = strings.Join(fns, ", ")
	if len(req.Calls) == 1 {
		req.Args, req.Calls = req.Calls[0].Args, nil
	}
	if len(steps) == 1 {
		req.Data = []DataItem{{Field: "your request", Value: q.text}}
	}
	return req
}

// checkProvenance asks before an app receives any argument value the user
// did not type in this request; refused values are removed.
func (h *Hub) checkProvenance(ctx context.Context, q *query, s *PlanStep) {
	spec, _ := h.catalog.spec(s.App)
	fn, _ := spec.Function(s.Function)
	items, tops := foreignValues(s.Args, fn.Request, q.text)
	if len(items) == 0 {
		return
	}
	req := ConsentRequest{
		Category: CategoryData, App: s.App, Function: s.Function, Data: items, Args: s.Args,
		Warning: "These values were not in your request: they come from your conversation history or were added by the planner.",
	}
	if h.decide(ctx, q, req) {
		return
	}
	zerolog.Ctx(ctx).Info().Str("app", s.App).Strs("args", tops).Msg("Removed arguments the user did not allow to share")
	s.Args = withoutArgs(s.Args, tops)
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
			o := guardStep(ctx, s, func() stepOutcome {
				return h.runPlanStep(ctx, q, s, len(steps) == 1, denied, func(id string) (stepOutcome, bool) {
					select {
					case <-done[id]:
					case <-ctx.Done():
						return stepOutcome{}, false
					}
					mu.Lock()
					defer mu.Unlock()
					return outcomes[id], true
				}, apps)
			})
			mu.Lock()
			outcomes[s.ID] = o
			mu.Unlock()
		}(s)
	}
	wg.Wait()
	return outcomes
}

// guardStep runs one step's work. A panic in it, a bug of the hub's, fails
// that step with the stack in the log; it must not end the process that
// serves every user.
func guardStep(ctx context.Context, s PlanStep, run func() stepOutcome) (o stepOutcome) {
	defer func() {
		if r := recover(); r != nil {
			zerolog.Ctx(ctx).Error().Str("app", s.App).Str("step", s.ID).Interface("panic", r).
				Bytes("stack", debug.Stack()).Msg("A step failed with a panic")
			o = stepOutcome{err: userError(fmt.Errorf("panic: %v", r), "%s failed because of an internal error", s.App)}
		}
	}()
	return run()
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
	spec, _ := h.catalog.spec(s.App)
	if fn, _ := spec.Function(s.Function); fn.Irreversible && apps.ValidateDocument(fn.Request, args) == nil {
		// Complete arguments: the spoke runs the step itself, without a model
		// call the broker could check, so the step's one approved run is
		// spent here.
		if !q.caps.consume("", s.App, s.Function, s.Args) {
			return stepOutcome{err: userError(nil, "%s.%s was not run: it cannot be undone and its approval was already used", s.App, s.Function)}
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
	args, err := decodeObject(s.Args)
	if err != nil {
		return nil, userError(err, "%s's arguments could not be read", s.App)
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
		shown, err := canonicalJSON(bySource[from])
		if err != nil {
			return nil, err
		}
		if !h.decide(ctx, q, ConsentRequest{Category: CategoryCollab, App: s.App, Source: stepApps[from], Function: s.Function, Result: shown, InPlan: true}) {
			return nil, userError(nil, "you did not allow %s's result to go to %s", stepApps[from], s.App)
		}
	}
	return canonicalJSON(args)
}

// canonicalJSON encodes v in the canonical form every boundary passes on.
func canonicalJSON(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("failed to encode arguments: %w", err)
	}
	canon, err := apps.Canonical(b)
	if err != nil {
		return nil, fmt.Errorf("failed to encode arguments: %w", err)
	}
	return canon, nil
}

// decodeObject reads a JSON object strictly: a duplicate key, which
// readers resolve differently, is an error, never a choice.
func decodeObject(raw json.RawMessage) (map[string]json.RawMessage, error) {
	canon, err := apps.Canonical(raw)
	if err != nil {
		return nil, err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(canon, &obj); err != nil || obj == nil {
		return nil, errors.New("not a JSON object")
	}
	return obj, nil
}

// fieldValue reads a dotted path from a JSON object.
func fieldValue(doc json.RawMessage, path string) (json.RawMessage, error) {
	cur := doc
	for _, part := range strings.Split(path, ".") {
		obj, err := decodeObject(cur)
		if err != nil {
			return nil, fmt.Errorf("not an object at %q: %w", part, err)
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
		// Only the canonical encoding of the checked value goes on: bytes the
		// validator read one way (a duplicate key's last value) must not
		// reach a reader that takes them another way.
		out, verr := apps.CanonicalDocument(fn.Response, res.Output)
		if verr != nil {
			zerolog.Ctx(ctx).Warn().Err(verr).Str("app", r.app).Msg("Discarded a result that does not match its schema")
			out = nil
			err = userError(verr, "%s returned a result that does not match its declared format, so it was discarded", r.app)
		}
		res.Output = out
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
		if appName == r.app && fnName == r.function && sameJSON(c.Args, r.args) && c.Error == "" {
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
	var res spoke.Result
	var info spoke.Info
	err := h.whileCurrent(q, func() error {
		var err error
		res, info, err = h.runner.Run(ctx, spoke.Key{User: q.user, App: app, Session: q.session}, step, b)
		return err
	})
	if errors.Is(err, errSessionEnded) {
		return res, info, userError(err, "%s was not run", appLabel(app))
	}
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

// sameJSON reports whether two documents have one canonical encoding.
func sameJSON(a, b json.RawMessage) bool {
	ca, err := apps.Canonical(a)
	if err != nil {
		return false
	}
	cb, err := apps.Canonical(b)
	return err == nil && bytes.Equal(ca, cb)
}
