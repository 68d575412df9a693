package hub_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/hub/hubtest"
	"github.com/secgpt/secgpt/scratch"
)

// TestForgetRemovesScratch: !forget removes the user's scratch
// directories, and no other user's; on main they stayed on disk.
func TestForgetRemovesScratch(t *testing.T) {
	ctx := context.Background()
	var root *scratch.Root
	sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{"metro_hail"}, Hub: func(o *hub.Options) {
		var err error
		if root, err = scratch.New(scratch.Options{Dir: filepath.Join(t.TempDir(), "scratch"), IDs: o.Store}); err != nil {
			t.Fatal(err)
		}
		o.Scratch = root
	}})
	dirs := map[string]string{}
	for _, user := range []string{alice, bob} {
		d, err := root.Dir(ctx, user, "metro_hail", false, scratch.Quota{})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "trip.txt"), []byte("from home"), 0o600); err != nil {
			t.Fatal(err)
		}
		dirs[user] = d
	}
	if err := sys.Hub.Forget(ctx, alice); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dirs[alice]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("alice's scratch survived !forget: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dirs[bob], "trip.txt")); err != nil {
		t.Errorf("bob's scratch went with alice's: %v", err)
	}
}
