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
// fixture in each; with SECGPT_MCP_MEMORY naming the dist/index.js of
// @modelcontextprotocol/server-memory, that server too) under the real
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
		if mem := os.Getenv("SECGPT_MCP_MEMORY"); mem != "" {
			servers = append(servers, server{"node_server_memory", mcptest.App{Decl: spoke.External{Name: "memory", Command: node, Args: []string{mem},
				ReadOnly: []string{filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(mem))))}, CallTimeout: 20 * time.Second}}, "read_graph", `{}`})
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
