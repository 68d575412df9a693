package sandboxcheck

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/apps/hostile"
	"github.com/secgpt/secgpt/apps/hostile/scripts"
)

// TestInterpreterAttacksAreTheScriptsTools: every attack made from a
// script uses a tool the script declares, with the arguments it takes;
// only the attacks on the spoke's channel, the memory hog (made by the
// allocation attack) and ptrace and threads from Node are left out, each
// with a reason.
func TestInterpreterAttacksAreTheScriptsTools(t *testing.T) {
	lab := &Lab{tcp: &streamTrap{}, udp: &packetTrap{}}
	for _, in := range Interpreters() {
		t.Run(in.Name, func(t *testing.T) {
			src, err := scripts.Source(in.Script)
			if err != nil {
				t.Fatal(err)
			}
			attacks, skipped := InterpreterAttacks(in.Script)
			if len(attacks)+len(skipped) != len(Attacks()) {
				t.Errorf("%d attacks and %d left out, want %d in all", len(attacks), len(skipped), len(Attacks()))
			}
			wantSkipped := []string{"send 10,000 frames a second", "send 10,000 requests and never read the replies",
				"ask for 64 completions of 500 KB", "keep the hub parsing refused 700 KiB model requests", "hold 1.5 GiB of memory",
				"store 640 MiB in its data through the hub"}
			if in.Script == scripts.Node {
				wantSkipped = append(wantSkipped, "ptrace the hub", "start 100,000 threads")
			}
			for _, title := range wantSkipped {
				if skipped[title] == "" {
					t.Errorf("%q is not left out with a reason: %v", title, skipped)
				}
			}
			for _, a := range append(attacks, InterpreterControls(in.Script)...) {
				declared := false
				for _, q := range []string{`tool("` + a.Function + `"`, `tool('` + a.Function + `'`} {
					declared = declared || strings.Contains(string(src), q)
				}
				if !declared {
					t.Errorf("%s: %s does not declare the tool %q", a.Name, in.Script, a.Function)
				}
				if a.Function == "resolve_name" || a.Function == "tcp_connect" || a.Function == "udp_send" {
					continue // their arguments need a running lab
				}
				for _, x := range a.args(lab) {
					if !slices.Contains(scriptTools[goFunction(a.Function)].keys, x.key) {
						t.Errorf("%s: argument %q, which %s does not take", a.Name, x.key, a.Function)
					}
				}
			}
		})
	}
}

func goFunction(tool string) string {
	for f, t := range scriptTools {
		if t.tool == tool {
			return f
		}
	}
	return ""
}

// TestServerExit reads how a server ended only from the spoke's diagnosis
// of the call in question.
func TestServerExit(t *testing.T) {
	tests := []struct{ msg, tool, want string }{
		{"hostile_py failed: the MCP server exited or closed its output during tools/call spin_cpu (killed by signal SIGXCPU: over its CPU-time limit)", "spin_cpu", "killed by signal SIGXCPU"},
		{"x failed: the MCP server exited or closed its output during tools/call ptrace_attach (killed by signal SIGSYS: it attempted a system call the sandbox forbids outright (ptrace, mount…)); its stderr: a", "ptrace_attach", "killed by signal SIGSYS"},
		{"x failed: the MCP server exited or closed its output during tools/call spin_cpu (exit status 1); its stderr: (killed by signal SIGXCPU", "spin_cpu", ""},
		{"x failed: the MCP server exited or closed its output during tools/call read_file (killed by signal SIGKILL (the CPU-time or memory limit))", "spin_cpu", ""},
		{"x failed: the MCP server did not answer within 1m0s during tools/call spin_cpu", "spin_cpu", ""},
	}
	for _, tt := range tests {
		if got := serverExit(tt.msg, tt.tool); got != tt.want {
			t.Errorf("serverExit(%q, %s) = %q, want %q", tt.msg, tt.tool, got, tt.want)
		}
	}
}

// TestJudgeScript judges the stops particular to a script on evidence
// that must and must not count as blocked.
func TestJudgeScript(t *testing.T) {
	blocked := &hostile.Result{Outcome: hostile.Blocked, Detail: "MemoryError"}
	loopback := &hostile.Result{Outcome: hostile.Succeeded, Detail: `resolved [(2, 1, 6, '', ('127.0.0.1', 80))]`}
	real := &hostile.Result{Outcome: hostile.Succeeded, Detail: `resolved [(2, 1, 6, '', ('93.184.215.14', 80))]`}
	memKill := errors.New("hostile_py failed: killed: over its memory limit of 256 MiB: the kernel killed a process of the app; ...")
	sigKill := errors.New("hostile_py failed: the MCP server exited ...")
	memory := stop{by: byReportOrKill, signals: []string{"SIGKILL"}, overMemory: true}
	spin := stop{by: byKill, signals: []string{"SIGXCPU"}}
	tests := []struct {
		name    string
		stop    stop
		e       evidence
		blocked bool
	}{
		{"memory: reported", memory, evidence{report: blocked}, true},
		{"memory: killed at its bound", memory, evidence{err: memKill, serverExit: "killed by signal SIGKILL", pid: 7}, true},
		{"memory: killed otherwise", memory, evidence{err: sigKill, serverExit: "killed by signal SIGKILL", pid: 7}, false},
		{"memory: allocated", memory, evidence{report: &hostile.Result{Outcome: hostile.Succeeded}}, false},
		{"spin: SIGXCPU", spin, evidence{err: sigKill, serverExit: "killed by signal SIGXCPU", pid: 7}, true},
		{"spin: another signal", spin, evidence{err: sigKill, serverExit: "killed by signal SIGSEGV", pid: 7}, false},
		{"spin: no exit", spin, evidence{err: sigKill, pid: 7}, false},
		{"resolver: loopback", stop{by: byOwnResolver}, evidence{report: loopback}, true},
		{"resolver: a real address", stop{by: byOwnResolver}, evidence{report: real}, false},
		{"resolver: refused", stop{by: byOwnResolver}, evidence{report: blocked}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.e.mcp, tt.e.app = true, "hostile_py"
			_, problems := judgeStop(Attack{stop: tt.stop}, &tt.e)
			if got := len(problems) == 0; got != tt.blocked {
				t.Errorf("stopped as required = %v, want %v (problems %v)", got, tt.blocked, problems)
			}
		})
	}
}
