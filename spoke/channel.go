package spoke

import (
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// rawChannel is the spoke's end of the ISC socket, read and written with
// raw system calls while the runtime's poller does the waiting.
//
// Why: a system call made the usual way (os.File.Read) tells the Go
// scheduler it may block, and the first one after the spoke has been idle
// wakes the runtime's monitor thread (sysmon), which then polls every
// 20 µs for a millisecond and more, and takes the spoke's P away from a
// call that a busy machine has not let finish within 20 µs. In a burst
// (100 users' warm queries on 2 CPUs) that polling was 23 % of the
// spokes' CPU samples (perf), and the spokes' context switches per query
// fell from 16–28 to 5–8 without it (secgpt bench --sweep-only); a lone
// spoke on a quiet machine sees no difference (BenchmarkWarmStepCPU). The
// socket is non-blocking, so a read or write returns at once (EAGAIN when
// it would wait, and then the poller parks the goroutine): nothing here
// can hold a thread.
//
// The hub reads and writes its end the same way (see rawSocket): there the
// monitor's polling costs the hub, which serves a hundred spokes at once.
type rawChannel struct {
	rc syscall.RawConn
}

// newRawChannel wraps a non-blocking socket.
func newRawChannel(c syscall.Conn) (*rawChannel, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("failed to reach the ISC socket: %w", err)
	}
	return &rawChannel{rc: rc}, nil
}

// rawSocket is c read and written as a rawChannel when it is a Unix
// socket of the net package, which is always non-blocking and in the
// poller (its deadlines and Close apply to raw reads and writes too), and
// c itself otherwise.
func rawSocket[T any](c T) T {
	if u, ok := any(c).(*net.UnixConn); ok {
		if raw, err := newRawChannel(u); err == nil {
			if t, ok := any(raw).(T); ok {
				return t
			}
		}
	}
	return c
}

// Read reads what is there, waiting in the poller while nothing is.
func (c *rawChannel) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			}
			n, errno = int(r), e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, &os.SyscallError{Syscall: "read", Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p, waiting in the poller while the socket is full.
func (c *rawChannel) Write(p []byte) (int, error) {
	done := 0
	var errno syscall.Errno
	err := c.rc.Write(func(fd uintptr) bool {
		for done < len(p) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[done])), uintptr(len(p)-done))
			switch e {
			case 0:
				done += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return done, err
	case errno != 0:
		return done, &os.SyscallError{Syscall: "write", Err: errno}
	case done < len(p):
		return done, io.ErrShortWrite
	}
	return done, nil
}
