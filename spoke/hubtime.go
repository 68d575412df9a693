package spoke

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync/atomic"
	"time"
	"unsafe"

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
// and that thread's CPU clock measures its work: waits (for the user,
// another app, the network) cost no CPU and are not charged, the decoding
// of a request and the encoding of its reply are. A model call is made
// outside the lock (Waiting): its client's work on a request the broker
// has already bounded (its size, the calls per step, the tokens) is not
// charged either. A call of another app is served in the same goroutine,
// so its serving counts for its caller's step too. The reader's decoding of a frame, once its bytes have all
// arrived, is timed the same way (decodeTimed).

// ErrHubTime: the spoke kept the hub busy beyond Options.MaxHubTime in one
// step and was killed.
var ErrHubTime = errors.New("over its bound on the hub's time")

// cpuOf runs f, which must not block, on one thread and returns the CPU
// time it took there.
func cpuOf(f func()) time.Duration {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	start := threadCPU()
	f()
	return threadCPU() - start
}

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

// threadCPU is the CPU time of the calling thread. The call is raw: it
// never blocks, and made the usual way (unix.ClockGettime) it tells the
// scheduler it might, which wakes the runtime's monitor thread (sysmon)
// after the hub has been idle, to poll every 20 µs for a millisecond and
// more (see rawChannel); a step reads the clock a dozen times.
func threadCPU() time.Duration {
	var ts unix.Timespec
	_, _, errno := unix.RawSyscall(unix.SYS_CLOCK_GETTIME, unix.CLOCK_THREAD_CPUTIME_ID, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
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
		return &hubTimeError{spent: m.spent, max: m.max}
	}
	return nil
}

// meterKey carries the meter of the step whose request a Handler serves,
// in the context it gets.
type meterKey struct{}

// Waiting runs wait, a call that mostly waits on something outside the
// hub (the model endpoint), from a Handler serving a step's request, in
// the goroutine that called it (ctx is the one the Handler got). The
// serving thread is released for the wait: locked, it would sleep and wake
// as a thread of its own each time the call blocks and resumes (two
// switches each, and a thread per waiting step). What wait's own goroutine
// spends is not charged; the Handler's work before and after it is.
func Waiting(ctx context.Context, wait func()) {
	m, _ := ctx.Value(meterKey{}).(*hubMeter)
	if m == nil || !m.locked {
		wait()
		return
	}
	m.charge()
	defer m.start()
	wait()
}

// hubTimeError is a step over its bound on the hub's time.
type hubTimeError struct{ spent, max time.Duration }

func (e *hubTimeError) Error() string {
	return fmt.Sprintf("%v: %v in one step, over %v", ErrHubTime, e.spent.Round(100*time.Microsecond), e.max)
}

func (e *hubTimeError) Unwrap() error { return ErrHubTime }

// release ends the step's metering, whichever way the step ended, and
// returns the time charged to it.
func (m *hubMeter) release() time.Duration {
	m.charge()
	return m.spent
}

// hubTimeFailure is how runStep reports a spoke stopped for the hub's time.
func hubTimeFailure(err error) (string, error) {
	var e *hubTimeError
	if errors.As(err, &e) {
		return fmt.Sprintf("kept the hub busy for %v in one step, over its bound of %v, and was stopped", e.spent.Round(100*time.Microsecond), e.max), err
	}
	return "kept the hub busy beyond its bound and was stopped", err
}
