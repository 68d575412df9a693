package spoke

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	goruntime "runtime"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/sandbox"
)

// The hub's side of the spawner: a small process of the spoke binary,
// started once per Manager, that starts every spoke (see spawnerMain). Go
// cannot vfork a child into a new user namespace: os/exec copies the
// starting process's page tables, which the hub must not pay per spoke.
// The spawner does not either: it starts each spoke by a clone that shares
// its memory until the exec (see spawnclone_linux.c), and falls back to
// os/exec only where that cannot run. The hub sends it each spoke's arguments, policy and descriptors
// (SCM_RIGHTS over a SOCK_SEQPACKET pair), and learns back the spoke's pid
// and, later, how it ended. The spawner keeps each ended spoke a zombie
// until the hub has killed its process group and released it, so that a
// pid the hub signals is never another process's.

// ErrSpawnerDied: the spawner that started a spoke died; its spokes died
// with it, and the next start runs a new spawner.
var ErrSpawnerDied = errors.New("the spoke spawner died")

// spawnerAnswerTimeout bounds the spawner's answer to one start, its wait
// for the starts before it included. It is not the spoke's start timeout
// (Options.StartTimeout, which bounds spawn to ready once the spoke runs),
// only the bound past which a spawner counts as hung.
const spawnerAnswerTimeout = time.Minute

// spawnRequest is the hub's message to the spawner: a spoke to start, or a
// spoke to reap.
type spawnRequest struct {
	ID     uint64   `json:"id,omitempty"`
	Args   []string `json:"args,omitempty"`
	Policy string   `json:"policy,omitempty"`
	// Files says, per descriptor from fd 3 on, whether the message
	// carries it (after the stderr pipe, which it always carries) or the
	// spoke gets it closed.
	Files []bool `json:"files,omitempty"`
	// Release asks the spawner to reap this ended spoke.
	Release int `json:"release,omitempty"`
}

// spawnerReply is the spawner's message to the hub: the outcome of
// request ID, or, with ID 0, that spoke PID ended with Status.
type spawnerReply struct {
	ID  uint64 `json:"id,omitempty"`
	PID int    `json:"pid,omitempty"`
	Err string `json:"err,omitempty"`
	// Sandbox says Err is a failure to sandbox the spoke.
	Sandbox bool `json:"sandbox,omitempty"`
	// Cgroup are the directories of the spoke's cgroup (see
	// sandbox.OpenCgroup), which the spawner made and moved it into
	// before it replied, and removes once the spoke is released.
	Cgroup []string `json:"cgroup,omitempty"`
	// UID and GID are the host ids the spawner leased the spoke (see
	// sandbox.SpokeIDs) until it is released.
	UID    int    `json:"uid,omitempty"`
	GID    int    `json:"gid,omitempty"`
	Exited bool   `json:"exited,omitempty"`
	Status uint32 `json:"status,omitempty"` // a syscall.WaitStatus
}

// spawner is a running spawner process.
type spawner struct {
	conn *net.UnixConn
	cmd  *exec.Cmd
	pid  int
	log  zerolog.Logger

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan spawnOutcome
	procs   map[int]*spokeProc
	dead    chan struct{}
	err     error // why it died; set before dead is closed
}

// spawnOutcome is a spawn request's outcome: the spoke, or why none.
type spawnOutcome struct {
	proc    *spokeProc
	err     string
	sandbox bool // err is a failure to sandbox it
}

// spokeProc is a spoke started by a spawner: its pid and how it ended.
type spokeProc struct {
	pid      int
	uid, gid int      // the host ids it runs as
	cgroup   []string // its cgroup's directories, if it has one
	sp       *spawner
	done     chan struct{}
	err      error // nil for exit status 0; set before done is closed

	mu       sync.Mutex
	released bool // reaped (or its spawner is gone): the pid is no longer its
}

// startSpawner starts binary as a spawner. Its process group is its own
// (a terminal's signals are the hub's to handle), and it is killed when
// the hub's thread that started it ends, which is only when it has died.
func startSpawner(binary string, log zerolog.Logger) (*spawner, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("failed to create the spawner's socket pair: %w", err)
	}
	hubFile := os.NewFile(uintptr(fds[0]), "spawner-hub")
	childFile := os.NewFile(uintptr(fds[1]), "spawner")
	defer childFile.Close()
	c, err := net.FileConn(hubFile)
	hubFile.Close()
	if err != nil {
		return nil, fmt.Errorf("failed to open the spawner's channel: %w", err)
	}
	conn := c.(*net.UnixConn)
	cmd := exec.Command(binary, SpawnerArg)
	if r, ok := sandbox.CurrentIDRange(); ok {
		// It leases the spokes' ids from the hub's range.
		cmd.Args = append(cmd.Args, spokeIDsArg, fmt.Sprintf("%d:%d", r.First, r.Count))
	}
	cmd.Args[0] = "secgpt-spawner"
	cmd.ExtraFiles = []*os.File{childFile} // fd 3
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("failed to open the spawner's log pipe: %w", err)
	}
	s := &spawner{conn: conn, cmd: cmd, log: log, pending: map[uint64]chan spawnOutcome{}, procs: map[int]*spokeProc{}, dead: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig follows this thread: it stays locked, and ends,
		// only once the spawner has exited.
		goruntime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		s.pid = cmd.Process.Pid
		started <- nil
		err := cmd.Wait()
		s.die(fmt.Errorf("%w (%v)", ErrSpawnerDied, err))
	}()
	if err := <-started; err != nil {
		conn.Close()
		return nil, fmt.Errorf("failed to start the spoke spawner %s: %w", binary, err)
	}
	go s.logLines(bufio.NewScanner(stderr))
	go s.read()
	return s, nil
}

// logLines relays what the spawner writes on stderr (only its failures).
func (s *spawner) logLines(sc *bufio.Scanner) {
	sc.Buffer(make([]byte, 0, maxLogLine), maxLogLine)
	for sc.Scan() {
		s.log.Warn().Int("spawner_pid", s.pid).Msg(sc.Text())
	}
}

// alive reports whether the spawner still runs.
func (s *spawner) alive() bool {
	select {
	case <-s.dead:
		return false
	default:
		return true
	}
}

// close ends the spawner, and with it every spoke it started.
func (s *spawner) close() {
	// Safe once the spawner was reaped, unlike a signal to its pid.
	_ = s.cmd.Process.Kill()
	s.die(fmt.Errorf("%w: its manager closed", ErrSpawnerDied))
}

// die records why the spawner is gone, fails the starts in flight, and
// ends its spokes: the kernel killed them with it (their Pdeathsig), and
// they are killed again should one have escaped that.
func (s *spawner) die(cause error) {
	s.mu.Lock()
	select {
	case <-s.dead:
		s.mu.Unlock()
		return
	default:
	}
	s.err = cause
	close(s.dead)
	pending, procs := s.pending, s.procs
	s.pending, s.procs = map[uint64]chan spawnOutcome{}, map[int]*spokeProc{}
	s.mu.Unlock()
	s.conn.Close()
	for _, ch := range pending {
		ch <- spawnOutcome{err: cause.Error()}
	}
	for _, p := range procs {
		p.kill()
		p.mu.Lock()
		p.released = true
		p.mu.Unlock()
		p.ended(cause)
	}
}

// read dispatches the spawner's messages until it dies.
func (s *spawner) read() {
	buf := make([]byte, 4<<10)
	for {
		n, _, _, _, err := s.conn.ReadMsgUnix(buf, nil)
		if err == nil && n == 0 {
			err = errors.New("its channel closed")
		}
		if err != nil {
			s.die(fmt.Errorf("%w: %v", ErrSpawnerDied, err))
			return
		}
		var r spawnerReply
		if err := json.Unmarshal(buf[:n], &r); err != nil {
			s.die(fmt.Errorf("%w: it sent a malformed message: %v", ErrSpawnerDied, err))
			return
		}
		s.mu.Lock()
		if r.Exited {
			p := s.procs[r.PID]
			delete(s.procs, r.PID)
			s.mu.Unlock()
			if p != nil {
				p.ended(exitError(syscall.WaitStatus(r.Status)))
			}
			continue
		}
		ch, ok := s.pending[r.ID]
		delete(s.pending, r.ID)
		out := spawnOutcome{err: r.Err, sandbox: r.Sandbox}
		if r.PID > 0 {
			out.proc = &spokeProc{pid: r.PID, uid: r.UID, gid: r.GID, cgroup: r.Cgroup, sp: s, done: make(chan struct{})}
			s.procs[r.PID] = out.proc
		}
		s.mu.Unlock()
		switch {
		case ok:
			ch <- out
		case out.proc != nil:
			// Its start timed out and nobody waits for it.
			out.proc.discard()
		}
	}
}

// spawn asks the spawner to start a spoke: the binary re-executed with
// args, prepared under policy (encoded), with stderr as its stderr and
// files from fd 3 on (a nil entry is closed in the spoke). The caller keeps
// its files and closes them.
func (s *spawner) spawn(ctx context.Context, args []string, policy string, stderr *os.File, files []*os.File) (*spokeProc, error) {
	req := spawnRequest{Args: args, Policy: policy}
	rights := []int{int(stderr.Fd())}
	for _, f := range files {
		req.Files = append(req.Files, f != nil)
		if f != nil {
			rights = append(rights, int(f.Fd()))
		}
	}
	ch := make(chan spawnOutcome, 1)
	s.mu.Lock()
	if !s.alive() {
		s.mu.Unlock()
		return nil, s.err
	}
	s.nextID++
	req.ID = s.nextID
	s.pending[req.ID] = ch
	s.mu.Unlock()
	b, err := json.Marshal(req)
	if err == nil {
		_, _, err = s.conn.WriteMsgUnix(b, syscall.UnixRights(rights...), nil)
	}
	// The descriptors are the spawner's now too (or were never sent).
	goruntime.KeepAlive(stderr)
	goruntime.KeepAlive(files)
	if err != nil {
		s.forget(req.ID)
		return nil, fmt.Errorf("failed to ask the spoke spawner: %w", err)
	}
	timer := time.NewTimer(spawnerAnswerTimeout)
	defer timer.Stop()
	var cause error
	select {
	case out := <-ch:
		if out.proc == nil {
			if !s.alive() {
				return nil, s.err
			}
			if out.sandbox {
				return nil, &sandboxError{errors.New(out.err)}
			}
			return nil, errors.New(out.err)
		}
		return out.proc, nil
	case <-ctx.Done():
		cause = context.Cause(ctx)
	case <-timer.C:
		// A spawner that does not answer is broken: its successor
		// serves the next start.
		cause = fmt.Errorf("the spoke spawner did not answer within %v and was stopped", spawnerAnswerTimeout)
		s.close()
	}
	if !s.forget(req.ID) {
		// The reply came meanwhile.
		if out := <-ch; out.proc != nil {
			out.proc.discard()
		}
	}
	return nil, cause
}

// forget drops request id and reports whether it was still pending.
func (s *spawner) forget(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pending[id]
	delete(s.pending, id)
	return ok
}

// discard kills p, which nobody supervises, and releases it once ended.
func (p *spokeProc) discard() {
	p.kill()
	go func() {
		_ = p.wait()
		p.release()
	}()
}

// ended records how p ended.
func (p *spokeProc) ended(err error) {
	p.err = err
	close(p.done)
}

// wait blocks until p has ended and returns how: nil for exit status 0.
func (p *spokeProc) wait() error {
	<-p.done
	return p.err
}

// kill sends SIGKILL to p's process group (it leads one) and to p, unless
// p was released: its pid may be another process's by then.
func (p *spokeProc) kill() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return
	}
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
}

// release lets the spawner reap p, which has ended; p is not signalled
// after.
func (p *spokeProc) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return
	}
	p.released = true
	b, _ := json.Marshal(spawnRequest{Release: p.pid})
	_, _, _ = p.sp.conn.WriteMsgUnix(b, nil, nil)
}

// exitError describes ws as os/exec does, or nil for exit status 0.
func exitError(ws syscall.WaitStatus) error {
	switch {
	case ws.Exited() && ws.ExitStatus() == 0:
		return nil
	case ws.Exited():
		return fmt.Errorf("exit status %d", ws.ExitStatus())
	case ws.Signaled() && ws.CoreDump():
		return fmt.Errorf("signal: %v (core dumped)", ws.Signal())
	case ws.Signaled():
		return fmt.Errorf("signal: %v", ws.Signal())
	default:
		return fmt.Errorf("wait status %#x", uint32(ws))
	}
}
