package hostile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// otherProcess reports whether path is under /proc/<pid>/ of a process other
// than this one (the attacks aim at the hub, which is running).
func otherProcess(path string) bool {
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return false
	}
	pid, _, _ := strings.Cut(rest, "/")
	n, err := strconv.Atoi(pid)
	return err == nil && n != os.Getpid()
}

// Each attempt below is written the way a malicious app would write it,
// except that it stops at the first refusal and reports it.

func readFile(path string) Result {
	attack := ReadFile + " " + path
	f, err := os.Open(path)
	if err != nil {
		if otherProcess(path) {
			// In a PID namespace of its own another process has no
			// entry: ENOENT is that namespace's refusal.
			return judge(attack, err, "", unix.EACCES, unix.EPERM, unix.ENOENT)
		}
		return judge(attack, err, "", unix.EACCES, unix.EPERM)
	}
	defer f.Close()
	buf := make([]byte, 64)
	n, err := f.Read(buf)
	if err != nil && !errors.Is(err, io.EOF) {
		// Opening was the breach; some files (/proc/<pid>/mem at offset
		// 0) then refuse the read itself.
		return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("opened; read failed: %v", err)}
	}
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("read %d bytes: %q", n, buf[:n])}
}

func writeFile(path string) Result {
	attack := WriteFile + " " + path
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o666)
	if err != nil {
		return judge(attack, err, "", unix.EACCES, unix.EPERM, unix.EROFS)
	}
	defer f.Close()
	_, err = f.WriteString("hostile was here\n")
	return judge(attack, err, "appended a line", unix.EACCES, unix.EPERM)
}

// dial connects (for UDP: sets the peer) and writes a few bytes.
func dial(ctx context.Context, network, address string) Result {
	attack := "dial" + network + " " + address
	d := net.Dialer{Timeout: 3 * time.Second}
	c, err := d.DialContext(ctx, network, address)
	if err != nil {
		return judge(attack, err, "", unix.EPERM, unix.EACCES)
	}
	defer c.Close()
	// Connecting was the breach, whatever the peer then does.
	detail := fmt.Sprintf("connected from %v and wrote", c.LocalAddr())
	if _, err := c.Write([]byte("hostile\n")); err != nil {
		detail = fmt.Sprintf("connected from %v; write failed: %v", c.LocalAddr(), err)
	}
	return Result{Attack: attack, Outcome: Succeeded, Detail: detail}
}

// resolve asks DNS servers itself, remembering the first error its own
// sockets met: a resolver's error text hides the errno.
func resolve(ctx context.Context, host string) Result {
	attack := Resolve + " " + host
	var mu sync.Mutex
	var dialErr error
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, address)
		mu.Lock()
		if err != nil && dialErr == nil {
			dialErr = err
		}
		mu.Unlock()
		return c, err
	}}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := r.LookupHost(ctx, host)
	if err == nil {
		return Result{Attack: attack, Outcome: Succeeded, Detail: "resolved to " + strings.Join(addrs, ", ")}
	}
	mu.Lock()
	defer mu.Unlock()
	if dialErr != nil {
		return judge(attack, dialErr, "", unix.EPERM, unix.EACCES)
	}
	return judge(attack, err, "")
}

// forkBomb creates processes the way fork(2) does, until refused.
func forkBomb() Result {
	const most = 100
	children := 0
	var errno unix.Errno
	for children < most {
		if _, errno = rawFork(); errno != 0 {
			break
		}
		children++
	}
	if children > 0 {
		return Result{Attack: ForkBomb, Outcome: Succeeded, Detail: fmt.Sprintf("created %d processes", children)}
	}
	return judge(ForkBomb, os.NewSyscallError("clone", errno), "", unix.EPERM)
}

// rawFork is fork(2): clone with no flags but the exit signal. The child
// exits at once, touching nothing, as in syscall.forkAndExecInChild.
//
//go:nosplit
//go:norace
func rawFork() (int, unix.Errno) {
	pid, _, errno := unix.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	if pid == 0 {
		for {
			unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
		}
	}
	return int(pid), 0
}

// execute replaces the spoke with a shell that would create marker.
func execute(program, marker string) Result {
	attack := Execute + " " + program
	argv := []string{program, "-c", "echo hostile > '" + strings.ReplaceAll(marker, "'", "") + "'"}
	err := unix.Exec(program, argv, nil)
	return judge(attack, os.NewSyscallError("execve", err), "", unix.EPERM, unix.EACCES)
}

func ptrace(pid int) Result {
	attack := fmt.Sprintf("%s %d", Ptrace, pid)
	if err := unix.PtraceAttach(pid); err != nil {
		return judge(attack, os.NewSyscallError("ptrace", err), "", unix.EPERM, unix.EACCES)
	}
	_ = unix.PtraceDetach(pid)
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("attached to %d", pid)}
}

// allocate maps n bytes and touches every page, so that success would
// cost real memory, not only address space.
func allocate(n int64) Result {
	attack := fmt.Sprintf("%s %d", Allocate, n)
	mem, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return judge(attack, os.NewSyscallError("mmap", err), "", unix.ENOMEM)
	}
	defer unix.Munmap(mem)
	for i := 0; i < len(mem); i += os.Getpagesize() {
		mem[i] = 1
	}
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("mapped and touched %d bytes", n)}
}

// spin keeps every processor busy and never returns. A spoke starts with
// one Go processor, so it first asks for as many as the machine has.
func spin() {
	runtime.GOMAXPROCS(runtime.NumCPU())
	for range runtime.NumCPU() - 1 {
		go burn()
	}
	burn()
}

func burn() {
	for x := uint64(1); ; x = x*6364136223846793005 + 1 {
	}
}

func bigFile(path string, n int64) Result {
	attack := fmt.Sprintf("%s %s %d", BigFile, path, n)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return judge(attack, err, "", unix.EACCES, unix.EPERM)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	var written int64
	for written < n {
		m, err := f.Write(chunk[:min(int64(len(chunk)), n-written)])
		written += int64(m)
		if err != nil {
			return judge(attack, fmt.Errorf("after %d bytes: %w", written, err), "", unix.EFBIG)
		}
	}
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("wrote %d bytes", written)}
}

func manyFiles(path string, count int) Result {
	attack := fmt.Sprintf("%s %s %d", ManyFiles, path, count)
	fds := make([]int, 0, 1024)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for len(fds) < count {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return judge(attack, fmt.Errorf("after %d opened: %w", len(fds), os.NewSyscallError("open", err)), "", unix.EMFILE)
		}
		fds = append(fds, fd)
	}
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("held %d descriptors at once", len(fds))}
}

// fillDisk writes files of 1 MiB in dir, up to count, until a write is
// refused: the space or the inodes of the scratch (ENOSPC, EDQUOT), or the
// file size limit (EFBIG) bound it.
func fillDisk(dir string, count int) Result {
	attack := fmt.Sprintf("%s %s %d", FillDisk, dir, count)
	chunk := make([]byte, 1<<20)
	var bytes int64
	for i := range count {
		err := os.WriteFile(fmt.Sprintf("%s/fill-%d", dir, i), chunk, 0o600)
		if err != nil {
			return judge(attack, fmt.Errorf("after %d bytes in %d files: %w", bytes, i, err), "", unix.ENOSPC, unix.EDQUOT, unix.EFBIG)
		}
		bytes += int64(len(chunk))
	}
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("wrote %d bytes in %d files", bytes, count)}
}

// iscFD is the spoke's channel to the hub.
const iscFD = 3

// rawChannel readies fd 3 for the attacks that use it straight, bypassing
// the spoke runtime: blocking, as they read and write it, whatever mode
// the runtime left it in (an app may set it, as any descriptor of its own).
func rawChannel(attack string) (Result, bool) {
	if err := unix.SetNonblock(iscFD, false); err != nil {
		return judge(attack, os.NewSyscallError("fcntl", err), ""), false
	}
	return Result{}, true
}

// flood sends frames as fast as it can while draining the hub's replies,
// so that nothing slows it but the hub's rate limit.
func flood(frames int) Result {
	if res, ok := rawChannel(fmt.Sprintf("%s %d", Flood, frames)); !ok {
		return res
	}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := unix.Read(iscFD, buf); err != nil {
				return
			}
		}
	}()
	return sendFrames(Flood, frames)
}

// stall sends frames and never reads a reply, so that the hub's replies
// fill the channel and a hub without a deadline on them waits forever.
func stall(frames int) Result { return sendFrames(Stall, frames) }

// sendFrames writes valid request frames (length-prefixed JSON, as the ISC
// protocol has them) straight onto fd 3, bypassing the spoke runtime.
func sendFrames(function string, frames int) Result {
	attack := fmt.Sprintf("%s %d", function, frames)
	if res, ok := rawChannel(attack); !ok {
		return res
	}
	start := time.Now()
	for i := range frames {
		body := fmt.Appendf(nil, `{"v":1,"kind":"data","id":%d,"body":{"op":"get","collection":"flood","id":"x"}}`, 1<<40+i)
		if err := writeFrame(body); err != nil {
			return judge(attack, fmt.Errorf("after %d frames: %w", i, err), "", unix.EPIPE, unix.ECONNRESET)
		}
	}
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("sent %d frames in %v", frames, time.Since(start).Round(time.Millisecond))}
}
