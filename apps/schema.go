package apps

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/google/jsonschema-go/jsonschema"
)

// MaxDocument bounds any argument or result document checked against a schema.
const MaxDocument = 256 << 10

// MaxDocumentDepth bounds how deeply a document's arrays and objects nest.
const MaxDocumentDepth = 64

// maxNumberDigits is the most significant digits a number keeps as written:
// a double holds no more, so further digits could only carry something
// other than the value.
const maxNumberDigits = 17

// ErrDuplicateKey is returned for a document with an object that names one
// key twice.
var ErrDuplicateKey = errors.New("duplicate object key")

var resolved sync.Map // string(schema) -> *jsonschema.Resolved

func resolve(schema json.RawMessage) (*jsonschema.Resolved, error) {
	key := string(schema)
	if r, ok := resolved.Load(key); ok {
		return r.(*jsonschema.Resolved), nil
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("failed to parse schema: %w", err)
	}
	r, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve schema: %w", err)
	}
	resolved.Store(key, r)
	return r, nil
}

// CheckSchema reports whether schema is a usable JSON schema.
func CheckSchema(schema json.RawMessage) error {
	_, err := resolve(schema)
	return err
}

// ValidateDocument checks doc against schema. It fails closed: a schema that
// cannot be resolved, a document that is not a single JSON value, one with a
// duplicate object key, or one over MaxDocument is invalid.
func ValidateDocument(schema, doc json.RawMessage) error {
	_, err := CanonicalDocument(schema, doc)
	return err
}

// CanonicalDocument checks doc against schema like ValidateDocument and
// returns its canonical encoding (see Canonical). Whoever passes a checked
// document on must pass on these bytes, never doc itself: they are exactly
// the value that was checked.
func CanonicalDocument(schema, doc json.RawMessage) (json.RawMessage, error) {
	r, err := resolve(schema)
	if err != nil {
		return nil, err
	}
	canon, err := Canonical(doc)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(canon, &v); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if err := r.Validate(v); err != nil {
		return nil, err
	}
	return canon, nil
}

// Canonical re-encodes one JSON document compactly, so that every reader
// sees the same value. It refuses, rather than repairs, anything on which
// readers may disagree: an object naming a key twice (a validator keeps the
// last, another parser the first), also when the two spellings differ only
// in case or escaping (Go's encoding/json matches struct fields
// case-insensitively); trailing data; nesting deeper than MaxDocumentDepth;
// a document over MaxDocument; a number out of a double's range.
//
// Object members keep their order, strings are re-escaped uniformly, and a
// number keeps its literal (51.80 stays 51.80) unless it has more than
// maxNumberDigits significant digits, when it becomes the shortest literal
// of its value.
func Canonical(doc json.RawMessage) (json.RawMessage, error) {
	if len(doc) > MaxDocument {
		return nil, fmt.Errorf("document of %d bytes is over the %d-byte limit", len(doc), MaxDocument)
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var out bytes.Buffer
	if err := canonValue(dec, &out, 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("not a single JSON value")
	}
	return out.Bytes(), nil
}

func canonValue(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("not valid JSON: %w", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= MaxDocumentDepth {
			return fmt.Errorf("nested deeper than %d levels", MaxDocumentDepth)
		}
		switch t {
		case '{':
			return canonObject(dec, out, depth)
		case '[':
			return canonArray(dec, out, depth)
		}
		return fmt.Errorf("not valid JSON: unexpected %q", t)
	case string:
		return canonString(out, t)
	case json.Number:
		return canonNumber(out, t)
	case bool:
		out.WriteString(strconv.FormatBool(t))
	case nil:
		out.WriteString("null")
	default:
		return fmt.Errorf("not valid JSON: unexpected token %v", tok)
	}
	return nil
}

func canonObject(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	out.WriteByte('{')
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("not valid JSON: %w", err)
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("not valid JSON: object key %v", tok)
		}
		folded := foldKey(key)
		if seen[folded] {
			return fmt.Errorf("%w %q", ErrDuplicateKey, key)
		}
		if len(seen) > 0 {
			out.WriteByte(',')
		}
		seen[folded] = true
		if err := canonString(out, key); err != nil {
			return err
		}
		out.WriteByte(':')
		if err := canonValue(dec, out, depth+1); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("not valid JSON: %w", err)
	}
	out.WriteByte('}')
	return nil
}

func canonArray(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	out.WriteByte('[')
	for i := 0; dec.More(); i++ {
		if i > 0 {
			out.WriteByte(',')
		}
		if err := canonValue(dec, out, depth+1); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("not valid JSON: %w", err)
	}
	out.WriteByte(']')
	return nil
}

// foldKey is the case folding encoding/json applies when it matches an
// object key to a struct field.
func foldKey(k string) string {
	return strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, k)
}

func canonString(out *bytes.Buffer, s string) error {
	enc := json.NewEncoder(out)
	// HTML escapes would make the bytes a consent prompt shows harder to read
	// than the value; JSON does not need them.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("failed to encode string: %w", err)
	}
	out.Truncate(out.Len() - 1) // Encode's newline
	return nil
}

func canonNumber(out *bytes.Buffer, n json.Number) error {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return fmt.Errorf("number %.40s is out of range", n)
	}
	if significantDigits(string(n)) <= maxNumberDigits {
		out.WriteString(string(n))
		return nil
	}
	out.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	return nil
}

// significantDigits counts the mantissa's digits from the first non-zero one.
func significantDigits(lit string) int {
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		lit = lit[:i]
	}
	n, started := 0, false
	for _, c := range lit {
		if c < '0' || c > '9' {
			continue
		}
		if c != '0' {
			started = true
		}
		if started {
			n++
		}
	}
	return n
}
