package hub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/secgpt/secgpt/apps"
)

// Plan is the planner's output: the steps that serve one query. It becomes
// the query's capability set; nothing outside it runs without the user.
type Plan struct {
	Steps []PlanStep `json:"steps"`
	// Answer is the planner's own answer to a request that needs no app
	// (see Hub.plan); it is used only when the planner planned no step.
	Answer string `json:"answer,omitempty"`
}

// PlanStep calls one function of one installed app.
type PlanStep struct {
	ID       string          `json:"id"`
	App      string          `json:"app"`
	Function string          `json:"function"`
	Args     json.RawMessage `json:"args"`
	// DependsOn names steps that must finish first.
	DependsOn []string `json:"depends_on,omitempty"`
	// InputsFrom fills arguments from earlier results: argument name →
	// "stepID.field". The hub copies the typed value, with the user's consent.
	InputsFrom map[string]string `json:"inputs_from,omitempty"`
}

var stepIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,16}$`)

// PlanError says why a plan was refused, in words for the user and for the
// planner's one retry.
type PlanError struct{ Reason string }

func (e *PlanError) Error() string { return "invalid plan: " + e.Reason }

func planErrorf(format string, args ...any) error {
	return &PlanError{Reason: fmt.Sprintf(format, args...)}
}

// DroppedStep is a step of the planner's that did not run, and why, in
// the hub's words: a step is the unit of failure, not the plan.
type DroppedStep struct {
	PlanStep
	Reason string `json:"reason"`
}

// parsePlan strictly reads the planner's answer and validates each step
// against the installed apps. A plan that cannot be read, or has more than
// maxSteps steps, is a PlanError; an invalid step is dropped with its
// reason, and so is every step that waits for a dropped one, while the
// rest stands: no step can make another fail.
func parsePlan(b []byte, catalog *catalog, maxSteps int) (Plan, []DroppedStep, error) {
	// The plan is decoded from its canonical form, so each step's arguments
	// are canonical bytes: what the provenance check reads, what the consent
	// shows and what the app receives are one value.
	canon, err := apps.Canonical(b)
	if err != nil {
		return Plan{}, nil, planErrorf("not a plan object: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(canon))
	dec.DisallowUnknownFields()
	var p Plan
	if err := dec.Decode(&p); err != nil {
		return Plan{}, nil, planErrorf("not a plan object: %v", err)
	}
	if dec.More() {
		return Plan{}, nil, planErrorf("trailing data after the plan")
	}
	if p.Steps == nil {
		return Plan{}, nil, planErrorf(`missing "steps"`)
	}
	if len(p.Steps) > maxSteps {
		return Plan{}, nil, planErrorf("%d steps; at most %d are allowed", len(p.Steps), maxSteps)
	}
	reasons := map[int]string{}
	ids := map[string]int{}
	for i := range p.Steps {
		s := &p.Steps[i]
		if len(bytes.TrimSpace(s.Args)) == 0 || string(bytes.TrimSpace(s.Args)) == "null" {
			s.Args = json.RawMessage("{}")
		}
		switch _, dup := ids[s.ID]; {
		case !stepIDPattern.MatchString(s.ID):
			reasons[i] = "its step id is not valid"
		case dup:
			reasons[i] = "its step id is used twice"
		default:
			ids[s.ID] = i
		}
	}
	for i := range p.Steps {
		if reasons[i] == "" {
			reasons[i] = checkStep(p.Steps[i], catalog, ids)
		}
	}
	// An annotation app answers alone: beside other steps it is dropped;
	// of several alone, the first stands.
	var valid, notes []int
	for i, s := range p.Steps {
		if reasons[i] == "" {
			valid = append(valid, i)
			if spec, _ := catalog.spec(s.App); spec.IsAnnotation() {
				notes = append(notes, i)
			}
		}
	}
	if len(valid) > 1 && len(notes) > 0 {
		drop := notes
		if len(notes) == len(valid) {
			drop = notes[1:]
		}
		for _, i := range drop {
			reasons[i] = "an annotation app answers alone, and the plan has other steps"
		}
	}
	// A step that waits for a dropped step, or on itself through others,
	// is dropped too, until nothing changes.
	for changed := true; changed; {
		changed = false
		for i, s := range p.Steps {
			if reasons[i] != "" {
				continue
			}
			for _, d := range s.deps() {
				if j, ok := ids[d]; !ok || reasons[j] != "" {
					reasons[i], changed = "it waits for a step that does not run", true
					break
				}
			}
		}
		if !changed {
			kept := keptSteps(p, reasons)
			if cyc := findCycle(kept); cyc != "" {
				for i, s := range p.Steps {
					if reasons[i] == "" && slices.Contains(strings.Split(cyc, " → "), s.ID) {
						reasons[i], changed = "steps wait for each other in a loop", true
					}
				}
			}
		}
	}
	var dropped []DroppedStep
	for i, s := range p.Steps {
		if reasons[i] != "" {
			dropped = append(dropped, DroppedStep{PlanStep: s, Reason: reasons[i]})
		}
	}
	return keptSteps(p, reasons), dropped, nil
}

// checkStep returns why a step is invalid, or "".
func checkStep(s PlanStep, catalog *catalog, ids map[string]int) string {
	spec, ok := catalog.spec(s.App)
	if !ok {
		return "it names an app that is not installed"
	}
	fn, ok := spec.Function(s.Function)
	if !ok {
		return fmt.Sprintf("%s has no such function", s.App)
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal(s.Args, &args); err != nil {
		return "its arguments are not an object"
	}
	for arg, src := range s.InputsFrom {
		if _, both := args[arg]; both {
			return "it gives an argument both a value and an input"
		}
		from, field, ok := strings.Cut(src, ".")
		if _, known := ids[from]; !ok || !known || from == s.ID || field == "" {
			return "it takes an input from something that is not another step's result"
		}
	}
	for _, d := range s.DependsOn {
		if _, known := ids[d]; !known || d == s.ID {
			return "it waits for a step that does not exist"
		}
	}
	// Arguments may be incomplete (the spoke completes them or says what
	// is missing), but what is there must fit the schema.
	if err := apps.ValidateDocument(catalog.relaxed(s.App, fn), s.Args); err != nil {
		return fmt.Sprintf("its arguments do not fit %s.%s", s.App, s.Function)
	}
	return ""
}

// keptSteps is the plan without the steps that have a reason to drop.
func keptSteps(p Plan, reasons map[int]string) Plan {
	kept := Plan{Steps: []PlanStep{}, Answer: p.Answer}
	for i, s := range p.Steps {
		if reasons[i] == "" {
			kept.Steps = append(kept.Steps, s)
		}
	}
	return kept
}

// deps returns the steps a step waits for.
func (s PlanStep) deps() []string {
	set := map[string]bool{}
	for _, d := range s.DependsOn {
		set[d] = true
	}
	for _, src := range s.InputsFrom {
		from, _, _ := strings.Cut(src, ".")
		set[from] = true
	}
	return sortedKeys(set)
}

func findCycle(p Plan) string {
	byID := map[string]PlanStep{}
	for _, s := range p.Steps {
		byID[s.ID] = s
	}
	const (
		unseen = iota
		active
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(id string) bool
	visit = func(id string) bool {
		switch state[id] {
		case active:
			path = append(path, id)
			return true
		case done:
			return false
		}
		state[id] = active
		path = append(path, id)
		for _, d := range byID[id].deps() {
			if visit(d) {
				return true
			}
		}
		path = path[:len(path)-1]
		state[id] = done
		return false
	}
	for _, s := range p.Steps {
		if visit(s.ID) {
			return strings.Join(path, " → ")
		}
	}
	return ""
}

// capabilities is what one query may do: the plan, the apps the user
// allowed for the session or always (any arguments), and single-use
// approvals, each bound to the arguments its prompt showed.
type capabilities struct {
	mu    sync.Mutex
	exec  map[string]bool    // "app.function"
	pairs map[[2]string]bool // planned app pairs, either direction
	// opened are the apps whose planned functions run with any arguments:
	// the user answered their exec question for the session or always.
	opened map[string]bool
	// approved are the unused single-use approvals by who may use them
	// and the function.
	approved map[approvalKey][]approval
	// probes are {caller, "app.function"} pairs the user allowed outside
	// the plan for some arguments; the callee's schemas may be given.
	probes map[[2]string]bool
}

// approval is one run the user allowed with the arguments shown. Shown
// arguments that were incomplete cover one call that gives each of them
// the value shown and adds only the arguments the prompt said the app
// completes: an argument the user was not told of is not covered.
type approval struct {
	args json.RawMessage
	// completes are the arguments the app may add; nil for complete
	// arguments, which cover exactly themselves.
	completes []string
}

// approvalKey is who may use an approval, for which function: the run of
// one step (caller "" for the plan's own steps, an app for its calls of
// another app), since each call a prompt showed was one step's.
type approvalKey struct {
	caller, step, app, fn string
}

func newCapabilities(p Plan) *capabilities {
	c := &capabilities{exec: map[string]bool{}, pairs: map[[2]string]bool{}, opened: map[string]bool{},
		approved: map[approvalKey][]approval{}, probes: map[[2]string]bool{}}
	byID := map[string]PlanStep{}
	for _, s := range p.Steps {
		c.exec[s.App+"."+s.Function] = true
		byID[s.ID] = s
	}
	// Steps linked by a dependency form a group whose apps may call each
	// other's planned functions, as in the paper's cascaded plans.
	for _, s := range p.Steps {
		for _, d := range s.deps() {
			other := byID[d]
			c.pairs[[2]string{s.App, other.App}] = true
			c.pairs[[2]string{other.App, s.App}] = true
		}
	}
	return c
}

func (c *capabilities) canExec(app, fn string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exec[app+"."+fn]
}

// canCall reports whether the plan lets caller ask for callee's function fn.
func (c *capabilities) canCall(caller, callee, fn string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pairs[[2]string{caller, callee}] && c.exec[callee+"."+fn]
}

// canProbe reports whether caller may learn the schemas of callee's fn.
func (c *capabilities) canProbe(caller, callee, fn string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.probes[[2]string{caller, callee + "." + fn}] || c.pairs[[2]string{caller, callee}] && c.exec[callee+"."+fn]
}

func (c *capabilities) planned(caller, callee string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pairs[[2]string{caller, callee}]
}

// offered are what app's model may be offered: its own planned functions,
// and the tool names of the other apps' planned functions it may call.
func (c *capabilities) offered(app string) (own, others []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, key := range sortedKeys(c.exec) {
		a, fn, _ := strings.Cut(key, ".")
		switch {
		case a == app:
			own = append(own, fn)
		case c.pairs[[2]string{app, a}]:
			others = append(others, apps.ToolName(a, fn))
		}
	}
	return own, others
}

// open lets app's planned functions run with any arguments for the rest
// of the query.
func (c *capabilities) open(app string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.opened[app] = true
}

// approve records that the user allowed one run of app's fn with args,
// in the run of step, asked by caller ("" for the plan's own step);
// completes are the arguments the app may add to incomplete args
// (non-nil, perhaps empty), nil when args are complete.
func (c *capabilities) approve(caller, step, app, fn string, args json.RawMessage, completes []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := approvalKey{caller: caller, step: step, app: app, fn: fn}
	c.approved[k] = append(c.approved[k], approval{args: args, completes: completes})
	if caller != "" {
		c.probes[[2]string{caller, app + "." + fn}] = true
	}
}

// admit decides whether a call of app's planned function fn with args, in
// the run of step, may run: for an app the user opened, yes, unless fn is
// irreversible; else only by using up an approval of that step's the call
// matches.
func (c *capabilities) admit(caller, step, app, fn string, args json.RawMessage, irreversible bool) bool {
	c.mu.Lock()
	opened := c.opened[app] && caller == ""
	c.mu.Unlock()
	if opened && !irreversible {
		return true
	}
	return c.consume(caller, step, app, fn, args)
}

// consume uses up one approval of step's this call matches: one of
// exactly these arguments, or else one of incomplete arguments that these
// complete.
func (c *capabilities) consume(caller, step, app, fn string, args json.RawMessage) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := approvalKey{caller: caller, step: step, app: app, fn: fn}
	list := c.approved[k]
	i := slices.IndexFunc(list, func(a approval) bool { return sameJSON(a.args, args) })
	if i < 0 {
		i = slices.IndexFunc(list, func(a approval) bool { return a.completes != nil && completes(args, a) })
	}
	if i < 0 {
		return false
	}
	c.approved[k] = slices.Delete(list, i, i+1)
	return true
}

// completes reports whether args gives every argument the approval
// showed the value shown, and any other only where the app was to
// complete it.
func completes(args json.RawMessage, a approval) bool {
	got, err := decodeObject(args)
	if err != nil {
		return false
	}
	shown, err := decodeObject(a.args)
	if err != nil {
		return false
	}
	for k, v := range shown {
		if g, ok := got[k]; !ok || !sameJSON(g, v) {
			return false
		}
	}
	for k := range got {
		if _, ok := shown[k]; !ok && !slices.Contains(a.completes, k) {
			return false
		}
	}
	return true
}
