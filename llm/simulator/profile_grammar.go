package simulator

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
)

// refuseSchemas refuses, as llama.cpp's converter does, a schema it cannot
// compile: the response format's, and for llama.cpp the tools' too (it
// compiles them into the grammar of its tool-call output, --jinja).
func (p *Profile) refuseSchemas(req *ChatRequest) *refusal {
	if p.Grammar != GrammarLlamaCpp && p.Grammar != GrammarOllama {
		return nil
	}
	var schemas []json.RawMessage
	if rf := req.ResponseFormat; rf != nil && rf.JSONSchema != nil {
		schemas = append(schemas, rf.JSONSchema.Schema)
	}
	if p.Grammar == GrammarLlamaCpp {
		for _, t := range req.Tools {
			schemas = append(schemas, t.Parameters)
		}
	}
	for _, s := range schemas {
		var v any
		if json.Unmarshal(s, &v) != nil {
			continue
		}
		problem := ""
		walkSchemas(v, func(node map[string]any) {
			if pat, ok := node["pattern"].(string); ok && problem == "" {
				problem = gbnfProblem(pat)
			}
		})
		switch {
		case problem == "":
		case p.Grammar == GrammarOllama && problem == unanchored:
			// The converter's error: llama.SchemaToGrammar returns nil.
			return &refusal{500, "api_error", "invalid JSON schema in format"}
		case p.Grammar == GrammarOllama:
			// The converter succeeds; the runner cannot parse the grammar.
			// The llama.cpp runner, Ollama's for most GGUF models, says
			// this (seen from Ollama 0.12.3; runner/llamarunner); the new
			// engine's says "failed to load model vocabulary required for
			// format" (runner/ollamarunner).
			return &refusal{500, "api_error", "Failed to create new sequence: unable to create sampling context\n"}
		case problem == unanchored:
			return &refusal{400, "invalid_request_error", "JSON schema conversion failed:\nPattern must start with '^' and end with '$'"}
		default:
			return &refusal{400, "invalid_request_error", "Failed to initialize samplers: failed to parse grammar"}
		}
	}
	return nil
}

const unanchored = "unanchored"

// gbnfProblem says why llama.cpp's json-schema-to-grammar cannot turn a
// pattern into a grammar that parses, or "": it wants ^ first and $ last
// (common/json-schema-to-grammar.cpp _visit_pattern), unescapes only
// ^$.[]()|{}*+? and copies every other escape into the grammar, whose
// parser knows only \x \u \U \t \r \n \\ \" \[ \] (src/llama-grammar.cpp).
func gbnfProblem(pattern string) string {
	if !strings.HasPrefix(pattern, "^") || !strings.HasSuffix(pattern, "$") {
		return unanchored
	}
	for i := 0; i < len(pattern)-1; i++ {
		if pattern[i] != '\\' {
			continue
		}
		next := pattern[i+1]
		if !strings.ContainsRune(`^$.[]()|{}*+?xuUtrn\"`, rune(next)) {
			return `unknown escape \` + string(next)
		}
		i++
	}
	return ""
}

// walkSchemas calls f on every schema object of a schema: the properties,
// items, alternatives and definitions, not data such as enum or default.
func walkSchemas(v any, f func(map[string]any)) {
	node, ok := v.(map[string]any)
	if !ok {
		return
	}
	f(node)
	for k, sub := range node {
		switch k {
		case "properties", "$defs", "definitions", "patternProperties":
			if m, ok := sub.(map[string]any); ok {
				for _, s := range m {
					walkSchemas(s, f)
				}
			}
		case "anyOf", "oneOf", "allOf", "prefixItems":
			if list, ok := sub.([]any); ok {
				for _, s := range list {
					walkSchemas(s, f)
				}
			}
		case "items", "additionalProperties", "not":
			walkSchemas(sub, f)
		}
	}
}

// enforce makes an answer to a response schema what the server lets
// out. A server in JSON mode never answers anything but JSON: an answer
// that is not becomes the simplest document the schema allows. A
// grammar-constrained server's model cannot close an object before every
// required property is there, so each missing one is filled with what the
// grammar lets through first.
func (p *Profile) enforce(req *ChatRequest, content string) string {
	if req.ResponseFormat == nil || req.ResponseFormat.JSONSchema == nil || (!p.JSONMode && p.Grammar == GrammarNone) {
		return content
	}
	var schema any
	if json.Unmarshal(req.ResponseFormat.JSONSchema.Schema, &schema) != nil {
		return content
	}
	dec := json.NewDecoder(strings.NewReader(content))
	dec.UseNumber()
	var v any
	switch {
	case dec.Decode(&v) != nil || dec.More():
		v = invent(schema)
	case p.Grammar == GrammarNone:
		return content
	default:
		v = fillRequired(schema, v)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return content
	}
	return strings.TrimSpace(buf.String())
}

// fillRequired returns v with every required property its schema names
// filled in, at every depth.
func fillRequired(schema, v any) any {
	s, ok := schema.(map[string]any)
	if !ok {
		return v
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if branches, ok := s[key].([]any); ok && len(branches) > 0 {
			return fillRequired(chooseBranch(branches, v), v)
		}
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		for name, val := range x {
			if ps, ok := props[name]; ok {
				x[name] = fillRequired(ps, val)
			}
		}
		required, _ := s["required"].([]any)
		for _, r := range required {
			name, _ := r.(string)
			if _, has := x[name]; !has && name != "" {
				x[name] = invent(props[name])
			}
		}
	case []any:
		for i, e := range x {
			x[i] = fillRequired(s["items"], e)
		}
	}
	return v
}

// chooseBranch picks the alternative whose const properties v has, else
// the first: a grammar follows the branch the model's first tokens chose.
func chooseBranch(branches []any, v any) any {
	obj, _ := v.(map[string]any)
	for _, b := range branches {
		props, _ := b.(map[string]any)["properties"].(map[string]any)
		match := len(props) > 0
		for name, ps := range props {
			p, _ := ps.(map[string]any)
			if c, ok := p["const"]; ok && obj[name] != c {
				match = false
			}
			if e, ok := p["enum"].([]any); ok && !inEnum(e, obj[name]) {
				match = false
			}
		}
		if match {
			return b
		}
	}
	return branches[0]
}

// inEnum reports whether v, a string, is a member of enum.
func inEnum(enum []any, v any) bool {
	s, ok := v.(string)
	if !ok {
		return false
	}
	for _, m := range enum {
		if m == s {
			return true
		}
	}
	return false
}

// inventedStrings are what a constrained model writes into a string it
// was never given, tried in order against the schema's pattern.
var inventedStrings = []string{"invented", "0", "invented@example.com", "INVENTED", "A0"}

// invent is a value a grammar lets through for schema: its const, its
// first enum value, or the simplest value of its type.
func invent(schema any) any {
	s, _ := schema.(map[string]any)
	if c, ok := s["const"]; ok {
		return c
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	typ, _ := s["type"].(string)
	switch typ {
	case "integer", "number":
		if m, ok := s["minimum"].(float64); ok {
			return m
		}
		return 0
	case "boolean":
		return false
	case "array":
		return []any{}
	case "object":
		return fillRequired(s, map[string]any{})
	}
	value := inventedStrings[0]
	if pat, ok := s["pattern"].(string); ok {
		if re, err := regexp.Compile(pat); err == nil {
			for _, c := range inventedStrings {
				if re.MatchString(c) {
					value = c
					break
				}
			}
		}
	}
	if n, ok := s["minLength"].(float64); ok && len(value) < int(n) {
		value += strings.Repeat("x", int(n)-len(value))
	}
	return value
}
