//go:build linux

// Package sbxtest runs sandboxed child processes for tests: a child program
// (sbxchild) that calls sandbox.Enter first, then makes one named attempt
// (read a file, open a socket, fork, …) and reports the result as one JSON
// line on stdout, so the parent test can assert what the sandbox allowed.
//
// The child is a separate program built once per test process without the
// race detector, not the test binary re-executed: a race-enabled binary
// reserves terabytes of shadow memory (no RLIMIT_AS can be tested) and makes
// syscalls a production spoke never makes. It is built into a directory that
// uid 65534 can enter, because a root hub runs spokes as 65534.
//
// This package must never be imported by production code.
package sbxtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/secgpt/secgpt/sandbox"
)

const childPackage = "github.com/secgpt/secgpt/sandbox/sbxtest/sbxchild"

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]string{}
)

// binDir returns a directory for built programs that every uid may enter.
func binDir() (string, error) {
	if buildDir != "" {
		return buildDir, nil
	}
	dir, err := os.MkdirTemp("", "sbxtest-bin-")
	if err != nil {
		return "", fmt.Errorf("failed to create build directory: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", fmt.Errorf("failed to chmod build directory: %w", err)
	}
	buildDir = dir
	return dir, nil
}

// buildOnce runs build for name once per process and returns the program's
// path.
func buildOnce(tb testing.TB, name string, build func(out string) *exec.Cmd) string {
	tb.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if path, ok := built[name]; ok {
		return path
	}
	dir, err := binDir()
	if err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(dir, name)
	cmd := build(out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("failed to build %s: %v\n%s", name, err, msg)
	}
	built[name] = out
	return out
}

// ChildBinary builds sbxchild (once per process) and returns its path.
func ChildBinary(tb testing.TB) string {
	tb.Helper()
	return buildOnce(tb, "sbxchild", func(out string) *exec.Cmd {
		goTool, err := exec.LookPath("go")
		if err != nil {
			tb.Skipf("go tool not in PATH, cannot build the child: %v", err)
		}
		cmd := exec.Command(goTool, "build", "-o", out, childPackage)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		return cmd
	})
}

// ChildBinaryNoCgo builds sbxchild without cgo (once per process) and
// returns its path: no libseccomp, so only a policy with AllowWeaker runs
// there, and libpsx's Go fallback (the runtime's AllThreadsSyscall)
// reaches the threads.
func ChildBinaryNoCgo(tb testing.TB) string {
	tb.Helper()
	return buildOnce(tb, "sbxchild-nocgo", func(out string) *exec.Cmd {
		goTool, err := exec.LookPath("go")
		if err != nil {
			tb.Skipf("go tool not in PATH, cannot build the child: %v", err)
		}
		cmd := exec.Command(goTool, "build", "-o", out, childPackage)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		return cmd
	})
}

// execHelperSource is the program the exec-profile tests run as ExecPath.
// Started once, it reports what it can do under the inherited sandbox, then
// re-executes itself (the one exec Landlock still allows) with "again".
const execHelperSource = `#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static void report(const char *step, long r) {
	printf("{\"step\":\"%s\",\"ok\":%s,\"errno\":%d}\n", step, r < 0 ? "false" : "true", r < 0 ? errno : 0);
	fflush(stdout);
}

int main(int argc, char **argv) {
	char *envp[] = {NULL};
	char *true_argv[] = {"true", NULL};
	char *again_argv[] = {argv[0], "again", NULL};
	if (argc > 1 && strcmp(argv[1], "again") == 0) {
		report("reexec_self", 0);
		return 0;
	}
	report("started", 0);
	report("open_shadow", open("/etc/shadow", O_RDONLY));
	report("socket_inet", socket(AF_INET, SOCK_STREAM, 0));
	pid_t pid = fork();
	if (pid == 0)
		_exit(0);
	report("fork", pid);
	report("execve_true", execve("/bin/true", true_argv, envp));
	report("execveat_true", syscall(SYS_execveat, AT_FDCWD, "/bin/true", true_argv, envp, 0));
	report("execve_sh", execve("/bin/sh", true_argv, envp));
	execve("/proc/self/exe", again_argv, envp);
	report("reexec_self", -1);
	return 0;
}
`

// ExecHelper compiles the exec-profile helper (once per process) with gcc
// and returns its path, or skips the test without gcc.
func ExecHelper(tb testing.TB) string {
	tb.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		tb.Skipf("gcc not in PATH, cannot build the exec helper: %v", err)
	}
	return buildOnce(tb, "exechelper", func(out string) *exec.Cmd {
		src := out + ".c"
		if err := os.WriteFile(src, []byte(execHelperSource), 0o644); err != nil {
			tb.Fatal(err)
		}
		return exec.Command(gcc, "-O1", "-o", out, src)
	})
}

// netHelperSource is the program the exec_net tests run as ExecPath: it
// tries, in its own network namespace (loopback down), every way out a
// server of an external app might try, and reports each like the exec
// helper. argv[1] is the port the policy allows, argv[2] another; ports 80
// and 443 are the spoke's transparent listeners.
const netHelperSource = `#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void report(const char *step, long r) {
	printf("{\"step\":\"%s\",\"ok\":%s,\"errno\":%d}\n", step, r < 0 ? "false" : "true", r < 0 ? errno : 0);
	fflush(stdout);
}

static long connect_to(int port) {
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return s;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	long r = connect(s, (struct sockaddr *)&a, sizeof a);
	close(s);
	return r;
}

int main(int argc, char **argv) {
	int pair[2];
	report("connect_proxy_port", connect_to(atoi(argv[1])));
	report("connect_other_port", connect_to(atoi(argv[2])));
	report("connect_http_port", connect_to(80));
	report("connect_https_port", connect_to(443));
	report("socket_udp", socket(AF_INET, SOCK_DGRAM, 0));
	report("socket_udplite", socket(AF_INET, SOCK_DGRAM, IPPROTO_UDPLITE));
	int u = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in outside = {.sin_family = AF_INET, .sin_port = htons(53)};
	outside.sin_addr.s_addr = htonl(0x08080808);
	report("udp_sendto_address", sendto(u, "x", 1, 0, (struct sockaddr *)&outside, sizeof outside));
	report("udp_connect_outside", connect(u, (struct sockaddr *)&outside, sizeof outside));
	report("socket_inet6", socket(AF_INET6, SOCK_STREAM, 0));
	report("socket_unix", socket(AF_UNIX, SOCK_STREAM, 0));
	report("socketpair_dgram", socketpair(AF_UNIX, SOCK_DGRAM, 0, pair));
	report("socketpair_stream", socketpair(AF_UNIX, SOCK_STREAM, 0, pair));
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in any = {.sin_family = AF_INET};
	report("bind", bind(s, (struct sockaddr *)&any, sizeof any));
	report("listen", listen(s, 1));
	report("sendto_address", sendto(s, "x", 1, 0, (struct sockaddr *)&any, sizeof any));
	return 0;
}
`

// NetHelper compiles the exec_net helper (once per process) with gcc and
// returns its path, or skips the test without gcc.
func NetHelper(tb testing.TB) string {
	tb.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		tb.Skipf("gcc not in PATH, cannot build the net helper: %v", err)
	}
	return buildOnce(tb, "nethelper", func(out string) *exec.Cmd {
		src := out + ".c"
		if err := os.WriteFile(src, []byte(netHelperSource), 0o644); err != nil {
			tb.Fatal(err)
		}
		return exec.Command(gcc, "-O1", "-o", out, src)
	})
}

// Cleanup removes what ChildBinary and ExecHelper built. Call it from
// TestMain after m.Run.
func Cleanup() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// Child is one sandboxed child to run.
type Child struct {
	// Policy is passed to Prepare and, encoded, to the child's Enter.
	Policy sandbox.Policy
	// Attempt names what the child does after Enter (see attempts).
	Attempt string
	// Args are the attempt's arguments.
	Args []string
	// ExtraFiles are passed to the child as fds 4, 5, … (fd 3 is the ISC
	// socket).
	ExtraFiles []*os.File
	// Timeout bounds the child's wall-clock time; 0 means 20 seconds.
	Timeout time.Duration
	// Unsandboxed runs the attempt without Prepare and Enter: the control
	// that shows an attempt the sandbox denies would otherwise succeed.
	Unsandboxed bool
	// Cgroup, when set, is the cgroup the child is moved into as soon as
	// it has started, as the spoke manager does.
	Cgroup *sandbox.Cgroup
	// Spare starts the child as the spoke manager starts a spare:
	// prepared under a strict policy without scratch (see
	// sandbox.Policy.Prestartable), it applies sandbox.EnterSpare, then
	// reads Policy on fd 4 (Policy's scratch prepared for it as the hub
	// does, sandbox.PrepareScratchFor) and applies the rest. No
	// ExtraFiles.
	Spare bool
	// NoCgo runs the child built without cgo (ChildBinaryNoCgo).
	NoCgo bool
}

// Outcome is what the parent saw of one child.
type Outcome struct {
	Result
	// ExitCode is the child's exit status, -1 if a signal killed it.
	ExitCode int
	// Signal is the signal that killed the child, 0 if it exited.
	Signal syscall.Signal
	// Stdout and Stderr are the child's raw output.
	Stdout, Stderr string
	// Elapsed is the wall-clock time from start to exit.
	Elapsed time.Duration
	// CPU is the user and system time the child used: what RLIMIT_CPU
	// counts, unlike Elapsed, whatever the machine's load.
	CPU time.Duration
}

// Result is the JSON line the child writes on stdout.
type Result struct {
	// Report is what Enter returned.
	Report sandbox.Report `json:"report"`
	// EnterError is Enter's error, if any.
	EnterError string `json:"enter_error,omitempty"`
	// Error is the attempt's error; "" means the attempt succeeded.
	Error string `json:"error,omitempty"`
	// Errno is the errno name in Error (e.g. "EPERM"), if any.
	Errno string `json:"errno,omitempty"`
	// Detail is attempt-specific (e.g. how many files were opened).
	Detail string `json:"detail,omitempty"`
}

// Run starts c under sandbox.Prepare, waits for it and returns what it saw.
// A child that cannot be started fails the test.
func Run(tb testing.TB, c Child) Outcome {
	tb.Helper()
	bin := ChildBinary(tb)
	if c.NoCgo {
		bin = ChildBinaryNoCgo(tb)
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 20 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	policy := NoEnter
	if !c.Unsandboxed {
		var err error
		if policy, err = c.Policy.Encode(); err != nil {
			tb.Fatalf("failed to encode policy: %v", err)
		}
	}
	prepared := c.Policy
	if c.Spare {
		if c.Unsandboxed || len(c.ExtraFiles) > 0 {
			tb.Fatal("a spare child is sandboxed and takes no extra files")
		}
		prepared = sandbox.Policy{Profile: sandbox.ProfileStrict, Namespaces: c.Policy.Namespaces, AllowWeaker: c.Policy.AllowWeaker, Cgroup: c.Policy.Cgroup}
		spare, err := prepared.Encode()
		if err != nil {
			tb.Fatalf("failed to encode the spare's policy: %v", err)
		}
		policy = SparePrefix + spare
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{policy, c.Attempt}, c.Args...)...)
	if c.Unsandboxed {
		cmd.Env = []string{}
	} else if err := sandbox.Prepare(cmd, prepared); err != nil {
		tb.Fatalf("failed to prepare child: %v", err)
	}
	defer sandbox.Release(cmd)
	parent, child, err := SocketPair()
	if err != nil {
		tb.Fatal(err)
	}
	defer parent.Close()
	cmd.ExtraFiles = append([]*os.File{child}, c.ExtraFiles...)
	if c.Spare {
		uid, gid := sandbox.SpokeIDs(cmd)
		if err := sandbox.PrepareScratchFor(c.Policy, uid, gid); err != nil {
			tb.Fatalf("failed to prepare the scratch of a spare: %v", err)
		}
		launch, err := c.Policy.Encode()
		if err != nil {
			tb.Fatalf("failed to encode policy: %v", err)
		}
		r, w, err := os.Pipe()
		if err != nil {
			tb.Fatal(err)
		}
		defer r.Close()
		_, err = w.WriteString(launch)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			tb.Fatal(err)
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		child.Close()
		tb.Fatalf("failed to start child: %v", err)
	}
	child.Close()
	if c.Cgroup != nil {
		if err := c.Cgroup.Add(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			tb.Fatal(err)
		}
	}
	err = cmd.Wait()
	out := Outcome{Stdout: stdout.String(), Stderr: stderr.String(), Elapsed: time.Since(start)}
	out.ExitCode = cmd.ProcessState.ExitCode()
	out.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		out.Signal = ws.Signal()
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		tb.Fatalf("failed to wait for child: %v", err)
	}
	if line, _, _ := strings.Cut(out.Stdout, "\n"); strings.HasPrefix(line, "{\"report\"") {
		if err := json.Unmarshal([]byte(line), &out.Result); err != nil {
			tb.Fatalf("child wrote a bad result %q: %v", line, err)
		}
	}
	return out
}

// SocketPair returns the two ends of a connected AF_UNIX stream socket, as
// the hub makes for a spoke's fd 3. Both ends are close-on-exec; ExtraFiles
// clears that flag in the child.
func SocketPair() (parent, child *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create socket pair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "isc-parent"), os.NewFile(uintptr(fds[1]), "isc-child"), nil
}

// RequireRoot skips tb unless it runs as root (the sandbox tests check that
// a root hub's spokes cannot read root's files).
func RequireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skipf("needs root to show a spoke cannot read root's files: running as uid %d", os.Geteuid())
	}
}

// RequireFull skips tb unless this machine offers seccomp and Landlock.
func RequireFull(tb testing.TB) sandbox.Capabilities {
	tb.Helper()
	caps := sandbox.Probe()
	if !caps.Seccomp {
		tb.Skipf("seccomp unavailable: %s", caps.SeccompDetail)
	}
	if caps.LandlockABI < 1 {
		tb.Skipf("landlock unavailable: %s", caps.LandlockDetail)
	}
	return caps
}

// Dir returns a new directory, removed at the end of the test, that every
// uid may enter: t.TempDir's parents are 0700, which a spoke running as
// 65534 could not traverse, so a Landlock rule on a path below could not be
// opened.
func Dir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "sbxtest-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	return dir
}
