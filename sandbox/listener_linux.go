//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The parent side of Policy.Notify: a spoke takes its app server's seccomp
// listener and answers every syscall the filter refuses with EPERM, having
// named it, so that a server that dies of a refusal (Node aborts when pipe2
// fails) can be told about by name.

// seccompNotif is struct seccomp_notif.
type seccompNotif struct {
	ID    uint64
	PID   uint32
	Flags uint32
	Data  struct {
		NR   int32
		Arch uint32
		IP   uint64
		Args [6]uint64
	}
}

// seccompNotifResp is struct seccomp_notif_resp.
type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// TakeListener copies descriptor fd of process pid, its seccomp listener
// (Report.Listener), into this process with pidfd_getfd. The process must
// still hold it: it waits for the caller before it executes its program.
func TakeListener(pid, fd int) (*os.File, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("failed to open process %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	l, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return nil, fmt.Errorf("failed to take the seccomp listener of process %d: %w", pid, err)
	}
	unix.CloseOnExec(l)
	return os.NewFile(uintptr(l), "seccomp-listener"), nil
}

// ServeListener answers every notification on l with EPERM, after calling
// refused with the syscall's name, until l fails (its filter's processes
// have all ended, or l is closed). It is what the filter would have done
// without a listener; a syscall is never let through.
func ServeListener(l *os.File, refused func(name string)) {
	fd := l.Fd()
	for {
		var req seccompNotif
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&req))); errno != 0 {
			if errors.Is(errno, unix.EINTR) {
				continue
			}
			return
		}
		refused(SyscallName(req.Data.NR))
		resp := seccompNotifResp{ID: req.ID, Error: -int32(unix.EPERM)}
		// ENOENT: the caller was interrupted or died meanwhile.
		_, _, _ = unix.Syscall(unix.SYS_IOCTL, fd, unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
	}
}
