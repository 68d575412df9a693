package egress

import (
	"container/list"
	"context"
	"sync"
)

// slots bounds the exchanges in flight: at most total at once, and at most
// perApp for one app, so that one slow app, however many users call it and
// however long its server keeps each exchange (up to Options.Timeout), leaves
// the rest of the broker to the other apps. Waiters are served in arrival
// order, skipping those whose app already has its share, so a free slot
// never idles behind an app at its limit and no waiter is overtaken by a
// later one it could have used the slot instead of. State is kept only for
// apps with exchanges in flight or waiting, so it does not grow with the
// number of users or apps over time. It is safe for concurrent use.
type slots struct {
	total, perApp int

	mu      sync.Mutex
	inUse   int
	held    map[string]int // app → exchanges in flight; no zero entries
	waiting list.List      // of *slotWaiter, in arrival order
}

// slotWaiter is one exchange waiting for a slot; ready is closed when the
// slot is its own.
type slotWaiter struct {
	app   string
	ready chan struct{}
}

func newSlots(total, perApp int) *slots {
	return &slots{total: total, perApp: perApp, held: map[string]int{}}
}

// acquire waits for a slot for app until ctx ends. Every nil return must be
// followed by exactly one release(app).
func (s *slots) acquire(ctx context.Context, app string) error {
	s.mu.Lock()
	// Slots are handed to eligible waiters as soon as they free up, so
	// every waiter still queued is ineligible: taking a free slot here
	// overtakes no one who could have had it.
	if s.free(app) {
		s.take(app)
		s.mu.Unlock()
		return nil
	}
	w := &slotWaiter{app: app, ready: make(chan struct{})}
	e := s.waiting.PushBack(w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case <-w.ready:
		// Granted while giving up: pass the slot on.
		s.mu.Unlock()
		s.release(app)
	default:
		s.waiting.Remove(e)
		s.mu.Unlock()
	}
	return ctx.Err()
}

// release frees a slot of app and hands free slots to the waiters in
// arrival order.
func (s *slots) release(app string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inUse--
	if s.held[app]--; s.held[app] <= 0 {
		delete(s.held, app)
	}
	for e := s.waiting.Front(); e != nil && s.inUse < s.total; {
		next := e.Next()
		if w := e.Value.(*slotWaiter); s.free(w.app) {
			s.take(w.app)
			s.waiting.Remove(e)
			close(w.ready)
		}
		e = next
	}
}

// free reports whether app may take a slot now; s.mu is held.
func (s *slots) free(app string) bool {
	return s.inUse < s.total && s.held[app] < s.perApp
}

// take records a slot taken by app; s.mu is held.
func (s *slots) take(app string) {
	s.inUse++
	s.held[app]++
}

// inFlight returns the exchanges in flight in all and for app.
func (s *slots) inFlight(app string) (all, forApp int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inUse, s.held[app]
}
