package egress

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSlotsShares(t *testing.T) {
	s := newSlots(3, 2)
	ctx := context.Background()
	for _, app := range []string{"a", "a", "b"} {
		if err := s.acquire(ctx, app); err != nil {
			t.Fatalf("acquire(%s): %v", app, err)
		}
	}
	// a is at its share and the broker is full: both wait.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.acquire(short, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire over a's share = %v, want a deadline error", err)
	}
	if s.waiting.Len() != 0 {
		t.Fatalf("a waiter that gave up is still queued")
	}
	// Queue a (over its share) before c; when b's slot frees, c gets it,
	// since a cannot use it; when a's frees, a's waiter gets it.
	got := make(chan string, 2)
	wait := func(app string) {
		go func() {
			if err := s.acquire(ctx, app); err == nil {
				got <- app
			}
		}()
		for deadline := time.Now().Add(time.Second); ; {
			s.mu.Lock()
			queued := s.waiting.Len() > 0 && s.waiting.Back().Value.(*slotWaiter).app == app
			s.mu.Unlock()
			if queued || time.Now().After(deadline) {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	wait("a")
	wait("c")
	s.release("b")
	if app := <-got; app != "c" {
		t.Errorf("b's slot went to %s, want c (a is at its share)", app)
	}
	s.release("a")
	if app := <-got; app != "a" {
		t.Errorf("a's slot went to %s, want a's waiter", app)
	}
	for _, app := range []string{"a", "a", "c"} {
		s.release(app)
	}
	if s.inUse != 0 || len(s.held) != 0 || s.waiting.Len() != 0 {
		t.Errorf("state after all released: %d in use, %v, %d waiting", s.inUse, s.held, s.waiting.Len())
	}
}

// TestSlotsBoundsUnderLoad checks the limits hold, nothing leaks and no
// waiter is stranded while many exchanges of several apps come and go and
// some give up waiting.
func TestSlotsBoundsUnderLoad(t *testing.T) {
	const total, perApp, apps = 5, 2, 4
	s := newSlots(total, perApp)
	var inUse atomic.Int64
	var perAppInUse [apps]atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := i % apps
			app := fmt.Sprint("app", n)
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(5))*time.Millisecond)
			defer cancel()
			if rand.IntN(2) == 0 {
				ctx = context.Background()
			}
			if err := s.acquire(ctx, app); err != nil {
				return
			}
			if v := inUse.Add(1); v > total {
				failed.Store(fmt.Sprintf("%d in use, over %d", v, total))
			}
			if v := perAppInUse[n].Add(1); v > perApp {
				failed.Store(fmt.Sprintf("%s has %d in use, over %d", app, v, perApp))
			}
			time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
			perAppInUse[n].Add(-1)
			inUse.Add(-1)
			s.release(app)
		}()
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatal(f)
	}
	if s.inUse != 0 || len(s.held) != 0 || s.waiting.Len() != 0 {
		t.Errorf("state after all ended: %d in use, %v, %d waiting", s.inUse, s.held, s.waiting.Len())
	}
}
