package spoke

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The hub's own time spent serving a spoke is charged to the step it
// serves: decoding the spoke's frames (in the reader), and decoding,
// answering, refusing and encoding its requests (in the step's goroutine).
// Without the charge a spoke whose own time barely runs (it only writes
// frames the hub refuses) could keep the hub busy for as long as it liked:
// the step's deadline counts the spoke's time, not the hub's.
//
// The step's goroutine is locked to its thread while it serves a frame,
// and that thread's CPU clock measures its work: waits (for the model, the
// user, another app, the network) cost no CPU and are not charged, the
// encoding of a model request and of a reply are. A call of another app
// is served in the same goroutine, so its serving counts for its caller's
// step too. The reader's decoding is timed on the wall clock from when a
// frame's bytes have all arrived (decodeTimed).

// ErrHubTime: the spoke kept the hub busy beyond Options.MaxHubTime in one
// step and was killed.
var ErrHubTime = errors.New("over its bound on the hub's time")

// hubMeter accumulates the hub's time on one step and enforces its bound.
type hubMeter struct {
	max   time.Duration // ≤ 0: no bound
	spent time.Duration
	// decoded is the reader's decode time not yet charged (ns); it is
	// charged to the step that receives the next frame.
	decoded *atomic.Int64
	cpu     time.Duration // thread CPU at start
	locked  bool          // between start and charge
}

// threadCPU is the CPU time of the calling thread.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// start begins serving one frame: it locks the goroutine to its thread
// and reads the thread's clock.
func (m *hubMeter) start() {
	goruntime.LockOSThread()
	m.locked = true
	m.cpu = threadCPU()
}

// charge ends serving a frame: it charges the serving and the reader's
// decoding since the last frame, and unlocks the goroutine.
func (m *hubMeter) charge() {
	if m.locked {
		m.spent += threadCPU() - m.cpu
		m.locked = false
		goruntime.UnlockOSThread()
	}
	m.spent += time.Duration(m.decoded.Swap(0))
}

// stop is charge, and an ErrHubTime error once the step is over its bound.
func (m *hubMeter) stop() error {
	m.charge()
	if m.max > 0 && m.spent > m.max {
		return fmt.Errorf("%w: %v of the hub's time in one step, over the bound of %v", ErrHubTime, m.spent.Round(time.Millisecond), m.max)
	}
	return nil
}

// release ends the step's metering, whichever way the step ended, and
// returns the time charged to it.
func (m *hubMeter) release() time.Duration {
	m.charge()
	return m.spent
}

// hubTimeFailure is how runStep reports a spoke stopped for the hub's time.
func hubTimeFailure(err error) (string, error) {
	return "kept the hub busy beyond its bound and was stopped (" + err.Error() + ")", err
}
