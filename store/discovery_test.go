package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/secgpt/secgpt/store"
)

// TestDiscoveryKeyedByIdentity: a cached discovery answers only for the
// identity it was found with, survives a reopen, and a new identity
// replaces it.
func TestDiscoveryKeyedByIdentity(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "secgpt.db")
	s, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutDiscovery(ctx, "notes", "sha256:aa", json.RawMessage(`{"name":"notes"}`)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = store.Open(ctx, path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tests := []struct {
		app, identity string
		want          string
	}{
		{"notes", "sha256:aa", `{"name":"notes"}`},
		{"notes", "sha256:bb", ""},
		{"other", "sha256:aa", ""},
	}
	for _, tt := range tests {
		got, ok, err := s.Discovery(ctx, tt.app, tt.identity)
		if err != nil || ok != (tt.want != "") || string(got) != tt.want {
			t.Errorf("Discovery(%s, %s) = %s, %v, %v; want %q", tt.app, tt.identity, got, ok, err, tt.want)
		}
	}
	if err := s.PutDiscovery(ctx, "notes", "sha256:bb", json.RawMessage(`{"name":"notes","version":"2"}`)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Discovery(ctx, "notes", "sha256:aa"); ok {
		t.Error("the old identity's discovery is still cached")
	}
	for _, bad := range []struct{ app, identity, spec string }{{"", "x", "{}"}, {"a", "", "{}"}, {"a", "x", "{"}} {
		if err := s.PutDiscovery(ctx, bad.app, bad.identity, json.RawMessage(bad.spec)); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutDiscovery(%q, %q, %q) = %v, want ErrInvalid", bad.app, bad.identity, bad.spec, err)
		}
	}
}
