package spoke

import (
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)

func newDemand() demand {
	return demand{halfLife: time.Hour, minQuiet: time.Second, max: 128}
}

// burstOf starts n expected spokes, each led by lead, spread over spread
// from at.
func (d *demand) burstOf(at time.Time, n int, spread, lead time.Duration) time.Time {
	for range n {
		at = at.Add(spread / time.Duration(n))
		d.started(at, lead)
	}
	return at
}

// TestDemandLearnsAPeakThatDecays: the rest size is the most expected
// spokes started within one quiet period; it halves every half-life, and
// starts spread wider than the quiet period do not add up.
func TestDemandLearnsAPeakThatDecays(t *testing.T) {
	d := newDemand()
	if got := d.rest(t0); got != 0 {
		t.Fatalf("rest before any start = %d, want 0", got)
	}
	end := d.burstOf(t0, 100, 500*time.Millisecond, time.Second)
	tests := []struct {
		after time.Duration
		want  int
	}{
		{0, 100},
		{time.Minute, 99},
		{time.Hour, 50},
		{2 * time.Hour, 25},
		{12 * time.Hour, 0},
	}
	for _, tt := range tests {
		if got := d.rest(end.Add(tt.after)); got != tt.want {
			t.Errorf("rest %v after a 100-spoke burst = %d, want %d", tt.after, got, tt.want)
		}
	}
	// A later, smaller burst does not lower it; a larger one raises it.
	end = d.burstOf(end.Add(time.Minute), 30, 300*time.Millisecond, time.Second)
	if got := d.rest(end); got != 99 {
		t.Errorf("rest after a smaller burst = %d, want the first's, decayed: 99", got)
	}
	// Starts further apart than the quiet period (2 s: two lead times)
	// are no burst.
	d = newDemand()
	end = d.burstOf(t0, 10, 50*time.Second, time.Second)
	if got := d.rest(end); got != 1 {
		t.Errorf("rest after 10 starts 5 s apart = %d, want 1", got)
	}
	// A start nobody expected (no lead) is neither counted nor a burst.
	d = newDemand()
	d.started(t0, 0)
	if got := d.rest(t0); got != 0 || !d.resting(t0) {
		t.Errorf("after an unexpected start: rest %d, resting %v; want 0, true", got, d.resting(t0))
	}
}

// TestDemandBurstEndsAfterQuiet: a burst is on from a new expectation or
// a start until a quiet period passes, the longer of SpareQuiet and two
// lead times.
func TestDemandBurstEndsAfterQuiet(t *testing.T) {
	d := newDemand()
	if !d.resting(t0) {
		t.Fatal("a new demand is not at rest")
	}
	d.expected(t0)
	if d.resting(t0.Add(999 * time.Millisecond)) {
		t.Error("at rest 999 ms after an expectation, want a burst for SpareQuiet (1 s)")
	}
	if !d.resting(t0.Add(time.Second)) {
		t.Error("not at rest SpareQuiet after an expectation")
	}
	d.started(t0.Add(1500*time.Millisecond), 1500*time.Millisecond)
	if d.resting(t0.Add(4400 * time.Millisecond)) {
		t.Error("at rest 2.9 s after a start led by 1.5 s, want a burst for two lead times (3 s)")
	}
	if !d.resting(t0.Add(4500 * time.Millisecond)) {
		t.Error("not at rest two lead times after the last start")
	}
}

// TestDemandUsefulSpares: a spare is started for an expected spoke only
// while it can be ready before that spoke's start is due.
func TestDemandUsefulSpares(t *testing.T) {
	d := newDemand()
	if !d.useful(t0.Add(time.Hour), t0) {
		t.Error("with no lead measured, a spare is not useful")
	}
	d.started(t0, time.Second)
	d.spareStarted(100 * time.Millisecond)
	tests := []struct {
		age  time.Duration
		want bool
	}{
		{0, true},
		{800 * time.Millisecond, true},
		{900 * time.Millisecond, false},
		{2 * time.Second, false},
	}
	for _, tt := range tests {
		if got := d.useful(t0.Add(tt.age), t0); got != tt.want {
			t.Errorf("useful for a spoke expected %v ago = %v, want %v (lead 1 s, spare start 100 ms)", tt.age, got, tt.want)
		}
	}
}

// TestWantedDuringAndAfterABurst: during a burst, spares start only for
// the expected spokes a spare can still serve, not once per expected
// spoke on top of the pool, and never to refill the pool; at rest the
// pool is refilled to the learned peak, bounded by MaxSpares.
func TestWantedDuringAndAfterABurst(t *testing.T) {
	newM := func(spares, maxSpares int) *Manager {
		return &Manager{
			opts:   Options{Spares: spares, SpareIdle: 30 * time.Second},
			spares: make(chan *child, maxSpares),
			spare: spareState{expected: map[Key]time.Time{},
				demand: demand{halfLife: time.Hour, minQuiet: time.Second, max: maxSpares}},
		}
	}
	expect := func(m *Manager, at time.Time, from, n int) {
		for i := from; i < from+n; i++ {
			m.spare.expected[Key{User: fmt.Sprintf("@u%d:x", i), App: "a", Session: "s"}] = at
		}
		m.spare.demand.expected(at)
	}
	start := func(m *Manager, at time.Time, from, n int) {
		for i := from; i < from+n; i++ {
			k := Key{User: fmt.Sprintf("@u%d:x", i), App: "a", Session: "s"}
			m.spare.demand.started(at, at.Sub(m.spare.expected[k]))
			delete(m.spare.expected, k)
		}
	}
	wanted := func(m *Manager, at time.Time) (int, int) {
		m.spare.mu.Lock()
		defer m.spare.mu.Unlock()
		return m.wanted(at)
	}
	check := func(what string, gotStart, gotKeep, wantStart, wantKeep int) {
		t.Helper()
		if gotStart != wantStart || gotKeep != wantKeep {
			t.Errorf("%s: wanted = %d, keep %d; want %d, keep %d", what, gotStart, gotKeep, wantStart, wantKeep)
		}
	}

	m := newM(2, 128)
	s, k := wanted(m, t0)
	check("a new bot", s, k, 2, 2)
	// A burst of 100 arrives: a spare for each (the first request's
	// lead is not known yet), 100, not 2 + 100.
	expect(m, t0, 0, 100)
	s, k = wanted(m, t0)
	check("100 arrive on a new bot", s, k, 100, 100)
	// Their plans come back after 1 s: 40 start; the 60 others start
	// now too, too soon for a spare started now, and the pool is not
	// refilled while they run.
	at := t0.Add(time.Second)
	start(m, at, 0, 40)
	s, k = wanted(m, at)
	check("40 of 100 started", s, k, 0, 60)
	start(m, at.Add(200*time.Millisecond), 40, 60)
	s, k = wanted(m, at.Add(time.Second))
	check("all started, a second later", s, k, 0, 100)
	// Two lead times after the last start the burst is over: the pool
	// is refilled to the 100 it had to start.
	at = at.Add(200*time.Millisecond + 2*m.spare.demand.lead)
	s, k = wanted(m, at)
	check("after the burst", s, k, 100, 100)
	// The next burst finds them waiting and starts none on top.
	expect(m, at, 100, 100)
	s, k = wanted(m, at)
	check("the next 100 arrive", s, k, 100, 100)

	// MaxSpares bounds the learned size.
	m = newM(2, 64)
	expect(m, t0, 0, 100)
	start(m, t0.Add(time.Second), 0, 100)
	s, k = wanted(m, t0.Add(10*time.Second))
	check("MaxSpares 64 after 100 started", s, k, 64, 64)
}
