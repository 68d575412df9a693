//go:build linux

package sbxtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/secgpt/secgpt/sandbox"
)

// NoEnter in place of the policy argument runs the attempt without Enter,
// for the unsandboxed baseline of the benchmarks.
const NoEnter = "-"

// SparePrefix before the policy argument makes the child a spare (see
// Child.Spare): the argument is the spare's policy, and the child's own
// comes on fd 4.
const SparePrefix = "spare:"

// iscFD is the connected socket a spoke gets from its parent.
const iscFD = 3

// attempt does one thing after (or around) Enter. enter applies the
// sandbox; most attempts call it first.
type attempt func(enter func() error, p sandbox.Policy, args []string) (detail string, err error)

// errEnter marks an error of Enter itself, not of the attempt.
type errEnter struct{ err error }

func (e errEnter) Error() string { return e.err.Error() }

// attempts is the child's catalog, by name.
var attempts = map[string]attempt{
	"ready":         ready,
	"proxy":         proxy,
	"caps":          capsAfterEnter,
	"read":          entered(func(a []string) (string, error) { b, err := os.ReadFile(a[0]); return strconv.Itoa(len(b)), err }),
	"write":         entered(func(a []string) (string, error) { return "", os.WriteFile(a[0], []byte("x"), 0o600) }),
	"socket":        entered(socket),
	"unix_connect":  entered(unixConnect),
	"unix_sendto":   entered(unixSendto),
	"fork_exec":     entered(forkExec),
	"exec":          execDeclared,
	"clone_process": entered(cloneProcess),
	"ptrace_attach": entered(func(a []string) (string, error) { return "", unix.PtraceAttach(atoi(a[0])) }),
	"mmap":          entered(mmap),
	"alloc":         entered(alloc),
	"spin":          entered(spin),
	"write_size":    entered(writeSize),
	"fill":          entered(fill),
	"open_many":     entered(openMany),
	"keyctl":        entered(rawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, 0)),
	"bpf":           entered(rawSyscall(unix.SYS_BPF, unix.BPF_MAP_CREATE, 0)),
	"mount":         entered(func([]string) (string, error) { return "", unix.Mount("none", "/mnt", "tmpfs", 0, "") }),
	"unshare":       entered(func([]string) (string, error) { return "", unix.Unshare(unix.CLONE_NEWNS) }),
	"threads":       threads,
	"env":           entered(env),
	"procs":         entered(func([]string) (string, error) { return strconv.Itoa(runtime.GOMAXPROCS(0)), nil }),
	"fds":           fds,
	"workload":      entered(workload),
	"ids":           ids,
	"enter_time":    enterTime,
	"pid_namespace": pidNamespace,
	"stat":          entered(statPaths),
	"hold":          hold,
	"share_mounts":  shareMounts,
}

// Main is the child program: args are the encoded policy (or NoEnter), the
// attempt and its arguments. It writes one Result as JSON on stdout and
// returns the exit code.
func Main() int {
	// As a spoke does, first thing (see sandbox.SetUpNamespaces).
	if err := sandbox.SetUpNamespaces(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: sbxchild <policy|-> <attempt> [args...]")
		return 2
	}
	try, ok := attempts[os.Args[2]]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown attempt %q\n", os.Args[2])
		return 2
	}
	var res Result
	var p sandbox.Policy
	enter := func() error { return nil }
	if spareText, ok := strings.CutPrefix(os.Args[1], SparePrefix); ok {
		var sp *sandbox.Spare
		var err error
		if sp, p, err = spare(spareText); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		enter = func() error {
			rep, err := sp.Enter(p)
			res.Report = rep
			if err != nil {
				return errEnter{err}
			}
			return nil
		}
	} else if os.Args[1] != NoEnter {
		var err error
		if p, err = sandbox.DecodePolicy(os.Args[1]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		enter = func() error {
			rep, err := sandbox.Enter(p)
			res.Report = rep
			if err != nil {
				return errEnter{err}
			}
			return nil
		}
	}
	detail, err := try(enter, p, os.Args[3:])
	res.Detail = detail
	var ee errEnter
	var errno syscall.Errno
	switch {
	case errors.As(err, &ee):
		res.EnterError = ee.Error()
	case errors.As(err, &errno):
		res.Error, res.Errno = err.Error(), unix.ErrnoName(errno)
	case err != nil:
		res.Error = err.Error()
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 1
	}
	if res.EnterError != "" {
		return 3
	}
	return 0
}

// spare applies sandbox.EnterSpare under the spare's policy (encoded in
// spareText), then reads the child's own policy on fd 4, as a spare spoke
// does.
func spare(spareText string) (*sandbox.Spare, sandbox.Policy, error) {
	sparePolicy, err := sandbox.DecodePolicy(spareText)
	if err != nil {
		return nil, sandbox.Policy{}, err
	}
	sp, err := sandbox.EnterSpare(sparePolicy)
	if err != nil {
		return nil, sandbox.Policy{}, fmt.Errorf("failed to enter as a spare: %w", err)
	}
	launch := os.NewFile(4, "launch")
	b, err := io.ReadAll(launch)
	launch.Close()
	if err != nil {
		return nil, sandbox.Policy{}, fmt.Errorf("failed to read the policy: %w", err)
	}
	p, err := sandbox.DecodePolicy(string(b))
	return sp, p, err
}

// entered runs f after Enter.
func entered(f func(args []string) (string, error)) attempt {
	return func(enter func() error, _ sandbox.Policy, args []string) (string, error) {
		if err := enter(); err != nil {
			return "", err
		}
		return f(args)
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
