package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func openInternal(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "secgpt.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// holdCommitter makes the committer run a write that waits until release
// is called, so that writes queued meanwhile wait for the next batch.
func holdCommitter(t *testing.T, s *Store) (release func()) {
	t.Helper()
	running, hold := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.write(context.Background(), func(context.Context) error {
			close(running)
			<-hold
			return nil
		})
	}()
	<-running
	return func() {
		close(hold)
		if err := <-done; err != nil {
			t.Errorf("held write: %v", err)
		}
	}
}

// TestWriterQueueHonoursContext checks that a writer waiting behind another
// gives up when its context ends instead of waiting forever, and that its
// write is then never made.
func TestWriterQueueHonoursContext(t *testing.T) {
	s := openInternal(t)
	release := holdCommitter(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := s.AppendHubMemory(ctx, "@a:x", RoleUser, "queued", Provenance{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued AppendHubMemory = %v, want deadline exceeded", err)
	}
	release()
	if err := s.AppendHubMemory(context.Background(), "@a:x", RoleUser, "free", Provenance{}); err != nil {
		t.Errorf("AppendHubMemory after the slot was freed = %v", err)
	}
	mem, err := s.HubMemory(context.Background(), "@a:x", 10)
	if err != nil || len(mem) != 1 || mem[0].Content != "free" {
		t.Errorf("hub memory = %+v, %v; want only the write that was not withdrawn", mem, err)
	}
}

// TestGroupCommit: writes queued while a batch commits share the next
// commit, and each is acknowledged only with it.
func TestGroupCommit(t *testing.T) {
	s := openInternal(t)
	release := holdCommitter(t, s)
	before := s.WriteStats()
	const writers = 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.AppendAudit(context.Background(), AuditEntry{User: "@a:x", Decision: "allow", Detail: fmt.Sprint(i)})
		}()
	}
	// Every writer is queued before the held batch ends.
	for deadline := time.Now().Add(5 * time.Second); ; {
		s.committer.mu.Lock()
		n := len(s.committer.queue)
		s.committer.mu.Unlock()
		if n == writers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writers queued, want %d", n, writers)
		}
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	after := s.WriteStats()
	if w, c := after.Writes-before.Writes, after.Commits-before.Commits; w != writers+1 || c != 2 {
		t.Errorf("%d writes in %d commits, want %d writes in 2 (the held one, then one for all the queued)", w, c, writers+1)
	}
}

// TestFailedWriteRollsBackAlone: a write that fails inside a batch leaves
// no trace, and the writes beside it commit.
func TestFailedWriteRollsBackAlone(t *testing.T) {
	s := openInternal(t)
	release := holdCommitter(t, s)
	ctx := context.Background()
	boom := errors.New("boom")
	results := make(chan error, 3)
	for i, fail := range []bool{false, true, false} {
		go func() {
			results <- s.write(ctx, func(ctx context.Context) error {
				if err := s.insertHubMemory(ctx, "@a:x", RoleUser, fmt.Sprint("entry ", i), ShapedBy(), nowNanos()); err != nil {
					return err
				}
				if fail {
					return boom
				}
				return nil
			})
		}()
		// In order, so that all three share the next batch in this order.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			s.committer.mu.Lock()
			n := len(s.committer.queue)
			s.committer.mu.Unlock()
			if n == i+1 || time.Now().After(deadline) {
				break
			}
		}
	}
	release()
	var failed int
	for range 3 {
		if err := <-results; errors.Is(err, boom) {
			failed++
		} else if err != nil {
			t.Errorf("write: %v", err)
		}
	}
	if failed != 1 {
		t.Errorf("%d writes failed, want 1", failed)
	}
	mem, err := s.HubMemory(ctx, "@a:x", 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range mem {
		got = append(got, m.Content)
	}
	if fmt.Sprint(got) != "[entry 0 entry 2]" {
		t.Errorf("stored %q, want the two writes that did not fail", got)
	}
}

// TestLaterWritesCommitBeforeLaterWaits: a write from Later returns at
// once; a write that waits, queued after it, finds it committed.
func TestLaterWritesCommitBeforeLaterWaits(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	release := holdCommitter(t, s)
	if err := s.Later().AppendSpokeMemory(ctx, "@a:x", "mail", "a note"); err != nil {
		t.Fatalf("AppendSpokeMemory from Later = %v while the committer is busy, want nil at once", err)
	}
	if err := s.Later().AppendSpokeMemory(ctx, "", "mail", "x"); !errors.Is(err, ErrInvalid) {
		t.Errorf("an invalid write from Later = %v, want ErrInvalid at once", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.AppendAudit(ctx, AuditEntry{User: "@a:x", Decision: "allow"}) }()
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mem, err := s.SpokeMemory(ctx, "@a:x", "mail", 10)
	if err != nil || len(mem) != 1 {
		t.Errorf("spoke memory after a write that waited = %+v, %v; want the note", mem, err)
	}
}

// TestCloseCommitsQueuedWrites: Close commits what Later queued.
func TestCloseCommitsQueuedWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secgpt.db")
	ctx := context.Background()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := s.Later().AppendSpokeMemory(ctx, "@a:x", "mail", fmt.Sprint("note ", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendAudit(ctx, AuditEntry{User: "@a:x", Decision: "allow"}); !errors.Is(err, errStoreClosed) {
		t.Errorf("a write after Close = %v, want %v", err, errStoreClosed)
	}
	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	mem, err := s2.SpokeMemory(ctx, "@a:x", "mail", 100)
	if err != nil || len(mem) != 50 {
		t.Errorf("after Close and reopen: %d notes, %v; want 50", len(mem), err)
	}
}

// TestLaterWritesWaitForCompany: writes no one waits for share a commit:
// queued apart, they commit together within laterDelay, or at once with a
// write that waits.
func TestLaterWritesWaitForCompany(t *testing.T) {
	tests := []struct {
		name string
		// waited ends the batch with a write that waits.
		waited bool
	}{
		{"alone, after laterDelay", false},
		{"with a write that waits, at once", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openInternal(t)
			ctx := context.Background()
			before := s.WriteStats()
			start := time.Now()
			for i := range 3 {
				if err := s.Later().AppendSpokeMemory(ctx, "@a:x", "mail", fmt.Sprint("note ", i)); err != nil {
					t.Fatal(err)
				}
				time.Sleep(laterDelay / 10)
			}
			writes := int64(3)
			if tt.waited {
				if err := s.AppendAudit(ctx, AuditEntry{User: "@a:x", Decision: "allow"}); err != nil {
					t.Fatal(err)
				}
				if took := time.Since(start); took >= laterDelay {
					t.Errorf("a write that waits took %v behind writes no one waits for, want < %v", took, laterDelay)
				}
				writes++
			}
			deadline := time.Now().Add(5 * time.Second)
			for s.WriteStats().Writes-before.Writes < writes && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			got := s.WriteStats()
			if got.Writes-before.Writes != writes || got.Commits-before.Commits != 1 {
				t.Errorf("%d writes in %d commits, want %d in 1", got.Writes-before.Writes, got.Commits-before.Commits, writes)
			}
		})
	}
}
