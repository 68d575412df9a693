//go:build linux && cgo

package sandbox_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/sandbox/sbxtest"
)

// The tests below look at a spoke made from a spare from the outside, as
// the kernel holds it, beside one started directly under the same policy:
// every thread's no_new_privs, capabilities and seccomp state, its seccomp
// program, and what its Landlock domain lets it open. A spare applies
// part of its sandbox before its claim (sandbox.EnterSpare); the spoke it
// becomes must hold no less.

// spareBuilds are the child's builds: with libseccomp (cgo), and without
// (no seccomp: only a policy with AllowWeaker runs, and libpsx reaches the
// threads through the Go runtime).
var spareBuilds = []struct {
	name  string
	noCgo bool
}{
	{"cgo", false},
	{"no cgo, weaker sandbox allowed", true},
}

func spareParityPolicy(t *testing.T, noCgo bool) sandbox.Policy {
	t.Helper()
	p := strictPolicy(t)
	p.Namespaces = true
	p.AllowWeaker = noCgo
	return p
}

// held starts the attempt "hold" (Enter, one byte on fd 3, then wait for
// fd 3 to close) directly or from a spare, as sbxtest.Run does, and returns
// its pid once it is confined, with the function that ends it.
func held(t *testing.T, p sandbox.Policy, spare, noCgo bool) (int, func()) {
	t.Helper()
	bin := sbxtest.ChildBinary(t)
	if noCgo {
		bin = sbxtest.ChildBinaryNoCgo(t)
	}
	prepared := p
	arg, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if spare {
		prepared = sandbox.Policy{Profile: sandbox.ProfileStrict, Namespaces: p.Namespaces, AllowWeaker: p.AllowWeaker, Cgroup: p.Cgroup}
		s, err := prepared.Encode()
		if err != nil {
			t.Fatal(err)
		}
		arg = sbxtest.SparePrefix + s
	}
	cmd := exec.Command(bin, arg, "hold")
	if err := sandbox.Prepare(cmd, prepared); err != nil {
		t.Fatal(err)
	}
	parent, child, err := sbxtest.SocketPair()
	if err != nil {
		sandbox.Release(cmd)
		t.Fatal(err)
	}
	cmd.ExtraFiles = []*os.File{child}
	if spare {
		uid, gid := sandbox.SpokeIDs(cmd)
		if err := sandbox.PrepareScratchFor(p, uid, gid); err != nil {
			sandbox.Release(cmd)
			t.Fatal(err)
		}
		r, w, err := os.Pipe()
		if err != nil {
			sandbox.Release(cmd)
			t.Fatal(err)
		}
		defer r.Close()
		_, err = w.WriteString(mustEncode(t, p))
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			sandbox.Release(cmd)
			t.Fatal(err)
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		child.Close()
		sandbox.Release(cmd)
		t.Fatal(err)
	}
	child.Close()
	stop := func() {
		parent.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		sandbox.Release(cmd)
	}
	_ = parent.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := parent.Read(make([]byte, 1)); err != nil {
		stop()
		t.Fatalf("child (spare %v) not ready: %v: %s", spare, err, out.String())
	}
	return cmd.Process.Pid, stop
}

func mustEncode(t *testing.T, p sandbox.Policy) string {
	t.Helper()
	s, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// threadStates returns, for each thread of pid, its status lines named,
// the distinct ones sorted.
func threadStates(t *testing.T, pid int, names ...string) []string {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for _, line := range strings.Split(string(b), "\n") {
			if name, _, ok := strings.Cut(line, ":"); ok && slices.Contains(names, name) {
				kept = append(kept, strings.Join(strings.Fields(line), " "))
			}
		}
		out = append(out, strings.Join(kept, "; "))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestSpareThreadsAsDirect checks that every thread of a spoke made from
// a spare has no_new_privs, no capability and the seccomp state of a
// spoke started directly, with and without libseccomp: the report says
// "no_new_privs on (all threads)" for both.
func TestSpareThreadsAsDirect(t *testing.T) {
	requireView(t)
	fields := []string{"NoNewPrivs", "Seccomp", "Seccomp_filters", "CapInh", "CapPrm", "CapEff", "CapAmb"}
	for _, b := range spareBuilds {
		t.Run(b.name, func(t *testing.T) {
			pid, stop := held(t, spareParityPolicy(t, b.noCgo), false, b.noCgo)
			direct := threadStates(t, pid, fields...)
			stop()
			pid, stop = held(t, spareParityPolicy(t, b.noCgo), true, b.noCgo)
			spare := threadStates(t, pid, fields...)
			stop()
			if len(direct) != 1 || !strings.Contains(direct[0], "NoNewPrivs: 1") {
				t.Fatalf("a spoke started directly has threads %q, want all alike with no_new_privs", direct)
			}
			if !slices.Equal(spare, direct) {
				t.Errorf("the threads of a spoke made from a spare are %q, a direct spoke's %q", spare, direct)
			}
		})
	}
}

// TestSpareSeccompProgramAsDirect checks that the seccomp program a spare
// compiled before its claim and loaded itself is, byte for byte, the one
// libseccomp loads in a spoke started directly, with the same flags.
func TestSpareSeccompProgramAsDirect(t *testing.T) {
	requireView(t)
	sbxtest.RequireRoot(t)
	var progs [2][]byte
	var flags [2]uint64
	for i, spare := range []bool{false, true} {
		pid, stop := held(t, spareParityPolicy(t, false), spare, false)
		progs[i], flags[i] = seccompProgram(t, pid)
		stop()
	}
	if len(progs[0]) == 0 || !bytes.Equal(progs[0], progs[1]) || flags[0] != flags[1] {
		t.Errorf("seccomp program from a spare: %d bytes, flags %#x; directly: %d bytes, flags %#x; equal %v",
			len(progs[1]), flags[1], len(progs[0]), flags[0], bytes.Equal(progs[0], progs[1]))
	}
}

// seccompProgram returns the first seccomp program of pid and its flags
// (PTRACE_SECCOMP_GET_FILTER and _GET_METADATA: root, tracee stopped).
func seccompProgram(t *testing.T, pid int) ([]byte, uint64) {
	t.Helper()
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := unix.PtraceAttach(pid); err != nil {
		t.Fatalf("failed to attach to %d: %v", pid, err)
	}
	defer unix.PtraceDetach(pid)
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		t.Fatal(err)
	}
	n, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), 0, 0, 0, 0)
	if errno != 0 || n == 0 {
		t.Fatalf("failed to get the seccomp program's length: %d, %v", n, errno)
	}
	prog := make([]unix.SockFilter, n)
	if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), 0, uintptr(unsafe.Pointer(&prog[0])), 0, 0); errno != 0 {
		t.Fatalf("failed to get the seccomp program: %v", errno)
	}
	const getMetadata = 0x420d // PTRACE_SECCOMP_GET_METADATA
	md := [2]uint64{}          // filter_off, flags
	if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, getMetadata, uintptr(pid), unsafe.Sizeof(md), uintptr(unsafe.Pointer(&md[0])), 0, 0); errno != 0 {
		t.Fatalf("failed to get the seccomp program's flags: %v", errno)
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), len(prog)*int(unsafe.Sizeof(prog[0]))), md[1]
}

// TestSpareLandlockAsDirect checks that a spare's Landlock ruleset, made
// before its claim, lets the spoke open no more than a direct spoke's:
// the directory of its threads, which only the C libpsx lists after each
// Landlock round, is not for a spoke built without it.
func TestSpareLandlockAsDirect(t *testing.T) {
	requireView(t)
	for _, b := range spareBuilds {
		t.Run(b.name, func(t *testing.T) {
			for _, path := range []string{"/proc/1/task", "/proc/1/task/1/fd"} {
				var errnos [2]string
				for i, spare := range []bool{false, true} {
					out := sbxtest.Run(t, sbxtest.Child{Policy: spareParityPolicy(t, b.noCgo), Attempt: "read", Args: []string{path}, Spare: spare, NoCgo: b.noCgo})
					if out.EnterError != "" {
						t.Fatalf("Enter (spare %v) failed: %s", spare, out.EnterError)
					}
					errnos[i] = out.Errno
				}
				if errnos[0] != errnos[1] {
					t.Errorf("open %s: from a spare %s, directly %s", path, errnos[1], errnos[0])
				}
			}
		})
	}
}
