package simulator

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// quoted is one quoted value in a text.
type quoted struct {
	value string
	// key is set when the value is keyed (key = 'value', key: "value").
	key string
}

// quotedValues returns the quoted values of s in order. An opening quote (' or
// ") must follow the start of s or a character that is not a letter or digit;
// its closing quote must precede the end of s or such a character, so the
// apostrophe in "don't" is no quote. A value preceded by an identifier and
// "=" or ":" is keyed by that identifier. Empty values are skipped.
func quotedValues(s string) []quoted {
	var out []quoted
	for i := 0; i < len(s); i++ {
		q := s[i]
		if (q != '\'' && q != '"') || !boundaryBefore(s, i) {
			continue
		}
		end := -1
		for j := i + 1; j < len(s); j++ {
			if s[j] == q && boundaryAfter(s, j+1) {
				end = j
				break
			}
		}
		if end < 0 {
			continue
		}
		if v := s[i+1 : end]; v != "" {
			out = append(out, quoted{value: v, key: keyBefore(s, i)})
		}
		i = end
	}
	return out
}

// boundaryBefore reports whether s[:i] is empty or ends in a character that
// is not a letter or digit.
func boundaryBefore(s string, i int) bool {
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return i == 0 || !isAlnum(r)
}

// boundaryAfter reports whether s[i:] is empty or starts with a character
// that is not a letter or digit.
func boundaryAfter(s string, i int) bool {
	r, _ := utf8.DecodeRuneInString(s[i:])
	return i >= len(s) || !isAlnum(r)
}

func isAlnum(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// keyBefore returns the identifier that keys the quote at s[i] ("key = " or
// "key: " just before it), or "".
func keyBefore(s string, i int) string {
	j := i
	for j > 0 && isSpace(s[j-1]) {
		j--
	}
	if j == 0 || (s[j-1] != '=' && s[j-1] != ':') {
		return ""
	}
	j--
	for j > 0 && isSpace(s[j-1]) {
		j--
	}
	end := j
	for j > 0 && isIdentByte(s[j-1]) {
		j--
	}
	// An identifier starts with a letter or "_".
	if j == end || (s[j] >= '0' && s[j] <= '9') {
		return ""
	}
	return s[j:end]
}

func isIdentByte(b byte) bool {
	return b == '_' || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9')
}

// fact is a recorded key/value pair.
type fact struct{ key, value string }

// recordedFacts returns the keyed values of texts in order of first
// appearance, one per key (compared case-insensitively; the last value
// wins).
func recordedFacts(texts []string) []fact {
	var out []fact
	index := map[string]int{}
	for _, t := range texts {
		for _, q := range quotedValues(t) {
			if q.key == "" {
				continue
			}
			k := strings.ToLower(q.key)
			if i, ok := index[k]; ok {
				out[i].value = q.value
				continue
			}
			index[k] = len(out)
			out = append(out, fact{key: q.key, value: q.value})
		}
	}
	return out
}

func joinFacts(facts []fact) string {
	parts := make([]string, len(facts))
	for i, f := range facts {
		parts[i] = f.key + ": " + f.value
	}
	return strings.Join(parts, "; ")
}

// isWordByte reports whether b is a word character for name mentions.
func isWordByte(b byte) bool {
	return b == '_' || (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9')
}

// firstMention returns the index of the first whole-word, case-insensitive
// occurrence of name in text (word characters are [a-z0-9_]), or -1.
func firstMention(text, name string) int {
	lower, name := strings.ToLower(text), strings.ToLower(name)
	if name == "" {
		return -1
	}
	for from := 0; ; {
		i := strings.Index(lower[from:], name)
		if i < 0 {
			return -1
		}
		i += from
		end := i + len(name)
		if (i == 0 || !isWordByte(lower[i-1])) && (end == len(lower) || !isWordByte(lower[end])) {
			return i
		}
		from = i + 1
	}
}

// queryWords returns the distinct lower-case words of s, split on anything
// that is not an ASCII letter or digit.
func queryWords(s string) map[string]bool {
	words := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !((r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'))
	}) {
		words[w] = true
	}
	return words
}

// function is one callable function as the model sees it.
type function struct {
	app, name string
	// tool is the name the model calls it by: app__function.
	tool string
	// types maps each argument property to its JSON type ("" when none).
	types map[string]string
	// required lists the properties quoted values fill, in order: the
	// required ones, or with no "required" list every property.
	required []string
}

// toolFunction describes an offered tool. A tool whose name has no "__"
// belongs to an app of the same name.
func toolFunction(name string, params json.RawMessage) function {
	app, fn, ok := strings.Cut(name, "__")
	if !ok {
		app, fn = name, name
	}
	f := function{app: app, name: fn, tool: name}
	f.types, f.required = argsSchema(params)
	return f
}

// argsSchema reads an object schema's property types and its positional
// order: the "required" list, or without one every property, in
// declaration order. Anything unreadable yields no properties.
func argsSchema(raw json.RawMessage) (map[string]string, []string) {
	var s struct {
		Properties map[string]struct {
			Type json.RawMessage `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	types := map[string]string{}
	if json.Unmarshal(raw, &s) != nil {
		return types, nil
	}
	for name, p := range s.Properties {
		types[name] = schemaType(p.Type)
	}
	order := s.Required
	if order == nil {
		order = propertyOrder(raw)
	}
	var positional []string
	for _, r := range order {
		if _, ok := types[r]; ok {
			positional = append(positional, r)
		}
	}
	return types, positional
}

// propertyOrder returns the names of a schema's top-level properties in
// declaration order.
func propertyOrder(raw json.RawMessage) []string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil
		}
		if k != "properties" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return nil
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return nil
		}
		var names []string
		for dec.More() {
			name, err := dec.Token()
			if err != nil {
				return nil
			}
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return nil
			}
			if n, ok := name.(string); ok {
				names = append(names, n)
			}
		}
		return names
	}
	return nil
}

// schemaType reads "type": a string, or the first non-null of an array.
func schemaType(raw json.RawMessage) string {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return one
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		for _, t := range many {
			if t != "null" {
				return t
			}
		}
	}
	return ""
}

// property returns f's property named name, compared case-insensitively.
func (f function) property(name string) (string, bool) {
	if _, ok := f.types[name]; ok {
		return name, true
	}
	for p := range f.types {
		if strings.EqualFold(p, name) {
			return p, true
		}
	}
	return "", false
}

// fill derives f's arguments from a query: keyed values fill the property
// of their key; the other quoted values fill the unfilled required string
// properties in order. It reports whether every required property is
// filled.
func (f function) fill(query string) (map[string]any, bool) {
	args := map[string]any{}
	var positional []string
	for _, q := range quotedValues(query) {
		if q.key == "" {
			positional = append(positional, q.value)
			continue
		}
		if p, ok := f.property(q.key); ok {
			args[p] = convert(q.value, f.types[p])
		}
	}
	for _, p := range f.required {
		if len(positional) == 0 {
			break
		}
		if _, set := args[p]; set || (f.types[p] != "string" && f.types[p] != "") {
			continue
		}
		args[p], positional = positional[0], positional[1:]
	}
	complete := true
	for _, p := range f.required {
		if _, set := args[p]; !set {
			complete = false
		}
	}
	return args, complete
}

// convert turns a quoted value into the property's type when it parses as
// that type, and leaves it a string otherwise.
func convert(v, typ string) any {
	switch typ {
	case "number":
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return v
		}
		if isJSONNumber(v) {
			return json.Number(v)
		}
		return json.Number(strconv.FormatFloat(f, 'f', -1, 64))
	case "integer":
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	case "boolean":
		if b, err := strconv.ParseBool(v); err == nil {
			return b
		}
	}
	return v
}

func isJSONNumber(s string) bool {
	var n json.Number
	return s != "" && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) && json.Unmarshal([]byte(s), &n) == nil
}

// chooseFunction picks the function of one app that a query asks for: the
// one whose name shares most words with the query, preferring functions
// whose required arguments the query fills, then declaration order.
func chooseFunction(fns []function, query string) function {
	if len(fns) == 1 {
		return fns[0]
	}
	words := queryWords(query)
	best, bestScore, bestFillable := 0, -1, false
	for i, f := range fns {
		score := 0
		seen := map[string]bool{}
		for _, w := range strings.Split(f.name, "_") {
			if w != "" && words[w] && !seen[w] {
				seen[w] = true
				score++
			}
		}
		_, fillable := f.fill(query)
		if score > bestScore || (score == bestScore && fillable && !bestFillable) {
			best, bestScore, bestFillable = i, score, fillable
		}
	}
	return fns[best]
}

// mentionedApps returns the apps of fns whose names the query mentions, in
// order of first mention, each with its functions in declaration order.
func mentionedApps(fns []function, query string) [][]function {
	var order []string
	byApp := map[string][]function{}
	for _, f := range fns {
		if _, ok := byApp[f.app]; !ok {
			order = append(order, f.app)
		}
		byApp[f.app] = append(byApp[f.app], f)
	}
	type mention struct {
		at  int
		app string
	}
	var found []mention
	for _, app := range order {
		if at := firstMention(query, app); at >= 0 {
			found = append(found, mention{at, app})
		}
	}
	slices.SortStableFunc(found, func(a, b mention) int { return a.at - b.at })
	out := make([][]function, len(found))
	for i, m := range found {
		out[i] = byApp[m.app]
	}
	return out
}
