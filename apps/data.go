package apps

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
)

// PutJSON stores v, encoded as JSON, as the document collection/id.
func PutJSON(ctx context.Context, ds DataStore, collection, id string, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("failed to encode %s document: %w", collection, err)
	}
	if err := ds.Put(ctx, collection, id, body); err != nil {
		return fmt.Errorf("failed to store %s document: %w", collection, err)
	}
	return nil
}

// Digest is the SHA-256 of v's JSON encoding. Digesting decoded arguments
// rather than their text gives the same digest however the caller spaced
// or ordered them, so an app can make a repeated request idempotent.
func Digest(v any) ([32]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return [32]byte{}, fmt.Errorf("failed to encode value to digest: %w", err)
	}
	return sha256.Sum256(b), nil
}
