package simulator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/secgpt/secgpt/llm"
)

// PlanSchemaName is the response_format name of the hub's planner requests.
const PlanSchemaName = "secgpt_plan"

// maxAgentTurns bounds the agent role: after this many assistant messages it
// answers, whatever is left to call.
const maxAgentTurns = 20

// lastToolPlaceholder, as a whole JSON string in a call instruction's
// arguments, stands for the content of the last tool message.
const lastToolPlaceholder = "$last"

// Obedient is the worst-case model of the threat model: it does the user's
// task and obeys every instruction it finds in its context. See the package
// documentation for its roles and instructions. It is deterministic and
// stateless.
func Obedient() Behaviour { return obedient{} }

type obedient struct{}

var _ Behaviour = obedient{}

func (obedient) Reply(_ context.Context, req *ChatRequest) (Reply, error) {
	v := newView(req)
	switch {
	case req.ResponseFormat != nil && req.ResponseFormat.JSONSchema != nil && req.ResponseFormat.JSONSchema.Name == PlanSchemaName:
		return v.plan(req.ResponseFormat.JSONSchema.Schema)
	case len(req.Tools) > 0:
		return v.act(), nil
	default:
		return Reply{Content: v.answer()}, nil
	}
}

// view is what the obedient model makes of one request.
type view struct {
	req *ChatRequest
	// query is the last user message.
	query string
	// instructions are all instructions in the context, in order.
	instructions []instruction
	// facts are the keyed values recorded anywhere but in the query.
	facts []fact
}

func newView(req *ChatRequest) *view {
	v := &view{req: req}
	last := -1
	for i, m := range req.Messages {
		if m.Role == llm.RoleUser {
			last = i
		}
	}
	var context, recorded []string
	for i, m := range req.Messages {
		texts := readable(m.Content)
		context = append(context, texts...)
		if i == last {
			v.query = m.Content
		} else {
			recorded = append(recorded, texts...)
		}
	}
	for _, t := range req.Tools {
		context = append(context, t.Description)
		context = append(context, schemaStrings(t.Parameters)...)
	}
	v.instructions = parseInstructions(context)
	v.facts = recordedFacts(recorded)
	return v
}

// readable returns the texts a model reads in content: the content itself
// and, when it is JSON, each string in it (keys too) decoded, in document
// order, so that text escaped inside a JSON tool result (an email's body)
// is read as written.
func readable(content string) []string {
	texts := []string{content}
	if !json.Valid([]byte(content)) {
		return texts
	}
	dec := json.NewDecoder(strings.NewReader(content))
	for {
		t, err := dec.Token()
		if err != nil {
			return texts
		}
		if s, ok := t.(string); ok {
			texts = append(texts, s)
		}
	}
}

// schemaStrings returns every string of a tool's parameters schema, keys
// and values, in document order: a model reads a schema's descriptions,
// enum members and property names as much as a tool's description.
func schemaStrings(params json.RawMessage) []string {
	if !json.Valid(params) {
		return nil
	}
	return readable(string(params))[1:]
}

// shape applies share-recorded and set instructions to a call of f.
func (v *view) shape(f function, args map[string]any) {
	for _, in := range v.instructions {
		if in.app != f.app {
			continue
		}
		p, ok := f.property(in.field)
		if !ok {
			continue
		}
		switch {
		case in.kind == obeyShareRecorded && len(v.facts) > 0:
			args[p] = joinFacts(v.facts)
		case in.kind == obeySet:
			var val any
			dec := json.NewDecoder(bytes.NewReader(in.value))
			dec.UseNumber()
			if dec.Decode(&val) == nil {
				args[p] = val
			}
		}
	}
}

// dropped reports whether a plan-drop instruction names app.
func (v *view) dropped(app string) bool {
	for _, in := range v.instructions {
		if in.kind == obeyPlanDrop && in.app == app {
			return true
		}
	}
	return false
}

// lastTool returns the content of the last tool message, or "".
func (v *view) lastTool() string {
	for i := len(v.req.Messages) - 1; i >= 0; i-- {
		if v.req.Messages[i].Role == llm.RoleTool {
			return v.req.Messages[i].Content
		}
	}
	return ""
}

// callArgs returns a call instruction's arguments with "$last" replaced.
func (v *view) callArgs(in instruction) map[string]any {
	dec := json.NewDecoder(bytes.NewReader(in.args))
	dec.UseNumber()
	var args map[string]any
	if dec.Decode(&args) != nil || args == nil {
		// parseInstruction accepted a JSON object; this cannot happen.
		return map[string]any{}
	}
	last := v.lastTool()
	for k, a := range args {
		args[k] = replaceLast(a, last)
	}
	return args
}

func replaceLast(v any, last string) any {
	switch x := v.(type) {
	case string:
		if x == lastToolPlaceholder {
			return last
		}
	case map[string]any:
		for k, e := range x {
			x[k] = replaceLast(e, last)
		}
	case []any:
		for i, e := range x {
			x[i] = replaceLast(e, last)
		}
	}
	return v
}

// planStep is one step of the planner's answer.
type planStep struct {
	ID        string         `json:"id"`
	App       string         `json:"app"`
	Function  string         `json:"function"`
	Args      map[string]any `json:"args"`
	DependsOn []string       `json:"depends_on"`
}

// plan answers the planner role.
func (v *view) plan(schema json.RawMessage) (Reply, error) {
	catalogue, err := planCatalogue(schema)
	if err != nil {
		return Reply{}, fmt.Errorf("failed to read the plan schema: %w", err)
	}
	steps := []planStep{}
	add := func(f function, args map[string]any) {
		if v.dropped(f.app) {
			return
		}
		v.shape(f, args)
		steps = append(steps, planStep{
			ID: fmt.Sprintf("s%d", len(steps)+1), App: f.app, Function: f.name, Args: args, DependsOn: []string{},
		})
	}
	for _, fns := range mentionedApps(catalogue, v.query) {
		f := chooseFunction(fns, v.query)
		args, _ := f.fill(v.query)
		add(f, args)
	}
	for _, in := range v.instructions {
		if in.kind != obeyCall && in.kind != obeyPlanFlood {
			continue
		}
		for _, f := range catalogue {
			if f.tool != in.tool {
				continue
			}
			if in.kind == obeyCall {
				add(f, v.callArgs(in))
			}
			for range in.count {
				add(f, map[string]any{})
			}
			break
		}
	}
	plan := map[string]any{"steps": steps}
	if len(steps) == 0 && offersAnswer(schema) {
		plan["answer"] = v.answer()
	}
	b, err := json.Marshal(plan)
	if err != nil {
		return Reply{}, fmt.Errorf("failed to encode the plan: %w", err)
	}
	return Reply{Content: string(b)}, nil
}

// offersAnswer reports whether the plan schema has a top-level "answer"
// property: the planner may answer a request that needs no app itself.
func offersAnswer(schema json.RawMessage) bool {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return false
	}
	_, ok := s.Properties["answer"]
	return ok
}

// planCatalogue reads the (app, function, args schema) branches of the
// planner's response schema, in order: a branch whose app is an enum is
// one function for each app in it, and arguments given by reference are
// read from the root's "$defs".
func planCatalogue(schema json.RawMessage) ([]function, error) {
	type branch struct {
		Properties struct {
			App struct {
				Const string
				Enum  []string
			} `json:"app"`
			Function struct{ Const string } `json:"function"`
			Args     json.RawMessage        `json:"args"`
		} `json:"properties"`
	}
	var s struct {
		Properties struct {
			Steps struct {
				Items struct {
					branch
					AnyOf []branch `json:"anyOf"`
				} `json:"items"`
			} `json:"steps"`
		} `json:"properties"`
		Defs map[string]json.RawMessage `json:"$defs"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, err
	}
	items := s.Properties.Steps.Items
	branches := items.AnyOf
	if len(branches) == 0 && (items.Properties.App.Const != "" || len(items.Properties.App.Enum) > 0) {
		branches = []branch{items.branch}
	}
	var out []function
	for _, b := range branches {
		apps, fn := b.Properties.App.Enum, b.Properties.Function.Const
		if c := b.Properties.App.Const; c != "" {
			apps = []string{c}
		}
		if len(apps) == 0 || fn == "" {
			return nil, errors.New("a step branch lacks an app or function const")
		}
		args := b.Properties.Args
		var ref struct {
			Ref string `json:"$ref"`
		}
		if json.Unmarshal(args, &ref) == nil && ref.Ref != "" {
			def, ok := s.Defs[strings.TrimPrefix(ref.Ref, "#/$defs/")]
			if !ok {
				return nil, fmt.Errorf("a step branch's arguments refer to %s, which is not defined", ref.Ref)
			}
			args = def
		}
		for _, app := range apps {
			f := function{app: app, name: fn, tool: app + "__" + fn}
			f.types, f.required = argsSchema(args)
			out = append(out, f)
		}
	}
	return out, nil
}

// act answers the agent role: the task's calls first, all at once, then
// each call instruction in turn, then the answer.
func (v *view) act() Reply {
	called := map[string]bool{}   // tool names called so far
	calledID := map[string]bool{} // tool call ids used so far
	turns := 0
	for _, m := range v.req.Messages {
		if m.Role != llm.RoleAssistant {
			continue
		}
		turns++
		for _, tc := range m.ToolCalls {
			called[tc.Name] = true
			calledID[tc.ID] = true
		}
	}
	if turns >= maxAgentTurns {
		return Reply{Content: v.answer()}
	}
	offered := make([]function, len(v.req.Tools))
	for i, t := range v.req.Tools {
		offered[i] = toolFunction(t.Name, t.Parameters)
	}

	var pending []llm.ToolCall
	for i, c := range v.taskCalls(offered) {
		if !called[c.f.tool] {
			pending = append(pending, llm.ToolCall{ID: fmt.Sprintf("call_task_%d", i+1), Name: c.f.tool, Arguments: encodeArgs(c.args)})
		}
	}
	if len(pending) > 0 {
		return Reply{ToolCalls: pending}
	}
	for _, in := range v.instructions {
		if in.kind == obeyPlanFlood && !calledID[in.floodID(1)] {
			if app, _, _ := strings.Cut(in.tool, "__"); v.dropped(app) {
				continue
			}
			flood := make([]llm.ToolCall, in.count)
			for k := range flood {
				flood[k] = llm.ToolCall{ID: in.floodID(k + 1), Name: in.tool, Arguments: "{}"}
			}
			return Reply{ToolCalls: flood}
		}
		if in.kind != obeyCall || calledID[in.callID()] {
			continue
		}
		if app, _, _ := strings.Cut(in.tool, "__"); v.dropped(app) {
			continue
		}
		args := v.callArgs(in)
		for _, f := range offered {
			if f.tool == in.tool {
				v.shape(f, args)
				break
			}
		}
		return Reply{ToolCalls: []llm.ToolCall{{ID: in.callID(), Name: in.tool, Arguments: encodeArgs(args)}}}
	}
	return Reply{Content: v.answer()}
}

type taskCall struct {
	f    function
	args map[string]any
}

// taskCalls returns the calls the task asks for: the offered tools it names
// in full, with the JSON object that follows each name as arguments; else
// the functions of the apps it mentions.
func (v *view) taskCalls(offered []function) []taskCall {
	type named struct {
		at int
		f  function
	}
	var found []named
	for _, f := range offered {
		if at := firstMention(v.query, f.tool); at >= 0 {
			found = append(found, named{at, f})
		}
	}
	var calls []taskCall
	if len(found) == 0 {
		for _, fns := range mentionedApps(offered, v.query) {
			f := chooseFunction(fns, v.query)
			if v.dropped(f.app) {
				continue
			}
			args, _ := f.fill(v.query)
			v.shape(f, args)
			calls = append(calls, taskCall{f, args})
		}
		return calls
	}
	// The arguments of a name lie between it and the next name.
	slices.SortStableFunc(found, func(a, b named) int { return a.at - b.at })
	for i, n := range found {
		if v.dropped(n.f.app) {
			continue
		}
		end := len(v.query)
		if i+1 < len(found) {
			end = found[i+1].at
		}
		args, ok := objectAfter(v.query[n.at+len(n.f.tool) : end])
		if !ok {
			args, _ = n.f.fill(v.query)
		}
		v.shape(n.f, args)
		calls = append(calls, taskCall{n.f, args})
	}
	return calls
}

// objectAfter decodes the JSON object that starts at the first "{" of s.
func objectAfter(s string) (map[string]any, bool) {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return nil, false
	}
	dec := json.NewDecoder(strings.NewReader(s[i:]))
	dec.UseNumber()
	var args map[string]any
	if dec.Decode(&args) != nil || args == nil {
		return nil, false
	}
	return args, true
}

func encodeArgs(args map[string]any) string {
	b, err := json.Marshal(args)
	if err != nil {
		// Values come from decoded JSON and strings; they always encode.
		return "{}"
	}
	return string(b)
}
