package spoke

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	goruntime "runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/secgpt/secgpt/sandbox"
)

// SpawnerArg is the hidden first argument by which the spoke binary runs as
// the spawner of a Manager (see spawner.go). ChildMain dispatches on it.
const SpawnerArg = "__secgpt_spawner"

// spokeIDsArg gives the spawner the hub's range of spoke ids, FIRST:COUNT
// (see sandbox.SetIDRange).
const spokeIDsArg = "--spoke-ids"

// spawnerFD is the spawner's channel to the hub.
const spawnerFD = 3

// maxSpawnRequest bounds one request: a spoke's arguments (its policy, an
// external app's declaration) and no more.
const maxSpawnRequest = 1 << 20

// maxSpawnFiles bounds the descriptors of one request: stderr, fds 3–5.
const maxSpawnFiles = 4

// starters is how many spokes the spawner starts at once: a start waits
// for the kernel to make the spoke's namespaces and for its exec, which
// other starts may overlap.
const starters = 4

// spawnerServer is the spawner process: it starts spokes for the hub on
// starters threads, which their Pdeathsig follows, and reports each one's
// end.
type spawnerServer struct {
	conn   *net.UnixConn
	wmu    sync.Mutex
	starts chan spawnJob

	mu      sync.Mutex
	release map[int]chan struct{}
}

type spawnJob struct {
	req   spawnRequest
	files []*os.File // stderr first
}

// spawnerMain runs the spawner until the hub closes its channel; then it
// exits, and the kernel kills every spoke it started (their Pdeathsig).
func spawnerMain() int {
	// Its channel must not reach a spoke; received descriptors are
	// close-on-exec already (Go receives with MSG_CMSG_CLOEXEC).
	syscall.CloseOnExec(spawnerFD)
	f := os.NewFile(spawnerFD, "spawner")
	c, err := net.FileConn(f)
	f.Close()
	conn, ok := c.(*net.UnixConn)
	if err != nil || !ok {
		fmt.Fprintln(os.Stderr, "secgpt-spawner: no channel to the hub on fd 3:", err)
		return exitProtocol
	}
	if len(os.Args) == 4 && os.Args[2] == spokeIDsArg {
		var r sandbox.IDRange
		_, err := fmt.Sscanf(os.Args[3], "%d:%d", &r.First, &r.Count)
		if err == nil {
			err = sandbox.SetIDRange(r)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "secgpt-spawner: bad spoke id range:", err)
			return exitUsage
		}
	}
	// One P: the spawner's Go code is small, its starts wait in the
	// kernel. With an idle P beside one in a system call, the runtime's
	// monitor polls every 20 µs for as long as the call lasts; with none,
	// it hands the P off once and sleeps.
	goruntime.GOMAXPROCS(1)
	s := &spawnerServer{conn: conn, starts: make(chan spawnJob), release: map[int]chan struct{}{}}
	for range starters {
		go s.starter()
	}
	buf := make([]byte, maxSpawnRequest)
	oob := make([]byte, syscall.CmsgSpace(maxSpawnFiles*4))
	for {
		n, oobn, flags, _, err := conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return exitOK
		}
		files, ferr := receivedFiles(oob[:oobn])
		var req spawnRequest
		switch {
		case flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0:
			ferr = errors.New("the request was over the limit")
		case ferr == nil:
			ferr = json.Unmarshal(buf[:n], &req)
		}
		if req.Release > 0 {
			s.released(req.Release)
			continue
		}
		if ferr == nil && len(files) != 1+countTrue(req.Files) {
			ferr = fmt.Errorf("%d descriptors for %d files", len(files), countTrue(req.Files))
		}
		if ferr != nil {
			closeFiles(files)
			s.send(spawnerReply{ID: req.ID, Err: "bad spawn request: " + ferr.Error()})
			continue
		}
		s.starts <- spawnJob{req: req, files: files}
	}
}

// starter starts spokes from one thread, locked for the spawner's life: a
// child's Pdeathsig fires when the thread that started it ends.
func (s *spawnerServer) starter() {
	goruntime.LockOSThread()
	stack, err := newStarterStack()
	if err != nil {
		// Its starts fork the spawner, as os/exec does.
		fmt.Fprintln(os.Stderr, "secgpt-spawner:", err)
	}
	for job := range s.starts {
		err := s.start(job, stack)
		closeFiles(job.files)
		if err != nil {
			var se *sandboxError
			s.send(spawnerReply{ID: job.req.ID, Err: err.Error(), Sandbox: errors.As(err, &se)})
		}
	}
}

// start starts one spoke and replies with its pid, then watches it.
func (s *spawnerServer) start(job spawnJob, stack *starterStack) error {
	policy, err := sandbox.DecodePolicy(job.req.Policy)
	if err != nil {
		return err
	}
	cmd := exec.Command("/proc/self/exe", job.req.Args...)
	cmd.Args[0] = "secgpt-spoke"
	cmd.Stderr = job.files[0]
	next := 1
	for _, present := range job.req.Files {
		var f *os.File
		if present {
			f = job.files[next]
			next++
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	}
	if err := sandbox.Prepare(cmd, policy); err != nil {
		return &sandboxError{err}
	}
	var cg *sandbox.Cgroup
	if policy.Cgroup {
		if cg, err = sandbox.NewCgroup(policy.Limits.WithDefaults(policy.Profile)); err != nil {
			sandbox.Release(cmd)
			return &sandboxError{err}
		}
	}
	pid, err := stack.startCmd(cmd)
	if err != nil {
		if cg != nil {
			cg.Remove()
		}
		sandbox.Release(cmd)
		return err
	}
	reply := spawnerReply{ID: job.req.ID, PID: pid}
	reply.UID, reply.GID = sandbox.SpokeIDs(cmd)
	if cg != nil {
		// Fail closed: a spoke outside its cgroup has no memory bound
		// and is not used.
		if err := cg.Add(pid); err != nil {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			reap(pid)
			cg.Remove()
			sandbox.Release(cmd)
			return &sandboxError{err}
		}
		reply.Cgroup = cg.Dirs()
	}
	rel := make(chan struct{})
	s.mu.Lock()
	s.release[pid] = rel
	s.mu.Unlock()
	// The reply goes before the spoke's end can be reported.
	s.send(reply)
	go s.watch(cmd, pid, rel, cg)
	return nil
}

// sandboxError is a failure to sandbox a spoke, which the hub reports as
// such.
type sandboxError struct{ err error }

func (e *sandboxError) Error() string { return e.err.Error() }

// watch reports how the spoke ended, keeping it a zombie until the hub
// releases it, then reaps it and removes its cgroup.
func (s *spawnerServer) watch(cmd *exec.Cmd, pid int, rel chan struct{}, cg *sandbox.Cgroup) {
	status, err := awaitExit(pid)
	if err != nil {
		fmt.Fprintf(os.Stderr, "secgpt-spawner: failed to wait for spoke %d: %v\n", pid, err)
	}
	s.send(spawnerReply{Exited: true, PID: pid, Status: uint32(status)})
	<-rel
	reap(pid)
	if cg != nil {
		// Only once the spoke is reaped: removing the cgroup waits for
		// the kernel to finish with what was in it.
		cg.Remove()
	}
	// Its id may go to another spoke only now.
	sandbox.Release(cmd)
}

func (s *spawnerServer) released(pid int) {
	s.mu.Lock()
	rel, ok := s.release[pid]
	delete(s.release, pid)
	s.mu.Unlock()
	if ok {
		close(rel)
	}
}

func (s *spawnerServer) send(r spawnerReply) {
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, _, err := s.conn.WriteMsgUnix(b, nil, nil); err != nil {
		// The hub is gone: closing the channel ends spawnerMain, and
		// our spokes with us.
		s.conn.Close()
	}
}

// goStart starts cmd by os/exec, a fork of the whole spawner, and returns
// its pid; the caller reaps it.
func goStart(cmd *exec.Cmd) (int, error) {
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	return pid, nil
}

// reap waits for the spawner's child pid and removes it.
func reap(pid int) {
	for {
		_, err := syscall.Wait4(pid, nil, 0, nil)
		if err != syscall.EINTR {
			return
		}
	}
}

// siginfoChild is the start of the kernel's siginfo_t for SIGCHLD on
// 64-bit Linux: si_signo, si_errno, si_code, padding, si_pid, si_uid,
// si_status.
type siginfoChild struct {
	Signo, Errno, Code, _ int32
	PID                   int32
	UID                   uint32
	Status                int32
	_                     [100]byte
}

// si_code values of SIGCHLD (CLD_KILLED is the third).
const (
	cldExited = 1
	cldDumped = 3
)

// awaitExit waits for pid to end without reaping it and returns its wait
// status. It waits on Go's poller for a pidfd, which becomes readable when
// pid ends: no thread sits in a system call meanwhile (which would keep
// the runtime's monitor polling); without pidfds, in waitid.
func awaitExit(pid int) (syscall.WaitStatus, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return waitNoReap(pid)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return waitNoReap(pid)
	}
	var (
		status syscall.WaitStatus
		werr   error
	)
	err = rc.Read(func(fd uintptr) bool {
		var ended bool
		status, ended, werr = waitid(unix.P_PIDFD, fd, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG)
		return ended || werr != nil
	})
	if err != nil {
		return 0, err
	}
	return status, werr
}

// waitNoReap waits for pid to end without reaping it (WNOWAIT) and
// returns its wait status.
func waitNoReap(pid int) (syscall.WaitStatus, error) {
	status, _, err := waitid(unix.P_PID, uintptr(pid), unix.WEXITED|unix.WNOWAIT)
	return status, err
}

// waitid is waitid(2) for one child: its wait status once it ended (with
// WNOHANG, ended is false while it runs).
func waitid(idtype int, id uintptr, options int) (status syscall.WaitStatus, ended bool, err error) {
	var info siginfoChild
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, uintptr(idtype), id,
			uintptr(unsafe.Pointer(&info)), uintptr(options), 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return 0, false, errno
		}
		break
	}
	if info.PID == 0 {
		return 0, false, nil
	}
	switch info.Code {
	case cldExited:
		return syscall.WaitStatus(info.Status&0xff) << 8, true, nil
	case cldDumped:
		return syscall.WaitStatus(info.Status&0x7f) | 0x80, true, nil
	default: // CLD_KILLED
		return syscall.WaitStatus(info.Status & 0x7f), true, nil
	}
}

// receivedFiles are the descriptors of one message's control data.
func receivedFiles(oob []byte) ([]*os.File, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			closeFiles(files)
			return nil, err
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "received"))
		}
	}
	return files, nil
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
