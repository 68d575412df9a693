//go:build linux && cgo

package sandbox_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
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
