package hub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// maxExemptEnum bounds the enums whose values count as the app's own
// choices rather than user data: a large enum could encode data.
const maxExemptEnum = 16

// foreignValues returns every value in args that the user did not type in
// this request: each must be shown to the user in a data consent before an
// app receives it. The plan is written by a model that read third-party
// text and the user's history, so provenance is checked, not assumed.
// Booleans, nulls and values of small enums in the schema are choices, not
// data. Fields are reported as paths under their top-level argument.
func foreignValues(args, schema json.RawMessage, query string) []DataItem {
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	if dec.Decode(&obj) != nil {
		return nil
	}
	props := schemaProperties(schema)
	normQuery := normalize(query)
	var items []DataItem
	for _, k := range sortedKeys(obj) {
		walkLeaves(k, obj[k], props[k], func(path, value string) {
			if normQuery != "" && strings.Contains(normQuery, normalize(value)) {
				return
			}
			items = append(items, DataItem{Field: path, Value: value})
		})
	}
	return items
}

// walkLeaves visits string and number leaves that are not exempt choices.
func walkLeaves(path string, v any, schema map[string]any, visit func(path, value string)) {
	switch t := v.(type) {
	case string:
		if t == "" || inSmallEnum(t, schema) {
			return
		}
		visit(path, t)
	case json.Number:
		visit(path, t.String())
	case map[string]any:
		props := map[string]map[string]any{}
		if p, ok := schema["properties"].(map[string]any); ok {
			for k, s := range p {
				if m, ok := s.(map[string]any); ok {
					props[k] = m
				}
			}
		}
		for _, k := range sortedKeys(t) {
			walkLeaves(path+"."+k, t[k], props[k], visit)
		}
	case []any:
		items, _ := schema["items"].(map[string]any)
		for i, e := range t {
			walkLeaves(fmt.Sprintf("%s[%d]", path, i), e, items, visit)
		}
	}
}

func inSmallEnum(s string, schema map[string]any) bool {
	if schema == nil {
		return false
	}
	if c, ok := schema["const"].(string); ok && c == s {
		return true
	}
	enum, ok := schema["enum"].([]any)
	if !ok || len(enum) > maxExemptEnum {
		return false
	}
	for _, e := range enum {
		if e == s {
			return true
		}
	}
	return false
}

func schemaProperties(schema json.RawMessage) map[string]map[string]any {
	var s struct {
		Properties map[string]map[string]any `json:"properties"`
	}
	_ = json.Unmarshal(schema, &s)
	if s.Properties == nil {
		return map[string]map[string]any{}
	}
	return s.Properties
}

// normalize lower-cases and collapses white space, so "Main  Street" in a
// query matches "main street" in an argument.
func normalize(s string) string { return strings.ToLower(strings.Join(strings.Fields(s), " ")) }

// withoutArgs removes the top-level arguments named by the items' paths.
func withoutArgs(args json.RawMessage, items []DataItem) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(args, &obj) != nil {
		return json.RawMessage("{}")
	}
	for _, it := range items {
		top := it.Field
		if i := strings.IndexAny(top, ".["); i >= 0 {
			top = top[:i]
		}
		delete(obj, top)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return json.RawMessage("{}")
	}
	return b
}

// topArgs lists the top-level argument names items fall under, sorted.
func topArgs(items []DataItem) []string {
	set := map[string]bool{}
	for _, it := range items {
		top := it.Field
		if i := strings.IndexAny(top, ".["); i >= 0 {
			top = top[:i]
		}
		set[top] = true
	}
	return sortedKeys(set)
}
