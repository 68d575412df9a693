package spoke

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/sandbox"
)

// Spares: spokes started ahead of need (see Options.Spares). The manager
// keeps, at rest, Options.Spares of them or as many as the demand it has
// seen asks for (see demand), at most Options.MaxSpares and what memory
// allows; while a burst is on, it starts one only for an expected spoke
// (Expect) that no waiting or starting spare covers and that the spare
// can still serve. An expectation ends when its spoke starts, or after
// Options.SpareIdle, and the spares above the number wanted are then
// stopped.

// spareArg tells a spoke to wait for its launch arguments on fd 4 (see
// Options.Spares). Only the manager's spares are started with it.
const spareArg = "--spare"

// AnyApp, as a Key's App in Expect, stands for a spoke of the key's user
// and session whose app is not known yet (a request that names no app):
// it is expected only while no spoke of that user and session runs or
// starts. App names are identifiers, so no app is called that.
const AnyApp = "*"

// spareStarts is how many spares start at once: more at a time only
// compete for the CPU with the requests they are started for.
const spareStarts = 2

// memoryCheck is how often the memory available to spares is read again.
const memoryCheck = 10 * time.Second

// spareState is the manager's bookkeeping of spares, under its mutex.
type spareState struct {
	mu sync.Mutex
	// expected are the keys announced by Expect whose spokes have not
	// started yet, with when they were first announced.
	expected map[Key]time.Time
	// firstSteps are the expected spokes started whose first step has
	// not ended, with when they started: a burst lasts until their
	// requests are about answered.
	firstSteps map[Key]time.Time
	demand     demand
	// memoryAllows is how many spares memory allows (sparesMemoryAllows),
	// as read at memoryAt.
	memoryAllows int
	memoryAt     time.Time
	// starting counts the spares being started.
	starting int
	// failed is set when a start failed: no more start until the next
	// refill, so that a machine that cannot start spokes is not kept
	// busy trying.
	failed bool
}

// wanted is how many spares should wait or start (start) and how many
// waiting ones to keep (keep). At rest, start is the rest size: Spares,
// or the learned demand's peak, bounded by memory, or the expected spokes
// a spare can still serve, whichever is more; during a burst it is only
// the latter. keep never stops a spare that an expected spoke or the rest
// size wants. Both are at most cap(spares). Expectations older than
// Options.SpareIdle are dropped. s.mu must be held.
func (m *Manager) wanted(now time.Time) (start, keep int) {
	s := &m.spare
	var ats []time.Time
	for k, at := range s.expected {
		if now.Sub(at) > m.opts.SpareIdle {
			delete(s.expected, k)
		} else {
			ats = append(ats, at)
		}
	}
	// A spoke started ahead of a step that never came.
	for k, at := range s.firstSteps {
		if now.Sub(at) > m.opts.SpareIdle {
			delete(s.firstSteps, k)
		}
	}
	slices.SortFunc(ats, time.Time.Compare)
	useful := s.demand.servable(now, ats, len(m.spares)+s.starting)
	rest := m.restSize(now)
	keep = min(max(rest, len(s.expected)), cap(m.spares))
	if !s.demand.resting(now) {
		return min(useful, cap(m.spares)), keep
	}
	return min(max(rest, useful), cap(m.spares)), keep
}

// restSize is the pool's size at rest: Options.Spares, or the learned
// demand's peak bounded by memory, at most cap(spares). s.mu must be held.
func (m *Manager) restSize(now time.Time) int {
	s := &m.spare
	if now.Sub(s.memoryAt) > memoryCheck {
		s.memoryAllows, s.memoryAt = sparesMemoryAllows(cap(m.spares)), now
	}
	return min(max(m.opts.Spares, min(s.demand.rest(now), s.memoryAllows)), cap(m.spares))
}

// keepSpares starts spares while fewer than wanted wait or start, and
// stops the ones above it that have waited for nothing.
func (m *Manager) keepSpares() {
	defer close(m.sparesDone)
	if cap(m.spares) == 0 {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(m.opts.SpareIdle / 2)
	defer tick.Stop()
	// rested wakes the loop when a burst is over, to refill the pool.
	rested := time.NewTimer(time.Hour)
	defer rested.Stop()
	started := make(chan struct{}, spareStarts)
	for {
		s := &m.spare
		s.mu.Lock()
		now := time.Now()
		want, _ := m.wanted(now)
		for !s.failed && s.starting < spareStarts && len(m.spares)+s.starting < want {
			s.starting++
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.startSpare()
				select {
				case started <- struct{}{}:
				default: // a signal waiting already wakes the loop
				}
			}()
		}
		if !s.demand.resting(now) {
			rested.Reset(s.demand.last.Add(s.demand.quiet()).Sub(now))
		}
		s.mu.Unlock()
		select {
		case <-m.stopSpares:
			return
		case <-m.refill:
			s.mu.Lock()
			s.failed = false
			s.mu.Unlock()
		case <-started:
		case <-rested.C:
		case <-tick.C:
			m.shrinkSpares()
		}
	}
}

// startSpare starts one spare and puts it among the waiting ones.
func (m *Manager) startSpare() {
	begun := time.Now()
	c, err := m.spawnSpare()
	s := &m.spare
	s.mu.Lock()
	defer s.mu.Unlock()
	s.starting--
	if err != nil {
		s.failed = true
		m.opts.Log.Warn().Err(err).Msg("Failed to start a spare spoke; spokes start without one")
		return
	}
	select {
	case <-m.stopSpares:
		c.discard()
		return
	default:
	}
	s.demand.spareStarted(time.Since(begun))
	select {
	case m.spares <- c:
	default:
		// Taking only empties and starting stays under cap, so this
		// does not happen; a spare with no room is not kept.
		c.discard()
	}
}

// shrinkSpares stops the waiting spares above the number wanted.
func (m *Manager) shrinkSpares() {
	s := &m.spare
	s.mu.Lock()
	_, keep := m.wanted(time.Now())
	extra := len(m.spares) - keep
	s.mu.Unlock()
	for ; extra > 0; extra-- {
		c := m.takeSpare()
		if c == nil {
			return
		}
		c.discard()
	}
}

// spawnSpare starts a spare: the binary prepared under SparePolicy, waiting
// on a pipe for its launch arguments.
func (m *Manager) spawnSpare() (*child, error) {
	r, w, err := newLaunchPipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// A spare is in a cgroup from its start, as every spoke is:
	// launchSpare sets the bounds of the spoke it becomes.
	policy := m.opts.SparePolicy
	policy.Cgroup, _ = sandbox.CgroupSupport()
	// The spare applies what of its sandbox holds under this policy
	// before it waits (enterSpare).
	encoded, err := policy.Encode()
	if err != nil {
		w.close()
		return nil, err
	}
	c, err := m.spawn(context.Background(), "spare", []string{ChildArg, spareArg, "--policy", encoded}, r, policy, encoded)
	if err != nil {
		w.close()
		return nil, err
	}
	c.launch = w
	return c, nil
}

// launchPipe is the hub's end of the pipe on which a spare waits for its
// launch arguments: non-blocking, so that the hub never waits for a spare,
// and outside the runtime's poller, which would cost a registration and a
// removal (two more syscalls each) per spare for one write.
type launchPipe struct{ fd int }

// newLaunchPipe returns a spare's end of a launch pipe, blocking as the
// spare reads it, and the hub's.
func newLaunchPipe() (*os.File, *launchPipe, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("failed to make the launch pipe: %w", err)
	}
	if err := unix.SetNonblock(fds[1], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("failed to make the launch pipe: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "launch"), &launchPipe{fd: fds[1]}, nil
}

// write writes b whole: b is at most maxPrivate, which a pipe's buffer
// holds; a full one (EAGAIN) fails like a spare that died.
func (l *launchPipe) write(b []byte) error {
	n, err := unix.Write(l.fd, b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("failed to write the launch arguments: %w", err)
	}
	return nil
}

func (l *launchPipe) close() error { return unix.Close(l.fd) }

// Spares returns how many spares wait, for tests and status.
func (m *Manager) Spares() int { return len(m.spares) }

// RestSpares returns how many spares the pool holds at rest now: the
// number it refills to once no burst is on.
func (m *Manager) RestSpares() int {
	m.spare.mu.Lock()
	defer m.spare.mu.Unlock()
	return m.restSize(time.Now())
}

// Expect says that the spokes of keys are likely to be asked for soon by
// a request that arrived at arrived (as it arrives, or once planned): each
// that neither runs nor starts is
// counted until it starts, and a spare is started for it if none waiting
// or starting covers it and one can still be ready before its step
// comes, up to Options.MaxSpares. A spare belongs
// to no one and has read nothing (see Options.Spares): expecting a
// spoke starts no app.
//
// A key is expected from its request's arrival, also when announced by
// its plan, so that a spoke's lead (see started) is its request's, from
// arrival to start, and never an earlier request's of the same user.
func (m *Manager) Expect(arrived time.Time, keys ...Key) {
	if cap(m.spares) == 0 || len(keys) == 0 {
		return
	}
	now := time.Now()
	m.mu.Lock()
	var fresh []Key
	for _, k := range keys {
		if !m.runningLocked(k) {
			fresh = append(fresh, k)
		}
	}
	m.mu.Unlock()
	if len(fresh) == 0 {
		return
	}
	m.spare.mu.Lock()
	for _, k := range fresh {
		// Only a key not yet expected (or expected longer ago than
		// SpareIdle, not dropped yet) is new demand: a user who re-sends
		// requests that start no spoke must not keep a burst on, and
		// with it the pool below its rest size, for everyone.
		if at, ok := m.spare.expected[k]; !ok || now.Sub(at) > m.opts.SpareIdle {
			at := arrived
			if at.IsZero() || at.After(now) {
				at = now
			}
			m.spare.expected[k] = at
			m.spare.demand.active(now)
		}
	}
	m.spare.mu.Unlock()
	m.refillSpares()
}

// runningLocked reports whether the spoke of k runs or starts; for AnyApp,
// whether any spoke of its user and session does. m.mu must be held.
func (m *Manager) runningLocked(k Key) bool {
	if k.App != AnyApp {
		p, ok := m.procs[k]
		_, starting := m.starting[k]
		return ok && !p.gone() || starting
	}
	for other, p := range m.procs {
		if other.User == k.User && other.Session == k.Session && !p.gone() {
			return true
		}
	}
	for other := range m.starting {
		if other.User == k.User && other.Session == k.Session {
			return true
		}
	}
	return false
}

// started ends the expectation of key, whose spoke starts now, and of a
// spoke of any app of its user and session, and counts the start in the
// demand, with the time since the user's first expectation.
func (m *Manager) started(key Key) {
	now := time.Now()
	s := &m.spare
	s.mu.Lock()
	defer s.mu.Unlock()
	// The lead is from the arrival of this very spoke's request (see
	// Expect); only a spoke not expected by name is led by its user's
	// AnyApp expectation. An older expectation of another app or of
	// AnyApp may be a request that started no spoke, not this one's.
	first, ok := s.expected[key]
	if !ok {
		first = s.expected[Key{User: key.User, Session: key.Session, App: AnyApp}]
	}
	var lead time.Duration
	if !first.IsZero() {
		lead = now.Sub(first)
	}
	s.demand.started(now, lead)
	if lead > 0 {
		s.firstSteps[key] = now
	}
	delete(s.expected, key)
	delete(s.expected, Key{User: key.User, Session: key.Session, App: AnyApp})
}

// firstStepDone notes that the first step of key's spoke ended: if it
// was expected, its request is about answered, and the burst it belongs
// to lasts a quiet period more, so that the pool's refill does not
// compete with the burst's last answers.
func (m *Manager) firstStepDone(key Key) {
	s := &m.spare
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.firstSteps[key]; ok {
		delete(s.firstSteps, key)
		s.demand.active(time.Now())
	}
}

// Prestart starts the spoke of key now, when none runs, without running
// a step: its first step then finds it ready (and reports the start as
// its own, Info.Cold). The caller decides that key's app may run: this
// starts it.
func (m *Manager) Prestart(ctx context.Context, key Key) error {
	_, _, err := m.get(ctx, key, true)
	return err
}

// takeSpare returns a spare, or nil when none is started.
func (m *Manager) takeSpare() *child {
	select {
	case c := <-m.spares:
		return c
	default:
		return nil
	}
}

// refillSpares asks keepSpares to start the spares wanted.
func (m *Manager) refillSpares() {
	select {
	case m.refill <- struct{}{}:
	default:
	}
}

// launchSpare gives a spare the launch arguments args of a spoke under
// policy, which a spare can become (sandbox.SpareCanBecome). The caller calls
// refillSpares once that spoke is ready or has failed, so that starting the
// next spare does not compete with it for the CPU. It returns nil, and
// no error, when no spare is there or the spare taken has died: the caller
// then starts the spoke itself. An error is the policy's, which a spoke
// started directly would meet too.
func (m *Manager) launchSpare(policy sandbox.Policy, args []string) (*child, error) {
	if cap(m.spares) == 0 {
		return nil, nil
	}
	c := m.takeSpare()
	if c == nil {
		return nil, nil
	}
	// A scratch the hub keeps is given to the spare's own id; one of
	// the spare's own is a tmpfs it mounts in its view (its host root is
	// detached already), so nothing of the host is made or checked for it.
	var err error
	if sandbox.OwnScratch(policy) {
		err = sandbox.CheckPolicy(policy)
	} else {
		err = sandbox.PrepareScratchFor(policy, c.proc.uid, c.proc.gid) // checks it too
	}
	if err != nil {
		c.discard()
		return nil, err
	}
	b, err := json.Marshal(args)
	if err != nil || len(b) > maxPrivate {
		c.discard()
		return nil, nil
	}
	if c.cg != nil {
		// The spare's cgroup was made for the spare policy's limits.
		if err := c.cg.Update(policy.Limits.WithDefaults(policy.Profile)); err != nil {
			c.discard()
			return nil, err
		}
	}
	// One that died leaves a broken pipe.
	err = c.launch.write(b)
	if cerr := c.launch.close(); err == nil {
		err = cerr
	}
	c.launch = nil
	if err != nil {
		m.opts.Log.Debug().Err(err).Int("spoke_pid", c.proc.pid).Msg("Spare spoke is gone; starting one")
		c.discard()
		return nil, nil
	}
	return c, nil
}

// closeSpares stops keepSpares and kills the spares.
func (m *Manager) closeSpares() {
	close(m.stopSpares)
	<-m.sparesDone
	for {
		select {
		case c := <-m.spares:
			c.discard()
		default:
			return
		}
	}
}

// enterSpare is a spare's first step: it applies the part of its sandbox
// that holds under the spare policy (sandbox.EnterSpare), encoded as
// policyText, before it waits for the launch arguments of the spoke it
// becomes.
func enterSpare(policyText string) (*sandbox.Spare, error) {
	policy, err := sandbox.DecodePolicy(policyText)
	if err != nil {
		return nil, err
	}
	sb, err := sandbox.EnterSpare(policy)
	if err != nil {
		return nil, err
	}
	// Best effort: a failure here costs the claim the warm-up, no more.
	_ = warmFrames()
	// What the start-up and EnterSpare allocated is collected now, while
	// the spare waits, not by a collection the claim's own allocations
	// would start.
	goruntime.GC()
	return sb, nil
}

// warmSchema and warmDoc are a request schema and document of the kinds
// apps declare (an object of bounded strings, a number, an enum), made here.
const (
	warmSchema = `{"type":"object","properties":{"text":{"type":"string","maxLength":100},"n":{"type":"number","minimum":0},"unit":{"type":"string","enum":["a","b"]},"tags":{"type":"array","items":{"type":"string"}}},"required":["text"],"additionalProperties":false}`
	warmDoc    = `{"text":"warm","n":1,"unit":"a","tags":["x"]}`
)

// warmFrames runs, on values made here, the app-independent part of a
// step as a claimed spare's first one runs it: the ready frame's encoding,
// a step frame's decoding with each of its fields, a model request's
// encoding and its reply's decoding, a JSON schema's resolution and a
// document's validation, a result's encoding. A spare that has not run them
// pays, in its first step, the page faults of their code and the building
// of encoding/json's per-type codecs (the schema type's is large).
// Nothing is read from outside.
func warmFrames() error {
	body, err := jsonMarshal(Ready{PID: os.Getpid(), Sandbox: []string{fmt.Sprintf("%s=%s (%s)", "spare", "on", "warm")}})
	if err != nil {
		return err
	}
	var frames bytes.Buffer
	enc := NewEncoder(&frames, DefaultMaxFrame)
	if err := enc.Encode(Frame{Kind: KindReady, Body: body}); err != nil {
		return err
	}
	frames.Reset()
	call := llm.ToolCall{ID: "c1", Name: "warm__warm", Arguments: warmDoc}
	msgs := []llm.Message{
		{Role: llm.RoleUser, Content: "warm"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{call}},
		{Role: llm.RoleTool, ToolCallID: "c1", Content: warmDoc},
	}
	step := Step{ID: "warm", Function: "warm", Args: json.RawMessage(warmDoc), ArgsComplete: true, Query: "warm",
		Answer: true, Memory: []string{"warm"}, History: msgs, Functions: []string{"warm"}, OtherTools: []string{"warm__other"},
		Results: []StepOutput{{Tool: "warm__warm", Args: json.RawMessage(warmDoc), Result: json.RawMessage(warmDoc)}}, MaxLLMCalls: 1}
	reply := LLMReply{Message: llm.Message{Role: llm.RoleAssistant, Content: "warm", ToolCalls: []llm.ToolCall{call}},
		Refused: []RefusedCall{{ID: "c2", Name: "warm__other", Reason: "warm"}}}
	for _, f := range []struct {
		kind Kind
		body any
	}{{KindStep, step}, {KindReply, reply}} {
		if body, err = jsonMarshal(f.body); err != nil {
			return err
		}
		if err := enc.Encode(Frame{Kind: f.kind, Body: body}); err != nil {
			return err
		}
	}
	dec := NewSpokeDecoder(&frames, DefaultMaxFrame)
	for _, v := range []any{&step, &reply} {
		f, err := dec.Decode()
		if err != nil {
			return err
		}
		if err := DecodeBody(f.Body, v); err != nil {
			return err
		}
	}
	if err := apps.ValidateDocument(json.RawMessage(warmSchema), json.RawMessage(warmDoc)); err != nil {
		return err
	}
	req := LLMRequest{Messages: msgs, Tools: []llm.Tool{{Name: "warm__warm", Description: "warm", Parameters: json.RawMessage(warmSchema)}}}
	res := Result{Output: json.RawMessage(warmDoc), Answer: "warm", Calls: []CallLog{{Tool: "warm__warm", Args: json.RawMessage(warmDoc), Result: json.RawMessage(warmDoc)}}}
	for _, v := range []any{req, res, Output{Output: json.RawMessage(warmDoc)}, MemoryAppend{Content: "warm"}} {
		if _, err := jsonMarshal(v); err != nil {
			return err
		}
	}
	return nil
}
