//go:build linux && cgo

package sandbox_test

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/sandbox/sbxtest"
)

// requireNetNS skips a test of the egress proxy's profiles on a machine
// without network namespaces, where Check refuses them.
func requireNetNS(t *testing.T) sandbox.Capabilities {
	t.Helper()
	caps := sbxtest.RequireFull(t)
	if !caps.UserNS || !caps.NetNS {
		t.Skipf("network namespaces unavailable: %s", caps.NSDetail)
	}
	return caps
}

const noCapabilities = "CapInh: 0000000000000000, CapPrm: 0000000000000000, CapEff: 0000000000000000, CapAmb: 0000000000000000"

// onlySysAdmin is what a spoke in a PID and mount namespace holds after
// UpLoopback and DropCapabilities: CAP_SYS_ADMIN over its own namespaces,
// for its view, until Enter.
const onlySysAdmin = "CapInh: 0000000000200000, CapPrm: 0000000000200000, CapEff: 0000000000200000, CapAmb: 0000000000200000"

// TestProxyProfile runs what the spoke of an external app with egress
// does: in its own network namespace it brings up loopback with the
// capability Prepare gave it (then holds no network one), listens before
// Enter, and after Enter accepts but cannot open a connection of its own.
func TestProxyProfile(t *testing.T) {
	caps := requireNetNS(t)
	p := strictPolicy(t)
	p.Profile = sandbox.ProfileProxy
	out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "proxy"})
	expect{errno: "EPERM"}.check(t, out)
	want := noCapabilities
	if caps.PIDNS {
		want = onlySysAdmin
	}
	if !strings.HasPrefix(out.Detail, want) || !strings.HasSuffix(out.Detail, "; accepted") {
		t.Fatalf("detail %q, want %s after UpLoopback and the connection accepted", out.Detail, want)
	}
	found := false
	for _, pr := range out.Report.Protections {
		if pr.Name == "network namespace" {
			found = pr.On
		}
		if pr.Name == "capabilities" && !caps.PIDNS {
			t.Errorf("Enter found capabilities to drop after UpLoopback: %+v", pr)
		}
	}
	if !found {
		t.Fatalf("no network namespace in the report %+v", out.Report)
	}
}

// TestProxyProfileDropsCapabilities: a proxy spoke that never calls
// UpLoopback still runs without a capability after Enter.
func TestProxyProfileDropsCapabilities(t *testing.T) {
	requireNetNS(t)
	p := strictPolicy(t)
	p.Profile = sandbox.ProfileProxy
	out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "caps"})
	expect{allowed: true}.check(t, out)
	if out.Detail != noCapabilities {
		t.Fatalf("capabilities after Enter: %q", out.Detail)
	}
	dropped := false
	for _, pr := range out.Report.Protections {
		dropped = dropped || (pr.Name == "capabilities" && pr.On)
	}
	if !dropped {
		t.Fatalf("Enter did not report the dropped capability: %+v", out.Report)
	}
}

// TestStrictHasNoCapabilities: a strict spoke runs with no capability: the
// one it may hold for its PID namespace (see SetUpNamespaces) is gone by
// the time it runs app code, and the proxy's is the proxy profile's alone.
func TestStrictHasNoCapabilities(t *testing.T) {
	requireNetNS(t)
	p := strictPolicy(t)
	p.Namespaces = true
	out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "caps"})
	expect{allowed: true}.check(t, out)
	if out.Detail != noCapabilities {
		t.Fatalf("capabilities of a strict spoke: %q", out.Detail)
	}
}

// TestExecNetProfile runs a C program as ExecPath under exec_net: it may
// connect over TCP/IPv4 to the proxy's port and to ports 80 and 443, and
// send UDP to loopback (all of which here find loopback down: the network
// namespace is its own), and has no other way out.
func TestExecNetProfile(t *testing.T) {
	caps := requireNetNS(t)
	helper := sbxtest.NetHelper(t)
	p := strictPolicy(t)
	p.Profile, p.ExecPath, p.ProxyPort, p.Namespaces = sandbox.ProfileExecNet, helper, 41234, true
	out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "exec", Args: []string{helper, "41234", "41235"}})
	if out.ExitCode != 0 {
		t.Fatalf("exit %d signal %v\nstdout: %s\nstderr: %s", out.ExitCode, out.Signal, out.Stdout, tail(out.Stderr))
	}
	steps := helperSteps(t, out.Stdout)
	other := "EACCES" // Landlock's TCP rules
	if caps.LandlockABI < 4 {
		other = "ENETUNREACH"
	}
	want := map[string]string{
		"connect_proxy_port": "ENETUNREACH",
		"connect_http_port":  "ENETUNREACH",
		"connect_https_port": "ENETUNREACH",
		"connect_other_port": other,
		// UDP for DNS: a datagram has nowhere to go but the loopback
		// of the spoke's namespace, where only its resolver listens.
		"socket_udp":          "ok",
		"socket_udplite":      "EPERM",
		"udp_sendto_address":  "EPERM",
		"udp_connect_outside": "ENETUNREACH",
		"socket_inet6":        "EPERM",
		"socket_unix":         "EPERM",
		"socketpair_dgram":    "EPERM",
		"socketpair_stream":   "ok",
		"bind":                "EPERM",
		"listen":              "EPERM",
		"sendto_address":      "EPERM",
	}
	for step, w := range want {
		if steps[step] != w {
			t.Errorf("%s: got %q, want %q (all: %v)", step, steps[step], w, steps)
		}
	}
}

// TestExecHasNoNetwork: the exec profile without egress cannot even make
// the TCP socket exec_net may.
func TestExecHasNoNetwork(t *testing.T) {
	sbxtest.RequireFull(t)
	helper := sbxtest.NetHelper(t)
	p := strictPolicy(t)
	p.Profile, p.ExecPath = sandbox.ProfileExec, helper
	out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "exec", Args: []string{helper, "41234", "41235"}})
	if steps := helperSteps(t, out.Stdout); steps["connect_proxy_port"] != "EPERM" || steps["socket_udp"] != "EPERM" {
		t.Fatalf("exec profile: %v", steps)
	}
}

func helperSteps(t *testing.T, stdout string) map[string]string {
	t.Helper()
	steps := map[string]string{}
	for line := range strings.Lines(stdout) {
		var s struct {
			Step  string `json:"step"`
			OK    bool   `json:"ok"`
			Errno int    `json:"errno"`
		}
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			continue // the sbxchild's own result line
		}
		if s.Step == "" {
			continue
		}
		steps[s.Step] = "ok"
		if !s.OK {
			steps[s.Step] = unix.ErrnoName(syscall.Errno(s.Errno))
		}
	}
	return steps
}

// TestNetworkProfilesNeedANamespace simulates a kernel without network
// namespaces: Prepare refuses the proxy's profiles, unless the operator
// allowed a weaker sandbox; then it gives no capability either.
func TestNetworkProfilesNeedANamespace(t *testing.T) {
	restore := sandbox.SetCapabilities(sandbox.Capabilities{Seccomp: true, LandlockABI: 7, NoNewPrivs: true, UserNS: true, NSDetail: "simulated"})
	defer restore()
	p := sandbox.Policy{Profile: sandbox.ProfileProxy}
	cmd := exec.Command("/bin/true")
	if err := sandbox.Prepare(cmd, p); !errors.Is(err, sandbox.ErrUnprotected) || !strings.Contains(err.Error(), "network namespace") {
		t.Fatalf("Prepare without a network namespace: %v", err)
	}
	p.AllowWeaker = true
	if err := sandbox.Prepare(cmd, p); err != nil {
		t.Fatalf("Prepare with AllowWeaker: %v", err)
	}
	if len(cmd.SysProcAttr.AmbientCaps) != 0 || cmd.SysProcAttr.Cloneflags&unix.CLONE_NEWNET != 0 {
		t.Fatalf("attr %+v: want no capability and no network namespace", cmd.SysProcAttr)
	}
}
