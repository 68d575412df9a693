package spoke

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"strconv"
	"time"
)

// The demand for spares, as the manager has seen it. A burst of new users
// needs one spoke each within one model round (their plans come back
// together), far more than spares can start in that time, and a spare
// started while the burst's steps run competes with them for the CPU. So
// the pool at rest is sized to the largest number of spokes started
// within one quiet period (see demand.quiet), a peak that decays; during
// a burst a spare starts only for an expected spoke that no waiting or
// starting spare covers and that it can still serve; and the pool is
// refilled to its rest size only once the burst is over: no spoke
// started and none newly expected for a quiet period.

// demand is the manager's record of recent spoke starts. Its methods take
// the time, so that the rules are tested without waiting; the caller
// holds spareState.mu.
type demand struct {
	// halfLife is how fast the learned peak fades; minQuiet is the
	// shortest quiet period.
	halfLife, minQuiet time.Duration
	// starts are the spoke starts within the last quiet period, oldest
	// first, at most max of them.
	starts []time.Time
	max    int
	// peak is the most starts seen within one quiet period, as of peakAt.
	peak   float64
	peakAt time.Time
	// last is the last expected spoke's start or new expectation: a
	// burst is on until a quiet period has passed since.
	last time.Time
	// lead is how long, on average, an expected spoke waited from its
	// user's first expectation to its start; spareStart, how long a
	// spare takes to start. Zero: not measured yet.
	lead, spareStart time.Duration
}

// ewma weighs a new sample by 1/4 against the average so far (none yet:
// the sample).
func ewma(avg, sample time.Duration) time.Duration {
	if avg == 0 {
		return sample
	}
	return avg + (sample-avg)/4
}

// quiet is how long no spoke must start, nor any be newly expected, for a
// burst to be over: at least minQuiet, and two lead times, the time for
// the last requests' answers to come back after their spokes started
// (their model round), so that the refill does not compete with them.
func (d *demand) quiet() time.Duration {
	return max(d.minQuiet, 2*d.lead)
}

// resting reports whether no burst is on.
func (d *demand) resting(now time.Time) bool {
	return now.Sub(d.last) >= d.quiet()
}

// expected notes a new expectation: a request arrived for a spoke.
func (d *demand) expected(now time.Time) { d.last = now }

// started notes a spoke's start, from a spare or not; lead is the time
// since its user's first expectation, 0 when it was not expected. Only an
// expected spoke's start is demand, counted in the peak and in a burst: a
// spare is for the spokes announced (see Manager.Expect), and a manager
// told of none keeps its Options.Spares as before.
func (d *demand) started(now time.Time, lead time.Duration) {
	if lead <= 0 {
		return
	}
	d.last = now
	d.lead = ewma(d.lead, lead)
	window := d.quiet()
	drop := 0
	for drop < len(d.starts) && now.Sub(d.starts[drop]) > window {
		drop++
	}
	d.starts = append(d.starts[drop:], now)
	if len(d.starts) > d.max {
		d.starts = d.starts[len(d.starts)-d.max:]
	}
	if n := float64(len(d.starts)); n > d.peakNow(now) {
		d.peak, d.peakAt = n, now
	}
}

// spareStarted notes how long a spare took to start.
func (d *demand) spareStarted(took time.Duration) { d.spareStart = ewma(d.spareStart, took) }

// peakNow is the peak as it has decayed by now.
func (d *demand) peakNow(now time.Time) float64 {
	if d.peak == 0 || d.halfLife <= 0 {
		return 0
	}
	return d.peak * math.Exp2(-float64(now.Sub(d.peakAt))/float64(d.halfLife))
}

// rest is how many spares the demand seen asks for at rest: the decayed
// peak, rounded.
func (d *demand) rest(now time.Time) int {
	return int(math.Round(d.peakNow(now)))
}

// useful reports whether a spare started now can serve a spoke first
// expected at: whether it is ready, by the average, before that spoke's
// start is due. Before any start was measured, it is assumed so.
func (d *demand) useful(now, at time.Time) bool {
	return d.lead == 0 || now.Sub(at)+d.spareStart < d.lead
}

// spareMemory is what one waiting spare is counted to take of the
// machine's memory: its own pages (about 2.3 MiB proportional, 12.5 MiB
// resident with what it shares), its kernel state (page tables, its
// namespaces, cgroup) and a margin.
const spareMemory = 8 << 20

// memoryShare is the share of the machine's available memory that the
// spares the learned demand asks for may take.
const memoryShare = 16

// sparesMemoryAllows is how many spares fit in 1/memoryShare of the
// memory available now (MemAvailable of /proc/meminfo); limit when it
// cannot be read.
func sparesMemoryAllows(limit int) int {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return limit
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("MemAvailable:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return limit
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return limit
		}
		return min(limit, int(kb<<10/memoryShare/spareMemory))
	}
	return limit
}
