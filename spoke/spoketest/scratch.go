package spoketest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/secgpt/secgpt/spoke"
)

// Scratch names each (user, app)'s scratch directory under a fresh root
// with a random id, as the product does (package scratch) without its
// store: a path says nothing of the user. The root, 0711 like the
// product's, is removed when the test ends.
type Scratch struct {
	root string
	mu   sync.Mutex
	dirs map[[2]string]string
}

// NewScratch returns a Scratch under a fresh root the spokes' uid can pass
// through (t.TempDir's parent is private to the test user).
func NewScratch(tb testing.TB) *Scratch {
	tb.Helper()
	root, err := os.MkdirTemp("", "secgpt-scratch-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o711); err != nil {
		tb.Fatal(err)
	}
	return &Scratch{root: root, dirs: map[[2]string]string{}}
}

// Root is the root of the scratch directories.
func (s *Scratch) Root() string { return s.root }

// Dir returns the scratch directory of k's (user, app), the same for every
// session; sandbox.Prepare makes it.
func (s *Scratch) Dir(k spoke.Key) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := [2]string{k.User, k.App}
	if d, ok := s.dirs[key]; ok {
		return d, nil
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("failed to name scratch: %w", err)
	}
	d := filepath.Join(s.root, hex.EncodeToString(b[:]))
	s.dirs[key] = d
	return d, nil
}
