// Package spoke runs apps in isolated child processes ("spokes") and owns the
// inter-spoke communication (ISC) protocol between them and the hub.
//
// The parent side (Manager) runs the spoke binary, one process per (user,
// app, session), supervises it, enforces deadlines, frame limits and a
// bound on the hub's own time spent serving it (hubtime.go), and kills it
// on any fault. It never forks itself for a spoke: a spawner, the spoke
// binary started once per Manager, does (see spawner.go). The child side
// (ChildMain) confines itself through package sandbox before it reads its first frame,
// then runs steps: the app's functions, and its own model's turns, which it
// can only obtain from the hub.
//
// This package never decides what a spoke may do: every request a child makes
// is handed to the hub through Handler, and a child is known only by the
// channel it speaks on. It must never give a child a secret, an inherited
// file descriptor beyond fds 0–3, or the parent's environment. A pipe on
// fd 4, which the child reads and closes before it confines itself, carries
// the one exception, an external app's own environment (its secrets
// included), handed to that app's server alone (see External), or, for a
// spare (see Options.Spares), the launch arguments a spoke started directly
// gets on its command line.
package spoke

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/sandbox"
)

// Key identifies a spoke process: one per (user, app, session). App is empty
// for a vanilla spoke, which hosts no app.
type Key struct {
	User    string
	App     string
	Session string
}

func (k Key) appLabel() string {
	if k.App == "" {
		return "vanilla"
	}
	return k.App
}

// Handler serves the requests a spoke makes while it runs a step. The hub
// implements it per step. An error is sent back to the spoke as a denial or
// failure; it never ends the spoke. Calls are sequential for one step.
type Handler interface {
	Complete(ctx context.Context, req LLMRequest) (LLMReply, error)
	Probe(ctx context.Context, p Probe) (ProbeReply, error)
	CallApp(ctx context.Context, c AppCall) (AppCallReply, error)
	HTTP(ctx context.Context, r HTTPRequest) (HTTPResponse, error)
	AppendMemory(ctx context.Context, m MemoryAppend) error
	Data(ctx context.Context, op DataOp) (DataReply, error)
}

// OutputHandler is a Handler that takes a step's early output (see
// KindOutput). A spoke's output frame to a handler without it is dropped:
// the result frame carries the output again.
type OutputHandler interface {
	Output(ctx context.Context, out Output)
}

// TunnelHandler is a Handler that carries an external app's TLS
// connections (see KindTunnel). It owns conn, a TCP connection accepted in
// the spoke's network namespace, and must close it; it may go on using it
// after it returns, until ctx, which ends with the step, is done. A tunnel
// request to a handler without it is refused.
type TunnelHandler interface {
	Tunnel(ctx context.Context, req TunnelRequest, conn net.Conn) (TunnelReply, error)
}

// Info describes the process that ran a step.
type Info struct {
	PID int `json:"pid"`
	// Cold is true when the process was started for this step.
	Cold bool `json:"cold"`
	// Startup is the time from spawn to ready (sandbox applied), for a
	// cold start.
	Startup time.Duration `json:"startup_ns,omitempty"`
	// Prestarted is true when a cold start began from a spare (see
	// Options.Spares): a process started ahead of need, not yet sandboxed,
	// that had served no one.
	Prestarted bool `json:"prestarted,omitempty"`
	// HubTime is the hub's own time spent serving the step's requests
	// (see Options.MaxHubTime).
	HubTime time.Duration `json:"hub_ns,omitempty"`
}

// Failure is a spoke fault: the spoke was killed or could not run. Message
// is fit for the user and names the app.
type Failure struct {
	App     string
	Message string
	Err     error
}

func (f *Failure) Error() string { return fmt.Sprintf("%s: %s: %v", f.App, f.Message, f.Err) }
func (f *Failure) Unwrap() error { return f.Err }

// Sentinel causes of a Failure.
var (
	// ErrDeadline: the spoke did not finish within its deadline and was killed.
	ErrDeadline = errors.New("deadline exceeded")
	// ErrCrashed: the spoke process died.
	ErrCrashed = errors.New("spoke process died")
	// ErrOutOfMemory means the kernel killed a process of the spoke (its
	// app's server, or the spoke) for going over its cgroup's memory bound.
	ErrOutOfMemory = errors.New("over its memory limit")
	// ErrProtocol: the spoke broke the ISC protocol and was killed.
	ErrProtocol = errors.New("protocol violation")
	// ErrFlood: the spoke sent frames faster than allowed and was killed.
	ErrFlood = errors.New("frame flood")
	// ErrCancelled: the caller cancelled the step and the spoke was stopped.
	ErrCancelled = errors.New("cancelled")
	// ErrClosed: the manager is closed.
	ErrClosed = errors.New("spoke manager closed")
)

// PolicyFunc returns the sandbox policy for a spoke. An error that is a
// Refusal says why in words fit for the user.
type PolicyFunc func(k Key) (sandbox.Policy, error)

// Refusal is an error that refuses a spoke for a reason fit for the user,
// such as its scratch being over its disk quota: a Failure for it carries
// the reason.
type Refusal interface {
	error
	Refusal() string
}

// Refused is the Failure of a spoke of k refused for r.
func Refused(k Key, r Refusal) *Failure {
	return &Failure{App: k.appLabel(), Message: "was refused: " + r.Refusal(), Err: r}
}

// Options configure a Manager. Zero values take the defaults noted.
type Options struct {
	// Binary is the spoke binary: its ChildMain runs the spawner, every
	// spoke and every external app's launcher. Default /proc/self/exe
	// (this binary must then dispatch to ChildMain when IsChild).
	Binary string
	// Policy gives each spoke its sandbox policy. Required.
	Policy PolicyFunc
	// MaxFrame bounds one ISC frame; default DefaultMaxFrame.
	MaxFrame int
	// StartTimeout bounds spawn to ready; default 5 s.
	StartTimeout time.Duration
	// StepTimeout bounds the time a spoke itself spends on one step, not
	// counting the time the hub takes to answer its requests (model calls,
	// the user's consent); default 2 min. The caller's ctx bounds the whole.
	StepTimeout time.Duration
	// IdleTimeout stops a spoke unused for this long; default 10 min.
	IdleTimeout time.Duration
	// MaxHubTime bounds the hub's own time serving one step of a spoke
	// (decoding, answering, refusing its requests; not the waits for the
	// model, the user or the network): a spoke over it is killed and named
	// (ErrHubTime). Default 2 s; negative is no bound.
	MaxHubTime time.Duration
	// MaxFramesPerSecond kills a spoke that sends more, averaged over a
	// one-second window; default 500.
	MaxFramesPerSecond int
	// LogLevel is passed to children; default info.
	LogLevel zerolog.Level
	// Extra, when set, gives the spoke of a key its extra arguments
	// (public: any process can read argv) and private bytes that it reads
	// on fd 4 and closes before it confines itself (an external app's
	// environment; see ExternalLaunch). Nil private bytes pass no fd 4; an
	// error fails the start.
	Extra func(k Key) (args []string, private []byte, err error)
	// Spares is how many spokes the manager keeps started ahead of need;
	// 0 keeps none. A spare belongs to no user or app and has read
	// nothing: it has only run the binary's start-up (exec, the Go
	// runtime, package initialisation, the new namespaces) and the part of
	// its sandbox that holds for every spoke it may become
	// (sandbox.EnterSpare), which is most of a spoke's cold start and
	// depends on no key. A spoke whose policy a spare can become
	// (sandbox.SpareCanBecome), and to which Extra gives nothing, starts
	// from a spare when one is there: it is told its arguments on fd 4,
	// then applies the rest of its sandbox and reads its first frame like
	// any spoke.
	Spares int
	// MaxSpares bounds the spares, Spares and those started for the
	// spokes expected (see Expect) or for the demand seen; 0 takes 128,
	// and below Spares (a negative value) it is Spares: none is started
	// for expected spokes or demand.
	MaxSpares int
	// SpareQuiet is the least time without a spoke start or a new
	// expectation after which a burst is over and the pool is refilled;
	// default 1 s. It is longer where requests wait longer for their
	// spokes (see demand.quiet).
	SpareQuiet time.Duration
	// SpareHalfLife is how fast the demand learned fades: the pool's
	// size at rest halves in this time without a burst as large; default
	// 1 h.
	SpareHalfLife time.Duration
	// SpareIdle is how long an expected spoke is waited for before its
	// spare, unused, is stopped; default 30 s.
	SpareIdle time.Duration
	// SparePolicy is the policy the spares are prepared under (see
	// sandbox.SpareCanBecome).
	SparePolicy sandbox.Policy
	// Log receives the manager's and the children's logs.
	Log zerolog.Logger
}

// Manager spawns and supervises spoke processes. It is safe for concurrent use.
type Manager struct {
	opts Options

	mu       sync.Mutex
	procs    map[Key]*process
	starting map[Key]chan struct{}
	closed   bool

	stopReaper chan struct{}
	reaperDone chan struct{}

	spares     chan *child // started ahead of need; cap Options.MaxSpares
	spare      spareState
	refill     chan struct{} // asks keepSpares for more
	stopSpares chan struct{}
	sparesDone chan struct{}

	spawnerMu sync.Mutex
	spawner   *spawner // started at the first spawn; replaced when it dies
}

// NewManager returns a Manager and starts its idle reaper.
func NewManager(opts Options) (*Manager, error) {
	if opts.Policy == nil {
		return nil, errors.New("spoke manager needs a sandbox policy function")
	}
	if opts.Binary == "" {
		opts.Binary = "/proc/self/exe"
	}
	if opts.MaxFrame <= 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 5 * time.Second
	}
	if opts.StepTimeout <= 0 {
		opts.StepTimeout = 2 * time.Minute
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 10 * time.Minute
	}
	if opts.MaxHubTime == 0 {
		opts.MaxHubTime = 2 * time.Second
	}
	if opts.MaxFramesPerSecond <= 0 {
		opts.MaxFramesPerSecond = 500
	}
	opts.Spares = max(opts.Spares, 0)
	if opts.MaxSpares == 0 {
		opts.MaxSpares = 128
	}
	opts.MaxSpares = max(opts.MaxSpares, opts.Spares)
	if opts.SpareIdle <= 0 {
		opts.SpareIdle = 30 * time.Second
	}
	if opts.SpareQuiet <= 0 {
		opts.SpareQuiet = time.Second
	}
	if opts.SpareHalfLife <= 0 {
		opts.SpareHalfLife = time.Hour
	}
	if opts.LogLevel == zerolog.NoLevel {
		opts.LogLevel = zerolog.InfoLevel
	}
	m := &Manager{
		opts:       opts,
		procs:      map[Key]*process{},
		starting:   map[Key]chan struct{}{},
		stopReaper: make(chan struct{}),
		reaperDone: make(chan struct{}),
		spares:     make(chan *child, opts.MaxSpares),
		spare: spareState{expected: map[Key]time.Time{},
			demand: demand{halfLife: opts.SpareHalfLife, minQuiet: opts.SpareQuiet, max: opts.MaxSpares}},
		refill:     make(chan struct{}, 1),
		stopSpares: make(chan struct{}),
		sparesDone: make(chan struct{}),
	}
	go m.reap()
	go m.keepSpares()
	return m, nil
}

// Run runs one step on the spoke for key, starting it if needed. Steps on
// one spoke run one at a time. On a fault the spoke is killed and the error
// is a *Failure; a later Run starts a fresh process. A warm spoke found
// dead when its step is sent (it died at rest, its death not yet seen: its
// spawner's death killed it, say) ran nothing of the step, which then runs
// once more on a fresh process.
func (m *Manager) Run(ctx context.Context, key Key, step Step, h Handler) (Result, Info, error) {
	res, info, err := m.runOnce(ctx, key, step, h)
	var undelivered stepUndelivered
	if errors.As(err, &undelivered) && !info.Cold {
		res, info, err = m.runOnce(ctx, key, step, h)
	}
	if errors.As(err, &undelivered) {
		err = undelivered.error
	}
	return res, info, err
}

func (m *Manager) runOnce(ctx context.Context, key Key, step Step, h Handler) (Result, Info, error) {
	p, cold, err := m.get(ctx, key, false)
	if err != nil {
		return Result{}, Info{}, err
	}
	// A spoke started ahead of its step (Prestart) is cold to its first.
	cold = p.unrun.CompareAndSwap(true, false) || cold
	select {
	case p.busy <- struct{}{}:
	case <-ctx.Done():
		return Result{}, Info{PID: p.pid}, m.notStarted(ctx, key, false)
	case <-p.dead:
		return Result{}, Info{PID: p.pid}, m.failure(key, "stopped", p.deathCause())
	}
	defer func() { <-p.busy }()
	info := Info{PID: p.pid, Cold: cold}
	if cold {
		info.Startup, info.Prestarted = p.startup, p.prestarted
	}
	res, err := p.runStep(ctx, step, h, &info.HubTime)
	p.touch()
	if err != nil {
		return Result{}, info, err
	}
	return res, info, nil
}

// StopUser stops every spoke of user (the user's session ended).
func (m *Manager) StopUser(user string) {
	m.mu.Lock()
	var victims []*process
	for k, p := range m.procs {
		if k.User == user {
			victims = append(victims, p)
			delete(m.procs, k)
		}
	}
	m.mu.Unlock()
	for _, p := range victims {
		p.kill(errors.New("session ended"))
	}
}

// PIDs returns the process IDs of the running spokes, for tests and status.
func (m *Manager) PIDs() map[Key]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[Key]int{}
	for k, p := range m.procs {
		out[k] = p.pid
	}
	return out
}

// Close kills every spoke and stops the manager.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	procs := m.procs
	m.procs = map[Key]*process{}
	m.mu.Unlock()
	close(m.stopReaper)
	<-m.reaperDone
	m.closeSpares()
	for _, p := range procs {
		p.kill(ErrClosed)
	}
	m.closeSpawner()
}

func (m *Manager) failure(k Key, msg string, cause error) error {
	return &Failure{App: k.appLabel(), Message: msg, Err: cause}
}

// notStarted is the failure of a step whose context ended while its spoke
// was starting or busy: the caller's cancellation, or the deadline.
func (m *Manager) notStarted(ctx context.Context, k Key, stopped bool) error {
	if errors.Is(context.Cause(ctx), context.Canceled) {
		return m.failure(k, "was cancelled before it started", ErrCancelled)
	}
	if stopped {
		return m.failure(k, "did not start in time and was stopped", ErrDeadline)
	}
	return m.failure(k, "did not start in time", ErrDeadline)
}

// get returns the live process for key, starting one if none runs. Only one
// start per key is in flight at a time. A process started for prestart
// (see Prestart) is marked unrun.
func (m *Manager) get(ctx context.Context, key Key, prestart bool) (*process, bool, error) {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, false, ErrClosed
		}
		if p, ok := m.procs[key]; ok {
			if !p.gone() {
				m.mu.Unlock()
				return p, false, nil
			}
			delete(m.procs, key)
		}
		if wait, ok := m.starting[key]; ok {
			m.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, false, m.notStarted(ctx, key, false)
			}
		}
		done := make(chan struct{})
		m.starting[key] = done
		m.mu.Unlock()

		p, err := m.start(ctx, key)

		m.mu.Lock()
		delete(m.starting, key)
		close(done)
		if err == nil {
			if m.closed {
				m.mu.Unlock()
				p.kill(ErrClosed)
				return nil, false, ErrClosed
			}
			p.unrun.Store(prestart)
			m.procs[key] = p
		}
		m.mu.Unlock()
		return p, true, err
	}
}

func (m *Manager) reap() {
	defer close(m.reaperDone)
	tick := time.NewTicker(m.opts.IdleTimeout / 4)
	defer tick.Stop()
	for {
		select {
		case <-m.stopReaper:
			return
		case <-tick.C:
		}
		m.mu.Lock()
		var idle []*process
		for k, p := range m.procs {
			if p.idleFor() > m.opts.IdleTimeout {
				idle = append(idle, p)
				delete(m.procs, k)
			}
		}
		m.mu.Unlock()
		for _, p := range idle {
			p.log.Debug().Msg("Stopping idle spoke")
			p.kill(errors.New("idle"))
		}
	}
}

// start starts the spoke for key, from a spare when one fits, and waits
// for its ready frame.
func (m *Manager) start(ctx context.Context, key Key) (*process, error) {
	policy, err := m.opts.Policy(key)
	if r, ok := errors.AsType[Refusal](err); ok {
		return nil, Refused(key, r)
	} else if err != nil {
		return nil, m.failure(key, "has no usable sandbox policy", err)
	}
	// With a cgroup per spoke, memory is bounded there and an exec-profile
	// server may reserve the address space its runtime wants.
	policy.Cgroup, _ = sandbox.CgroupSupport()
	encoded, err := policy.Encode()
	if err != nil {
		return nil, m.failure(key, "has no usable sandbox policy", err)
	}
	m.started(key)
	spawned := time.Now()
	args := []string{"--app", key.App, "--policy", encoded,
		"--max-frame", strconv.Itoa(m.opts.MaxFrame), "--log-level", m.opts.LogLevel.String()}
	var extra []string
	var private []byte
	if m.opts.Extra != nil {
		if extra, private, err = m.opts.Extra(key); err != nil {
			return nil, m.failure(key, "could not be started", err)
		}
	}
	if len(extra) == 0 && private == nil && sandbox.SpareCanBecome(policy, m.opts.SparePolicy) {
		defer m.refillSpares()
		c, err := m.launchSpare(policy, args)
		if err != nil {
			return nil, m.failure(key, "could not be sandboxed", err)
		}
		if c != nil {
			p, err := m.ready(ctx, key, c, spawned, true)
			// A spare that died before it was ready (killed while it
			// waited) is replaced by a start of its own; a fault of
			// the spoke's own shows again there and is reported.
			if !errors.Is(err, ErrCrashed) {
				return p, err
			}
			m.opts.Log.Debug().Err(err).Msg("Spare spoke died before it was ready; starting one")
		}
	}
	var fd4 *os.File
	var fill func() error
	if private != nil {
		if fd4, fill, err = privatePipe(private); err != nil {
			return nil, m.failure(key, "could not be started", err)
		}
		defer fd4.Close()
	}
	c, err := m.spawn(ctx, key.appLabel(), append(append([]string{ChildArg}, args...), extra...), fd4, policy, encoded)
	if err != nil {
		if fill != nil {
			_ = fill()
		}
		if ctx.Err() != nil {
			// It waited for the spawner past the caller's end.
			return nil, m.notStarted(ctx, key, false)
		}
		return nil, err
	}
	// The spoke starts its app's server only once it has read fd 4, which
	// is filled now that the spoke is in its cgroup: the server starts
	// there too.
	if fill != nil {
		if err := fill(); err != nil {
			c.discard()
			return nil, m.failure(key, "could not be started", err)
		}
	}
	return m.ready(ctx, key, c, spawned, false)
}

// ready supervises c as the spoke for key and waits for its ready frame.
// spawned is when the start began; prestarted, whether c was a spare.
func (m *Manager) ready(ctx context.Context, key Key, c *child, spawned time.Time, prestarted bool) (*process, error) {
	p := &process{
		key:        key,
		proc:       c.proc,
		pid:        c.proc.pid,
		conn:       c.conn,
		tunnels:    c.tunnels,
		enc:        NewEncoder(c.conn, m.opts.MaxFrame),
		frames:     make(chan Frame, 16),
		dead:       make(chan struct{}),
		busy:       make(chan struct{}, 1),
		maxRate:    m.opts.MaxFramesPerSecond,
		stepTime:   m.opts.StepTimeout,
		maxHubTime: m.opts.MaxHubTime,
		lastUsed:   time.Now(),
		prestarted: prestarted,
		cg:         c.cg,
	}
	p.log = m.opts.Log.With().Str("user", key.User).Str("app", key.appLabel()).Int("spoke_pid", p.pid).Logger()
	go p.forwardLogs(c.stderr)
	go p.wait()

	// The ready frame is read here, not by the reader started after it:
	// the spoke's frame wakes this goroutine, not one that hands it over.
	// An end of the start (its deadline, or the caller's) kills the
	// spoke, which ends the read.
	startCtx, cancel := context.WithTimeout(ctx, m.opts.StartTimeout)
	defer cancel()
	stop := context.AfterFunc(startCtx, func() { p.kill(errors.Unwrap(m.notStarted(startCtx, key, true))) })
	dec := NewHubDecoder(c.conn, m.opts.MaxFrame)
	f, ok := p.next(dec)
	if !stop() {
		return nil, m.notStarted(startCtx, key, true)
	}
	if !ok {
		p.kill(ErrCrashed)
		return nil, m.failure(key, "exited before it was ready", p.deathCause())
	}
	var ready Ready
	if f.Kind != KindReady || DecodeBody(f.Body, &ready) != nil {
		p.kill(ErrProtocol)
		return nil, m.failure(key, "sent a malformed first frame and was stopped", ErrProtocol)
	}
	go p.readFrames(dec)
	p.startup = time.Since(spawned)
	p.log.Debug().Strs("sandbox", ready.Sandbox).Dur("startup", p.startup).Bool("prestarted", prestarted).Msg("Spoke ready")
	return p, nil
}
