package spoke_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/spoke/mcptest"
)

// BenchmarkMCPRuntimes measures a Python and a Node MCP server (the words
// fixture in each; with SECGPT_MCP_SERVERS, from scripts/mcp-servers.sh,
// @modelcontextprotocol/server-memory under Node 20 and, with
// SECGPT_NODE24, under Node 24 too) under the real
// sandbox: cold, from a new user's request to the first tool result (spoke,
// cgroup, launcher, interpreter start, initialize, tools/list, the call);
// warm, one more call to the running server; and the server's resident
// memory after the calls.
func BenchmarkMCPRuntimes(b *testing.B) {
	requireSandbox(b)
	type server struct {
		name     string
		app      mcptest.App
		function string
		args     string
	}
	var servers []server
	servers = append(servers, server{"python", pythonApp(b, "words", "words.py"), "word_count", `{"text":"one two"}`})
	if node, err := exec.LookPath("node"); err == nil {
		node, _ = filepath.EvalSymlinks(node)
		dir := mcptest.Dir(b)
		script := mcptest.Script(b, dir, "words.js")
		servers = append(servers, server{"node", mcptest.App{Decl: spoke.External{Name: "nodewords", Command: node, Args: []string{script}, CallTimeout: 20 * time.Second}}, "word_count", `{"text":"one two"}`})
		if dir := os.Getenv("SECGPT_MCP_SERVERS"); dir != "" {
			mem := filepath.Join(dir, "node_modules/@modelcontextprotocol/server-memory/dist/index.js")
			memory := func(node string) mcptest.App {
				a := mcptest.App{Decl: spoke.External{Name: "memory", Command: node, Args: []string{mem},
					ReadOnly: []string{filepath.Join(dir, "node_modules")}, CallTimeout: 20 * time.Second}}
				a.Env = map[string]string{"MEMORY_FILE_PATH": spoke.ScratchPlaceholder + "/memory.jsonl"}
				return a
			}
			servers = append(servers, server{"node20_server_memory", memory(node), "read_graph", `{}`})
			if n24 := os.Getenv("SECGPT_NODE24"); n24 != "" {
				servers = append(servers, server{"node24_server_memory", memory(n24), "read_graph", `{}`})
			}
		}
	}
	for _, s := range servers {
		b.Run(s.name, func(b *testing.B) {
			w := mcptest.NewWiring(b, s.app)
			w.Discover(b, s.app.Decl.Name)
			m := w.Manager(b, nil)
			var cold, warm time.Duration
			var rss int
			for i := range b.N {
				user := fmt.Sprintf("@u%d:example.org", i)
				start := time.Now()
				if res, _, err := runFunction(b, m, user, s.app.Decl.Name, s.function, s.args); err != nil || res.Error != "" {
					b.Fatalf("cold call: %v %q\n%s", err, res.Error, w.Logs)
				}
				cold += time.Since(start)
				start = time.Now()
				if res, _, err := runFunction(b, m, user, s.app.Decl.Name, s.function, s.args); err != nil || res.Error != "" {
					b.Fatalf("warm call: %v %q", err, res.Error)
				}
				warm += time.Since(start)
				for k, pid := range m.PIDs() {
					if k.User == user {
						rss = max(rss, residentKiB(childOf(pid)))
					}
				}
				m.StopUser(user)
			}
			b.ReportMetric(float64(cold.Milliseconds())/float64(b.N), "ms-cold")
			b.ReportMetric(float64(warm.Microseconds())/1000/float64(b.N), "ms-warm")
			b.ReportMetric(float64(rss)/1024, "MiB-rss")
		})
	}
}

// residentKiB is VmRSS of pid in KiB, 0 if unknown.
func residentKiB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
