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
	answer   bool   // this spoke writes the app's part of the answer
	caller   string // the app that asked, for app-to-app calls
	chain    []string
	// early, for a step that writes its part, takes the checked output as
	// soon as the spoke reports it, before the part is written.
	early func(json.RawMessage)
	// complete says args satisfy the function's request schema, as the
	// hub checked: the spoke runs the function with them without its
	// model and without checking them again.
	complete bool
}

// stepRun is one plan step as it runs.
type stepRun struct {
	PlanStep
	// known is closed once the step's output is known, or known never to
	// come: later steps and the combiner wait for it, not for the part.
	known  chan struct{}
	once   sync.Once
	output json.RawMessage
	err    error // why there is no output
	// part is the app's part of the answer, in its own words; partErr why
	// there is none.
	part    string
	partErr error
}

func newStepRun(s PlanStep) *stepRun { return &stepRun{PlanStep: s, known: make(chan struct{})} }

// settle records the step's output, or why there is none, once.
func (s *stepRun) settle(out json.RawMessage, err error) {
	s.once.Do(func() {
		s.output, s.err = out, err
		close(s.known)
	})
}

// fail ends a step that produced nothing.
func (s *stepRun) fail(err error) {
	s.settle(nil, err)
	s.partErr = err
}

// execute runs the plan and composes the reply: each app's part written
// in its own spoke, the cross-app part from typed fields only, and the
// hub's notes.
func (h *Hub) execute(ctx context.Context, q *query, plan Plan, history []store.MemoryEntry) (*Reply, error) {
	if len(plan.Steps) == 0 {
		if plan.Answer != "" {
			// The planner answered in its own round (see Hub.plan).
			return &Reply{Parts: []Part{{Text: plan.Answer}}}, nil
		}
		text, err := h.answerVanilla(ctx, q, spoke.Step{ID: "answer", Query: q.text, History: assistantHistory(history)})
		if err != nil {
			return nil, err
		}
		return &Reply{Parts: []Part{{Text: text}}}, nil
	}
	runs := make([]*stepRun, len(plan.Steps))
	byID := map[string]*stepRun{}
	for i, s := range plan.Steps {
		runs[i] = newStepRun(s)
		byID[s.ID] = runs[i]
	}
	h.expect(q, spokesOf(runs))
	h.askPlan(ctx, q, runs)
	h.prestart(ctx, q, runs)

	var wg sync.WaitGroup
	for _, r := range runs[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.guardStep(ctx, r, func() { h.runPlanStep(ctx, q, r, byID) })
		}()
	}
	var summary *Summary
	var combineErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		summary, combineErr = h.combine(ctx, q, runs)
	}()
	// The first step runs here, once every other has its goroutine: this
	// one's stack has grown through planning already, and a new one's
	// would grow again, copied at each doubling (a tenth of the hub's CPU
	// in 100 users' warm queries went to stack growth).
	h.guardStep(ctx, runs[0], func() { h.runPlanStep(ctx, q, runs[0], byID) })
	wg.Wait()

	reply := &Reply{Summary: summary}
	for _, r := range runs {
		if r.part != "" {
			reply.Parts = append(reply.Parts, Part{App: r.App, Step: r.ID, Function: r.Function, Text: r.part})
		}
		if r.partErr != nil {
			reply.Notes = append(reply.Notes, noteOf(r.partErr))
		} else if r.output == nil && r.err != nil {
			reply.Notes = append(reply.Notes, noteOf(r.err))
		}
	}
	if combineErr != nil {
		zerolog.Ctx(ctx).Warn().Err(combineErr).Msg("The cross-app part could not be written")
		reply.Notes = append(reply.Notes, Note{Text: "the comparison across apps could not be written"})
	}
	if len(reply.Parts) == 0 && reply.Summary == nil {
		if len(runs) == 1 && runs[0].partErr != nil {
			return nil, runs[0].partErr
		}
		// Each failure stays a note in its own voice: an app's error text
		// is the app's, and one message in the hub's words would make it
		// the hub's.
		reply.Notes = append([]Note{{Text: "none of the apps could complete your request"}}, reply.Notes...)
	}
	return reply, nil
}

// approveStep records the user's once-answer to run plan step s with args:
// it covers, in s's run only, a call with exactly those, or, where they are
// incomplete, one call that gives each the value shown and adds only the
// arguments the prompt said the app completes (missingArgs).
func (h *Hub) approveStep(q *query, s PlanStep, args json.RawMessage) {
	spec, _ := h.catalog.spec(s.App)
	fn, _ := spec.Function(s.Function)
	var completes []string
	if apps.ValidateDocument(fn.Request, args) != nil {
		s.Args = args
		completes = append([]string{}, h.missingArgs(s)...)
	}
	q.caps.approve("", s.ID, s.App, s.Function, args, completes)
}

// guardStep runs one step's work. A panic in it, a bug of the hub's, fails
// that step with the stack in the log; it must not end the process that
// serves every user.
func (h *Hub) guardStep(ctx context.Context, r *stepRun, run func()) {
	defer func() {
		if p := recover(); p != nil {
			zerolog.Ctx(ctx).Error().Str("app", r.App).Str("step", r.ID).Interface("panic", p).
				Bytes("stack", debug.Stack()).Msg("A step failed with a panic")
			r.fail(userError(fmt.Errorf("panic: %v", p), "%s failed because of an internal error", r.App))
		}
		// Whatever happened, nothing waits for this step forever.
		r.settle(nil, userError(nil, "%s did not produce a result for %s", r.App, r.Function))
	}()
	run()
}

// runPlanStep waits for the step's inputs, copies them in with consent,
// and runs the step on its app's spoke, which writes the app's part.
func (h *Hub) runPlanStep(ctx context.Context, q *query, r *stepRun, byID map[string]*stepRun) {
	if r.partErr != nil {
		return
	}
	for _, d := range r.deps() {
		dep := byID[d]
		select {
		case <-dep.known:
		case <-ctx.Done():
			r.fail(userError(ctx.Err(), "%s was not run: the request was cancelled", r.App))
			return
		}
		if dep.output == nil {
			r.fail(userError(nil, "%s was not run because %s did not produce a result", r.App, dep.App))
			return
		}
	}
	args := r.Args
	if len(r.InputsFrom) > 0 {
		var err error
		if args, err = h.fillInputs(ctx, q, r.PlanStep, byID); err != nil {
			r.fail(err)
			return
		}
		h.approveStep(q, r.PlanStep, args)
	}
	spec, _ := h.catalog.spec(r.App)
	fn, _ := spec.Function(r.Function)
	complete := apps.ValidateDocument(fn.Request, args) == nil
	if complete && !q.caps.admit("", r.ID, r.App, r.Function, args, fn.Irreversible) {
		// Complete arguments: the spoke runs the step itself, without a
		// model call the broker could check, so its approval is spent here.
		r.fail(userError(nil, "%s.%s was not run: the approval you gave covered other calls", r.App, r.Function))
		return
	}
	res, err := h.runApp(ctx, q, runSpec{
		step: r.ID, app: r.App, function: r.Function, args: args, answer: true, complete: complete,
		early: func(out json.RawMessage) { r.settle(out, nil) },
	})
	if err != nil {
		r.fail(err)
		return
	}
	if res.Output == nil && !spec.IsAnnotation() {
		// The spoke's model answered without the planned result; the user
		// hears it from the hub, not only in the app's words.
		r.settle(nil, userError(nil, "%s did not produce a valid result for %s", r.App, r.Function))
	}
	r.settle(res.Output, nil)
	r.part = res.Answer
}

// fillInputs copies typed values from earlier results into the step's
// arguments. A value that is free text an app wrote does not cross: the
// step does not run. Each source app's result going to this app is a
// collab consent showing exactly the values copied.
func (h *Hub) fillInputs(ctx context.Context, q *query, s PlanStep, byID map[string]*stepRun) (json.RawMessage, error) {
	args, err := decodeObject(s.Args)
	if err != nil {
		return nil, userError(err, "%s's arguments could not be read", s.App)
	}
	bySource := map[string]map[string]json.RawMessage{}
	for _, arg := range sortedKeys(s.InputsFrom) {
		from, field, _ := strings.Cut(s.InputsFrom[arg], ".")
		src := byID[from]
		v, err := fieldValue(src.output, field)
		if err != nil {
			return nil, userError(err, "%s could not get %q from %s's result", s.App, field, src.App)
		}
		if text := freeText(v, h.catalog.responseAt(src.App, src.Function, field), q.text); len(text) > 0 {
			return nil, userError(nil, "%s.%s was not run: it needed %s's %s, which is text the app wrote, and text does not pass between apps", s.App, s.Function, src.App, field)
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
		src := byID[from].App
		v := h.decideAll(ctx, q, []ConsentRequest{{Category: CategoryCollab, App: s.App, Source: src, Function: s.Function, Result: shown, InPlan: true}})[0]
		switch {
		case v.timedOut():
			return nil, userError(nil, "%s's result did not go to %s: you did not answer in time", src, s.App)
		case !v.decision.allows():
			return nil, userError(nil, "you did not allow %s's result to go to %s", src, s.App)
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
		ID: r.step, Function: r.function, Args: r.args, ArgsComplete: r.complete, Answer: r.answer,
		MaxLLMCalls: h.opts.MaxLLMCallsPerStep,
	}
	if r.caller == "" {
		step.Functions, step.OtherTools = q.caps.offered(r.app)
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
	b := &broker{h: h, q: q, app: r.app, chain: r.chain, step: r.step}
	// The output the spoke reported early, as it came and as checked: the
	// result that repeats it byte for byte is not checked again.
	var earlyRaw, earlyCanon json.RawMessage
	if r.early != nil {
		b.early = func(out json.RawMessage) {
			if canon, err := apps.CanonicalDocument(fn.Response, out); err == nil {
				earlyRaw, earlyCanon = out, canon
				r.early(canon)
			}
		}
	}
	res, info, err := h.run(ctx, q, r.app, step, b)
	call := CallRecord{Step: r.step, App: r.app, Function: r.function, Caller: r.caller, Args: r.args, SpokePID: info.PID, Source: "hub"}
	if err == nil && res.Output != nil && earlyCanon != nil && bytes.Equal(res.Output, earlyRaw) {
		res.Output = earlyCanon
	} else if err == nil && res.Output != nil {
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
	switch {
	case err != nil:
		call.Error = err.Error()
	case res.Output == nil && !r.answer:
		err = userError(nil, "%s did not produce a result for %s", r.app, r.function)
		call.Error = err.Error()
	case res.Output == nil && !spec.IsAnnotation():
		// The app wrote its part without the result: on record, and the
		// step tells the user (runPlanStep).
		call.Error = fmt.Sprintf("%s did not produce a valid result for %s", r.app, r.function)
	}
	call.Result = res.Output
	q.recordCall(call)
	for _, c := range res.Calls {
		appName, fnName, _ := apps.SplitToolName(c.Tool)
		if appName != r.app {
			// Only its own app's calls happen in the spoke: another app's
			// run, or its refusal, is the hub's to record, and a spoke's
			// word on it (which its app could forge) is not.
			continue
		}
		if fnName == r.function && sameJSON(c.Args, r.args) && c.Error == "" {
			continue // the planned call itself, recorded above
		}
		q.recordCall(CallRecord{Step: r.step, App: appName, Function: fnName, Caller: r.app, Args: c.Args, Result: c.Result, Error: c.Error, SpokePID: info.PID, Source: "spoke"})
	}
	return res, err
}

// answerVanilla has the user's vanilla spoke write an answer.
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
	h.ledger.addHubTime(ctx, q.user, app, info.HubTime)
	if info.PID != 0 {
		name := app
		if name == "" {
			name = "vanilla"
		}
		q.recordSpoke(name, info)
	}
	if b.overBudget != nil {
		// The hub refused the step's model call: its words, not the
		// spoke's, say why, whatever the spoke did after.
		return spoke.Result{}, info, userError(b.overBudget, "%s was stopped: %s", appLabel(app), b.overBudget.Error())
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
		// The spoke's words: its app's error, or its model's.
		e := userError(nil, "%s failed: %s", appLabel(app), res.Error)
		e.App = app
		return res, info, e
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
