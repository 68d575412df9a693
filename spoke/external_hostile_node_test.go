package spoke_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/spoke/mcptest"
)

// nodeErrors are how Node names the errors CPython names by their text.
var nodeErrors = map[string]string{
	"Permission denied":       "EACCES",
	"Operation not permitted": "EPERM",
	"Network is unreachable":  "ENETUNREACH",
	"File too large":          "EFBIG",
	"Too many open files":     "EMFILE",
	"'127.0.0.1'":             `"127.0.0.1"`,
}

// nodeHostile says how an attack looks from hostile.js where the error
// is not merely renamed, or why Node cannot make the attempt.
var nodeHostile = map[string]struct {
	errText string
	skip    string
}{
	"allocate_memory": {errText: "RangeError"},
	// libuv holds descriptors of its own at 3 and above: fd 3 is not
	// the spoke's socket.
	"spoke_socket":    {errText: "not a socket"},
	"exec_shell":      {skip: "Node 20 has no execve (process.execve is Node 23.11+)"},
	"ptrace_attach":   {skip: "Node has no ptrace without a native addon; TestRefusedClassesFromPython makes the call"},
	"sigio_kill":      {skip: "Node has no fcntl F_SETOWN/F_SETSIG"},
	"mptcp_connect":   {skip: "Node's net module cannot ask for IPPROTO_MPTCP"},
	"thread_bomb":     {skip: "Node's worker threads are whole isolates, bounded by memory first; the cgroup's pids.max bounds tasks"},
	"tls_server_name": {skip: "hostile.js does not hand-craft ClientHellos; the Python server does"},
	"host_header":     {skip: "hostile.js does not forge Host headers; the Python server does"},
}

// nodeHTTPS are the attacks whose request is HTTPS.
var nodeHTTPS = map[string]bool{
	"CONNECT to an undeclared host through the proxy":   true,
	"CONNECT to another port through the proxy":         true,
	"egress redirected to 169.254.169.254":              true,
	"control: egress to its declared domain over HTTPS": true,
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
		if nodeHTTPS[a.name] {
			return a, "Node's fetch does not trust the test lab's CA over HTTPS here (TypeError: fetch failed): its own issue; the plain-HTTP egress attacks run"
		}
		if code, ok := nodeErrors[a.errText]; ok {
			a.errText = code
		}
		o := nodeHostile[a.function]
		if o.errText != "" {
			a.errText = o.errText
		}
		return a, o.skip
	})
}
