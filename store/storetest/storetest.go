// Package storetest opens real, throw-away stores for tests of packages that
// use package store. It owns nothing else and must never be imported by
// non-test code.
package storetest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/secgpt/secgpt/store"
)

// Open opens a new store in a fresh temporary directory and closes it when
// the test ends.
func Open(tb testing.TB) *store.Store {
	tb.Helper()
	return OpenAt(tb, filepath.Join(tb.TempDir(), "secgpt.db"))
}

// OpenAt opens the store at path and closes it when the test ends.
func OpenAt(tb testing.TB, path string) *store.Store {
	tb.Helper()
	s, err := store.Open(context.Background(), path)
	if err != nil {
		tb.Fatalf("storetest: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("storetest: %v", err)
		}
	})
	return s
}
