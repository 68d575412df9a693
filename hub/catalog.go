package hub

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/secgpt/secgpt/apps"
)

// catalog holds the installed apps' specs and what the hub derives from them.
type catalog struct {
	specs  map[string]apps.Spec
	names  []string // installed order
	hashes map[string]string

	mu          sync.Mutex
	relaxedMemo map[string]json.RawMessage
	schema      json.RawMessage
}

func newCatalog(specs []apps.Spec) (*catalog, error) {
	c := &catalog{specs: map[string]apps.Spec{}, hashes: map[string]string{}, relaxedMemo: map[string]json.RawMessage{}}
	for _, s := range specs {
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("failed to install app: %w", err)
		}
		if _, dup := c.specs[s.Name]; dup {
			return nil, fmt.Errorf("failed to install app: %q installed twice", s.Name)
		}
		for _, f := range s.Functions {
			for _, schema := range []json.RawMessage{f.Request, f.Response} {
				if err := apps.CheckSchema(schema); err != nil {
					return nil, fmt.Errorf("failed to install app %s: function %s: %w", s.Name, f.Name, err)
				}
			}
		}
		c.specs[s.Name] = s
		c.names = append(c.names, s.Name)
		c.hashes[s.Name] = s.Hash()
	}
	schema, err := c.buildPlanSchema()
	if err != nil {
		return nil, err
	}
	c.schema = schema
	return c, nil
}

func (c *catalog) spec(name string) (apps.Spec, bool) {
	s, ok := c.specs[name]
	return s, ok
}

// irreversible reports whether app's function fn cannot be undone.
func (c *catalog) irreversible(app, fn string) bool {
	f, _ := c.specs[app].Function(fn)
	return f.Irreversible
}

// otherTools lists the tool names of every installed function but app's.
func (c *catalog) otherTools(app string) []string {
	var out []string
	for _, name := range c.names {
		if name == app || c.specs[name].IsAnnotation() {
			continue
		}
		for _, f := range c.specs[name].Functions {
			out = append(out, apps.ToolName(name, f.Name))
		}
	}
	return out
}

// relaxed returns fn's request schema without its top-level "required",
// for checking a plan's possibly incomplete arguments.
func (c *catalog) relaxed(app string, fn apps.Function) json.RawMessage {
	key := app + "." + fn.Name
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.relaxedMemo[key]; ok {
		return s
	}
	var m map[string]json.RawMessage
	out := fn.Request
	if json.Unmarshal(fn.Request, &m) == nil {
		delete(m, "required")
		if b, err := json.Marshal(m); err == nil {
			out = b
		}
	}
	c.relaxedMemo[key] = out
	return out
}

// thirdPartyText are schema keywords whose values are vendor prose. They are
// left out of the plan's response schema, which is the hub's own control
// channel; the prose reaches the planner only fenced in the catalogue.
var thirdPartyText = map[string]bool{"description": true, "title": true, "examples": true, "$comment": true, "default": true}

func stripProse(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, val := range t {
			if thirdPartyText[k] {
				continue
			}
			out[k] = stripProse(val)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, val := range t {
			out[i] = stripProse(val)
		}
		return out
	default:
		return v
	}
}

// planSchemaName names the structured output the planner must produce.
const planSchemaName = "secgpt_plan"

// buildPlanSchema describes every valid step: one branch per installed
// function, with the function's argument schema.
func (c *catalog) buildPlanSchema() (json.RawMessage, error) {
	var branches []any
	for _, name := range c.names {
		for _, f := range c.specs[name].Functions {
			var args any
			if err := json.Unmarshal(f.Request, &args); err != nil {
				return nil, fmt.Errorf("failed to read %s.%s request schema: %w", name, f.Name, err)
			}
			branches = append(branches, map[string]any{
				"type": "object",
				"properties": map[string]any{
					"id":          map[string]any{"type": "string"},
					"app":         map[string]any{"const": name},
					"function":    map[string]any{"const": f.Name},
					"args":        stripProse(args),
					"depends_on":  map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
					"inputs_from": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
				},
				"required":             []string{"id", "app", "function", "args"},
				"additionalProperties": false,
			})
		}
	}
	items := map[string]any{"anyOf": branches}
	if len(branches) == 0 {
		items = map[string]any{"type": "object"}
	}
	schema := map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"steps": map[string]any{"type": "array", "items": items}},
		"required":             []string{"steps"},
		"additionalProperties": false,
	}
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("failed to build plan schema: %w", err)
	}
	return b, nil
}

// fence writes the catalogue with each app's text between markers carrying
// a nonce the app's text cannot know, so no description can end its fence.
func (c *catalog) fence(nonce string) string {
	var b strings.Builder
	for _, name := range c.names {
		s := c.specs[name]
		fmt.Fprintf(&b, "<<APP-%s %s\n", nonce, name)
		fmt.Fprintf(&b, "description: %s\n", oneLine(s.Description))
		if s.IsAnnotation() {
			b.WriteString("kind: annotation app (answers the user by itself; function respond, no arguments)\n")
		}
		b.WriteString("functions:\n")
		for _, f := range s.Functions {
			fmt.Fprintf(&b, "- %s: %s\n  arguments schema: %s\n", f.Name, oneLine(f.Description), compact(f.Request))
		}
		fmt.Fprintf(&b, "APP-%s>>\n", nonce)
	}
	return b.String()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func compact(raw json.RawMessage) string {
	var buf strings.Builder
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return string(raw)
	}
	buf.Write(b)
	return buf.String()
}
