package hub

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The planner's response schema: every valid step, each schema once. A
// branch of the steps' items is one function and the signature of its
// arguments, for every app that has that function with that signature
// (its "app" an enum of them: the 13 key apps of `secgpt bench` are one
// branch); a schema that more than one branch uses is written once under
// the root's "$defs"; and the signatures' own definitions are moved
// there, their references renamed, so that no reference dangles (one
// left in an argument schema would point at the plan's root).

// buildPlanSchema returns the plan schema for the listed apps.
func (c *catalog) buildPlanSchema(list []string) (json.RawMessage, error) {
	defs := &ordered{}
	var branches []*planBranch
	byKey := map[string]*planBranch{}
	uses := map[string]int{}
	for _, name := range list {
		budget := maxAppSignatures
		for _, f := range c.specs[name].Functions {
			args := signature(f.Request)
			if len(args) > budget {
				args = openSignature
			}
			budget -= len(args)
			args = hoistDefs(args, name+"."+f.Name, defs)
			key := f.Name + "\x00" + string(args)
			if b, ok := byKey[key]; ok {
				b.apps = append(b.apps, name)
				continue
			}
			b := &planBranch{apps: []string{name}, function: f.Name, args: args}
			byKey[key] = b
			branches = append(branches, b)
			uses[string(args)]++
		}
	}
	share := func(name string, schema json.RawMessage, n int) json.RawMessage {
		ref := json.RawMessage(fmt.Sprintf(`{"$ref":"#/$defs/%s"}`, name))
		if n < 2 || len(schema) <= len(ref) {
			return schema
		}
		if !defs.has(name) {
			defs.set(name, schema)
		}
		return ref
	}
	deps := share("depends_on", json.RawMessage(`{"type":"array","items":{"type":"string"}}`), len(branches))
	inputs := share("inputs_from", json.RawMessage(`{"type":"object","additionalProperties":{"type":"string"}}`), len(branches))
	shared := map[string]string{}
	var items []any
	for _, b := range branches {
		args := b.args
		if uses[string(args)] > 1 {
			if _, ok := shared[string(args)]; !ok {
				shared[string(args)] = fmt.Sprintf("args%d", len(shared)+1)
			}
			args = share(shared[string(args)], args, uses[string(args)])
		}
		app := any(map[string]any{"const": b.apps[0]})
		if len(b.apps) > 1 {
			app = map[string]any{"enum": b.apps}
		}
		props := &ordered{}
		props.set("id", json.RawMessage(`{"type":"string"}`))
		props.set("app", app)
		props.set("function", map[string]any{"const": b.function})
		props.set("args", args)
		props.set("depends_on", deps)
		props.set("inputs_from", inputs)
		step := &ordered{}
		step.set("type", "object")
		step.set("properties", props)
		step.set("required", []string{"id", "app", "function", "args"})
		step.set("additionalProperties", false)
		items = append(items, step)
	}
	var stepSchema any = map[string]any{"anyOf": items}
	if len(items) == 0 {
		stepSchema = map[string]any{"type": "object"}
	}
	props := &ordered{}
	props.set("steps", map[string]any{"type": "array", "items": stepSchema})
	props.set("answer", map[string]any{"type": "string"})
	root := &ordered{}
	root.set("type", "object")
	root.set("properties", props)
	root.set("required", []string{"steps"})
	root.set("additionalProperties", false)
	if len(defs.keys) > 0 {
		root.set("$defs", defs)
	}
	out, err := json.Marshal(root)
	if err != nil {
		return nil, fmt.Errorf("failed to build plan schema: %w", err)
	}
	return out, nil
}

// planBranch is one function's branch of the plan schema.
type planBranch struct {
	apps     []string
	function string
	args     json.RawMessage
}

// hoistDefs moves the definitions of the signature args into defs, each
// named prefix.name, and renames its references to them. A reference to
// anything else would dangle: the arguments are then an open object.
func hoistDefs(args json.RawMessage, prefix string, defs *ordered) json.RawMessage {
	if !strings.Contains(string(args), `"$ref"`) && !strings.Contains(string(args), `"$defs"`) && !strings.Contains(string(args), `"definitions"`) {
		return args
	}
	v, err := decodeOrdered(args)
	top, ok := v.(*ordered)
	if err != nil || !ok {
		return openSignature
	}
	local := map[string]any{}
	rest := &ordered{}
	for _, k := range top.keys {
		if k != "$defs" && k != "definitions" {
			rest.set(k, top.vals[k])
			continue
		}
		m, ok := top.vals[k].(*ordered)
		if !ok {
			return openSignature
		}
		for _, name := range m.keys {
			local["#/"+k+"/"+name] = m.vals[name]
		}
	}
	renamed := map[string]string{}
	for ref := range local {
		renamed[ref] = "#/$defs/" + prefix + "." + ref[strings.LastIndexByte(ref, '/')+1:]
	}
	dangling := false
	var rename func(v any) any
	rename = func(v any) any {
		switch t := v.(type) {
		case *ordered:
			out := &ordered{}
			for _, k := range t.keys {
				val := t.vals[k]
				if ref, ok := val.(string); ok && k == "$ref" {
					to, known := renamed[ref]
					dangling = dangling || !known
					out.set(k, to)
					continue
				}
				out.set(k, rename(val))
			}
			return out
		case []any:
			out := make([]any, len(t))
			for i, e := range t {
				out[i] = rename(e)
			}
			return out
		}
		return v
	}
	body := rename(rest)
	moved := map[string]any{}
	for ref, def := range local {
		moved[renamed[ref]] = rename(def)
	}
	b, err := json.Marshal(body)
	if dangling || err != nil {
		return openSignature
	}
	for _, ref := range sortedKeys(moved) {
		defs.set(strings.TrimPrefix(ref, "#/$defs/"), moved[ref])
	}
	return b
}
