package spoke_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/spoke/mcptest"
)

// requireSandbox skips a test of external apps on a machine whose spokes
// cannot be confined (the spoke refuses to start them there).
func requireSandbox(t testing.TB) {
	t.Helper()
	if err := sandbox.Probe().Check(sandbox.Policy{Profile: sandbox.ProfileStrict}); err != nil {
		t.Skipf("the spoke sandbox cannot be applied on this kernel: %v", err)
	}
}

func pythonApp(t testing.TB, name, script string, args ...string) mcptest.App {
	t.Helper()
	dir := mcptest.Dir(t)
	path := mcptest.Script(t, dir, script)
	return mcptest.App{Decl: spoke.External{Name: name, Command: mcptest.Python(t), Args: append([]string{path}, args...), CallTimeout: 5 * time.Second}}
}

// runFunction runs one function of app on a spoke of m, with the plan's
// arguments already complete (no model call).
func runFunction(t testing.TB, m *spoke.Manager, user, app, function, args string) (spoke.Result, spoke.Info, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := &handler{}
	return m.Run(ctx, spoke.Key{User: user, App: app, Session: "s"}, spoke.Step{ID: "s1", Function: function, Args: json.RawMessage(args), MaxLLMCalls: 1}, h)
}

func TestDescribeExternalApps(t *testing.T) {
	requireSandbox(t)
	w := mcptest.NewWiring(t,
		pythonApp(t, "words", "words.py"),
		mcptest.App{Decl: spoke.External{Name: "gofixture", Command: mcptest.GoServer(t)}},
	)
	specs := w.Discover(t, "words", "gofixture")
	want := map[string]map[string]bool{ // function → typed
		"words":     {"word_count": true, "shout": false},
		"gofixture": {"add": true, "greet": false, "fetch": false},
	}
	for _, s := range specs {
		if s.Profile != apps.ProfileExec || s.Version == "" || s.Description == "" {
			t.Errorf("%s: spec %+v", s.Name, s)
		}
		if len(s.Functions) != len(want[s.Name]) {
			t.Errorf("%s: functions %+v, want %v", s.Name, s.Functions, want[s.Name])
		}
		for _, f := range s.Functions {
			typed, ok := want[s.Name][f.Name]
			untrusted := strings.Contains(string(f.Response), spoke.UntrustedTextField)
			if !ok || typed == untrusted {
				t.Errorf("%s.%s: response %s, want typed=%t", s.Name, f.Name, f.Response, typed)
			}
		}
	}
	if specs[0].Version != "1.0.0" || specs[1].Version != "2.1.0" || !strings.Contains(specs[1].Description, "adds numbers") {
		t.Errorf("versions or instructions not taken from the servers: %+v", specs)
	}
}

func TestExternalAppRunsItsTools(t *testing.T) {
	requireSandbox(t)
	w := mcptest.NewWiring(t,
		pythonApp(t, "words", "words.py"),
		mcptest.App{Decl: spoke.External{Name: "gofixture", Command: mcptest.GoServer(t)}},
	)
	w.Discover(t, "words", "gofixture")
	m := w.Manager(t, nil)
	tests := []struct{ app, function, args, want string }{
		{"words", "word_count", `{"text":"one two three"}`, `{"words":3}`},
		{"words", "shout", `{"text":"hello"}`, `{"untrusted_text":"HELLO!"}`},
		{"gofixture", "add", `{"a":2,"b":40}`, `{"sum":42}`},
		{"gofixture", "greet", `{"name":"Ada"}`, `{"untrusted_text":"Hello, Ada!"}`},
	}
	for _, tt := range tests {
		res, info, err := runFunction(t, m, "@alice:example.org", tt.app, tt.function, tt.args)
		if err != nil || res.Error != "" {
			t.Fatalf("%s.%s: %v %q\n%s", tt.app, tt.function, err, res.Error, w.Logs)
		}
		if string(res.Output) != tt.want {
			t.Errorf("%s.%s = %s, want %s", tt.app, tt.function, res.Output, tt.want)
		}
		if info.PID == 0 {
			t.Errorf("%s: no spoke pid", tt.app)
		}
	}
}

// TestMCPServerQuirks: what real servers do works: a banner on stdout
// before the first message is skipped with a warning; a tool that can only
// run as a task is left out of the catalogue; progress notifications are
// accepted; non-text content is described in words.
func TestMCPServerQuirks(t *testing.T) {
	requireSandbox(t)
	w := mcptest.NewWiring(t, pythonApp(t, "quirks", "failing.py", "quirks"))
	specs := w.Discover(t, "quirks")
	if fns := specs[0].Functions; len(fns) != 1 || fns[0].Name != "work" {
		t.Fatalf("functions %+v, want only work (research runs only as a task)", fns)
	}
	// The spoke's log reaches the hub on its stderr, apart from the
	// channel that carried the spoke's description: it may come after.
	logged := func() bool {
		return strings.Contains(w.Logs.String(), "not a JSON-RPC message") && strings.Contains(w.Logs.String(), "quirks server running on stdio")
	}
	for deadline := time.Now().Add(5 * time.Second); !logged() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !logged() {
		t.Errorf("the banner was not skipped with a warning:\n%s", w.Logs)
	}
	m := w.Manager(t, nil)
	res, _, err := runFunction(t, m, "@alice:example.org", "quirks", "work", `{"text":"x"}`)
	if err != nil || res.Error != "" {
		t.Fatalf("work: %v %q\n%s", err, res.Error, w.Logs)
	}
	var out struct {
		Text string `json:"untrusted_text"`
	}
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"worked", "[an image (image/png, 8 bytes), not shown]", `[a link to the resource "report" (file:///report.txt), not followed]`, "[the resource mem://note:]\na note"} {
		if !strings.Contains(out.Text, want) {
			t.Errorf("result %q lacks %q", out.Text, want)
		}
	}
	if strings.Contains(out.Text, "mcp.") {
		t.Errorf("result %q names a Go type", out.Text)
	}
}

// TestExternalAppSecrets: an app's secret reaches its server's environment
// through the spoke's fd 4, never argv or the spoke's own environment, and
// no other app sees it.
func TestExternalAppSecrets(t *testing.T) {
	requireSandbox(t)
	const secret = "sk-mcp-secret-4242"
	keeper := pythonApp(t, "keeper", "hostile.py")
	keeper.Env = map[string]string{"TOKEN": secret, "GREETING": "hi"}
	other := pythonApp(t, "other", "hostile.py")
	w := mcptest.NewWiring(t, keeper, other)
	w.Discover(t, "keeper", "other")
	m := w.Manager(t, nil)

	for app, want := range map[string]string{"keeper": "TOKEN=" + secret, "other": "TOKEN=(unset)"} {
		res, _, err := runFunction(t, m, "@alice:example.org", app, "get_env", `{"name":"TOKEN"}`)
		if err != nil || !strings.Contains(string(res.Output), "succeeded: "+want) {
			t.Fatalf("%s sees %s (error %v), want %s", app, res.Output, err, want)
		}
	}
	spokePID := 0
	for k, pid := range m.PIDs() {
		if k.App == "keeper" {
			spokePID = pid
		}
	}
	serverPID := childOf(spokePID)
	if spokePID == 0 || serverPID == 0 {
		t.Fatalf("no keeper spoke (%d) or server (%d)", spokePID, serverPID)
	}
	read := func(pid int, what string) string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, what))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, p := range []struct {
		pid  int
		what string
	}{{spokePID, "cmdline"}, {spokePID, "environ"}, {serverPID, "cmdline"}} {
		if got := read(p.pid, p.what); strings.Contains(got, secret) {
			t.Errorf("/proc/%d/%s holds the secret: %q", p.pid, p.what, got)
		}
	}
	// The control: the server's own environment does hold it, so the
	// reads above would have seen it.
	if env := read(serverPID, "environ"); !strings.Contains(env, "TOKEN="+secret) || strings.Contains(env, "PATH=") {
		t.Errorf("the server's environment is %q, want its declared variables and the proxy's only", env)
	}
}
