package llm

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
)

// Servers that enforce a schema compile it into a grammar: vLLM (xgrammar,
// guidance), llama.cpp's server and Ollama (llama.cpp's
// json-schema-to-grammar). That converter takes a "pattern" only when it is
// anchored with ^ and $, and copies any backslash escape it does not know
// into the grammar, which then fails to parse: \d, \w, \s and their
// negations (ggml-org/llama.cpp#27580), and also \/ or \- (#27397). The
// request then fails: llama.cpp answers 400 "failed to parse grammar", and
// Ollama 500 "invalid JSON schema in format" (ollama/ollama#8185). A tool's
// schema is compiled too, so one such tool fails every request that offers
// it.
//
// grammarSafe rewrites every pattern of a schema into that subset, or
// leaves it out when it cannot be written so. That only loosens what the
// model is told: every argument is still checked against the app's own
// schema, pattern included, by the hub and the spoke. The client does so
// for an endpoint once its compiler failed on a schema (Client.adapt):
// other servers take the schemas as the apps wrote them.
func grammarSafe(schema json.RawMessage) json.RawMessage {
	if !bytes.Contains(schema, []byte(`"pattern"`)) {
		return schema
	}
	v, err := decodeOrdered(schema)
	if err != nil {
		return schema
	}
	if !rewriteSchema(v) {
		return schema
	}
	var buf bytes.Buffer
	v.encode(&buf)
	return buf.Bytes()
}

// Keywords whose value is a schema, a list of schemas, or an object of
// schemas (by name). Every other keyword's value is data (enum, const,
// default, examples…) and is left alone.
var (
	schemaKeywords = map[string]bool{
		"items": true, "additionalProperties": true, "not": true, "if": true, "then": true, "else": true,
		"contains": true, "propertyNames": true, "unevaluatedProperties": true, "unevaluatedItems": true, "additionalItems": true,
	}
	schemaListKeywords = map[string]bool{"anyOf": true, "oneOf": true, "allOf": true, "prefixItems": true, "items": true}
	schemaMapKeywords  = map[string]bool{"properties": true, "patternProperties": true, "$defs": true, "definitions": true, "dependentSchemas": true}
)

// rewriteSchema makes the patterns of the schema v grammar-safe in place
// and reports whether it changed anything.
func rewriteSchema(v *ordered) bool {
	if v.kind != '{' {
		return false
	}
	changed := false
	kept := v.members[:0]
	for _, m := range v.members {
		switch {
		case m.key == "pattern" && m.value.kind == '"':
			p, ok := grammarPattern(m.value.str)
			if !ok {
				changed = true
				continue
			}
			if p != m.value.str {
				m.value = &ordered{kind: '"', str: p}
				changed = true
			}
		case schemaMapKeywords[m.key] && m.value.kind == '{':
			for _, sub := range m.value.members {
				changed = rewriteSchema(sub.value) || changed
			}
		case schemaListKeywords[m.key] && m.value.kind == '[':
			for _, sub := range m.value.items {
				changed = rewriteSchema(sub) || changed
			}
		case schemaKeywords[m.key]:
			changed = rewriteSchema(m.value) || changed
		}
		kept = append(kept, m)
	}
	v.members = kept
	return changed
}

// grammarPattern writes pattern in the subset grammar converters accept
// (see grammarSafe), or reports that it cannot (ok false). \d, \w and \s
// become classes, inside a class too; escaped punctuation becomes the
// character; anything else unusual (lookaround, backreferences, \b, a
// negated class escape inside a class, ^ or $ inside the pattern) drops
// the pattern.
func grammarPattern(pattern string) (string, bool) {
	if len(pattern) < 2 || pattern[0] != '^' || !strings.HasSuffix(pattern, "$") || strings.HasSuffix(pattern, `\$`) {
		return "", false
	}
	body := pattern[1 : len(pattern)-1]
	var out strings.Builder
	out.WriteByte('^')
	inClass := false
	classStart := 0
	var classTail string // characters moved to the end of the current class
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == '\\':
			if i+1 >= len(body) {
				return "", false
			}
			i++
			e, ok := translateEscape(body[i], inClass)
			if !ok {
				return "", false
			}
			if inClass && e == "-" {
				if i+1 < len(body) && body[i+1] == '-' {
					return "", false // an escaped "-" that starts a range
				}
				classTail = "-" // a literal "-" is safe only last in a class
				continue
			}
			out.WriteString(e)
			// After a class escape such as \w, a "-" is a character of its
			// own, but after the expansion (which ends in a character) it
			// would start a range: last in the class it moves to the end,
			// anywhere else the pattern is not translated.
			if inClass && len(e) > 1 && i+1 < len(body) && body[i+1] == '-' {
				if i+2 >= len(body) || body[i+2] != ']' {
					return "", false
				}
				classTail = "-"
				i++
			}
		case inClass && c == ']':
			if out.Len() == classStart {
				return "", false // "[]" and "[^]" mean different things to different engines
			}
			if !strings.HasSuffix(out.String(), "-") { // else "-" is in the class already
				out.WriteString(classTail)
			}
			out.WriteByte(']')
			inClass, classTail = false, ""
		case inClass:
			out.WriteByte(c)
		case c == '[':
			out.WriteByte('[')
			inClass = true
			if i+1 < len(body) && body[i+1] == '^' {
				out.WriteByte('^')
				i++
			}
			classStart = out.Len()
		case c == '^' || c == '$':
			return "", false
		case c == '(' && i+1 < len(body) && body[i+1] == '?':
			return "", false
		default:
			out.WriteByte(c)
		}
	}
	if inClass {
		return "", false
	}
	out.WriteByte('$')
	return out.String(), true
}

// translateEscape writes the escape \c grammar-safe, inside a class or not.
func translateEscape(c byte, inClass bool) (string, bool) {
	classes := map[byte]string{'d': "0-9", 'w': "a-zA-Z0-9_", 's': ` \t\n\r`}
	negated := map[byte]byte{'D': 'd', 'W': 'w', 'S': 's'}
	switch {
	case classes[c] != "" && inClass:
		return classes[c], true
	case classes[c] != "":
		return "[" + classes[c] + "]", true
	case negated[c] != 0 && !inClass:
		return "[^" + classes[negated[c]] + "]", true
	case c == 'n' || c == 't' || c == 'r' || c == '\\':
		return `\` + string(c), true
	case strings.IndexByte(`^$.[]()|{}*+?`, c) >= 0:
		// Escaped in a regular expression and understood by the
		// converter; in a class only the brackets need it, and "^",
		// which would negate a class it opens.
		if inClass && c != '[' && c != ']' && c != '^' {
			return string(c), true
		}
		return `\` + string(c), true
	case c == '-':
		return "-", true
	case c > ' ' && c < 0x7f && !isAlnumByte(c):
		return string(c), true // \/ \@ \" …: the character itself
	default:
		return "", false
	}
}

func isAlnumByte(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// ordered is a JSON value that keeps its object members in order, so that
// a rewritten schema keeps its properties' order, which a grammar follows.
type ordered struct {
	kind    byte // '{', '[', '"' or 0 for any other literal
	members []member
	items   []*ordered
	str     string
	raw     json.RawMessage
}

type member struct {
	key   string
	value *ordered
}

func decodeOrdered(b []byte) (*ordered, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, io.ErrUnexpectedEOF
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (*ordered, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		v := &ordered{kind: byte(t)}
		for dec.More() {
			if t == '{' {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				val, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				v.members = append(v.members, member{key: k.(string), value: val})
				continue
			}
			val, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			v.items = append(v.items, val)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return v, nil
	case string:
		return &ordered{kind: '"', str: t}, nil
	default:
		raw, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		return &ordered{raw: raw}, nil
	}
}

func (v *ordered) encode(buf *bytes.Buffer) {
	switch v.kind {
	case '{':
		buf.WriteByte('{')
		for i, m := range v.members {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, m.key)
			buf.WriteByte(':')
			m.value.encode(buf)
		}
		buf.WriteByte('}')
	case '[':
		buf.WriteByte('[')
		for i, it := range v.items {
			if i > 0 {
				buf.WriteByte(',')
			}
			it.encode(buf)
		}
		buf.WriteByte(']')
	case '"':
		writeString(buf, v.str)
	default:
		buf.Write(v.raw)
	}
}

func writeString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // a string always encodes
	buf.Write(b)
}
