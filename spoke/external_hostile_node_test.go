package spoke_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/spoke/mcptest"
)

// nodeHostile says how each attack looks from hostile.js: Node names an
// error by its code (EACCES) and message, and a few attempts need what
// Node has no API for.
var nodeHostile = map[string]struct {
	errText string
	outcome hostileOutcome
	skip    string
}{
	"tcp_connect":     {errText: "EACCES"},
	"udp_send":        {errText: "EPERM"},
	"unix_connect":    {errText: "EPERM"},
	"resolve_name":    {errText: "EAI_AGAIN"},
	"fork_bomb":       {errText: "EPERM"},
	"run_shell":       {errText: "EPERM"},
	"allocate_memory": {errText: "RangeError"},
	"big_file":        {errText: "EFBIG"},
	"bypass_proxy":    {errText: "EACCES"},
	// libuv holds descriptors of its own at 3 and above: fd 3 is not
	// the spoke's socket.
	"spoke_socket":  {errText: "not a socket"},
	"exec_shell":    {skip: "Node 20 has no execve (process.execve is Node 23.11+)"},
	"ptrace_attach": {skip: "Node has no ptrace without a native addon; TestRefusedClassesFromPython makes the call"},
	"sigio_kill":    {skip: "Node has no fcntl F_SETOWN/F_SETSIG"},
	"mptcp_connect": {skip: "Node's net module cannot ask for IPPROTO_MPTCP"},
	"thread_bomb":   {skip: "Node's worker threads are whole isolates, bounded by memory first; the cgroup's pids.max bounds tasks"},
	"fetch_url":     {skip: "Node's fetch ignores HTTP(S)_PROXY: egress from Node awaits the transparent egress of issue 10 (part B)"},
}

// TestHostileMCPServerNode repeats the hostile attacks from Node (the
// machine's Node 20) under the exec_net profile, each blocked as from
// Python.
func TestHostileMCPServerNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("no node on this machine: %v", err)
	}
	node, _ = filepath.EvalSymlinks(node)
	script := mcptest.Script(t, mcptest.Dir(t), "hostile.js")
	app := mcptest.App{Decl: spoke.External{Name: "hostile_mcp", Command: node, Args: []string{script}}}
	runHostileAttacks(t, app, func(a hostileAttack) (hostileAttack, string) {
		o, ok := nodeHostile[a.function]
		if !ok {
			return a, ""
		}
		if o.errText != "" {
			a.errText = o.errText
		}
		if o.outcome != 0 {
			a.outcome = o.outcome
		}
		return a, o.skip
	})
}
