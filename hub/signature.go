package hub

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
)

// An app's schemas are vendor text like its description: a description,
// a title, an example, a default, a comment, a pattern or an enum member
// can say anything. The planner reads a function only as its signature:
// what the hub derives here from the request schema, keeping structure
// and typed constraints and dropping every free string. A signature
// holds no "required" at any depth: the planner writes only what the user
// gave, and the spoke completes the rest; a server that enforces schemas
// as grammars would otherwise make the model invent values.

// maxSignature bounds one function's signature. A larger schema is
// planned as an open object, which the spoke fills.
const maxSignature = 4 << 10

// identifierPattern is the shape of an identifier-like token: what may
// cross into the planner's context as a property name or enum member, and
// across an app boundary as an enum member. No spaces, at most 64 bytes.
var identifierPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

// maxTypedEnum bounds the enums whose members count as typed values (and,
// for a plan's arguments, as the app's own choices rather than user
// data): a large enum could encode data.
const maxTypedEnum = 16

// refPattern is a local reference into a schema's own definitions.
var refPattern = regexp.MustCompile(`^#/(\$defs|definitions)/[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

// signatureKeywords are the keywords a signature keeps, each for the kind
// of value it holds; every other keyword (description, title, examples,
// default, $comment, pattern, format, required, …) is dropped.
var signatureKeywords = map[string]keywordKind{
	"type":                 kwTypes,
	"properties":           kwSchemaMap,
	"$defs":                kwSchemaMap,
	"definitions":          kwSchemaMap,
	"items":                kwSchemaOrList,
	"prefixItems":          kwSchemaList,
	"anyOf":                kwSchemaList,
	"oneOf":                kwSchemaList,
	"allOf":                kwSchemaList,
	"additionalProperties": kwSchemaOrBool,
	"enum":                 kwEnum,
	"const":                kwConst,
	"$ref":                 kwRef,
	"minimum":              kwNumber,
	"maximum":              kwNumber,
	"exclusiveMinimum":     kwNumberOrBool,
	"exclusiveMaximum":     kwNumberOrBool,
	"multipleOf":           kwNumber,
	"minLength":            kwNumber,
	"maxLength":            kwNumber,
	"minItems":             kwNumber,
	"maxItems":             kwNumber,
	"minProperties":        kwNumber,
	"maxProperties":        kwNumber,
	"uniqueItems":          kwBool,
}

type keywordKind int

const (
	kwTypes keywordKind = iota
	kwSchemaMap
	kwSchemaOrList
	kwSchemaList
	kwSchemaOrBool
	kwEnum
	kwConst
	kwRef
	kwNumber
	kwNumberOrBool
	kwBool
)

// errOpaque says a schema cannot be signed: it names something (a
// property, a definition, a reference) in a way that is not an identifier.
var errOpaque = errors.New("not expressible as a signature")

// signature returns the signature of a request schema: an object schema
// with only identifiers, types and typed constraints, in the vendor's
// order; an open object when the schema names anything by other than an
// identifier or the signature would be over maxSignature.
func signature(schema json.RawMessage) json.RawMessage {
	v, err := decodeOrdered(schema)
	if err != nil {
		return openSignature
	}
	s, err := signSchema(v)
	if err != nil {
		return openSignature
	}
	b, err := json.Marshal(s)
	if err != nil || len(b) > maxSignature {
		return openSignature
	}
	return b
}

// openSignature is the signature of a function planned without its
// arguments' structure: any object, which the spoke completes.
var openSignature = json.RawMessage(`{"type":"object"}`)

// signSchema keeps a schema's signature keywords.
func signSchema(v any) (any, error) {
	switch t := v.(type) {
	case bool:
		return t, nil
	case *ordered:
		out := &ordered{}
		hasPatternProps := t.has("patternProperties")
		for _, k := range t.keys {
			kind, ok := signatureKeywords[k]
			if !ok || k == "additionalProperties" && hasPatternProps {
				continue
			}
			val, keep, err := signKeyword(kind, t.vals[k])
			if err != nil {
				return nil, err
			}
			if keep {
				out.set(k, val)
			}
		}
		return out, nil
	default:
		return nil, errOpaque
	}
}

// signKeyword returns a keyword's signed value, or keep false to drop it.
func signKeyword(kind keywordKind, v any) (any, bool, error) {
	switch kind {
	case kwTypes:
		return v, isTypeName(v) || isTypeList(v), nil
	case kwSchemaMap:
		m, ok := v.(*ordered)
		if !ok {
			return nil, false, errOpaque
		}
		out := &ordered{}
		for _, name := range m.keys {
			if !identifierPattern.MatchString(name) {
				return nil, false, errOpaque
			}
			s, err := signSchema(m.vals[name])
			if err != nil {
				return nil, false, err
			}
			out.set(name, s)
		}
		return out, true, nil
	case kwSchemaOrList:
		if list, ok := v.([]any); ok {
			return signList(list)
		}
		s, err := signSchema(v)
		return s, err == nil, err
	case kwSchemaList:
		list, ok := v.([]any)
		if !ok {
			return nil, false, errOpaque
		}
		return signList(list)
	case kwSchemaOrBool:
		s, err := signSchema(v)
		return s, err == nil, err
	case kwEnum:
		list, ok := v.([]any)
		if !ok || len(list) == 0 || len(list) > maxTypedEnum {
			return nil, false, nil
		}
		for _, m := range list {
			if !typedLiteral(m) {
				return nil, false, nil
			}
		}
		return list, true, nil
	case kwConst:
		return v, typedLiteral(v), nil
	case kwRef:
		ref, ok := v.(string)
		if !ok || !refPattern.MatchString(ref) {
			return nil, false, errOpaque
		}
		return ref, true, nil
	case kwNumber:
		_, ok := v.(json.Number)
		return v, ok, nil
	case kwNumberOrBool:
		_, num := v.(json.Number)
		_, b := v.(bool)
		return v, num || b, nil
	case kwBool:
		_, ok := v.(bool)
		return v, ok, nil
	}
	return nil, false, nil
}

func signList(list []any) (any, bool, error) {
	out := make([]any, len(list))
	for i, s := range list {
		signed, err := signSchema(s)
		if err != nil {
			return nil, false, err
		}
		out[i] = signed
	}
	return out, true, nil
}

var typeNames = map[string]bool{"object": true, "array": true, "string": true, "number": true, "integer": true, "boolean": true, "null": true}

func isTypeName(v any) bool {
	s, ok := v.(string)
	return ok && typeNames[s]
}

func isTypeList(v any) bool {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return false
	}
	for _, t := range list {
		if !isTypeName(t) {
			return false
		}
	}
	return true
}

// typedLiteral reports whether a literal is a typed value: a number, a
// boolean, null, or an identifier-like string.
func typedLiteral(v any) bool {
	switch t := v.(type) {
	case json.Number, bool, nil:
		return true
	case string:
		return identifierPattern.MatchString(t)
	}
	return false
}

// Where a schema holds subschemas: maps of them, one, or lists of them.
var (
	subschemaMaps  = map[string]bool{"properties": true, "patternProperties": true, "$defs": true, "definitions": true, "dependentSchemas": true}
	subschemaOne   = map[string]bool{"additionalProperties": true, "items": true, "not": true, "if": true, "then": true, "else": true, "contains": true, "propertyNames": true, "additionalItems": true, "unevaluatedItems": true, "unevaluatedProperties": true}
	subschemaLists = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true, "prefixItems": true, "items": true}
)

// schemaEdit removes parts of a schema at every depth, where they are
// keywords of a schema and nowhere else: a property named "required"
// is not the keyword.
type schemaEdit struct {
	// keyword reports whether to drop a keyword.
	keyword func(k string) bool
	// property, if set, reports whether to drop a property, by its schema.
	property func(sub any) bool
}

// withoutRequired removes "required" and "dependentRequired".
var withoutRequired = schemaEdit{keyword: func(k string) bool { return k == "required" || k == "dependentRequired" }}

// apply returns v edited.
func (e schemaEdit) apply(v any) any {
	o, ok := v.(*ordered)
	if !ok {
		return v
	}
	out := &ordered{}
	for _, k := range o.keys {
		val := o.vals[k]
		switch {
		case e.keyword(k):
			continue
		case subschemaMaps[k]:
			if m, ok := val.(*ordered); ok {
				sub := &ordered{}
				for _, name := range m.keys {
					if k == "properties" && e.property != nil && e.property(m.vals[name]) {
						continue
					}
					sub.set(name, e.apply(m.vals[name]))
				}
				val = sub
			}
		case subschemaLists[k]:
			if list, ok := val.([]any); ok {
				sub := make([]any, len(list))
				for i, s := range list {
					sub[i] = e.apply(s)
				}
				val = sub
			} else if subschemaOne[k] {
				val = e.apply(val)
			}
		case subschemaOne[k]:
			val = e.apply(val)
		}
		out.set(k, val)
	}
	return out
}

// ordered is a JSON object that keeps its members' order: a signature
// lists the vendor's properties as declared, which is the order a model
// reads them in.
type ordered struct {
	keys []string
	vals map[string]any
}

func (o *ordered) set(k string, v any) {
	if o.vals == nil {
		o.vals = map[string]any{}
	}
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

func (o *ordered) has(k string) bool {
	_, ok := o.vals[k]
	return ok
}

// MarshalJSON writes the members in order.
func (o *ordered) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		vb, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// decodeOrdered decodes one JSON document, objects as *ordered and
// numbers as json.Number. A duplicate key is an error.
func decodeOrdered(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &ordered{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key %v", kt)
				}
				if o.has(k) {
					return nil, fmt.Errorf("duplicate key %q", k)
				}
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				o.set(k, v)
			}
			_, err := dec.Token()
			return o, err
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token()
			return list, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return tok, nil
	}
}
