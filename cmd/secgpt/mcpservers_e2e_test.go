//go:build e2e

package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/secgpt/secgpt/spoke/mcptest"
)

// The ecosystem's MCP servers, as scripts/mcp-servers.sh installs them
// (scripts/test.sh exports its lines), run confined through the built
// binary and the obedient simulated model: discovery, a real call with the
// right answer, state per user and across restarts (each `secgpt ask` is
// a new process) where the server keeps state.

// The binary under test has the e2e broker's test resolver (egress_e2e.go).
func init() { binaryTags = "e2e" }

// mcpServers is what scripts/mcp-servers.sh printed.
type mcpServers struct {
	dir, node24, python string
}

func (s mcpServers) pkg(name string) string {
	return filepath.Join(s.dir, "node_modules", name)
}

func (s mcpServers) nodeModules() string { return filepath.Join(s.dir, "node_modules") }

func installedMCPServers(t *testing.T) mcpServers {
	t.Helper()
	requireSpokeSandbox(t)
	s := mcpServers{dir: os.Getenv("SECGPT_MCP_SERVERS"), node24: os.Getenv("SECGPT_NODE24"), python: os.Getenv("SECGPT_MCP_PYTHON")}
	if s.dir == "" || s.node24 == "" || s.python == "" {
		t.Fatal("the MCP server tests need the servers: eval the lines of scripts/mcp-servers.sh into the environment (scripts/test.sh does)")
	}
	return s
}

// notesScript copies the Python server where every uid may read it.
func (s mcpServers) notesScript(t *testing.T) string {
	t.Helper()
	script := filepath.Join(mcptest.Dir(t), "notes.py")
	src, err := os.ReadFile(s.python)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	return script
}

// mcpApp is one server's declaration in the config, as a YAML list item.
type mcpApp struct{ name, yaml string }

// nodeApp declares a Node server of an npm package: node runs its entry
// script; the install's node_modules are readable (its code).
func (s mcpServers) nodeApp(name, node, entry string, extra string) mcpApp {
	return mcpApp{name, fmt.Sprintf("- name: %s\n  command: %s\n  args: [%s]\n  read_only: [%s]\n%s",
		name, node, entry, s.nodeModules(), extra)}
}

// askAs runs one query for user against cfg and returns its answer.
func askAs(t *testing.T, cfg, user, query string) string {
	t.Helper()
	r := runBinary(t, "", "ask", "--config", cfg, "--user", user, query)
	if r.code != exitOK {
		t.Fatalf("ask %q as %s: exit %d\nstdout: %s\nstderr: %s", query, user, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func wantIn(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s: %q lacks %q", what, got, w)
		}
	}
}

func TestEcosystemMCPServers(t *testing.T) {
	s := installedMCPServers(t)
	node20 := "/usr/bin/node"
	if _, err := os.Stat(node20); err != nil {
		t.Fatalf("the machine's Node: %v", err)
	}
	// The filesystem server's root, readable to every uid (spokes run as
	// 65534).
	root := mcptest.Dir(t)
	if err := os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello from the filesystem server\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := s.notesScript(t)
	servers := []mcpApp{
		s.nodeApp("files", s.node24, filepath.Join(s.pkg("@modelcontextprotocol/server-filesystem"), "dist/index.js")+", "+root, ""),
		s.nodeApp("memory", node20, filepath.Join(s.pkg("@modelcontextprotocol/server-memory"), "dist/index.js"), "  env: {MEMORY_FILE_PATH: \"{scratch}/memory.jsonl\"}\n"),
		s.nodeApp("everything", node20, filepath.Join(s.pkg("@modelcontextprotocol/server-everything"), "dist/index.js")+", stdio", ""),
		s.nodeApp("thinking", s.node24, filepath.Join(s.pkg("@modelcontextprotocol/server-sequential-thinking"), "dist/index.js"), ""),
		s.nodeApp("fetcher", s.node24, filepath.Join(s.pkg("@tokenizin/mcp-npx-fetch"), "dist/index.js"), "  egress: [example.org]\n"),
		{"notes", fmt.Sprintf("- name: notes\n  command: /usr/bin/python3\n  args: [%s]\n", script)},
		{"go_memory", fmt.Sprintf("- name: go_memory\n  command: %s\n  args: [-memory, memory.json]\n", filepath.Join(s.dir, "bin", "go-memory-server"))},
	}
	var yaml strings.Builder
	for _, a := range servers {
		yaml.WriteString(a.yaml)
	}
	cfg := testConfig(t, "apps:\n  installed: []\n  external:\n"+indent(yaml.String(), "    "))

	// A query that uses no app: the first discovers every server (the
	// store holds nothing yet); the next finds them in the store.
	const noApp = "What is the capital of France?"
	timedAsk := func() time.Duration {
		start := time.Now()
		askAs(t, cfg, "@carol:example.org", noApp)
		return time.Since(start)
	}
	first, cached := timedAsk(), timedAsk()
	t.Logf("a query that uses none of the %d servers: %v with discovery (the first), %v with discovery cached", len(servers), first.Round(time.Millisecond), cached.Round(time.Millisecond))

	// Discovery: every server starts confined and lists its tools.
	r := runBinary(t, "", "apps", "--config", cfg)
	if r.code != exitOK {
		t.Errorf("secgpt apps: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for app, fns := range map[string][]string{
		"files":      {"read_text_file", "list_allowed_directories"},
		"memory":     {"create_entities", "read_graph"},
		"everything": {"get_sum", "echo"},
		"thinking":   {"sequentialthinking"},
		"fetcher":    {"fetch_txt"},
		"notes":      {"write_note", "rename_note", "delete_note"},
		"go_memory":  {"create_entities", "read_graph"},
	} {
		wantIn(t, "secgpt apps, "+app, appBlock(r.stdout, app), fns...)
	}
	if strings.Contains(appBlock(r.stdout, "everything"), "simulate_research_query") {
		t.Error("a tool that runs only as a task is in the catalogue")
	}

	const alice, bob = "@alice:example.org", "@bob:example.org"
	// The internet, for the binary built with the e2e tag: example.org is
	// this loopback server, reached only through the egress broker.
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "page %s served to the broker\n", r.URL.Path)
	}))
	defer web.Close()
	t.Setenv("SECGPT_E2E_EGRESS", "example.org="+web.Listener.Addr().String())
	t.Run("filesystem", func(t *testing.T) {
		out := askAs(t, cfg, alice, fmt.Sprintf("Use files to read text file: path = '%s'", filepath.Join(root, "hello.txt")))
		wantIn(t, "read_text_file", out, "hello from the filesystem server")
	})
	t.Run("everything", func(t *testing.T) {
		wantIn(t, "get_sum", askAs(t, cfg, alice, "Use everything to get sum: a = '2' b = '40'"), "42")
		wantIn(t, "echo", askAs(t, cfg, alice, "Use everything to echo: message = 'confined and well'"), "confined and well")
	})
	t.Run("sequential thinking", func(t *testing.T) {
		out := askAs(t, cfg, alice, "Use thinking for sequentialthinking: thought = 'first check the map' nextThoughtNeeded = 'false' thoughtNumber = '1' totalThoughts = '1'")
		wantIn(t, "sequentialthinking", out, "thoughtNumber", "1")
	})
	for _, app := range []string{"memory", "go_memory"} {
		t.Run(app+" keeps state per user", func(t *testing.T) {
			askAs(t, cfg, alice, fmt.Sprintf(`Use %s to create entities: %s__create_entities {"entities":[{"name":"Ada","entityType":"person","observations":["drinks tea"]}]}`, app, app))
			// A new process: the graph was kept on disk, in alice's scratch.
			wantIn(t, "alice's graph", askAs(t, cfg, alice, "Use "+app+" to read graph."), "Ada", "drinks tea")
			if out := askAs(t, cfg, bob, "Use "+app+" to read graph."); strings.Contains(out, "Ada") {
				t.Errorf("bob sees alice's graph: %s", out)
			}
		})
	}
	t.Run("notes create, rename and delete files", func(t *testing.T) {
		wantIn(t, "write", askAs(t, cfg, alice, "Use notes to write note: name = 'todo' text = 'buy milk'"), "todo")
		wantIn(t, "rename", askAs(t, cfg, alice, "Use notes to rename note: old = 'todo' new = 'done'"), "done")
		wantIn(t, "read", askAs(t, cfg, alice, "Use notes to read note: name = 'done'"), "buy milk")
		if out := askAs(t, cfg, bob, "Use notes to list notes"); strings.Contains(out, "done") {
			t.Errorf("bob sees alice's notes: %s", out)
		}
		out := askAs(t, cfg, alice, "Use notes to delete note: name = 'done'")
		if strings.Contains(out, "done") || strings.Contains(out, "Error") {
			t.Errorf("delete: %s", out)
		}
	})
	t.Run("fetch reaches a declared domain through the broker", func(t *testing.T) {
		out := askAs(t, cfg, alice, "Use fetcher to fetch txt: url = 'http://example.org/page'")
		wantIn(t, "fetch of the declared domain", out, "served to the broker")
	})
	t.Run("fetch is refused an undeclared domain", func(t *testing.T) {
		r := runBinary(t, "", "ask", "--config", cfg, "--user", alice, "Use fetcher to fetch txt: url = 'http://undeclared.example.net/page'")
		if strings.Contains(r.stdout, "served to the broker") {
			t.Errorf("an undeclared domain was reached: %s", r.stdout)
		}
		wantIn(t, "fetch of an undeclared domain", r.stdout+r.stderr, "example.net")
	})
}

// appBlock is app's entry in the output of `secgpt apps`: its first line
// and the indented lines after it.
func appBlock(out, app string) string {
	var b strings.Builder
	in := false
	for _, l := range strings.SplitAfter(out, "\n") {
		switch {
		case strings.HasPrefix(l, app+" "):
			in = true
		case !strings.HasPrefix(l, "  "):
			in = false
		}
		if in {
			b.WriteString(l)
		}
	}
	return b.String()
}

// TestMCPServerLatency measures, for a Node and a Python server, the time
// from query to answer: cold (discovery, then the spoke and server start),
// with discovery cached (a new secgpt process: spoke and server start),
// and warm (the user's spoke and its server already running, in one chat);
// and the resident memory of the running server. It logs the figures (the
// README's table); it asserts only that each answer is right.
func TestMCPServerLatency(t *testing.T) {
	s := installedMCPServers(t)
	script := s.notesScript(t)
	memoryEntry := filepath.Join(s.pkg("@modelcontextprotocol/server-memory"), "dist/index.js")
	for _, tt := range []struct {
		name, yaml, query, want, process string
	}{
		{"node memory", s.nodeApp("memory", "/usr/bin/node", memoryEntry, "  env: {MEMORY_FILE_PATH: \"{scratch}/memory.jsonl\"}\n").yaml,
			"Use memory to read graph.", "memory.read_graph", memoryEntry},
		{"python notes", fmt.Sprintf("- name: notes\n  command: /usr/bin/python3\n  args: [%s]\n", script),
			"Use notes to list notes", "notes.list_notes", script},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, "apps:\n  installed: []\n  external:\n"+indent(tt.yaml, "    "))
			timed := func() time.Duration {
				start := time.Now()
				wantIn(t, "answer", askAs(t, cfg, "@alice:example.org", tt.query), tt.want)
				return time.Since(start)
			}
			cold, cached := timed(), timed()

			cmd, stdin, out := startChat(t, cfg, "@alice:example.org")
			defer cmd.Wait()
			defer stdin.Close()
			fmt.Fprintln(stdin, tt.query)
			waitFor(t, out, "Run the app")
			fmt.Fprintln(stdin, "a")
			waitForCount(t, out, tt.want, 1)
			start := time.Now()
			fmt.Fprintln(stdin, tt.query)
			waitForCount(t, out, tt.want, 2)
			warm := time.Since(start)
			rss := residentKiB(tt.process)
			t.Logf("%s: query to answer: cold %v, discovery cached %v, warm %v; server resident memory %d KiB",
				tt.name, cold.Round(time.Millisecond), cached.Round(time.Millisecond), warm.Round(time.Millisecond), rss)
		})
	}
}

func waitForCount(t *testing.T, out *syncBuffer, want string, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for strings.Count(out.String(), want) < n {
		if time.Now().After(deadline) {
			t.Fatalf("not %d of %q in:\n%s", n, want, out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// residentKiB is the VmRSS of the process whose command line holds arg.
func residentKiB(arg string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		argv0, _, _ := strings.Cut(string(cmdline), "\x00")
		if err != nil || !strings.Contains(string(cmdline), arg) || strings.Contains(filepath.Base(argv0), "secgpt") {
			continue // not the server, or its spoke
		}
		status, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		for line := range strings.Lines(string(status)) {
			var kib int
			if _, err := fmt.Sscanf(line, "VmRSS: %d kB", &kib); err == nil {
				return kib
			}
		}
	}
	return 0
}

// TestAppsAddFromNPM: the README's `secgpt apps add npm:…` installs the
// pinned package into the directory given, and its printed entry, pasted
// in a config, installs a server that answers.
func TestAppsAddFromNPM(t *testing.T) {
	installedMCPServers(t)
	into := mcptest.Dir(t)
	r := runBinary(t, "", "apps", "add", "--into", into, "--node", "/usr/bin/node", "npm:@modelcontextprotocol/server-memory@2026.8.31")
	if r.code != exitOK {
		t.Fatalf("apps add: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	wantIn(t, "apps add", r.stdout, "- name: memory", "command: /usr/", filepath.Join(into, "@modelcontextprotocol+server-memory@2026.8.31", "node_modules"), "memory_bytes: 1073741824, open_files: 1024")
	entry := r.stdout + "  env: {MEMORY_FILE_PATH: \"{scratch}/memory.jsonl\"}\n"
	cfg := testConfig(t, "apps:\n  installed: []\n  external:\n"+indent(entry, "    "))
	out := askAs(t, cfg, "@alice:example.org", `Use memory to create entities: memory__create_entities {"entities":[{"name":"Grace","entityType":"person","observations":["wrote a compiler"]}]}`)
	wantIn(t, "create_entities", out, "Grace")
}
