package spoke

import (
	"testing"
	"time"
)

// Red-team review (redteam3) of the spares sized to demand, the frames
// held for the next write and the hub's raw channel.

// TestRedteam3RepeatedExpectCannotHoldTheBurst: a user whose requests need
// no app (the hub expects a spoke of AnyApp for each, and none ever starts)
// re-sends a request more often than the quiet period. Each re-sent request
// announces a key that is already expected; it is no new demand and must
// not keep a "burst" on, or one user with a chat message a second holds the
// pool below its rest size (the learned peak, even Options.Spares) for
// everyone, and the next real burst of new users finds no spare.
func TestRedteam3RepeatedExpectCannotHoldTheBurst(t *testing.T) {
	const quiet = 40 * time.Millisecond
	m := &Manager{
		opts:   Options{Spares: 2, SpareIdle: 30 * time.Second},
		spares: make(chan *child, 16),
		spare: spareState{expected: map[Key]time.Time{},
			demand: demand{halfLife: time.Hour, minQuiet: quiet, max: 16}},
	}
	// The pool learned a peak of 10 from an earlier burst.
	m.spare.demand.peak, m.spare.demand.peakAt = 10, time.Now()
	chatty := Key{User: "@chatty:x", App: AnyApp, Session: "!room:x"}
	for end := time.Now().Add(25 * quiet); time.Now().Before(end); {
		m.Expect(chatty)
		time.Sleep(quiet / 4)
	}
	m.spare.mu.Lock()
	now := time.Now()
	start, _ := m.wanted(now)
	resting := m.spare.demand.resting(now)
	rest := m.restSize(now)
	m.spare.mu.Unlock()
	if !resting || start < rest {
		t.Fatalf("after one user re-sent a request every %v for %v: resting %v, wanted %d; want at rest and the pool refilled to its rest size %d",
			quiet/4, 25*quiet, resting, start, rest)
	}
}
