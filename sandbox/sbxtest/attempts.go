//go:build linux

package sbxtest

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/secgpt/secgpt/sandbox"
)

// The attempts a child makes (see attempts in child.go), each a thing a
// spoke might try, reporting what happened.

// ids reports the uid and gid the child runs as (read before Enter: the
// filter does not allow getuid).
func ids(enter func() error, _ sandbox.Policy, _ []string) (string, error) {
	detail := fmt.Sprintf("%d %d", os.Getuid(), os.Getgid())
	return detail, enter()
}

// enterTime reports how long Enter took, in nanoseconds.
func enterTime(enter func() error, _ sandbox.Policy, _ []string) (string, error) {
	start := time.Now()
	err := enter()
	return strconv.FormatInt(int64(time.Since(start)), 10), err
}

// ready is what a spoke does at start: Enter, then one byte on fd 3.
func ready(enter func() error, _ sandbox.Policy, _ []string) (string, error) {
	if err := enter(); err != nil {
		return "", err
	}
	_, err := unix.Write(iscFD, []byte{1})
	return "", err
}

func socket(a []string) (string, error) {
	fd, err := unix.Socket(atoi(a[0]), atoi(a[1]), 0)
	if err == nil {
		unix.Close(fd)
	}
	return "", err
}

func unixConnect(a []string) (string, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return "socket", err
	}
	defer unix.Close(fd)
	return "connect", unix.Connect(fd, &unix.SockaddrUnix{Name: a[0]})
}

func unixSendto(a []string) (string, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err != nil {
		return "socket", err
	}
	defer unix.Close(fd)
	return "sendto", unix.Sendto(fd, []byte("x"), 0, &unix.SockaddrUnix{Name: a[0]})
}

func forkExec([]string) (string, error) {
	pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{})
	if err == nil {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
	}
	return "", err
}

// execDeclared execs args (ExecPath first) through sandbox.Exec; outside
// the exec profile it tries /bin/true directly.
func execDeclared(enter func() error, p sandbox.Policy, args []string) (string, error) {
	if err := enter(); err != nil {
		return "", err
	}
	if p.Profile != sandbox.ProfileExec && p.Profile != sandbox.ProfileExecNet {
		return "execve", syscall.Exec("/bin/true", []string{"true"}, nil)
	}
	var env []string
	if p.Scratch != "" {
		// Where servers keep state and temporary files, as the spoke sets.
		env = []string{"HOME=" + p.Scratch, "TMPDIR=" + p.Scratch}
	}
	return "exec", sandbox.Exec(p, args, env)
}

// cloneProcess asks for a new process (no CLONE_THREAD). If the filter let
// it through, the copy exits at once without touching the Go runtime.
func cloneProcess([]string) (string, error) {
	r, _, errno := syscall.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	if errno != 0 {
		return "", errno
	}
	if r == 0 {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws syscall.WaitStatus
	syscall.Wait4(int(r), &ws, 0, nil)
	return "cloned", nil
}

func mmap(a []string) (string, error) {
	b, err := syscall.Mmap(-1, 0, atoi(a[0]), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err == nil {
		syscall.Munmap(b)
	}
	return "", err
}

// alloc allocates and touches the given number of bytes through the Go
// heap; past RLIMIT_AS the runtime dies with "out of memory".
func alloc(a []string) (string, error) {
	b := make([]byte, atoi(a[0]))
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	return strconv.Itoa(len(b)), nil
}

func spin([]string) (string, error) {
	for x := 0; ; x++ {
		if x < 0 {
			return "", nil
		}
	}
}

func writeSize(a []string) (string, error) {
	f, err := os.Create(a[0])
	if err != nil {
		return "create", err
	}
	defer f.Close()
	n, err := f.Write(make([]byte, atoi(a[1])))
	return strconv.Itoa(n), err
}

// fill writes files of a[1] bytes in directory a[0] until a write fails,
// as a hostile app filling its scratch would; Detail is "<bytes> <files>"
// written.
func fill(a []string) (string, error) {
	chunk := make([]byte, atoi(a[1]))
	var bytes, files int
	for i := 0; ; i++ {
		f, err := os.Create(fmt.Sprintf("%s/f%d", a[0], i))
		if err != nil {
			return fmt.Sprintf("%d %d", bytes, files), err
		}
		files++
		n, err := f.Write(chunk)
		bytes += n
		f.Close()
		if err != nil {
			return fmt.Sprintf("%d %d", bytes, files), err
		}
	}
}

// openMany opens unix sockets until it fails; Detail is the highest fd it
// got.
func openMany(a []string) (string, error) {
	highest := 0
	for range atoi(a[0]) {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return strconv.Itoa(highest), err
		}
		highest = max(highest, fd)
	}
	return strconv.Itoa(highest), nil
}

func rawSyscall(nr, a0, a1 uintptr) func([]string) (string, error) {
	return func([]string) (string, error) {
		_, _, errno := syscall.Syscall(nr, a0, a1, 0)
		if errno != 0 {
			return "", errno
		}
		return "", nil
	}
}

// threads checks that the sandbox covers threads that existed before
// Enter (seccomp TSYNC, Landlock on every thread) and that the runtime keeps
// working under it: 50 goroutines locked to their own threads before Enter
// each try a denied socket and a denied file; then 10 threads are created
// under the filter (clone3 gets ENOSYS, glibc falls back to clone) and 50
// goroutines make syscalls, sleep and allocate.
func threads(enter func() error, _ sandbox.Policy, _ []string) (string, error) {
	const n = 50
	start := make(chan struct{})
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Never unlocked: the thread exits with the goroutine, so
			// the threads below must be created under the filter.
			runtime.LockOSThread()
			<-start
			if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0); err != unix.EPERM {
				unix.Close(fd)
				errs <- fmt.Errorf("pre-Enter thread %d (tid %d): socket(AF_INET) = %v, want EPERM", i, unix.Gettid(), err)
			}
			// EACCES from Landlock, or ENOENT where the thread sees
			// the spoke's view.
			if _, err := os.ReadFile("/etc/hostname"); !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.ENOENT) {
				errs <- fmt.Errorf("pre-Enter thread %d (tid %d): read /etc/hostname = %v, want EACCES or ENOENT", i, unix.Gettid(), err)
			}
		})
	}
	if err := enter(); err != nil {
		close(start)
		wg.Wait()
		return "", err
	}
	close(start)
	// Threads created under the filter: goroutines locked to threads and
	// blocked in a raw sleep force the runtime to clone new ones.
	for range n / 5 {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			// A signal (the runtime's preemption, libpsx) interrupts the
			// sleep with EINTR; the rest of it is slept again.
			ts := unix.NsecToTimespec(int64(20 * time.Millisecond))
			for {
				err := unix.Nanosleep(&ts, &ts)
				if err == unix.EINTR {
					continue
				}
				if err != nil {
					errs <- err
				}
				break
			}
		})
	}
	for range n {
		wg.Go(func() {
			for range 20 {
				_ = unix.Getpid()
				time.Sleep(100 * time.Microsecond)
				b := make([]byte, 64<<10)
				if _, err := rand.Read(b); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	runtime.GC()
	close(errs)
	if err := <-errs; err != nil {
		return "", err
	}
	return strconv.Itoa(runtime.NumGoroutine()), nil
}

func env([]string) (string, error) {
	if e := os.Environ(); len(e) != 0 {
		return fmt.Sprint(e), fmt.Errorf("environment not empty: %d variables", len(e))
	}
	return "", nil
}

// fds lists the open descriptors below 64 and whether each is
// close-on-exec, before and after Enter: "fd:cloexec ... | fd:cloexec ...".
func fds(enter func() error, _ sandbox.Policy, _ []string) (string, error) {
	list := func() string {
		out := ""
		for fd := range 64 {
			flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
			if err == nil {
				out += fmt.Sprintf("%d:%d ", fd, flags&unix.FD_CLOEXEC)
			}
		}
		return out
	}
	before := list()
	err := enter()
	return before + "| " + list(), err
}

// workload is what a spoke does, to show the allowlist is enough: JSON
// frames over fd 3, goroutines, timers, GC, files in scratch.
func workload(args []string) (string, error) {
	isc := os.NewFile(iscFD, "isc")
	enc, dec := json.NewEncoder(isc), json.NewDecoder(isc)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			t := time.NewTimer(time.Duration(i) * time.Millisecond)
			<-t.C
			_ = make([]byte, 1<<20)
		})
	}
	wg.Wait()
	runtime.GC()
	if err := enc.Encode(map[string]any{"kind": "ready", "now": time.Now().Format(time.RFC3339Nano)}); err != nil {
		return "encode", err
	}
	var reply map[string]any
	if err := dec.Decode(&reply); err != nil {
		return "decode", err
	}
	if len(args) > 0 {
		dir := args[0]
		sub := filepath.Join(dir, "sub")
		if err := os.MkdirAll(sub, 0o700); err != nil {
			return "mkdir", err
		}
		path := filepath.Join(sub, "a.json")
		if err := os.WriteFile(path, []byte(`{"x":1}`), 0o600); err != nil {
			return "write", err
		}
		if err := os.Rename(path, filepath.Join(sub, "b.json")); err != nil {
			return "rename", err
		}
		if _, err := os.ReadDir(sub); err != nil {
			return "readdir", err
		}
		if _, err := os.ReadFile(filepath.Join(sub, "b.json")); err != nil {
			return "read", err
		}
		if err := os.RemoveAll(sub); err != nil {
			return "remove", err
		}
	}
	<-time.After(5 * time.Millisecond)
	return fmt.Sprint(reply["kind"]), enc.Encode(map[string]any{"kind": "result"})
}

// proxy is what the spoke of an external app with egress does: bring up
// loopback (dropping the capability it took), open a listener, and after
// Enter only accept. A client connects before Enter, so that there is a
// connection to accept; after Enter a new one must fail. The detail is the
// capability sets after UpLoopback and whether the accept worked.
func proxy(enter func() error, _ sandbox.Policy, _ []string) (string, error) {
	if err := sandbox.UpLoopback(); err != nil {
		return "", fmt.Errorf("failed to bring up loopback: %w", err)
	}
	// Ports 80 and 443 of its own namespace, as the spoke's transparent
	// egress listens (CAP_NET_BIND_SERVICE), then no capability.
	for _, port := range []string{"80", "443"} {
		ln, err := net.Listen("tcp4", "0.0.0.0:"+port)
		if err != nil {
			return "", fmt.Errorf("failed to listen on port %s: %w", port, err)
		}
		defer ln.Close()
	}
	if err := sandbox.DropCapabilities(); err != nil {
		return "", err
	}
	caps, err := capabilitySets()
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("failed to listen: %w", err)
	}
	client, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		return "", fmt.Errorf("failed to connect before Enter: %w", err)
	}
	defer client.Close()
	if err := enter(); err != nil {
		return "", err
	}
	accepted := "accepted"
	if c, err := ln.Accept(); err != nil {
		accepted = "accept failed: " + err.Error()
	} else {
		c.Close()
	}
	_, err = net.Dial("tcp4", ln.Addr().String())
	return caps + "; " + accepted, err
}

// pidNamespace reports, before Enter, the process's pid, the processes its
// /proc shows and the pid_max it reads: "pid 1; processes [1]; pid_max N".
func pidNamespace(enter func() error, _ sandbox.Policy, _ []string) (string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return "", err
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	pidMax, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return "", err
	}
	detail := fmt.Sprintf("pid %d; processes %v; pid_max %s", os.Getpid(), pids, strings.TrimSpace(string(pidMax)))
	return detail, enter()
}

// capsAfterEnter reports the capability sets after Enter, through a
// descriptor opened before (Landlock forbids opening /proc after).
func capsAfterEnter(enter func() error, _ sandbox.Policy, _ []string) (string, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := enter(); err != nil {
		return "", err
	}
	buf := make([]byte, 8192)
	n, err := f.ReadAt(buf, 0)
	if n == 0 {
		return "", err
	}
	return capabilityLines(string(buf[:n])), nil
}

// capabilitySets returns the capability lines of /proc/self/status.
func capabilitySets() (string, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "", err
	}
	return capabilityLines(string(status)), nil
}

func capabilityLines(status string) string {
	var sets []string
	for _, line := range strings.Split(status, "\n") {
		if strings.HasPrefix(line, "CapInh:") || strings.HasPrefix(line, "CapPrm:") || strings.HasPrefix(line, "CapEff:") || strings.HasPrefix(line, "CapAmb:") {
			sets = append(sets, strings.Join(strings.Fields(line), " "))
		}
	}
	return strings.Join(sets, ", ")
}

// statPaths stats (without following a last symlink) each path in a and
// reports, for each, "path=ok size N" or "path=ERRNO": what a spoke learns
// of files it may not read.
func statPaths(a []string) (string, error) {
	var out []string
	for _, path := range a {
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			out = append(out, path+"="+unix.ErrnoName(err.(syscall.Errno)))
			continue
		}
		out = append(out, fmt.Sprintf("%s=ok size %d", path, st.Size))
	}
	return strings.Join(out, "; "), nil
}

// hold is a spoke that stays: Enter, one byte on fd 3, then wait until the
// parent closes its end.
func hold(enter func() error, _ sandbox.Policy, _ []string) (string, error) {
	if err := enter(); err != nil {
		return "", err
	}
	if _, err := unix.Write(iscFD, []byte{1}); err != nil {
		return "", err
	}
	b := make([]byte, 1)
	for {
		n, err := unix.Read(iscFD, b)
		if err == unix.EINTR {
			continue
		}
		if n <= 0 || err != nil {
			return "", nil
		}
	}
}

// shareMounts starts a process in its own mount namespace (with
// PrepareLaunch) or, with args[0] "shared", in the child's, as a spoke
// that forgot PrepareLaunch would, then enters: building a view would move
// that process's root too.
func shareMounts(enter func() error, _ sandbox.Policy, args []string) (string, error) {
	cmd := exec.Command("/bin/sleep", "30")
	if len(args) == 0 || args[0] != "shared" {
		sandbox.PrepareLaunch(cmd)
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	return "", enter()
}
