package hub

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Across an app boundary only typed values move (DESIGN §3, "Text flow"):
// numbers, booleans, null, members of small enums that are identifier-like
// tokens, and strings the user typed (a whole span of the query). Object
// member names cross only when the schema declares them as identifiers.
// Everything else is free text an app wrote: it never reaches another
// app's spoke, the planner or the combiner.

// freeText returns the paths of the free text in v, a value read at
// schema (nil: none known): strings that are neither members of a small
// enum nor a whole span of the query, and member names the schema does
// not declare as identifiers.
func freeText(v json.RawMessage, schema map[string]any, query string) []string {
	var val any
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := dec.Decode(&val); err != nil {
		return []string{"(value)"}
	}
	var out []string
	walkTyped(val, schema, "", func(path string, typed bool, s string) {
		if path == "" {
			path = "(value)"
		}
		if !typed && !inQuery(normalize(query), s) {
			out = append(out, path)
		}
	})
	return out
}

// typedEnumMember reports whether s is an identifier-like member of a
// small enum (or the const) of schema.
func typedEnumMember(s string, schema map[string]any) bool {
	return identifierPattern.MatchString(s) && inSmallEnum(s, schema)
}

// walkTyped visits every string and member name of v at schema, telling
// whether it is typed; see freeText.
func walkTyped(v any, schema map[string]any, path string, visit func(path string, typed bool, s string)) {
	switch t := v.(type) {
	case map[string]any:
		props, _ := schema["properties"].(map[string]any)
		for _, k := range sortedKeys(t) {
			sub, declared := props[k].(map[string]any)
			p := joinPath(path, k)
			if !declared || !identifierPattern.MatchString(k) {
				visit(p+" (name)", false, k)
			}
			walkTyped(t[k], sub, p, visit)
		}
	case []any:
		items, _ := schema["items"].(map[string]any)
		for i, e := range t {
			walkTyped(e, items, fmt.Sprintf("%s[%d]", path, i), visit)
		}
	case string:
		visit(path, typedEnumMember(t, schema), t)
	}
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// typedProjection returns doc, checked against schema, without its free
// text: free strings and the members that hold them, and members the
// schema does not declare, are removed at every depth. Strings the user
// typed are removed too: what remains must fit typedSchema's schema,
// which cannot know the query. A document that is itself free text (a
// bare string) has no projection: an error.
func typedProjection(doc json.RawMessage, schema json.RawMessage) (json.RawMessage, error) {
	var s map[string]any
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("failed to read schema: %w", err)
	}
	v, err := decodeOrdered(doc)
	if err != nil {
		return nil, fmt.Errorf("failed to read result: %w", err)
	}
	out, typed := project(v, s)
	if !typed {
		return nil, errors.New("failed to project result: it is free text")
	}
	return canonicalJSON(out)
}

// project keeps v's typed parts, in order; keep false means nothing of v
// is typed.
func project(v any, schema map[string]any) (any, bool) {
	switch t := v.(type) {
	case *ordered:
		props, _ := schema["properties"].(map[string]any)
		out := &ordered{}
		for _, k := range t.keys {
			sub, declared := props[k].(map[string]any)
			if !declared || !identifierPattern.MatchString(k) {
				continue
			}
			if pv, ok := project(t.vals[k], sub); ok {
				out.set(k, pv)
			}
		}
		return out, true
	case []any:
		items, _ := schema["items"].(map[string]any)
		out := []any{}
		for _, e := range t {
			if pv, ok := project(e, items); ok {
				out = append(out, pv)
			}
		}
		return out, true
	case string:
		return t, typedEnumMember(t, schema)
	default:
		return t, true
	}
}

// typedSchema is the schema of what typedProjection leaves of a result of
// schema: its signature (no prose, no "required"), without the properties
// that hold only free text, and without lower bounds on sizes, which a
// projection may go under. It is what a caller's spoke is told to expect.
func typedSchema(schema json.RawMessage) json.RawMessage {
	v, err := decodeOrdered(schema)
	if err != nil {
		return json.RawMessage(`{"type":"object"}`)
	}
	s, err := signSchema(withoutFreeText.apply(v))
	if err != nil {
		return json.RawMessage(`{"type":"object"}`)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return json.RawMessage(`{"type":"object"}`)
	}
	return b
}

// withoutFreeText drops, at every depth, properties whose schema is a
// string with no enum and no const, and size lower bounds, which a
// projection may go under.
var withoutFreeText = schemaEdit{
	keyword: func(k string) bool { return k == "minItems" || k == "minProperties" || k == "minLength" },
	property: func(sub any) bool {
		o, ok := sub.(*ordered)
		return ok && o.vals["type"] == "string" && !o.has("enum") && !o.has("const")
	},
}

// typedFields returns the top-level typed scalars of an output, by field
// name, in order: what the combiner may read of an app's result.
func typedFields(output, schema json.RawMessage) *ordered {
	projected, err := typedProjection(output, schema)
	if err != nil {
		return nil
	}
	v, err := decodeOrdered(projected)
	o, ok := v.(*ordered)
	if err != nil || !ok {
		return nil
	}
	out := &ordered{}
	for _, k := range o.keys {
		switch o.vals[k].(type) {
		case *ordered, []any:
		default:
			out.set(k, o.vals[k])
		}
	}
	return out
}

// responseAt returns the schema of the field at a dotted path of app's
// function's result, or nil.
func (c *catalog) responseAt(app, fn, path string) map[string]any {
	spec, _ := c.spec(app)
	f, _ := spec.Function(fn)
	var s map[string]any
	if json.Unmarshal(f.Response, &s) != nil {
		return nil
	}
	for _, part := range strings.Split(path, ".") {
		props, _ := s["properties"].(map[string]any)
		if s, _ = props[part].(map[string]any); s == nil {
			return nil
		}
	}
	return s
}
