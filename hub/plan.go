package hub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/secgpt/secgpt/apps"
)

// Plan is the planner's output: the steps that serve one query. It becomes
// the query's capability set; nothing outside it runs without the user.
type Plan struct {
	Steps []PlanStep `json:"steps"`
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

// parsePlan strictly parses and validates a plan against the installed apps.
func parsePlan(b []byte, catalog *catalog, maxSteps int) (Plan, error) {
	// The plan is decoded from its canonical form, so each step's arguments
	// are canonical bytes: what the provenance check reads, what the consent
	// shows and what the app receives are one value.
	canon, err := apps.Canonical(b)
	if err != nil {
		return Plan{}, planErrorf("not a plan object: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(canon))
	dec.DisallowUnknownFields()
	var p Plan
	if err := dec.Decode(&p); err != nil {
		return Plan{}, planErrorf("not a plan object: %v", err)
	}
	if dec.More() {
		return Plan{}, planErrorf("trailing data after the plan")
	}
	if p.Steps == nil {
		return Plan{}, planErrorf(`missing "steps"`)
	}
	if len(p.Steps) > maxSteps {
		return Plan{}, planErrorf("%d steps; at most %d are allowed", len(p.Steps), maxSteps)
	}
	ids := map[string]int{}
	for i := range p.Steps {
		s := &p.Steps[i]
		if !stepIDPattern.MatchString(s.ID) {
			return Plan{}, planErrorf("step %d has an invalid id %q", i+1, s.ID)
		}
		if _, dup := ids[s.ID]; dup {
			return Plan{}, planErrorf("step id %q is used twice", s.ID)
		}
		ids[s.ID] = i
	}
	for i := range p.Steps {
		s := &p.Steps[i]
		spec, ok := catalog.spec(s.App)
		if !ok {
			return Plan{}, planErrorf("step %s names the app %q, which is not installed; installed apps: %s", s.ID, s.App, strings.Join(catalog.names, ", "))
		}
		fn, ok := spec.Function(s.Function)
		if !ok {
			return Plan{}, planErrorf("step %s names %s.%s, but %s has no function %q", s.ID, s.App, s.Function, s.App, s.Function)
		}
		if spec.IsAnnotation() && len(p.Steps) > 1 {
			return Plan{}, planErrorf("step %s uses the annotation app %s, which must be the only step", s.ID, s.App)
		}
		if len(bytes.TrimSpace(s.Args)) == 0 || string(bytes.TrimSpace(s.Args)) == "null" {
			s.Args = json.RawMessage("{}")
		}
		var args map[string]json.RawMessage
		if err := json.Unmarshal(s.Args, &args); err != nil {
			return Plan{}, planErrorf("step %s: args must be a JSON object", s.ID)
		}
		for arg, src := range s.InputsFrom {
			if _, both := args[arg]; both {
				return Plan{}, planErrorf("step %s gives argument %q both a value and an input", s.ID, arg)
			}
			from, _, ok := strings.Cut(src, ".")
			if _, known := ids[from]; !ok || !known || from == s.ID {
				return Plan{}, planErrorf("step %s takes %q from %q, which is not another step's result field", s.ID, arg, src)
			}
		}
		for _, d := range s.DependsOn {
			if _, known := ids[d]; !known || d == s.ID {
				return Plan{}, planErrorf("step %s depends on unknown step %q", s.ID, d)
			}
		}
		// Arguments may be incomplete (the spoke completes them or says what
		// is missing), but what is there must fit the schema.
		if err := apps.ValidateDocument(catalog.relaxed(s.App, fn), s.Args); err != nil {
			return Plan{}, planErrorf("step %s: the arguments for %s.%s do not match its schema: %v", s.ID, s.App, s.Function, err)
		}
	}
	if cyc := findCycle(p); cyc != "" {
		return Plan{}, planErrorf("steps depend on each other in a loop (%s)", cyc)
	}
	return p, nil
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

// capabilities is what one query may do: the plan, plus single-use
// approvals the user gave during the query, each bound to the exact
// arguments it showed.
type capabilities struct {
	mu    sync.Mutex
	exec  map[string]bool    // "app.function"
	pairs map[[2]string]bool // planned app pairs, either direction
	// approved counts unused approvals by approvalKey.
	approved map[string]int
	// probes are {caller, "app.function"} pairs the user allowed outside
	// the plan for some arguments; the callee's schemas may be given.
	probes map[[2]string]bool
}

func newCapabilities(p Plan) *capabilities {
	c := &capabilities{exec: map[string]bool{}, pairs: map[[2]string]bool{}, approved: map[string]int{}, probes: map[[2]string]bool{}}
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

// approvalKey names one call: who asks ("" for a plan step), what runs,
// and the canonical arguments the user was shown.
func approvalKey(caller, app, fn string, args json.RawMessage) string {
	return caller + "\x00" + app + "." + fn + "\x00" + string(args)
}

// approve records that the user allowed one run of app's fn with exactly
// args, asked by caller.
func (c *capabilities) approve(caller, app, fn string, args json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.approved[approvalKey(caller, app, fn, args)]++
	if caller != "" {
		c.probes[[2]string{caller, app + "." + fn}] = true
	}
}

// consume uses up one approval of exactly this call, if there is one.
func (c *capabilities) consume(caller, app, fn string, args json.RawMessage) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := approvalKey(caller, app, fn, args)
	if c.approved[k] == 0 {
		return false
	}
	c.approved[k]--
	return true
}
