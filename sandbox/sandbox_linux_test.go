//go:build linux && cgo

package sandbox_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/sandbox/sbxtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	sbxtest.Cleanup()
	os.Exit(code)
}

// strictPolicy is a strict policy with a fresh scratch directory.
func strictPolicy(t *testing.T) sandbox.Policy {
	t.Helper()
	return sandbox.Policy{
		Profile: sandbox.ProfileStrict,
		Limits:  sandbox.DefaultLimits(),
		Scratch: filepath.Join(sbxtest.Dir(t), "scratch"),
	}
}

// expect is what the parent must see of one attempt.
type expect struct {
	allowed bool           // the attempt succeeded
	errno   string         // the attempt failed with this errno
	signal  syscall.Signal // the child was killed by this signal
}

func (e expect) check(t *testing.T, out sbxtest.Outcome) {
	t.Helper()
	if out.EnterError != "" {
		t.Fatalf("Enter failed: %s", out.EnterError)
	}
	switch {
	case e.signal != 0:
		if out.Signal != e.signal {
			t.Fatalf("want the child killed by %v, got exit %d signal %v, result %+v\nstderr: %s", e.signal, out.ExitCode, out.Signal, out.Result, tail(out.Stderr))
		}
	case e.allowed:
		if out.ExitCode != 0 || out.Error != "" {
			t.Fatalf("want allowed, got exit %d signal %v error %q\nstderr: %s", out.ExitCode, out.Signal, out.Error, tail(out.Stderr))
		}
	default:
		if out.ExitCode != 0 || out.Errno != e.errno {
			t.Fatalf("want %s, got exit %d signal %v errno %q error %q\nstderr: %s", e.errno, out.ExitCode, out.Signal, out.Errno, out.Error, tail(out.Stderr))
		}
	}
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}

// TestStrictProfile makes one attempt per case in a fresh strict spoke.
func TestStrictProfile(t *testing.T) {
	sbxtest.RequireFull(t)
	sbxtest.RequireRoot(t)
	dir := sbxtest.Dir(t)

	// A world-readable file and a world-writable directory of the parent:
	// only Landlock stands between them and the spoke.
	outside := filepath.Join(dir, "outside.txt")
	if err := os.WriteFile(outside, []byte("parent data"), 0o644); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove("/tmp/sbxtest-escape") })
	stream := listenUnix(t, "unix", filepath.Join(open, "hub.sock"))
	dgram := listenUnix(t, "unixgram", filepath.Join(open, "dgram.sock"))
	ppid := strconv.Itoa(os.Getpid())
	view := sandbox.Probe().MountView

	// control marks the cases that must succeed without the sandbox, to
	// show that the denial comes from the sandbox.
	const control, noControl = true, false
	tests := []struct {
		name    string
		attempt string
		args    []string
		want    expect
		control bool
	}{
		{"read /etc/shadow", "read", []string{"/etc/shadow"}, expect{errno: "EACCES"}, control},
		{"read /etc/hostname", "read", []string{"/etc/hostname"}, expect{errno: "EACCES"}, control},
		{"read a world-readable file of the parent", "read", []string{outside}, expect{errno: "EACCES"}, control},
		{"write outside scratch", "write", []string{filepath.Join(open, "x")}, expect{errno: "EACCES"}, control},
		{"write /tmp", "write", []string{"/tmp/sbxtest-escape"}, expect{errno: "EACCES"}, control},
		{"write inside scratch", "write", []string{"<scratch>/out.txt"}, expect{allowed: true}, noControl},
		{"read own executable", "read", []string{"<self>"}, expect{allowed: true}, noControl},
		{"TCP socket", "socket", []string{itoa(unix.AF_INET), itoa(unix.SOCK_STREAM)}, expect{errno: "EPERM"}, control},
		{"UDP socket", "socket", []string{itoa(unix.AF_INET), itoa(unix.SOCK_DGRAM)}, expect{errno: "EPERM"}, control},
		{"IPv6 TCP socket", "socket", []string{itoa(unix.AF_INET6), itoa(unix.SOCK_STREAM)}, expect{errno: "EPERM"}, control},
		{"netlink socket", "socket", []string{itoa(unix.AF_NETLINK), itoa(unix.SOCK_RAW)}, expect{errno: "EPERM"}, control},
		{"unix socket", "socket", []string{itoa(unix.AF_UNIX), itoa(unix.SOCK_STREAM)}, expect{allowed: true}, noControl},
		{"connect to a listening unix socket", "unix_connect", []string{stream}, expect{errno: "EPERM"}, control},
		{"sendto a unix datagram socket", "unix_sendto", []string{dgram}, expect{errno: "EPERM"}, control},
		{"fork and exec /bin/true", "fork_exec", nil, expect{errno: "EPERM"}, control},
		{"execve /bin/true", "exec", nil, expect{errno: "EPERM"}, control},
		{"clone without CLONE_THREAD", "clone_process", nil, expect{errno: "EPERM"}, control},
		{"ptrace attach to the parent", "ptrace_attach", []string{ppid}, expect{signal: syscall.SIGSYS}, noControl},
		{"open the parent's memory", "read", []string{"/proc/" + ppid + "/mem"}, expect{errno: "EACCES"}, noControl},
		{"open the parent's environment", "read", []string{"/proc/" + ppid + "/environ"}, expect{errno: "EACCES"}, control},
		{"open own environment", "read", []string{"/proc/self/environ"}, expect{errno: "EACCES"}, control},
		{"keyctl", "keyctl", nil, expect{signal: syscall.SIGSYS}, noControl},
		{"bpf", "bpf", nil, expect{signal: syscall.SIGSYS}, noControl},
		{"mount", "mount", nil, expect{signal: syscall.SIGSYS}, noControl},
		{"unshare", "unshare", nil, expect{signal: syscall.SIGSYS}, noControl},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := strictPolicy(t)
			args := make([]string, len(tt.args))
			for i, a := range tt.args {
				a = strings.ReplaceAll(a, "<scratch>", p.Scratch)
				args[i] = strings.ReplaceAll(a, "<self>", sbxtest.ChildBinary(t))
			}
			out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: tt.attempt, Args: args})
			tt.want.check(t, out)
			if view {
				// The same from a spare, which applied the part of
				// its sandbox that holds for every strict policy
				// before it was told p (its view's skeleton, its
				// filter compiled ahead).
				// Its view hides what Landlock would refuse, or
				// holds it read-only.
				p.Namespaces = true
				out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: tt.attempt, Args: args, Spare: true})
				if tt.want.errno != "EACCES" || out.Errno != "ENOENT" && out.Errno != "EROFS" {
					tt.want.check(t, out)
				}
			}
			if tt.control {
				out := sbxtest.Run(t, sbxtest.Child{Attempt: tt.attempt, Args: args, Unsandboxed: true})
				if out.ExitCode != 0 || out.Error != "" {
					t.Fatalf("control without the sandbox failed too: exit %d, error %q", out.ExitCode, out.Error)
				}
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// listenUnix makes a socket any uid may reach by its path.
func listenUnix(t *testing.T, network, path string) string {
	t.Helper()
	var closer interface{ Close() error }
	var err error
	if network == "unixgram" {
		closer, err = net.ListenUnixgram(network, &net.UnixAddr{Name: path, Net: network})
	} else {
		closer, err = net.Listen(network, path)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closer.Close() })
	if err := os.Chmod(path, 0o777); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRunsAsOwnID checks that a root hub's spoke runs as nobody inside its
// user namespace and, on the host, as an id of the spokes' range, which also
// owns its scratch; without namespaces it runs as that id directly.
func TestRunsAsOwnID(t *testing.T) {
	sbxtest.RequireFull(t)
	sbxtest.RequireRoot(t)
	r := sandbox.DefaultIDRange
	inRange := func(id int) bool { return id >= int(r.First) && id < int(r.First)+int(r.Count) }
	for _, ns := range []bool{false, true} {
		t.Run(fmt.Sprintf("namespaces=%v", ns), func(t *testing.T) {
			if ns && !sandbox.Probe().UserNS {
				t.Skipf("user namespaces unavailable: %s", sandbox.Probe().NSDetail)
			}
			p := strictPolicy(t)
			p.Namespaces = ns
			// A scratch the hub makes (a spoke's own tmpfs is not on
			// its disk: TestScratchBounded).
			p.KeepScratch = true
			out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "ids"})
			expect{allowed: true}.check(t, out)
			var uid, gid int
			if _, err := fmt.Sscan(out.Detail, &uid, &gid); err != nil {
				t.Fatalf("child ids %q: %v", out.Detail, err)
			}
			if ns && (uid != 65534 || gid != 65534) {
				t.Fatalf("child uid gid = %q inside its namespace, want 65534 65534", out.Detail)
			}
			if !ns && (!inRange(uid) || gid != uid) {
				t.Fatalf("child uid gid = %q, want one id of %+v", out.Detail, r)
			}
			st, err := os.Stat(p.Scratch)
			if err != nil {
				t.Fatal(err)
			}
			if sys := st.Sys().(*syscall.Stat_t); !inRange(int(sys.Uid)) || sys.Gid != sys.Uid || st.Mode().Perm() != 0o700 {
				t.Fatalf("scratch owned by %d:%d mode %v, want an id of %+v, 0700", sys.Uid, sys.Gid, st.Mode().Perm(), r)
			}
		})
	}
}

// TestNamespaces checks that the child sees itself in new user, PID and
// network namespaces and is still confined there.
func TestNamespaces(t *testing.T) {
	caps := sbxtest.RequireFull(t)
	if !caps.UserNS || !caps.NetNS {
		t.Skipf("namespaces unavailable: %s", caps.NSDetail)
	}
	want := []string{"user", "net"}
	if caps.PIDNS {
		want = append(want, "pid")
	}
	p := strictPolicy(t)
	p.Namespaces = true
	out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "read", Args: []string{"/etc/shadow"}})
	// Not in its view (ENOENT) where it has a mount namespace; Landlock
	// denies it (EACCES) where not.
	denied := "EACCES"
	if caps.PIDNS {
		denied = "ENOENT"
	}
	expect{errno: denied}.check(t, out)
	for _, pr := range out.Report.Protections {
		if pr.Name != "namespaces" {
			continue
		}
		for _, w := range want {
			if !pr.On || !strings.Contains(pr.Detail, w) {
				t.Errorf("namespaces protection %+v, want %s", pr, w)
			}
		}
		return
	}
	t.Fatalf("no namespaces entry in report %+v", out.Report)
}

func TestReportAllOn(t *testing.T) {
	sbxtest.RequireFull(t)
	out := sbxtest.Run(t, sbxtest.Child{Policy: strictPolicy(t), Attempt: "ready"})
	expect{allowed: true}.check(t, out)
	want := []string{"environment", "file descriptors", "namespaces", "disk", "mount view", "rlimits", "no_new_privs", "landlock", "seccomp"}
	if len(out.Report.Protections) != len(want) {
		t.Fatalf("report %+v, want %v", out.Report, want)
	}
	for i, pr := range out.Report.Protections {
		if pr.Name != want[i] || (!pr.On && pr.Name != "namespaces" && pr.Name != "disk" && pr.Name != "mount view") {
			t.Errorf("protection %d = %+v, want %s on", i, pr, want[i])
		}
		t.Logf("%s", pr.Name+": "+pr.Detail)
	}
}

// TestSpareReportsAsDirect checks that a spoke made from a spare reports
// the same protections, on and off alike, as one started under its policy,
// and that a spare refuses a policy it was not prepared for.
func TestSpareReportsAsDirect(t *testing.T) {
	requireView(t)
	p := strictPolicy(t)
	p.Namespaces = true
	direct := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "ready"})
	expect{allowed: true}.check(t, direct)
	spare := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "ready", Spare: true})
	expect{allowed: true}.check(t, spare)
	if len(spare.Report.Protections) != len(direct.Report.Protections) {
		t.Fatalf("spare reported %+v, a direct start %+v", spare.Report, direct.Report)
	}
	for i, pr := range spare.Report.Protections {
		d := direct.Report.Protections[i]
		if pr.Name != d.Name || pr.On != d.On {
			t.Errorf("spare's protection %d = %+v, a direct start's %+v", i, pr, d)
		}
		t.Logf("%s: %s", pr.Name, pr.Detail)
		if pr.Name == "mount view" && !strings.Contains(pr.Detail, "once claimed") {
			t.Errorf("spare's view %q does not say what was built before its claim", pr.Detail)
		}
	}

	// A spare detached the host's root before it was claimed: it cannot
	// become a spoke that needs host paths, and the hub does not ask it.
	spareP := sandbox.Policy{Profile: sandbox.ProfileStrict, Namespaces: true}
	exec := p
	exec.Profile, exec.ExecPath = sandbox.ProfileExec, "/bin/true"
	kept := p
	kept.KeepScratch = true
	readOnly := p
	readOnly.ReadOnly = []string{"/etc"}
	for name, q := range map[string]sandbox.Policy{"exec": exec, "kept scratch": kept, "read-only path": readOnly} {
		if sandbox.SpareCanBecome(q, spareP) {
			t.Errorf("SpareCanBecome(%s policy) = true, want false", name)
		}
		out := sbxtest.Run(t, sbxtest.Child{Policy: q, Attempt: "ready", Spare: true})
		if out.ExitCode == 0 || !strings.Contains(out.EnterError, "does not fit the spare") {
			t.Errorf("a spare given a policy with %s: exit %d, %q; want refused", name, out.ExitCode, out.EnterError)
		}
	}
	if !sandbox.SpareCanBecome(p, spareP) {
		t.Errorf("SpareCanBecome(strict policy with its own scratch) = false, want true")
	}
}

func TestEnvironmentEmpty(t *testing.T) {
	sbxtest.RequireFull(t)
	out := sbxtest.Run(t, sbxtest.Child{Policy: strictPolicy(t), Attempt: "env"})
	expect{allowed: true}.check(t, out)
}

// TestOneProcessor: a spoke's Go runtime starts with one processor, whatever
// the machine has (see childEnv).
func TestOneProcessor(t *testing.T) {
	sbxtest.RequireFull(t)
	out := sbxtest.Run(t, sbxtest.Child{Policy: strictPolicy(t), Attempt: "procs"})
	expect{allowed: true}.check(t, out)
	if out.Detail != "1" {
		t.Errorf("GOMAXPROCS in a spoke = %s, want 1", out.Detail)
	}
}

// TestInheritedFDsClosed passes two extra descriptors (4 and 5) without
// close-on-exec: Enter must close them and keep 0–3 and the runtime's own.
func TestInheritedFDsClosed(t *testing.T) {
	sbxtest.RequireFull(t)
	var extra []*os.File
	for range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		extra = append(extra, r)
	}
	out := sbxtest.Run(t, sbxtest.Child{Policy: strictPolicy(t), Attempt: "fds", ExtraFiles: extra})
	expect{allowed: true}.check(t, out)
	before, after, _ := strings.Cut(out.Detail, "|")
	t.Logf("before Enter: %s; after: %s", before, after)
	parse := func(list string) map[int]int { // fd → close-on-exec flag
		open := map[int]int{}
		for _, f := range strings.Fields(list) {
			fd, flag, _ := strings.Cut(f, ":")
			open[atoi(t, fd)] = atoi(t, flag)
		}
		return open
	}
	was, is := parse(before), parse(after)
	for _, fd := range []int{4, 5} {
		if flag, ok := was[fd]; !ok || flag != 0 {
			t.Fatalf("fd %d was not inherited as passed (%s)", fd, before)
		}
	}
	for fd := range 4 {
		if _, ok := is[fd]; !ok {
			t.Errorf("fd %d closed, want it kept", fd)
		}
	}
	for fd, cloexec := range is {
		if fd > 3 && cloexec == 0 {
			t.Errorf("inherited fd %d still open", fd)
		}
	}
	// The runtime's own descriptors (close-on-exec, opened before Enter)
	// must survive: closing them would break the Go runtime.
	for fd, cloexec := range was {
		if _, ok := is[fd]; cloexec == 1 && !ok {
			t.Errorf("fd %d of the runtime closed", fd)
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWorkloadUnderFilter runs what a spoke does (frames over fd 3, files
// in scratch, goroutines, timers, GC) under the strict filter. It is the
// regression test of the allowlist.
func TestWorkloadUnderFilter(t *testing.T) {
	sbxtest.RequireFull(t)
	p := strictPolicy(t)
	bin := sbxtest.ChildBinary(t)
	enc, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, enc, "workload", p.Scratch)
	if err := sandbox.Prepare(cmd, p); err != nil {
		t.Fatal(err)
	}
	parent, child, err := sbxtest.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	defer parent.Close()
	cmd.ExtraFiles = []*os.File{child}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child.Close()
	// A hung child is killed, which ends the reads below.
	timer := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	frames := bufio.NewReader(parent)
	var ready map[string]any
	if err := json.NewDecoder(frames).Decode(&ready); err != nil {
		t.Fatalf("no ready frame: %v\nstderr: %s", err, tail(stderr.String()))
	}
	if _, err := parent.Write([]byte(`{"kind":"reply"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	waitErr := cmd.Wait()
	if waitErr != nil {
		t.Fatalf("child: %v\nstdout: %s\nstderr: %s", waitErr, stdout.String(), tail(stderr.String()))
	}
	var res sbxtest.Result
	if err := json.Unmarshal([]byte(stdout.String()), &res); err != nil || res.Error != "" || res.EnterError != "" {
		t.Fatalf("child result %s (%v)", stdout.String(), err)
	}
	if ready["kind"] != "ready" || res.Detail != "reply" {
		t.Fatalf("frames: ready %v, reply seen by child %q", ready, res.Detail)
	}
}

// TestPIDNamespace: a spoke with namespaces is PID 1 of its own PID
// namespace and sees only itself in a /proc of its own, which bounds its
// tasks where the kernel keeps a pid_max per namespace.
func TestPIDNamespace(t *testing.T) {
	if caps := sbxtest.RequireFull(t); !caps.PIDNS {
		t.Skipf("no PID namespace for spokes on this machine: %s", caps.NSDetail)
	}
	p := strictPolicy(t)
	p.Namespaces = true
	out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "pid_namespace"})
	expect{allowed: true}.check(t, out)
	if !strings.HasPrefix(out.Detail, "pid 1; processes [1];") {
		t.Fatalf("detail %q, want PID 1 that sees only itself", out.Detail)
	}
	for _, pr := range out.Report.Protections {
		if pr.Name == "namespaces" && !strings.Contains(pr.Detail, "pid (own /proc") {
			t.Fatalf("namespaces reported as %q", pr.Detail)
		}
	}
	t.Log(out.Detail)
}

// TestThreadsUnderFilter: threads that existed before Enter are confined
// too (seccomp TSYNC, Landlock on every thread), new threads can be created
// under the filter, and the runtime keeps working.
// With namespaces too: Landlock reaches threads through /proc before ABI 8.
func TestThreadsUnderFilter(t *testing.T) {
	caps := sbxtest.RequireFull(t)
	for _, ns := range []bool{false, true} {
		t.Run(fmt.Sprintf("namespaces=%v", ns), func(t *testing.T) {
			if ns && !caps.UserNS {
				t.Skipf("user namespaces unavailable: %s", caps.NSDetail)
			}
			p := strictPolicy(t)
			p.Namespaces = ns
			expect{allowed: true}.check(t, sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "threads"}))
		})
	}
}

func TestLimits(t *testing.T) {
	sbxtest.RequireFull(t)
	tests := []struct {
		name    string
		limits  sandbox.Limits
		attempt string
		args    []string
		check   func(t *testing.T, out sbxtest.Outcome)
	}{
		{"mmap 4 GiB", sandbox.Limits{}, "mmap", []string{itoa(4 << 30)}, func(t *testing.T, out sbxtest.Outcome) {
			expect{errno: "ENOMEM"}.check(t, out)
		}},
		{"allocate 4 GiB on the Go heap", sandbox.Limits{}, "alloc", []string{itoa(4 << 30)}, func(t *testing.T, out sbxtest.Outcome) {
			if out.ExitCode != 2 || !strings.Contains(out.Stderr, "out of memory") {
				t.Fatalf("want a clean runtime death (exit 2, out of memory), got exit %d signal %v\nstderr: %s", out.ExitCode, out.Signal, tail(out.Stderr))
			}
		}},
		{"spin the CPU", sandbox.Limits{CPUSeconds: 1}, "spin", nil, func(t *testing.T, out sbxtest.Outcome) {
			if out.Signal != syscall.SIGKILL && out.Signal != syscall.SIGXCPU {
				t.Fatalf("want SIGXCPU or SIGKILL, got exit %d signal %v", out.ExitCode, out.Signal)
			}
			if out.CPU > 4*time.Second {
				t.Fatalf("killed after %v of CPU, want about 2 s", out.CPU)
			}
			t.Logf("killed by %s after %v of CPU (%v wall clock)", unix.SignalName(out.Signal), out.CPU, out.Elapsed)
		}},
		{"write past the file size", sandbox.Limits{FileSize: 1 << 20}, "write_size", []string{"<scratch>/big", itoa(2 << 20)}, func(t *testing.T, out sbxtest.Outcome) {
			expect{errno: "EFBIG"}.check(t, out)
			if out.Detail != itoa(1<<20) {
				t.Fatalf("wrote %s bytes, want exactly the limit %d", out.Detail, 1<<20)
			}
		}},
		{"open more files than allowed", sandbox.Limits{OpenFiles: 16}, "open_many", []string{"100"}, func(t *testing.T, out sbxtest.Outcome) {
			expect{errno: "EMFILE"}.check(t, out)
			if n := atoi(t, out.Detail); n > 15 {
				t.Fatalf("got fd %d, want none above 15", n)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := strictPolicy(t)
			p.Limits = tt.limits
			args := make([]string, len(tt.args))
			for i, a := range tt.args {
				args[i] = strings.ReplaceAll(a, "<scratch>", p.Scratch)
			}
			tt.check(t, sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: tt.attempt, Args: args}))
		})
	}
}

// TestAddressSpaceNeeded keeps MinAddressSpace and the default honest: a
// spoke starts and serves at the minimum, and 60 threads fit in the
// default.
func TestAddressSpaceNeeded(t *testing.T) {
	sbxtest.RequireFull(t)
	p := strictPolicy(t)
	p.Limits.AddressSpace = sandbox.MinAddressSpace
	expect{allowed: true}.check(t, sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "ready"}))
	p = strictPolicy(t)
	expect{allowed: true}.check(t, sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "threads"}))
}

// TestExecProfile runs the C helper as ExecPath: it starts (the one exec),
// is as confined as a Go spoke, and cannot execute anything else. Executing
// itself again is the one exec Landlock still allows (see Exec).
func TestExecProfile(t *testing.T) {
	sbxtest.RequireFull(t)
	helper := sbxtest.ExecHelper(t)
	p := strictPolicy(t)
	p.Profile = sandbox.ProfileExec
	p.ExecPath = helper
	out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "exec", Args: []string{helper}})
	if out.ExitCode != 0 {
		t.Fatalf("exit %d signal %v\nstdout: %s\nstderr: %s", out.ExitCode, out.Signal, out.Stdout, tail(out.Stderr))
	}
	steps := map[string]string{}
	for line := range strings.Lines(out.Stdout) {
		var s struct {
			Step  string `json:"step"`
			OK    bool   `json:"ok"`
			Errno int    `json:"errno"`
		}
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("bad helper line %q: %v", line, err)
		}
		steps[s.Step] = "ok"
		if !s.OK {
			steps[s.Step] = unix.ErrnoName(syscall.Errno(s.Errno))
		}
	}
	want := map[string]string{
		"started":       "ok",
		"open_shadow":   "EACCES",
		"socket_inet":   "EPERM",
		"fork":          "EPERM",
		"execve_true":   "EACCES",
		"execveat_true": "EPERM",
		"execve_sh":     "EACCES",
		"reexec_self":   "ok",
	}
	for step, w := range want {
		if steps[step] != w {
			t.Errorf("%s: got %q, want %q (all: %v)", step, steps[step], w, steps)
		}
	}
}

// TestExecProfileRefusesScripts: a script's interpreter would need
// EXECUTE and could run anything, so Enter refuses a non-ELF ExecPath.
func TestExecProfileRefusesScripts(t *testing.T) {
	sbxtest.RequireFull(t)
	script := filepath.Join(sbxtest.Dir(t), "run.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec /bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := strictPolicy(t)
	p.Profile = sandbox.ProfileExec
	p.ExecPath = script
	out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "exec", Args: []string{script}})
	if !strings.Contains(out.EnterError, "not an ELF executable") {
		t.Fatalf("Enter error %q, want a refusal of the script", out.EnterError)
	}
}

func TestProbe(t *testing.T) {
	caps := sandbox.Probe()
	for _, l := range caps.Lines() {
		t.Log(l)
	}
	if !caps.Seccomp && caps.SeccompDetail == "" || caps.LandlockABI == 0 && caps.LandlockDetail == "" || caps.NSDetail == "" {
		t.Fatalf("a protection is off without a reason: %+v", caps)
	}
	if !caps.NoNewPrivs {
		t.Fatalf("no_new_privs unsupported on a kernel that has seccomp filters: %+v", caps)
	}
}

// TestPrepareFailsClosed simulates a kernel without seccomp or Landlock:
// Prepare must refuse, unless the policy allows a weaker sandbox.
func TestPrepareFailsClosed(t *testing.T) {
	restore := sandbox.SetCapabilities(sandbox.Capabilities{LandlockABI: 7, NoNewPrivs: true, SeccompDetail: "simulated"})
	defer restore()
	p := sandbox.Policy{Profile: sandbox.ProfileStrict}
	cmd := exec.Command("/bin/true")
	if err := sandbox.Prepare(cmd, p); !errors.Is(err, sandbox.ErrUnprotected) || cmd.SysProcAttr != nil {
		t.Fatalf("Prepare without seccomp: got %v (SysProcAttr %v), want ErrUnprotected and cmd untouched", err, cmd.SysProcAttr)
	}
	p.AllowWeaker = true
	t.Setenv("SECGPT_HUB_SECRET", "canary")
	if err := sandbox.Prepare(cmd, p); err != nil {
		t.Fatalf("Prepare with AllowWeaker: %v", err)
	}
	if cmd.Env == nil || len(cmd.Env) > 2 || slices.ContainsFunc(cmd.Env, func(e string) bool { return strings.Contains(e, "canary") }) || cmd.SysProcAttr == nil || !cmd.SysProcAttr.Setpgid || cmd.SysProcAttr.Pdeathsig != syscall.SIGKILL {
		t.Fatalf("Prepare set env %q attr %+v", cmd.Env, cmd.SysProcAttr)
	}
}
