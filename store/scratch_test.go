package store_test

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/secgpt/secgpt/store"
)

// TestScratchIDs: a (user, app)'s scratch id is random, not derived from
// the user, stable while it is kept, survives a reopen, and is listed idle
// and per user until deleted.
func TestScratchIDs(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "secgpt.db")
	s, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	alice, err := s.Scratch(ctx, "@alice:x", "notes")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(alice) {
		t.Errorf("scratch id %q, want 32 hex digits", alice)
	}
	other, err := s.Scratch(ctx, "@alice:x", "memory")
	if err != nil || other == alice {
		t.Errorf("another app's scratch id = %q, %v; want a new id", other, err)
	}
	s.Close()
	if s, err = store.Open(ctx, path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if again, err := s.Scratch(ctx, "@alice:x", "notes"); err != nil || again != alice {
		t.Errorf("scratch id after reopen = %q, %v; want %q", again, err, alice)
	}
	// Another store names the same (user, app) differently: nothing in the
	// id comes from the user.
	s2, err := store.Open(ctx, filepath.Join(t.TempDir(), "other.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if id, _ := s2.Scratch(ctx, "@alice:x", "notes"); id == alice || strings.Contains(id, "alice") {
		t.Errorf("the same (user, app) got id %q in two stores", id)
	}

	mine, err := s.UserScratches(ctx, "@alice:x")
	if err != nil || len(mine) != 2 || mine[0].App != "memory" || mine[1].ID != alice {
		t.Errorf("UserScratches = %+v, %v; want memory and notes", mine, err)
	}
	idle, err := s.IdleScratches(ctx, time.Now().Add(time.Hour))
	if err != nil || len(idle) != 2 {
		t.Errorf("IdleScratches(in an hour) = %+v, %v; want both", idle, err)
	}
	if idle, _ := s.IdleScratches(ctx, time.Now().Add(-time.Hour)); len(idle) != 0 {
		t.Errorf("IdleScratches(an hour ago) = %+v, want none", idle)
	}
	if err := s.DeleteScratch(ctx, alice); err != nil {
		t.Fatal(err)
	}
	ids, err := s.ScratchIDs(ctx)
	if err != nil || len(ids) != 1 || ids[alice] {
		t.Errorf("ScratchIDs after delete = %v, %v; want the other only", ids, err)
	}
	if id, err := s.Scratch(ctx, "@alice:x", "notes"); err != nil || id == alice {
		t.Errorf("scratch id after delete = %q, %v; want a new id", id, err)
	}
	if _, err := s.Scratch(ctx, "", "notes"); err == nil {
		t.Error("Scratch of an empty user succeeded")
	}
}

// TestScratchUseRecordedOnce: naming a scratch again within
// scratchUseGrain of its recorded use (every spoke start names its
// scratch) writes nothing; the first use is recorded, and a deleted id is
// not named again.
func TestScratchUseRecordedOnce(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(ctx, filepath.Join(t.TempDir(), "secgpt.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, err := s.Scratch(ctx, "@alice:x", "notes")
	if err != nil {
		t.Fatal(err)
	}
	before := s.WriteStats()
	for range 20 {
		if id, err := s.Scratch(ctx, "@alice:x", "notes"); err != nil || id != first {
			t.Fatalf("Scratch again = %q, %v; want %q", id, err, first)
		}
	}
	// A waited write commits every write queued before it.
	if err := s.Write(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := s.WriteStats().Writes - before.Writes; got != 1 {
		t.Errorf("20 starts within the grain wrote %d times (with the flush), want 1", got)
	}
	if idle, err := s.IdleScratches(ctx, time.Now()); err != nil || len(idle) != 1 || idle[0].ID != first {
		t.Errorf("IdleScratches(now) = %+v, %v; want the first use recorded", idle, err)
	}
	if err := s.DeleteScratch(ctx, first); err != nil {
		t.Fatal(err)
	}
	if id, err := s.Scratch(ctx, "@alice:x", "notes"); err != nil || id == first {
		t.Errorf("Scratch after delete = %q, %v; want a new id", id, err)
	}
}
