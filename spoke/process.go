package spoke

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/sandbox"
)

// The parent side's view of one running spoke: reading and writing its
// frames within their limits, serving its requests through a Handler
// during a step, and its death. The Manager (manager.go) starts and
// finds processes; this file is what happens once one runs.

// process is one running spoke child.
type process struct {
	key  Key
	proc *spokeProc
	pid  int
	conn net.Conn
	// tunnels is the hub's end of the tunnel socket of a ProfileProxy
	// spoke (see TunnelFD); nil for others.
	tunnels *net.UnixConn
	enc     *Encoder
	frames  chan Frame
	log     zerolog.Logger

	startup    time.Duration   // spawn to ready
	prestarted bool            // started from a spare
	unrun      atomic.Bool     // started by Prestart; no step has run on it yet
	cg         *sandbox.Cgroup // nil where the machine offers none

	busy     chan struct{}
	nextID   uint64
	maxRate  int
	stepTime time.Duration
	rate     frameRate
	// maxHubTime bounds the hub's time serving one step (hubtime.go);
	// decoded is the reader's decode time not yet charged, in ns.
	maxHubTime time.Duration
	decoded    atomic.Int64

	dead      chan struct{}
	deathOnce sync.Once
	deathErr  error
	killed    atomic.Bool // kill ran; deathErr is final

	useMu    sync.Mutex
	lastUsed time.Time
}

func (p *process) touch() {
	p.useMu.Lock()
	p.lastUsed = time.Now()
	p.useMu.Unlock()
}

func (p *process) idleFor() time.Duration {
	if len(p.busy) > 0 {
		return 0
	}
	p.useMu.Lock()
	defer p.useMu.Unlock()
	return time.Since(p.lastUsed)
}

// kill ends the process group and records why. Safe to call many times.
func (p *process) kill(cause error) {
	p.deathOnce.Do(func() {
		p.deathErr = cause
		p.log.Debug().Err(cause).Msg("Stopping spoke")
	})
	p.killed.Store(true)
	// The child leads its own process group (sandbox.Prepare sets Setpgid).
	p.proc.kill()
	p.conn.Close()
	if p.tunnels != nil {
		p.tunnels.Close()
	}
}

// gone reports whether the process was killed or has exited.
func (p *process) gone() bool {
	if p.killed.Load() {
		return true
	}
	select {
	case <-p.dead:
		return true
	default:
		return false
	}
}

func (p *process) deathCause() error {
	<-p.dead
	p.deathOnce.Do(func() { p.deathErr = ErrCrashed })
	return p.deathErr
}

func (p *process) wait() {
	err := p.proc.wait()
	if oom := p.outOfMemory(); oom != nil {
		err = oom
	}
	p.deathOnce.Do(func() {
		p.deathErr = fmt.Errorf("%w: %w", ErrCrashed, err)
	})
	if err != nil {
		p.log.Debug().Err(err).Msg("Spoke exited")
	}
	// Whatever the spoke left in its group goes with it: an external app's
	// server, which its spoke could not signal across their sandboxes. The
	// spawner keeps the spoke a zombie, its pid and group its own, until
	// it is released.
	p.proc.kill()
	// The spawner reaps it, and removes its cgroup.
	p.proc.release()
	// What the spoke wrote before it exited (a result, then exit: an
	// external app whose server failed) is still read; the deadline ends
	// the reader should a descendant hold the spoke's end open.
	_ = p.conn.SetReadDeadline(time.Now().Add(exitDrain))
	if p.tunnels != nil {
		// Connections it passed and the hub has not taken go with it.
		p.tunnels.Close()
	}
	close(p.dead)
}

// outOfMemory is an ErrOutOfMemory error if the kernel killed a process of
// the spoke for going over its memory bound, else nil.
func (p *process) outOfMemory() error {
	if p.cg == nil || p.cg.OOMKills() == 0 {
		return nil
	}
	return fmt.Errorf("%w of %d MiB: the kernel killed a process of the app", ErrOutOfMemory, p.cg.Memory>>20)
}

// exitDrain bounds reading what a spoke wrote before it exited.
const exitDrain = time.Second

// readFrames decodes frames until the channel fails, enforcing the frame
// rate. Any decode error kills the spoke.
func (p *process) readFrames(dec *Decoder) {
	defer close(p.frames)
	defer p.conn.Close()
	for {
		f, ok := p.next(dec)
		if !ok {
			return
		}
		// A frame is delivered even if the spoke has exited since.
		select {
		case p.frames <- f:
			continue
		default:
		}
		select {
		case p.frames <- f:
		case <-p.dead:
			return
		}
	}
}

// next decodes the spoke's next frame within the frame rate; false once
// the channel has ended or the spoke is killed for what it sent.
func (p *process) next(dec *Decoder) (Frame, bool) {
	f, took, err := dec.decodeTimed()
	p.decoded.Add(int64(took))
	if err != nil {
		// EOF and a reset (the spoke ended with bytes unread) are its
		// end, which wait reports; not a frame of its.
		ended := errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
		if !ended && !(errors.Is(err, os.ErrDeadlineExceeded) && p.gone()) {
			p.log.Warn().Err(err).Msg("Spoke sent a bad frame; stopping it")
			p.kill(fmt.Errorf("%w: %v", ErrProtocol, err))
		}
		return Frame{}, false
	}
	// A step's result answers the hub; only what the spoke sends on its
	// own initiative counts against it.
	if f.Kind != KindResult && !p.rate.allow(p.maxRate) {
		p.log.Warn().Int("limit", p.maxRate).Msg("Spoke flooded the channel; stopping it")
		p.kill(ErrFlood)
		return Frame{}, false
	}
	return f, true
}

// frameRate counts a spoke's requests in a one-second window that also
// restarts with every step the hub starts, so a fast, well-behaved spoke is
// never mistaken for a flood while one that floods within a step is.
type frameRate struct {
	mu    sync.Mutex
	start time.Time
	count int
}

func (r *frameRate) reset() {
	r.mu.Lock()
	r.start, r.count = time.Now(), 0
	r.mu.Unlock()
}

// allow counts one frame and reports whether the spoke is within limit.
func (r *frameRate) allow(limit int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.start) > time.Second {
		r.start, r.count = now, 0
	}
	r.count++
	return r.count <= limit
}

// maxLogLine bounds one forwarded log line; a child cannot flood our logs
// with one huge line, and lines beyond maxLogLinesPerSecond are dropped.
const (
	maxLogLine           = 4 << 10
	maxLogLinesPerSecond = 100
)

// forwardLogs re-logs the child's stderr, tagged with user, app and pid.
func (p *process) forwardLogs(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, maxLogLine), maxLogLine)
	windowStart, count, dropped := time.Now(), 0, 0
	for {
		if !sc.Scan() {
			if errors.Is(sc.Err(), bufio.ErrTooLong) {
				p.log.Warn().Msg("Spoke wrote an over-long log line; dropping its logs")
				_, _ = io.Copy(io.Discard, r)
			}
			return
		}
		if now := time.Now(); now.Sub(windowStart) > time.Second {
			if dropped > 0 {
				p.log.Warn().Int("dropped", dropped).Msg("Dropped spoke log lines over the rate limit")
			}
			windowStart, count, dropped = now, 0, 0
		}
		if count++; count > maxLogLinesPerSecond {
			dropped++
			continue
		}
		p.relay(sc.Bytes())
	}
}

// describeDeath says in words why a spoke ended.
func describeDeath(cause error) string {
	switch {
	case errors.Is(cause, ErrProtocol):
		return "broke the protocol and was stopped"
	case errors.Is(cause, ErrFlood):
		return "flooded the channel and was stopped"
	case errors.Is(cause, ErrOutOfMemory):
		return "was killed: " + cause.Error()
	case errors.Is(cause, ErrDeadline):
		return "did not finish in time and was stopped"
	case errors.Is(cause, ErrCancelled):
		return "was stopped: the request was cancelled"
	default:
		return "crashed"
	}
}

// write sends one frame within the spoke's remaining time and returns what
// is left of it. A spoke that stops reading must not hold the hub in a
// blocked write: past the deadline the write fails and the spoke is killed.
// A reply over the frame limit is replaced by an error reply.
func (p *process) write(f Frame, budget time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = p.conn.SetWriteDeadline(start.Add(budget))
	err := p.enc.Encode(f)
	if errors.Is(err, ErrFrameTooLarge) && f.Kind == KindReply {
		f.Body, f.Error = nil, "the reply was larger than the channel allows"
		err = p.enc.Encode(f)
	}
	_ = p.conn.SetWriteDeadline(time.Time{})
	return budget - time.Since(start), err
}

// stepUndelivered is the failure of a step whose frame could not reach its
// spoke, which had died: nothing of the step ran (see Manager.Run).
type stepUndelivered struct{ error }

func (e stepUndelivered) Unwrap() error { return e.error }

func describeWriteFailure(err error) (string, error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "did not read the hub's messages in time and was stopped", fmt.Errorf("%w: %v", ErrDeadline, err)
	}
	return "could not be reached", fmt.Errorf("%w: %v", ErrCrashed, err)
}

// runStep sends step and serves the spoke's requests until its result. It
// adds the hub's time serving the step to *hubTime, and stops a spoke that
// keeps the hub busy beyond its bound (hubtime.go).
func (p *process) runStep(ctx context.Context, step Step, h Handler, hubTime *time.Duration) (Result, error) {
	meter := hubMeter{max: p.maxHubTime, decoded: &p.decoded}
	defer func() { *hubTime += meter.release() }()
	ctx = context.WithValue(ctx, meterKey{}, &meter)
	fail := func(msg string, cause error) (Result, error) {
		// When the reader already stopped the spoke, its reason is the
		// real one; a failed write is only its echo. So is any failure
		// once the kernel killed a process of the spoke for its memory.
		if oom := p.outOfMemory(); oom != nil {
			cause, msg = oom, describeDeath(oom)
		} else if p.killed.Load() {
			p.deathOnce.Do(func() {})
			cause, msg = p.deathErr, describeDeath(p.deathErr)
		}
		p.kill(cause)
		return Result{}, &Failure{App: p.key.appLabel(), Message: msg, Err: cause}
	}
	// A panic in h (a bug of the hub's, which may recover it) leaves the
	// spoke waiting for a reply: it ends with the step.
	defer func() {
		if r := recover(); r != nil {
			p.kill(fmt.Errorf("%w: the hub failed while serving it", ErrCrashed))
			panic(r)
		}
	}()
	// Whatever a request starts that may outlive it (a tunnel) ends with
	// the step.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.nextID++
	stepID := p.nextID
	p.rate.reset()
	body, err := json.Marshal(step)
	if err != nil {
		return Result{}, fmt.Errorf("failed to encode step: %w", err)
	}
	// budget is the spoke's own time left: it runs down while the hub waits
	// for the spoke or writes to it, not while the hub serves its requests.
	budget := p.stepTime
	if budget, err = p.write(Frame{Kind: KindStep, ID: stepID, Body: body}, budget); err != nil {
		res, failure := fail(describeWriteFailure(err))
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return res, failure // a spoke that stops reading is not started again
		}
		return res, stepUndelivered{failure}
	}
	timer := time.NewTimer(budget)
	defer timer.Stop()
	for {
		var f Frame
		var ok bool
		waited := time.Now()
		select {
		case f, ok = <-p.frames:
			if !ok {
				cause := p.deathCause()
				return fail(describeDeath(cause), cause)
			}
		case <-timer.C:
			return fail("did not finish in time and was stopped", ErrDeadline)
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return fail("was stopped: the request was cancelled", ErrCancelled)
			}
			return fail("did not finish in time and was stopped", ErrDeadline)
		}
		timer.Stop()
		if budget -= time.Since(waited); budget <= 0 {
			return fail("did not finish in time and was stopped", ErrDeadline)
		}
		meter.start()
		switch f.Kind {
		case KindResult:
			if f.ID != stepID {
				return fail("broke the protocol and was stopped", fmt.Errorf("%w: result for step %d, want %d", ErrProtocol, f.ID, stepID))
			}
			var res Result
			if err := DecodeBody(f.Body, &res); err != nil {
				return fail("sent a malformed result and was stopped", fmt.Errorf("%w: %v", ErrProtocol, err))
			}
			if res.Error != "" {
				// The app's server died under its spoke: say so if
				// the kernel killed it for its memory.
				if oom := p.outOfMemory(); oom != nil {
					res.Error = "killed: " + oom.Error() + "; " + res.Error
				}
			}
			return res, nil
		case KindReady:
			return fail("broke the protocol and was stopped", fmt.Errorf("%w: second ready frame", ErrProtocol))
		case KindOutput:
			var out Output
			if err := DecodeBody(f.Body, &out); err != nil {
				return fail("sent a malformed output and was stopped", fmt.Errorf("%w: %v", ErrProtocol, err))
			}
			if oh, ok := h.(OutputHandler); ok {
				oh.Output(ctx, out)
			}
			if err := meter.stop(); err != nil {
				return fail(hubTimeFailure(err))
			}
			timer.Reset(budget)
		case KindMemory:
			var m MemoryAppend
			if err := DecodeBody(f.Body, &m); err != nil {
				return fail("sent a malformed memory entry and was stopped", fmt.Errorf("%w: %v", ErrProtocol, err))
			}
			if err := h.AppendMemory(ctx, m); err != nil {
				// No reply: the spoke carries on without the entry.
				p.log.Debug().Err(err).Msg("Refused a spoke's memory entry")
			}
			if err := meter.stop(); err != nil {
				return fail(hubTimeFailure(err))
			}
			timer.Reset(budget)
		default:
			reply, err := p.serve(ctx, f, h)
			if errors.Is(err, ErrProtocol) {
				return fail("sent a malformed request and was stopped", err)
			}
			if budget, err = p.write(reply, budget); err != nil {
				return fail(describeWriteFailure(err))
			}
			if budget <= 0 {
				return fail("did not finish in time and was stopped", ErrDeadline)
			}
			if err := meter.stop(); err != nil {
				return fail(hubTimeFailure(err))
			}
			timer.Reset(budget)
		}
	}
}

// serve answers one spoke request. A malformed body is a protocol error;
// a handler error becomes a reply carrying the error text.
func (p *process) serve(ctx context.Context, f Frame, h Handler) (Frame, error) {
	reply := Frame{Kind: KindReply, ID: f.ID}
	var out any
	var err error
	decode := func(v any) error { return DecodeBody(f.Body, v) }
	switch f.Kind {
	case KindLLM:
		var req LLMRequest
		if err = decode(&req); err == nil {
			out, err = h.Complete(ctx, req)
		}
	case KindProbe:
		var req Probe
		if err = decode(&req); err == nil {
			out, err = h.Probe(ctx, req)
		}
	case KindAppCall:
		var req AppCall
		if err = decode(&req); err == nil {
			out, err = h.CallApp(ctx, req)
		}
	case KindHTTP:
		var req HTTPRequest
		if err = decode(&req); err == nil {
			out, err = h.HTTP(ctx, req)
		}
	case KindData:
		var req DataOp
		if err = decode(&req); err == nil {
			out, err = h.Data(ctx, req)
		}
	case KindTunnel:
		var req TunnelRequest
		if err = decode(&req); err != nil {
			break
		}
		var conn net.Conn
		if conn, err = p.receiveTunnel(req.Seq); err != nil {
			return reply, err
		}
		if th, ok := h.(TunnelHandler); ok {
			out, err = th.Tunnel(ctx, req, conn)
		} else {
			conn.Close()
			err = errNoTunnels
		}
	default:
		return reply, fmt.Errorf("%w: unexpected %q frame during a step", ErrProtocol, f.Kind)
	}
	if errors.Is(err, ErrBadFrame) {
		return reply, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	if err != nil {
		reply.Error = err.Error()
		return reply, nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		reply.Error = "failed to encode reply"
		return reply, nil
	}
	reply.Body = b
	return reply, nil
}
