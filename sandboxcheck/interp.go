package sandboxcheck

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/secgpt/secgpt/apps/hostile"
	"github.com/secgpt/secgpt/apps/hostile/scripts"
)

// Interpreter is a runtime that runs a hostile script (apps/hostile/scripts)
// as an external app, the way a user's MCP server runs.
type Interpreter struct {
	// Name names the runtime for the table.
	Name string
	// App is the external app's name.
	App string
	// Script is the script's name in apps/hostile/scripts.
	Script string
	// program is the executable looked up on PATH.
	program string
}

// Interpreters are the runtimes the check attacks from: the machine's
// python3 and node.
func Interpreters() []Interpreter {
	return []Interpreter{
		{Name: "CPython", App: "hostile_py", Script: scripts.Python, program: "python3"},
		{Name: "Node", App: "hostile_js", Script: scripts.Node, program: "node"},
	}
}

// Command returns the interpreter's ELF executable, symlinks resolved (a
// declared command must be the executable itself, not a launcher script
// such as a version manager's shim), or why there is none: the one on
// PATH, else the system's.
func (i Interpreter) Command() (string, error) {
	var tried []string
	candidates := []string{filepath.Join("/usr/bin", i.program), filepath.Join("/usr/local/bin", i.program)}
	if p, err := exec.LookPath(i.program); err == nil {
		candidates = append([]string{p}, candidates...)
	}
	for _, c := range candidates {
		p, err := filepath.EvalSymlinks(c)
		if err != nil {
			continue
		}
		if isELF(p) {
			return p, nil
		}
		tried = append(tried, p+" (not an ELF executable)")
	}
	if len(tried) == 0 {
		return "", fmt.Errorf("no %s on PATH, in /usr/bin or /usr/local/bin", i.program)
	}
	return "", fmt.Errorf("no %s executable: %s", i.program, strings.Join(tried, ", "))
}

// isELF reports whether the file at path starts as an ELF file does.
func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && string(magic[:]) == "\x7fELF"
}

// WriteScript writes the interpreter's script into dir, readable by the
// spokes' uid, and returns its path.
func (i Interpreter) WriteScript(dir string) (string, error) {
	b, err := scripts.Source(i.Script)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, i.Script)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", fmt.Errorf("failed to write hostile script: %w", err)
	}
	return path, nil
}

// scriptTools are the hostile app's functions as the scripts' tools, with
// the argument keys each tool takes. The scripts share the tool names;
// scriptOnly names the tools only some scripts have.
var scriptTools = map[string]struct {
	tool string
	keys []string
}{
	hostile.ReadFile:  {"read_file", []string{"path"}},
	hostile.WriteFile: {"write_file", []string{"path"}},
	hostile.DialTCP:   {"tcp_connect", []string{"address"}},
	hostile.DialUDP:   {"udp_send", []string{"address"}},
	hostile.DialUnix:  {"unix_connect", []string{"path"}},
	hostile.Resolve:   {"resolve_name", []string{"host"}},
	hostile.ForkBomb:  {"fork_bomb", nil},
	// run_shell forks and executes /bin/sh, as a server's child_process
	// or subprocess does.
	hostile.Execute:   {"run_shell", []string{"marker"}},
	hostile.Ptrace:    {"ptrace_attach", []string{"pid"}},
	hostile.Allocate:  {"allocate_memory", []string{"bytes"}},
	hostile.Spin:      {"spin_cpu", nil},
	hostile.BigFile:   {"big_file", []string{"path", "bytes"}},
	hostile.ManyFiles: {"many_files", []string{"count"}},
	hostile.FillDisk:  {"fill_disk", []string{"path", "count"}},
	hostile.Fetch:     {"fetch_url", []string{"url"}},
}

// leftOut says why an attack of the Go app is not made from a script.
var leftOut = map[string]map[string]string{
	"": {
		hostile.Flood: "floods the spoke's channel to the hub, which an MCP server never holds (its spoke speaks MCP to it over pipes)",
		hostile.Stall: "stalls the spoke's channel to the hub, which an MCP server never holds (its spoke speaks MCP to it over pipes)",
	},
	scripts.Node: {hostile.Ptrace: "Node has no ptrace without a native addon"},
}

// InterpreterAttacks returns the attacks of Attacks that the script makes
// with its tools, judged as the Go app's are but for what differs in an
// interpreter, and says why each other attack is not made.
func InterpreterAttacks(script string) ([]Attack, map[string]string) {
	return scriptAttacks(script, Attacks())
}

// InterpreterControls returns Controls as the script's tools.
func InterpreterControls(script string) []Attack {
	controls, _ := scriptAttacks(script, Controls())
	return controls
}

func scriptAttacks(script string, list []Attack) ([]Attack, map[string]string) {
	var out []Attack
	skipped := map[string]string{}
	for _, a := range list {
		why := leftOut[""][a.Function]
		if why == "" {
			why = leftOut[script][a.Function]
		}
		t, ok := scriptTools[a.Function]
		if why == "" && !ok {
			why = "the script has no tool for it"
		}
		if why != "" {
			skipped[a.Title] = why
			continue
		}
		out = append(out, asScript(a, t.tool, t.keys))
	}
	return out, skipped
}

// asScript turns a Go app's attack into the script's: its tool, the
// arguments the tool takes, and the differences of a server process that
// is the spoke's child.
func asScript(a Attack, tool string, keys []string) Attack {
	args := a.args
	a.Function = tool
	a.args = func(l *Lab) []arg {
		var kept []arg
		for _, x := range args(l) {
			for _, k := range keys {
				if x.key == k {
					kept = append(kept, x)
				}
			}
		}
		return kept
	}
	switch tool {
	case "fork_bomb", "run_shell":
		// The server is the spoke's one child; it must have none.
		outside := a.outside
		a.outside = func(e *evidence) error {
			if err := onlyServer(e.pid); err != nil {
				return err
			}
			if tool == "run_shell" {
				return outside(e)
			}
			return nil
		}
	case "resolve_name":
		a.stop, a.outside = stop{by: byOwnResolver}, func(e *evidence) error { return e.nothingResolvedOrDialled() }
	case "ptrace_attach":
		a.stop = stop{by: byReportOrKill, signals: []string{"SIGSYS"}}
	case "allocate_memory":
		// MemoryError (RLIMIT_AS), or the kernel kills the server at its
		// cgroup's memory bound. The Go app's address-space check looks
		// at the spoke, not at its server.
		a.stop, a.outside = stop{by: byReportOrKill, signals: []string{"SIGKILL"}, overMemory: true}, nil
	case "big_file":
		// EFBIG, or SIGXFSZ where the runtime does not ignore it.
		a.stop = stop{by: byReportOrKill, signals: []string{"SIGXFSZ"}}
	case "spin_cpu":
		a.stop = stop{by: byKill, signals: []string{"SIGXCPU", "SIGKILL"}}
	}
	return a
}
