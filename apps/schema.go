package apps

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
)

// MaxDocument bounds any argument or result document checked against a schema.
const MaxDocument = 256 << 10

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
// cannot be resolved, a document that is not a single JSON value, or one over
// MaxDocument is invalid.
func ValidateDocument(schema, doc json.RawMessage) error {
	if len(doc) > MaxDocument {
		return fmt.Errorf("document of %d bytes is over the %d-byte limit", len(doc), MaxDocument)
	}
	r, err := resolve(schema)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("not valid JSON: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("not a single JSON value")
	}
	if err := r.Validate(v); err != nil {
		return err
	}
	return nil
}
