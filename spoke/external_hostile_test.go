package spoke_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/secgpt/secgpt/hub/hubtest"
	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/spoke/mcptest"
)

// hostileLimits are the hostile server's limits: small, so that the CPU,
// file-size and descriptor attacks end in seconds. The memory bound is
// small too: reaching the exec profile's 1 GiB takes 262,144 page faults,
// about 4 s of CPU at this machine's 15 µs a fault when no huge page is
// to be had, so the 2 s CPU limit killed the allocating server first and
// the memory bound went unnamed.
var hostileLimits = sandbox.Limits{CPUSeconds: 2, FileSize: 8 << 20, OpenFiles: 64, Memory: 192 << 20}

// hostileTargets are what the hostile server aims at, outside its spoke.
type hostileTargets struct {
	lab          *mcptest.Lab
	secret       string
	victimSecret string // a file in another user's scratch, owned by the spokes' uid
	outside      string // a world-writable file outside every scratch
	marker       string // what a shell that ran would create
	unixSocket   string
	unixAccepted func() int64
	database     string
	victimPID    int // a process of the spokes' uid
}

// hostileOutcome is how an attempt must end.
type hostileOutcome int

const (
	// blocked: the server reports the attempt failed with this error.
	blocked hostileOutcome = iota + 1
	// killed: the sandbox killed the server; the hub reports the app failed.
	killed
	// refused: the hub's egress broker refused; the server got a 403.
	refused
	// allowed: a control, which must succeed.
	allowed
	// memoryBounded: blocked with errText, or the kernel killed the server
	// for its cgroup's memory bound and the hub reports the app over its
	// memory limit.
	memoryBounded
)

// memoryOutcome is how an allocation over the bound ends: with a cgroup per
// spoke the server's address space is not limited (runtimes reserve more
// than they use), so either the kernel refuses the mapping (overcommit, on
// a machine with less memory than asked for) or it kills the server at its
// cgroup's bound; without a cgroup RLIMIT_AS refuses it.
func memoryOutcome() hostileOutcome {
	if ok, _ := sandbox.CgroupSupport(); ok {
		return memoryBounded
	}
	return blocked
}

type hostileAttack struct {
	name, function string
	args           func(*hostileTargets) map[string]any
	outcome        hostileOutcome
	// errText must appear in what the server reports.
	errText string
	// leak must appear nowhere in the answer, the record or the logs.
	leak func(*hostileTargets) string
	// outside checks from outside the spoke that nothing happened.
	outside func(*hostileTargets, *hostileEvidence) error
	// skip, when set, says why this machine cannot show the defence.
	skip func() string
}

// hostileEvidence is what the test can see of the attacker's processes.
type hostileEvidence struct {
	spokePID, serverPID int
	scratch             string
}

func arg(k string, v any) func(*hostileTargets) map[string]any {
	return func(*hostileTargets) map[string]any { return map[string]any{k: v} }
}

func noArgs(*hostileTargets) map[string]any { return map[string]any{} }

func hostileAttacks() []hostileAttack {
	return []hostileAttack{
		{name: "read /etc/shadow", function: "read_file", args: arg("path", "/etc/shadow"), outcome: blocked, errText: notInView(),
			leak: func(*hostileTargets) string { return "root:" }},
		{name: "read the hub's database", function: "read_file", args: func(t *hostileTargets) map[string]any { return map[string]any{"path": t.database} },
			outcome: blocked, errText: notInView(), leak: func(*hostileTargets) string { return "SQLite format 3" }},
		{name: "read another user's scratch", function: "read_file", args: func(t *hostileTargets) map[string]any { return map[string]any{"path": t.victimSecret} },
			outcome: blocked, errText: notInView(), leak: func(t *hostileTargets) string { return t.secret }},
		{name: "read the hub's environment", function: "read_file", args: arg("path", fmt.Sprintf("/proc/%d/environ", os.Getpid())),
			outcome: blocked, errText: invisibleHub(), leak: func(*hostileTargets) string { return "PATH=" }},
		{name: "write outside scratch", function: "write_file", args: func(t *hostileTargets) map[string]any { return map[string]any{"path": t.outside} },
			outcome: blocked, errText: notInView(),
			outside: func(t *hostileTargets, _ *hostileEvidence) error { return fileHolds(t.outside, t.secret) }},
		{name: "TCP to a listener on the machine's 127.0.0.1", function: "tcp_connect", args: func(t *hostileTargets) map[string]any { return map[string]any{"address": t.lab.TCP.Addr()} },
			outcome: blocked, errText: "Permission denied",
			outside: func(t *hostileTargets, _ *hostileEvidence) error {
				return untouched("TCP listener", t.lab.TCP.Accepted.Load())
			}},
		{name: "UDP to 127.0.0.1", function: "udp_send", args: func(t *hostileTargets) map[string]any { return map[string]any{"address": t.lab.UDP.Addr()} },
			outcome: blocked, errText: "Operation not permitted",
			outside: func(t *hostileTargets, _ *hostileEvidence) error {
				return untouched("UDP socket", t.lab.UDP.Received.Load())
			}},
		// Landlock allows ports 80 and 443 (the spoke's listeners); the
		// namespace has no route but loopback.
		{name: "TCP to a public address", function: "tcp_connect", args: arg("address", mcptest.PublicIP+":443"), outcome: blocked, errText: "Network is unreachable"},
		{name: "TCP to a port other than 80 and 443", function: "tcp_connect", args: arg("address", "127.0.0.1:8080"), outcome: blocked, errText: "Permission denied"},
		{name: "UDP to a public DNS server", function: "udp_send", args: arg("address", "9.9.9.9:53"), outcome: blocked, errText: "Operation not permitted"},
		// Only the spoke's resolver answers, with loopback: no query
		// leaves, and no answer says where a name really is.
		{name: "control: resolve a name itself", function: "resolve_name", args: arg("host", "example.net"), outcome: allowed, errText: "'127.0.0.1'",
			outside: func(t *hostileTargets, _ *hostileEvidence) error { return notResolved(t, "example.net") }},
		{name: "connect to a unix socket by path", function: "unix_connect", args: func(t *hostileTargets) map[string]any { return map[string]any{"path": t.unixSocket} },
			outcome: blocked, errText: "Operation not permitted",
			outside: func(t *hostileTargets, _ *hostileEvidence) error { return untouched("unix socket", t.unixAccepted()) }},
		{name: "fork bomb", function: "fork_bomb", args: noArgs, outcome: blocked, errText: "Operation not permitted",
			outside: func(_ *hostileTargets, e *hostileEvidence) error { return groupAtMost(e.spokePID, 2) }},
		{name: "run /bin/sh as a subprocess", function: "run_shell", args: func(t *hostileTargets) map[string]any { return map[string]any{"marker": t.marker} },
			outcome: blocked, errText: "Operation not permitted",
			outside: func(t *hostileTargets, _ *hostileEvidence) error { return absent(t.marker) }},
		{name: "execve /bin/sh", function: "exec_shell", args: func(t *hostileTargets) map[string]any { return map[string]any{"marker": t.marker} },
			outcome: blocked, errText: notInView(),
			outside: func(t *hostileTargets, _ *hostileEvidence) error { return absent(t.marker) }},
		{name: "ptrace the hub", function: "ptrace_attach", args: arg("pid", os.Getpid()), outcome: killed,
			outside: func(*hostileTargets, *hostileEvidence) error { return notTraced() }},
		{name: "allocate 4 GiB", function: "allocate_memory", args: arg("bytes", 4<<30), outcome: memoryOutcome(), errText: "MemoryError",
			outside: func(_ *hostileTargets, e *hostileEvidence) error {
				status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", e.serverPID))
				if memoryOutcome() == memoryBounded && (err != nil || strings.Contains(string(status), "(zombie)")) {
					return nil // killed at its bound, as the report said
				}
				return peakBelow(e.serverPID, 4<<30)
			}},
		{name: "spin the CPU", function: "spin_cpu", args: noArgs, outcome: killed},
		{name: "write a 10 GiB file", function: "big_file", args: func(*hostileTargets) map[string]any { return map[string]any{"path": "big.bin", "bytes": 10 << 30} },
			outcome: blocked, errText: "File too large",
			outside: func(_ *hostileTargets, e *hostileEvidence) error {
				return sizeAtMost(filepath.Join(e.scratch, "big.bin"), hostileLimits.FileSize)
			}},
		{name: "open 100,000 files", function: "many_files", args: arg("count", 100000), outcome: blocked, errText: "Too many open files",
			outside: func(_ *hostileTargets, e *hostileEvidence) error {
				return openFilesAtMost(e.serverPID, hostileLimits.OpenFiles)
			}},
		{name: "reach the network around the proxy", function: "bypass_proxy", args: arg("target", "http://"+mcptest.PublicIP+"/"), outcome: blocked, errText: "Network is unreachable"},
		{name: "TLS to a declared name whose ClientHello names an undeclared one", function: "tls_server_name",
			args: func(*hostileTargets) map[string]any {
				return map[string]any{"connect": mcptest.PublicHost, "sni": mcptest.UndeclaredHost}
			},
			outcome: refused, errText: "Error",
			outside: func(t *hostileTargets, e *hostileEvidence) error {
				if err := notResolved(t, mcptest.UndeclaredHost); err != nil {
					return err
				}
				return onlyPublicDialled(t, e)
			}},
		// Python sends no server name for an IP address.
		{name: "TLS naming an IP address (no server name)", function: "tls_server_name",
			args: func(*hostileTargets) map[string]any {
				return map[string]any{"connect": mcptest.PublicHost, "sni": mcptest.PublicIP}
			},
			outcome: refused, errText: "Error", outside: onlyPublicDialled},
		{name: "HTTP to a declared name with an undeclared Host header", function: "host_header",
			args: func(*hostileTargets) map[string]any {
				return map[string]any{"url": "http://" + mcptest.PublicHost + "/", "host": mcptest.UndeclaredHost}
			},
			outcome: refused, errText: "domain example.org is not declared by the app",
			outside: func(t *hostileTargets, e *hostileEvidence) error {
				if err := notResolved(t, mcptest.UndeclaredHost); err != nil {
					return err
				}
				return onlyPublicDialled(t, e)
			}},
		{name: "use its spoke's channel to the hub (fd 3)", function: "spoke_socket", args: noArgs, outcome: blocked, errText: "Bad file descriptor"},
		{name: "kill a process of its uid through SIGIO (fcntl F_SETOWN)", function: "sigio_kill",
			args: func(t *hostileTargets) map[string]any { return map[string]any{"pid": t.victimPID} }, outcome: blocked, errText: "Operation not permitted",
			outside: func(t *hostileTargets, _ *hostileEvidence) error { return running(t.victimPID) }},
		{name: "MPTCP around the proxy's port rule", function: "mptcp_connect", args: arg("address", mcptest.PublicIP+":443"), outcome: blocked, errText: "Operation not permitted"},
		{name: "thread bomb (5,000 threads with small stacks)", function: "thread_bomb", args: arg("count", 5000), outcome: blocked, errText: "can't start new thread",
			skip: perNamespaceTaskBound},
		{name: "egress to an undeclared domain", function: "fetch_url", args: arg("url", "http://"+mcptest.UndeclaredHost+"/upload"), outcome: refused,
			errText: "HTTP 403", outside: func(t *hostileTargets, e *hostileEvidence) error {
				lookups, _ := t.lab.Network()
				for _, l := range lookups {
					if l == mcptest.UndeclaredHost {
						return fmt.Errorf("the broker resolved %s", l)
					}
				}
				return onlyPublicDialled(t, e)
			}},
		{name: "CONNECT to an undeclared host through the proxy", function: "fetch_url", args: arg("url", "https://"+mcptest.UndeclaredHost+"/upload"),
			outcome: refused, errText: "HTTP 403", outside: func(t *hostileTargets, e *hostileEvidence) error {
				if err := notResolved(t, mcptest.UndeclaredHost); err != nil {
					return err
				}
				return onlyPublicDialled(t, e)
			}},
		{name: "CONNECT to another port through the proxy", function: "fetch_url", args: arg("url", "https://"+mcptest.PublicHost+":8443/"),
			outcome: refused, errText: "HTTP 403", outside: onlyPublicDialled},
		{name: "egress to a declared name resolving to 127.0.0.1", function: "fetch_url", args: func(t *hostileTargets) map[string]any { return map[string]any{"url": t.lab.LoopbackURL()} },
			outcome: refused, errText: "a loopback address",
			outside: func(t *hostileTargets, e *hostileEvidence) error {
				return onlyPublicDialled(t, e)
			}},
		{name: "egress to a declared name resolving to 169.254.169.254", function: "fetch_url", args: arg("url", "http://"+mcptest.MetadataHost+"/latest/meta-data/"),
			outcome: refused, errText: "HTTP 403", outside: onlyPublicDialled},
		{name: "egress redirected to 127.0.0.1", function: "fetch_url", args: arg("url", "http://"+mcptest.PublicHost+mcptest.ToLoopback),
			outcome: refused, errText: "a loopback address",
			outside: onlyPublicDialled},
		{name: "egress redirected to 169.254.169.254", function: "fetch_url", args: arg("url", "https://"+mcptest.PublicHost+mcptest.ToMetadata),
			outcome: refused, errText: "HTTP 403"},
		{name: "control: write its own scratch", function: "write_file", args: arg("path", "own.txt"), outcome: allowed,
			outside: func(_ *hostileTargets, e *hostileEvidence) error {
				_, err := os.Stat(filepath.Join(e.scratch, "own.txt"))
				return err
			}},
		{name: "control: egress to its declared domain over HTTPS", function: "fetch_url", args: arg("url", "https://"+mcptest.PublicHost+"/"), outcome: allowed, errText: mcptest.PageText},
	}
}

// TestHostileMCPServer repeats the sandbox check's attacks from a Python
// MCP server that declares egress (so runs under the exec_net profile, the
// more permissive one), through the hub and the obedient model. Each is
// blocked as expected, seen from outside where it can be, logged, and the
// hub keeps serving another user.
func TestHostileMCPServer(t *testing.T) {
	runHostileAttacks(t, pythonApp(t, "hostile_mcp", "hostile.py"), nil)
}

// runHostileAttacks runs hostileAttacks against app (named hostile_mcp),
// each adjusted for its interpreter by adjust when set, which may also say
// why the interpreter cannot make the attempt.
func runHostileAttacks(t *testing.T, app mcptest.App, adjust func(hostileAttack) (hostileAttack, string)) {
	requireSandbox(t)
	caps := sandbox.Probe()
	if !caps.UserNS || !caps.NetNS {
		t.Skipf("an external app with egress needs a network namespace of its own: %s", caps.NSDetail)
	}
	lab := mcptest.NewLab(t)
	// Long enough that the CPU limit (2 s of CPU), not the call's
	// deadline, ends the spinning server on a loaded machine too.
	app.Decl.CallTimeout = 45 * time.Second
	app.Egress = []string{mcptest.Domain}
	w := mcptest.NewWiring(t, app)
	w.Limits = hostileLimits
	sys := externalSystem(t, w, []string{"metro_hail"}, []string{"hostile_mcp"}, lab)
	targets := newHostileTargets(t, w, sys, lab)

	for _, a := range hostileAttacks() {
		t.Run(a.name, func(t *testing.T) {
			if adjust != nil {
				var why string
				if a, why = adjust(a); why != "" {
					t.Skip(why)
				}
			}
			if a.skip != nil {
				if why := a.skip(); why != "" {
					t.Skip(why)
				}
			}
			args, err := json.Marshal(a.args(targets))
			if err != nil {
				t.Fatal(err)
			}
			// The spoke logs at most 20 lines of a server's stderr a
			// second (mcp.go): paced, every attempt's line is kept.
			time.Sleep(100 * time.Millisecond)
			logsBefore := len(w.Logs.String())
			reply, err := askHub(sys, mallory, "Use hostile_mcp to "+a.function+" "+keyed(a.args(targets))+".")
			var text, answer string
			if reply != nil && reply.Record != nil {
				answer = reply.Answer
				for _, c := range reply.Record.Calls {
					if c.App == "hostile_mcp" && c.Function == a.function && c.Result != nil {
						var r struct {
							Text string `json:"untrusted_text"`
						}
						_ = json.Unmarshal(c.Result, &r)
						text = r.Text
					}
				}
			}
			logs := w.Logs.String()[logsBefore:]
			switch a.outcome {
			case blocked, refused:
				if err != nil || !strings.HasPrefix(text, "blocked: ") || !strings.Contains(strings.ToLower(text), strings.ToLower(a.errText)) {
					t.Errorf("want blocked with %q; got %q (error %v) for %s", a.errText, text, err, args)
				}
				// The server's stderr reaches the log through the spoke's own
				// log stream, which may trail the reply.
				if !logShows(w, logsBefore, "hostile: "+a.function+" -> blocked") {
					t.Errorf("the attempt is not in the log")
				}
			case killed:
				if err == nil || !strings.Contains(err.Error(), "hostile_mcp failed: the MCP server exited") {
					t.Errorf("want the server killed and the app reported failed; got %q, error %v", text, err)
				}
				if !strings.Contains(logs, "The app's MCP server failed") {
					t.Errorf("the server's death is not in the log")
				}
			case memoryBounded:
				refused := err == nil && strings.HasPrefix(text, "blocked: ") && strings.Contains(text, a.errText)
				if !refused && (err == nil || !strings.Contains(err.Error(), "over its memory limit")) {
					t.Errorf("want %q or the app reported over its memory limit; got %q, error %v", a.errText, text, err)
				}
			case allowed:
				if err != nil || !strings.HasPrefix(text, "succeeded: ") || !strings.Contains(text, a.errText) {
					t.Errorf("control: want success with %q; got %q (error %v)", a.errText, text, err)
				}
			}
			if a.outcome == refused {
				logged := strings.Contains(logs, "Egress proxy refused a request") || strings.Contains(logs, "Egress refused a TLS connection")
				if !logged || !auditDenied(t, sys) {
					t.Errorf("the refusal is neither in the log nor in the audit")
				}
			}
			if a.leak != nil {
				leak := a.leak(targets)
				record, _ := json.Marshal(reply)
				if strings.Contains(answer, leak) || strings.Contains(string(record), leak) || strings.Contains(text, leak) {
					t.Errorf("%q reached the attacker: %q", leak, text)
				}
			}
			if a.outside != nil {
				if err := a.outside(targets, evidence(t, sys, w)); err != nil {
					t.Errorf("seen from outside: %v", err)
				}
			}
			victimServed(t, sys, w)
		})
	}
}

// TestServerDiesWithItsSpoke: an external app's server does not outlive
// its spoke when nothing kills it for the spoke (the hub crashed, or only
// the spoke was killed): the spoke is PID 1 of its PID namespace, and the
// kernel ends the namespace with it.
func TestServerDiesWithItsSpoke(t *testing.T) {
	requireSandbox(t)
	if caps := sandbox.Probe(); !caps.PIDNS {
		t.Skipf("no PID namespace for spokes here, so nothing ends a server with its spoke but the hub: %s", caps.NSDetail)
	}
	w := mcptest.NewWiring(t, pythonApp(t, "words", "words.py"))
	w.Namespaces = true
	m := w.Manager(t, nil)
	if _, _, err := runFunction(t, m, "@alice:example.org", "words", "word_count", `{"text":"a b c"}`); err != nil {
		t.Fatal(err)
	}
	var spokePID int
	for k, pid := range m.PIDs() {
		if k.App == "words" {
			spokePID = pid
		}
	}
	server := childOf(spokePID)
	if spokePID == 0 || server == 0 {
		t.Fatalf("no spoke (%d) or server (%d) process", spokePID, server)
	}
	// The spoke alone, not its process group: what a crash of the hub
	// leaves (Pdeathsig kills the spoke, nothing else).
	if err := syscall.Kill(spokePID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); running(server) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server %d outlived its spoke %d", server, spokePID)
		}
	}
}

// keyed writes arguments as the obedient planner reads them: key = 'value'.
func keyed(args map[string]any) string {
	var parts []string
	for k, v := range args {
		parts = append(parts, fmt.Sprintf("%s = '%v'", k, v))
	}
	return strings.Join(parts, " and ")
}

func newHostileTargets(t *testing.T, w *mcptest.Wiring, sys *hubtest.System, lab *mcptest.Lab) *hostileTargets {
	t.Helper()
	tg := &hostileTargets{lab: lab, secret: fmt.Sprintf("mcp-secret-%d", time.Now().UnixNano()), database: filepath.Join(sys.Dir, "secgpt.db")}
	scratch, err := w.ScratchDir(spoke.Key{User: bob, App: "metro_hail"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		t.Fatal(err)
	}
	tg.victimSecret = filepath.Join(scratch, "secret.txt")
	if err := os.WriteFile(tg.victimSecret, []byte(tg.secret), 0o600); err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 {
		uid, gid = 65534, 65534
	}
	for _, p := range []string{scratch, tg.victimSecret} {
		if err := os.Lchown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	open := filepath.Join(mcptest.Dir(t), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	tg.outside, tg.marker = filepath.Join(open, "victim.txt"), filepath.Join(open, "pwned.txt")
	if err := os.WriteFile(tg.outside, []byte(tg.secret), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tg.outside, 0o666); err != nil {
		t.Fatal(err)
	}
	tg.unixSocket = filepath.Join(open, "hub.sock")
	ln, err := net.Listen("unix", tg.unixSocket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(tg.unixSocket, 0o777); err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	tg.unixAccepted = accepted.Load
	victim := exec.Command("/bin/sleep", "600")
	victim.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	tg.victimPID = victim.Process.Pid
	return tg
}

// invisibleHub is how reading the hub's /proc entry fails: in a PID
// namespace of the spoke's own the hub has no entry at all; elsewhere
// Landlock refuses it.
func invisibleHub() string {
	if sandbox.Probe().PIDNS {
		return "No such file or directory"
	}
	return "Permission denied"
}

// notInView is how a server's attempt on a host path outside its policy
// fails: in its own mount view the path does not exist; elsewhere Landlock
// refuses it.
func notInView() string {
	if sandbox.Probe().MountView {
		return "No such file or directory"
	}
	return "Permission denied"
}

// running: the process is alive (not a zombie).
func running(pid int) error {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return fmt.Errorf("process %d is gone: %v", pid, err)
	}
	if fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(fields) == 0 || fields[0] == "Z" {
		return fmt.Errorf("process %d was killed", pid)
	}
	return nil
}

// perNamespaceTaskBound says why a spoke's tasks are not bounded here, or
// "" if they are: the bound is the spoke's PID namespace's own pid_max,
// which Linux keeps per namespace since 6.14.
func perNamespaceTaskBound() string {
	if caps := sandbox.Probe(); !caps.PIDNS {
		return "no PID namespace for spokes here: " + caps.NSDetail
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return err.Error()
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil || major < 6 || major == 6 && minor < 14 {
		return "this kernel keeps no pid_max per PID namespace (Linux 6.14+): " + unix.ByteSliceToString(u.Release[:])
	}
	return ""
}

// evidence finds the attacker's spoke and server processes.
func evidence(t *testing.T, sys *hubtest.System, w *mcptest.Wiring) *hostileEvidence {
	t.Helper()
	ev := &hostileEvidence{}
	for k, pid := range sys.Spokes.PIDs() {
		if k.User == mallory && k.App == "hostile_mcp" {
			ev.spokePID = pid
			ev.serverPID = childOf(pid)
			scratch, err := w.ScratchDir(k)
			if err != nil {
				t.Fatal(err)
			}
			ev.scratch = scratch
		}
	}
	return ev
}

func auditDenied(t *testing.T, sys *hubtest.System) bool {
	t.Helper()
	audit, err := sys.Hub.Audit(context.Background(), mallory, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range audit {
		if e.Category == "egress" && e.Decision == "deny" {
			return true
		}
	}
	// The newest entry may be the answer's; look a little further.
	audit, _ = sys.Hub.Audit(context.Background(), mallory, 5)
	for _, e := range audit {
		if e.Category == "egress" && e.Decision == "deny" {
			return true
		}
	}
	return false
}

// childOf returns a child process of pid, 0 if none.
func childOf(pid int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			return child
		}
	}
	return 0
}

func fileHolds(path, want string) error {
	got, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if string(got) != want {
		return fmt.Errorf("%s changed: %q", path, got)
	}
	return nil
}

func untouched(what string, n int64) error {
	if n > 0 {
		return fmt.Errorf("the %s saw %d connections or datagrams", what, n)
	}
	return nil
}

func absent(path string) error {
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s exists (or cannot be checked: %v)", path, err)
	}
	return nil
}

// groupAtMost: the spoke's process group has at most n processes (the
// spoke and its server).
func groupAtMost(pgid, n int) error {
	if pgid == 0 {
		return errors.New("no spoke process to look at")
	}
	entries, _ := os.ReadDir("/proc")
	count := 0
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 2 && fields[2] == strconv.Itoa(pgid) {
			count++
		}
	}
	if count > n {
		return fmt.Errorf("the spoke's process group has %d processes, want at most %d", count, n)
	}
	return nil
}

func notTraced() error {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	if !strings.Contains(string(status), "TracerPid:\t0\n") {
		return errors.New("the hub is being traced")
	}
	return nil
}

func peakBelow(pid int, limit uint64) error {
	if pid == 0 {
		return errors.New("no server process to look at")
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err
	}
	// With a cgroup the bound is on memory used (the resident peak); the
	// address space is not limited. Without one it is RLIMIT_AS.
	field := "VmPeak:"
	if ok, _ := sandbox.CgroupSupport(); ok {
		field = "VmHWM:"
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return err
			}
			if kb<<10 >= limit {
				return fmt.Errorf("the server peaked at %d bytes", kb<<10)
			}
			return nil
		}
	}
	return errors.New("no " + field)
}

func sizeAtMost(path string, limit uint64) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if uint64(st.Size()) > limit {
		return fmt.Errorf("%s is %d bytes, over %d", path, st.Size(), limit)
	}
	return nil
}

func openFilesAtMost(pid int, limit uint64) error {
	if pid == 0 {
		return errors.New("no server process to look at")
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return err
	}
	if uint64(len(fds)) > limit {
		return fmt.Errorf("the server holds %d descriptors, over %d", len(fds), limit)
	}
	return nil
}

// onlyPublicDialled: the broker dialled nothing but the lab's public server.
func onlyPublicDialled(t *hostileTargets, _ *hostileEvidence) error {
	_, dials := t.lab.Network()
	for _, d := range dials {
		if !strings.HasPrefix(d, mcptest.PublicIP+":") {
			return fmt.Errorf("the broker dialled %s", d)
		}
	}
	return nil
}

// notResolved checks that the broker never resolved host: no request for it
// got past the policy.
func notResolved(t *hostileTargets, host string) error {
	lookups, _ := t.lab.Network()
	if slices.Contains(lookups, host) {
		return fmt.Errorf("the broker resolved %s", host)
	}
	return nil
}

// logShows reports whether the log written after offset shows want within
// a few seconds.
func logShows(w *mcptest.Wiring, offset int, want string) bool {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if strings.Contains(w.Logs.String()[offset:], want) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
