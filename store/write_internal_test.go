package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestWriterQueueHonoursContext checks that a writer waiting behind another
// gives up when its context ends instead of waiting forever.
func TestWriterQueueHonoursContext(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "secgpt.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	s.writeSlot <- struct{}{} // another writer holds the slot
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = s.AppendHubMemory(ctx, "@a:x", RoleUser, "queued", Provenance{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued AppendHubMemory = %v, want deadline exceeded", err)
	}
	<-s.writeSlot
	if err := s.AppendHubMemory(context.Background(), "@a:x", RoleUser, "free", Provenance{}); err != nil {
		t.Errorf("AppendHubMemory after the slot was freed = %v", err)
	}
}
