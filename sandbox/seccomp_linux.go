//go:build linux && cgo

package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"unsafe"

	seccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// minSeccompAPI is the libseccomp API level this package needs: 2 for
// SECCOMP_FILTER_FLAG_TSYNC (without it the filter would cover only the
// calling thread, and libseccomp-golang would silently load it so) and 3 for
// SECCOMP_RET_KILL_PROCESS.
const minSeccompAPI = 3

// notifyAPI is the libseccomp API level that a filter with a listener
// needs: level 6 is the kernel's TSYNC_ESRCH, without which a listener
// cannot be combined with TSYNC.
const notifyAPI = 6

// defaultAction is what the filter does for a syscall no rule allows.
var defaultAction = seccomp.ActErrno.SetReturnCode(int16(unix.EPERM))

// defaultActionName is defaultAction in the report's words.
const defaultActionName = "default EPERM"

// seccompSupport reports whether this build and kernel can load the filter.
func seccompSupport() (bool, string) {
	if runtime.GOARCH == "s390x" {
		// clone takes the stack first there: the thread-only rule would
		// test the stack pointer, not the flags.
		return false, "the filter's clone rule does not fit s390x's argument order"
	}
	major, minor, micro := seccomp.GetLibraryVersion()
	lib := fmt.Sprintf("libseccomp %d.%d.%d", major, minor, micro)
	api, err := seccomp.GetAPI()
	if err != nil {
		return false, fmt.Sprintf("%s: %v", lib, err)
	}
	if api < minSeccompAPI {
		return false, fmt.Sprintf("%s: kernel API level %d, need %d (thread sync and kill-process)", lib, api, minSeccompAPI)
	}
	return true, fmt.Sprintf("%s, API level %d", lib, api)
}

// installSeccomp loads the filter of profile p into every thread of the
// process (TSYNC). It must run last in Enter: after it, even Landlock could
// no longer be set up. With notify, a syscall no rule allows goes to a
// listener, whose close-on-exec descriptor it returns (see Listen), instead
// of failing at once with EPERM; otherwise it returns -1.
func installSeccomp(p Profile, notify bool) (string, int, error) {
	if ok, detail := seccompSupport(); !ok {
		return "", -1, errors.New(detail)
	}
	def, what := defaultAction, defaultActionName
	if notify {
		if api, err := seccomp.GetAPI(); err != nil || api < notifyAPI {
			// The syscall still fails with EPERM; only its name is lost.
			notify = false
			what = fmt.Sprintf("default EPERM (refusals not named: libseccomp API level %d, need %d)", api, notifyAPI)
		}
	}
	if notify {
		def, what = seccomp.ActNotify, "default EPERM through a listener that names the syscall"
	}
	filter, n, err := buildFilter(p, unix.Getpid(), def)
	if err != nil {
		return "", -1, err
	}
	defer filter.Release()
	if err := filter.Load(); err != nil {
		return "", -1, fmt.Errorf("failed to load seccomp filter: %w", err)
	}
	listener := -1
	if notify {
		fd, err := filter.GetNotifFd()
		if err != nil {
			return "", -1, fmt.Errorf("failed to get the seccomp listener: %w", err)
		}
		// A copy of our own: Release may close libseccomp's.
		if listener, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0); err != nil {
			return "", -1, fmt.Errorf("failed to keep the seccomp listener: %w", err)
		}
	}
	return seccompDetail(n, what), listener, nil
}

// seccompDetail describes a loaded filter of n rules for the report, the
// same whether it was built at once or compiled ahead (compiledFilter).
func seccompDetail(n int, action string) string {
	return fmt.Sprintf("%d rules, %s, other architectures killed", n, action)
}

// compiledFilter is the filter of a profile compiled to BPF ahead of need
// (by a spare, before it is claimed), so that loading it is one syscall.
type compiledFilter struct {
	profile Profile
	rules   int
	prog    []unix.SockFilter
}

// compileFilter compiles the filter of profile p, without a listener, for
// process pid, as installSeccomp would load it.
func compileFilter(p Profile, pid int) (*compiledFilter, error) {
	filter, n, err := buildFilter(p, pid, defaultAction)
	if err != nil {
		return nil, err
	}
	defer filter.Release()
	fd, err := unix.MemfdCreate("secgpt-seccomp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("failed to make room for the seccomp filter: %w", err)
	}
	f := os.NewFile(uintptr(fd), "secgpt-seccomp")
	defer f.Close()
	if err := filter.ExportBPF(f); err != nil {
		return nil, fmt.Errorf("failed to compile the seccomp filter: %w", err)
	}
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("failed to read the compiled seccomp filter: %w", err)
	}
	const insn = int(unsafe.Sizeof(unix.SockFilter{}))
	if len(b) == 0 || len(b)%insn != 0 || len(b)/insn > bpfMaxInsns {
		return nil, fmt.Errorf("failed to compile the seccomp filter: %d bytes of BPF", len(b))
	}
	prog := make([]unix.SockFilter, len(b)/insn)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), len(b)), b)
	return &compiledFilter{profile: p, rules: n, prog: prog}, nil
}

// bpfMaxInsns is the kernel's BPF_MAXINSNS, the longest filter it loads.
const bpfMaxInsns = 4096

// load loads f into every thread of the process, as libseccomp's load of
// the same filter does (libseccomp 2.5: seccomp(SECCOMP_SET_MODE_FILTER)
// with SECCOMP_FILTER_FLAG_TSYNC only, no_new_privs set before, which Enter
// did). With TSYNC the kernel returns the id of a thread it could not
// synchronise; the filter is then on no thread.
func (f *compiledFilter) load() (string, error) {
	prog := unix.SockFprog{Len: uint16(len(f.prog)), Filter: &f.prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(f)
	switch {
	case errno != 0:
		return "", fmt.Errorf("failed to load seccomp filter: %w", errno)
	case r != 0:
		return "", fmt.Errorf("failed to load seccomp filter: thread %d could not be synchronised", r)
	}
	return seccompDetail(f.rules, defaultActionName), nil
}

// SyscallName names the syscall numbered nr on this architecture.
func SyscallName(nr int32) string {
	name, err := seccomp.ScmpSyscall(nr).GetName()
	if err != nil {
		return fmt.Sprintf("syscall %d", nr)
	}
	return name
}

// buildFilter turns the table into a libseccomp filter for profile p. pid
// replaces selfPID in conditions. It returns the number of rules added.
func buildFilter(p Profile, pid int, def seccomp.ScmpAction) (*seccomp.ScmpFilter, int, error) {
	filter, err := seccomp.NewFilter(def)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to create seccomp filter: %w", err)
	}
	// x32 and i386 system calls take other numbers: kill them rather than
	// let a second table through.
	if err := filter.SetBadArchAction(seccomp.ActKillProcess); err != nil {
		filter.Release()
		return nil, 0, fmt.Errorf("failed to set seccomp bad-arch action: %w", err)
	}
	n := 0
	for _, r := range tableFor(p) {
		if err := addRule(filter, r, pid); err != nil {
			filter.Release()
			return nil, 0, err
		}
		n++
	}
	return filter, n, nil
}

// tableFor returns the rules of the table that apply in profile p.
func tableFor(p Profile) []rule {
	var out []rule
	for _, table := range [][]rule{genericRules, archRules} {
		for _, r := range table {
			if r.Profiles.has(p) {
				out = append(out, r)
			}
		}
	}
	return out
}

func addRule(filter *seccomp.ScmpFilter, r rule, pid int) error {
	call, err := seccomp.GetSyscallFromName(r.Name)
	if err != nil {
		return fmt.Errorf("failed to resolve syscall %s: %w", r.Name, err)
	}
	var act seccomp.ScmpAction
	switch r.Action {
	case actAllow:
		act = seccomp.ActAllow
	case actKill:
		act = seccomp.ActKillProcess
	case actENOSYS:
		act = seccomp.ActErrno.SetReturnCode(int16(unix.ENOSYS))
	default:
		return fmt.Errorf("seccomp rule %s: unknown action %d", r.Name, r.Action)
	}
	if len(r.When) == 0 {
		if err := filter.AddRule(call, act); err != nil {
			return fmt.Errorf("failed to add seccomp rule %s: %w", r.Name, err)
		}
		return nil
	}
	conds := make([]seccomp.ScmpCondition, 0, len(r.When))
	for _, c := range r.When {
		value := c.Value
		if value == selfPID {
			value = uint64(pid)
		}
		var sc seccomp.ScmpCondition
		switch c.Op {
		case opEq:
			sc, err = seccomp.MakeCondition(c.Arg, seccomp.CompareEqual, value)
		case opMaskedEq:
			// libseccomp's masked-equal takes the mask first.
			sc, err = seccomp.MakeCondition(c.Arg, seccomp.CompareMaskedEqual, c.Mask, value)
		default:
			err = fmt.Errorf("unknown comparison %d", c.Op)
		}
		if err != nil {
			return fmt.Errorf("failed to make seccomp condition for %s: %w", r.Name, err)
		}
		conds = append(conds, sc)
	}
	if err := filter.AddRuleConditional(call, act, conds); err != nil {
		return fmt.Errorf("failed to add seccomp rule %s: %w", r.Name, err)
	}
	return nil
}
