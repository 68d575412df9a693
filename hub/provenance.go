package hub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/secgpt/secgpt/apps"
)

// maxExemptValues bounds the values one document may carry without a data
// consent. Each exempt value is a choice among few (an enum member, a
// boolean, a span of the query), and enough choices spell anything: a
// date of birth is about 16 bits. The case-study apps need at most six.
const maxExemptValues = 8

// foreignValues returns every value in args that the user did not type in
// this request: each must be shown to the user in a data consent before an
// app receives it. The plan is written by a model that read third-party
// text and the user's history, so provenance is checked, not assumed.
//
// Exempt, up to maxExemptValues in the document: a value that is a whole
// span of the query's words (anywhere), and, at a scalar position of the
// schema (not inside an array, where their pattern could spell data), a
// boolean, a null, an empty string or a member of a small enum. Everything
// else is reported, and so is every object member name the schema does not
// declare, since an open object's names are free text.
// Arguments that are not a JSON object are reported whole.
func foreignValues(args, schema json.RawMessage, query string) []DataItem {
	var obj map[string]any
	canon, err := apps.Canonical(args)
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(canon))
		dec.UseNumber()
		err = dec.Decode(&obj)
	}
	if err != nil || obj == nil {
		return []DataItem{{Field: "(arguments)", Value: string(args)}}
	}
	w := &provenanceWalk{query: normalize(query), exemptLeft: maxExemptValues}
	props := schemaProperties(schema)
	for _, k := range sortedKeys(obj) {
		if _, declared := props[k]; !declared {
			w.report(k+" (name)", k)
		}
		w.walk(k, obj[k], props[k], false)
	}
	return w.items
}

// provenanceWalk is the state of one foreignValues run.
type provenanceWalk struct {
	query      string
	exemptLeft int
	items      []DataItem
}

func (w *provenanceWalk) report(path, value string) {
	w.items = append(w.items, DataItem{Field: path, Value: value})
}

func (w *provenanceWalk) walk(path string, v any, schema map[string]any, inArray bool) {
	switch t := v.(type) {
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
			if _, declared := props[k]; !declared {
				w.report(path+"."+k+" (name)", k)
			}
			w.walk(path+"."+k, t[k], props[k], inArray)
		}
	case []any:
		items, _ := schema["items"].(map[string]any)
		for i, e := range t {
			w.walk(fmt.Sprintf("%s[%d]", path, i), e, items, true)
		}
	default:
		if w.exempt(t, schema, inArray) {
			return
		}
		w.report(path, scalarText(t))
	}
}

// exempt reports whether a scalar needs no consent, and spends one of the
// document's exempt values on it.
func (w *provenanceWalk) exempt(v any, schema map[string]any, inArray bool) bool {
	var ok bool
	switch t := v.(type) {
	case string:
		ok = inQuery(w.query, t) || !inArray && (t == "" || inSmallEnum(t, schema))
	case json.Number:
		ok = inQuery(w.query, t.String())
	case bool, nil:
		// A boolean is a choice between two, like a small enum's member.
		ok = !inArray
	}
	if !ok || w.exemptLeft == 0 {
		return false
	}
	w.exemptLeft--
	return true
}

func scalarText(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case json.Number:
		return t.String()
	case nil:
		return "null"
	default:
		return fmt.Sprint(t)
	}
}

// inQuery reports whether value, normalized, occurs in the normalized
// query as a whole span of words: neither neighbour of the match is a
// letter or digit. "Main Street" is in "from 'Main Street' to", "ain" and
// "1" are not in "from Main Street on June 10th".
func inQuery(query, value string) bool {
	v := normalize(value)
	if v == "" || query == "" {
		return false
	}
	for from := 0; from <= len(query)-len(v); {
		i := strings.Index(query[from:], v)
		if i < 0 {
			return false
		}
		i += from
		before, _ := utf8.DecodeLastRuneInString(query[:i])
		after, _ := utf8.DecodeRuneInString(query[i+len(v):])
		if (i == 0 || !isWordRune(before)) && (i+len(v) == len(query) || !isWordRune(after)) {
			return true
		}
		_, size := utf8.DecodeRuneInString(query[i:])
		from = i + size
	}
	return false
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

func inSmallEnum(s string, schema map[string]any) bool {
	if schema == nil {
		return false
	}
	if c, ok := schema["const"].(string); ok && c == s {
		return true
	}
	enum, ok := schema["enum"].([]any)
	if !ok || len(enum) > maxTypedEnum {
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
