//go:build linux && cgo

package sandbox_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/sandbox/sbxtest"
)

// runtime is one real interpreter the exec profile must run.
type runtime struct {
	name   string
	path   string // its ELF executable, reachable by the spoke's uid
	script string // the workload in testdata
}

// runtimes are the interpreters of this machine (and Node 24 from
// SECGPT_NODE24), each skipped with its reason when missing.
func runtimes(t *testing.T) []runtime {
	t.Helper()
	var rs []runtime
	if node, err := exec.LookPath("node"); err == nil {
		rs = append(rs, runtime{"node20", resolved(t, node), "workload.js"})
	} else {
		t.Logf("node not in PATH: %v", err)
	}
	if n24 := sbxtest.Node24(t); n24 != "" {
		rs = append(rs, runtime{"node24", n24, "workload.js"})
	}
	if py := sbxtest.Python(t); py != "" {
		rs = append(rs, runtime{"python", py, "workload.py"})
	}
	return rs
}

func resolved(t *testing.T, path string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// execPolicy is an exec-profile policy for program with a fresh scratch
// directory and script readable.
func execPolicy(t *testing.T, program string, readOnly ...string) sandbox.Policy {
	t.Helper()
	p := strictPolicy(t)
	p.Profile = sandbox.ProfileExec
	p.ExecPath = program
	p.ReadOnly = append(p.ReadOnly, readOnly...)
	// As an external app's server runs: in its spoke's namespaces, where
	// it sees only its own view.
	p.Namespaces = true
	return p
}

// script copies testdata/name where the spoke's uid can read it.
func script(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(sbxtest.Dir(t), name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRuntimesUnderExec runs Node 20, Node 24 and CPython doing an
// ordinary server's work (files: mkdir, write, fsync, rename, chmod, utime,
// locks, unlink, rmdir; pipes, threads, signals, event loops, uname) under
// the exec profile: every step must succeed but starting another program.
func TestRuntimesUnderExec(t *testing.T) {
	sbxtest.RequireFull(t)
	for _, rt := range runtimes(t) {
		t.Run(rt.name, func(t *testing.T) {
			s := script(t, rt.script)
			p := execPolicy(t, rt.path, s)
			cg := sbxtest.RequireCgroup(t, p.Limits.WithDefaults(p.Profile))
			p.Cgroup = true
			out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "exec", Args: []string{rt.path, s, p.Scratch}, Cgroup: cg})
			steps := lastJSON(t, out)
			if len(steps) == 0 {
				t.Fatalf("%s wrote no result: exit %d signal %v\nstdout: %s\nstderr: %s", rt.name, out.ExitCode, out.Signal, out.Stdout, tail(out.Stderr))
			}
			// A step ending in _refused reports "ok" when the sandbox
			// refused it (starting /bin/true).
			for step, got := range steps {
				if got != "ok" {
					t.Errorf("%s: step %s: %s", rt.name, step, got)
				}
			}
		})
	}
}

// lastJSON decodes the last line of the child's stdout as a map of step
// results.
func lastJSON(t *testing.T, out sbxtest.Outcome) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil {
		return nil
	}
	return m
}

// TestMemoryBound: an interpreter that allocates past its cgroup's memory
// bound is killed by the kernel, and the cgroup counts the kill; below the
// bound the same allocation succeeds.
func TestMemoryBound(t *testing.T) {
	sbxtest.RequireFull(t)
	py := sbxtest.Python(t)
	if py == "" {
		t.Skip("no CPython on this machine")
	}
	for _, tt := range []struct {
		name   string
		memory uint64
		killed bool
	}{
		{"over the bound", 64 << 20, true},
		{"under the bound", 512 << 20, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := execPolicy(t, py)
			p.Limits.Memory = tt.memory
			p.Cgroup = true
			cg := sbxtest.RequireCgroup(t, p.Limits.WithDefaults(p.Profile))
			code := "b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096]); print('allocated')"
			out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "exec", Args: []string{py, "-c", code}, Cgroup: cg})
			killed := out.Signal == syscall.SIGKILL
			if killed != tt.killed || (killed && cg.OOMKills() == 0) {
				t.Fatalf("killed %v (signal %v, oom kills %d), want %v\nstdout: %s\nstderr: %s", killed, out.Signal, cg.OOMKills(), tt.killed, out.Stdout, tail(out.Stderr))
			}
		})
	}
}

// TestRefusedClassesFromPython makes, from CPython under the exec profile,
// one syscall of each class of kernel attack surface the filter refuses,
// through ctypes, each in a fresh process: it must fail with the errno the
// table gives, or the process must die of SIGSYS.
func TestRefusedClassesFromPython(t *testing.T) {
	sbxtest.RequireFull(t)
	if goruntime.GOARCH != "amd64" {
		t.Skip("the snippets use x86-64 syscall numbers")
	}
	py := sbxtest.Python(t)
	if py == "" {
		t.Skip("no CPython on this machine")
	}
	const cloneNewUser = 0x10000000
	tests := []struct {
		class string
		nr    int
		args  string
		errno string // "" means killed by SIGSYS
	}{
		{"io_uring", 425, "8, 0", "ENOSYS"},
		{"bpf", 321, "0, 0, 0", ""},
		{"userfaultfd", 323, "0", ""},
		{"keyctl", 250, "0, 0", ""},
		{"ptrace", 101, "16, 1", ""},
		{"process_vm_readv", 310, "1, 0, 0, 0, 0, 0", ""},
		{"mount", 165, "0, 0, 0, 0, 0", ""},
		{"unshare", 272, fmt.Sprint(cloneNewUser), ""},
		{"setns", 308, "0, 0", ""},
		{"clone into a namespace", 56, fmt.Sprint(cloneNewUser), "EPERM"},
		{"perf_event_open", 298, "0, 0, -1, -1, 0", ""},
		{"kexec_load", 246, "0, 0, 0, 0", ""},
		{"init_module", 175, "0, 0, 0", ""},
		{"personality", 135, "0xffffffff", "EPERM"},
		{"fork", 57, "", "EPERM"},
		{"execveat", 322, "-100, 0, 0, 0, 0", "EPERM"},
	}
	for _, tt := range tests {
		t.Run(tt.class, func(t *testing.T) {
			code := fmt.Sprintf("import ctypes, errno, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"+
				"r = libc.syscall(%d%s)\nprint('refused', errno.errorcode.get(ctypes.get_errno(), '?') if r < 0 else 'allowed', flush=True)\n",
				tt.nr, prefixComma(tt.args))
			p := execPolicy(t, py)
			out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "exec", Args: []string{py, "-c", code}})
			switch {
			case tt.errno == "":
				if out.Signal != syscall.SIGSYS {
					t.Fatalf("want killed by SIGSYS, got exit %d signal %v\nstdout: %s\nstderr: %s", out.ExitCode, out.Signal, out.Stdout, tail(out.Stderr))
				}
			case !strings.Contains(out.Stdout, "refused "+tt.errno):
				t.Fatalf("want refused with %s, got %q (exit %d, signal %v)\nstderr: %s", tt.errno, out.Stdout, out.ExitCode, out.Signal, tail(out.Stderr))
			}
		})
	}
}

func prefixComma(args string) string {
	if args == "" {
		return ""
	}
	return ", " + args
}
