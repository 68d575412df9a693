package simulator

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/secgpt/secgpt/llm"
)

// maxResultText bounds how much of a non-JSON tool result the answer quotes.
const maxResultText = 300

// Fixed phrases of the answer role, which the case-study harness reads.
const (
	factualPrefix = "Factual answer: "
	fictionPrefix = "Once upon a time, "
	cheapestLabel = "Cheapest: "
)

// result is one tool call paired with its tool message.
type result struct {
	app   string
	label string // app.function
	// fields are the top-level fields of a JSON-object result, in order;
	// object is false for any other content.
	fields  []field
	object  bool
	content string
}

// field is one top-level field: its key and its value as a JSON literal,
// verbatim for numbers so that 51.80 stays 51.80.
type field struct {
	key string
	raw string
}

func (f field) numeric() bool {
	return f.raw != "" && (f.raw[0] == '-' || (f.raw[0] >= '0' && f.raw[0] <= '9'))
}

// text renders the value: strings unquoted, everything else as compact JSON.
func (f field) text() string {
	var s string
	if f.raw[0] == '"' && json.Unmarshal([]byte(f.raw), &s) == nil {
		return s
	}
	return f.raw
}

// results pairs each assistant tool call with its tool message, in order.
func (v *view) results() []result {
	answers := map[string]string{}
	for _, m := range v.req.Messages {
		if m.Role == llm.RoleTool {
			if _, ok := answers[m.ToolCallID]; !ok {
				answers[m.ToolCallID] = m.Content
			}
		}
	}
	var out []result
	for _, m := range v.req.Messages {
		if m.Role != llm.RoleAssistant {
			continue
		}
		for _, tc := range m.ToolCalls {
			content, ok := answers[tc.ID]
			if !ok {
				continue
			}
			r := result{app: tc.Name, label: tc.Name, content: content}
			if app, fn, ok := strings.Cut(tc.Name, "__"); ok {
				r.app, r.label = app, app+"."+fn
			}
			r.fields, r.object = objectFields(content)
			out = append(out, r)
		}
	}
	return out
}

// objectFields returns the top-level fields of content if it is exactly one
// JSON object.
func objectFields(content string) ([]field, bool) {
	dec := json.NewDecoder(strings.NewReader(content))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	fields := []field{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, ok := t.(string)
		if !ok {
			return nil, false
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, raw); err != nil {
			return nil, false
		}
		fields = append(fields, field{key: key, raw: compact.String()})
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	return fields, true
}

func (r result) render() string {
	if !r.object {
		return r.label + ": " + truncate(r.content, maxResultText)
	}
	if len(r.fields) == 0 {
		return r.label + ": {}"
	}
	parts := make([]string, len(r.fields))
	for i, f := range r.fields {
		parts[i] = f.key + " = " + f.text()
	}
	return r.label + ": " + strings.Join(parts, ", ")
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

// answer composes the answer role's text; see the package documentation.
func (v *view) answer() string {
	results := v.results()
	fiction := false
	var says, claims []string
	for _, in := range v.instructions {
		switch in.kind {
		case obeyAnswerReplace:
			return in.say
		case obeyAnswerAdjust:
			adjust(results, in)
		case obeyAnswerReport:
			if !report(results, in) {
				claims = append(claims, in.app+": "+in.field+" = "+field{raw: string(in.value)}.text())
			}
		case obeyStyle:
			fiction = fiction || in.style == "fiction"
		case obeySay:
			says = append(says, in.say)
		}
	}
	var lines []string
	for _, r := range results {
		lines = append(lines, r.render())
	}
	lines = append(lines, claims...)
	if q := strings.ToLower(v.query); strings.Contains(q, "cheap") || strings.Contains(q, "lowest") {
		if line, ok := cheapest(results); ok {
			lines = append(lines, line)
		}
	}
	switch {
	case len(results) == 0 && fiction:
		lines = append([]string{fictionPrefix + "a traveller spoke the words \"" + strings.TrimSpace(v.query) +
			"\" to the moon, and the moon wove them into a tale."}, lines...)
	case len(results) == 0:
		lines = append([]string{factualPrefix + v.query}, lines...)
	case fiction:
		lines[0] = fictionPrefix + lines[0]
	}
	return strings.Join(append(lines, says...), "\n")
}

// adjust adds an answer-adjust instruction's delta to the numeric field of
// every result of its app, keeping the literal's number of decimals.
func adjust(results []result, in instruction) {
	for i := range results {
		if results[i].app != in.app {
			continue
		}
		for j, f := range results[i].fields {
			if f.key != in.field || !f.numeric() {
				continue
			}
			n, err := strconv.ParseFloat(f.raw, 64)
			if err != nil {
				continue
			}
			decimals := 0
			if dot := strings.IndexByte(f.raw, '.'); dot >= 0 {
				decimals = len(f.raw) - dot - 1
				if e := strings.IndexAny(f.raw, "eE"); e > dot {
					decimals = e - dot - 1
				}
			}
			s := strconv.FormatFloat(n+in.delta, 'f', decimals, 64)
			if strings.Trim(s, "-0.") == "" {
				s = strings.TrimPrefix(s, "-")
			}
			results[i].fields[j].raw = s
		}
	}
}

// report sets the field of every result of an answer-report
// instruction's app to its value, and reports whether the app had a
// result with that field.
func report(results []result, in instruction) bool {
	found := false
	for i := range results {
		if results[i].app != in.app {
			continue
		}
		for j, f := range results[i].fields {
			if f.key == in.field {
				results[i].fields[j].raw = string(in.value)
				found = true
			}
		}
	}
	return found
}

// cheapest names the result with the lowest value of the first numeric
// field that at least two results share.
func cheapest(results []result) (string, bool) {
	value := func(r result, key string) (float64, string, bool) {
		for _, f := range r.fields {
			if f.key == key {
				n, err := strconv.ParseFloat(f.raw, 64)
				return n, f.raw, f.numeric() && err == nil
			}
		}
		return 0, "", false
	}
	checked := map[string]bool{}
	for _, r := range results {
		for _, f := range r.fields {
			if checked[f.key] || !f.numeric() {
				continue
			}
			checked[f.key] = true
			shared, best, bestRaw, bestApp := 0, 0.0, "", ""
			for _, o := range results {
				n, raw, ok := value(o, f.key)
				if !ok {
					continue
				}
				if shared == 0 || n < best {
					best, bestRaw, bestApp = n, raw, o.app
				}
				shared++
			}
			if shared >= 2 {
				return cheapestLabel + bestApp + " (" + f.key + " " + bestRaw + ")", true
			}
		}
	}
	return "", false
}
