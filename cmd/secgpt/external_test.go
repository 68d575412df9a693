package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/spoke/mcptest"
)

// externalConfig writes a config (simulated model, fresh database and
// scratch) with metro_hail and the external apps of yamlApps, a YAML list.
func externalConfig(t *testing.T, yamlApps string) string {
	t.Helper()
	return testConfig(t, "apps:\n  installed: [metro_hail]\n  external:\n"+indent(yamlApps, "    "))
}

func indent(s, prefix string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.TrimSpace(line) != "" {
			b.WriteString(prefix)
		}
		b.WriteString(line)
	}
	return b.String()
}

func requireSpokeSandbox(t *testing.T) {
	t.Helper()
	if err := sandbox.Probe().Check(sandbox.Policy{Profile: sandbox.ProfileStrict}); err != nil {
		t.Skipf("the spoke sandbox cannot be applied on this kernel: %v", err)
	}
}

func TestExternalConfigErrorsNameTheField(t *testing.T) {
	python := mcptest.Python(t)
	dir := mcptest.Dir(t)
	script := mcptest.Script(t, dir, "words.py")
	tests := []struct{ name, app, want string }{
		{"built-in name", "- name: metro_hail\n  command: " + python, `apps.external[0].name: "metro_hail" is the name of a built-in app`},
		{"bad name", "- name: Words\n  command: " + python, `apps.external[0].name: "Words" is not a valid app name`},
		{"twice", "- name: w\n  command: " + python + "\n- name: w\n  command: " + python, `apps.external[1].name: "w" is installed twice`},
		{"relative command", "- name: w\n  command: python3", `apps.external[0].command: "python3" is not a clean absolute path`},
		{"missing command", "- name: w\n  command: /nonexistent/server", "apps.external[0].command: /nonexistent/server does not exist"},
		{"script as command", "- name: w\n  command: " + script, "apps.external[0].command: " + script + " is not an executable file"},
		{"bad dir", "- name: w\n  command: " + python + "\n  dir: " + script, "apps.external[0].dir: " + script + " is not a directory"},
		{"bad variable", "- name: w\n  command: " + python + "\n  env: {1X: y}", "apps.external[0].env.1X: is not a valid environment variable name"},
		{"reserved variable", "- name: w\n  command: " + python + "\n  env: {HTTPS_PROXY: x}", "apps.external[0].env.HTTPS_PROXY: is set by secgpt itself"},
		{"secret value in the file", "- name: w\n  command: " + python + "\n  secrets: {TOKEN: sk-123-456}", "apps.external[0].secrets.TOKEN: must name a variable of secgpt's environment"},
		{"secret and variable", "- name: w\n  command: " + python + "\n  env: {TOKEN: x}\n  secrets: {TOKEN: T}", "apps.external[0].secrets.TOKEN: is also set in env"},
		{"egress not registrable", "- name: w\n  command: " + python + "\n  egress: [api.example.com]", "apps.external[0].egress[0]: api.example.com is not a registrable domain; declare example.com"},
		{"strict profile", "- name: w\n  command: " + python + "\n  profile: strict", `apps.external[0].profile: must be exec`},
		{"small address space", "- name: w\n  command: " + python + "\n  limits: {address_space_bytes: 1048576}", "apps.external[0].limits.address_space_bytes: must be 0"},
		{"missing read-only path", "- name: w\n  command: " + python + "\n  read_only: [/nonexistent]", "apps.external[0].read_only[0]: /nonexistent does not exist"},
		{"unknown field", "- name: w\n  command: " + python + "\n  network: all", `unknown field "network"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := configFor(externalConfig(t, tt.app))
			if err == nil {
				t.Fatal("config accepted")
			}
			if msg := err.Error(); !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Fatalf("error = %q, want one line containing %q", msg, tt.want)
			}
		})
	}
	// An external app is installed: it may have limits of its own.
	cfg, _, err := configFor(testConfig(t, "apps:\n  installed: [metro_hail]\n  external:\n    - name: w\n      command: "+python+"\n      args: ["+script+"]\n"+
		"sandbox:\n  apps:\n    w: {cpu_seconds: 3}\n"))
	if err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	if l := cfg.appLimits("w"); l.CPUSeconds != 3 {
		t.Fatalf("limits of w: %+v", l)
	}
}

// TestExternalAppInAFewLines: a few lines of config install a Python MCP
// server; `secgpt apps` lists it with its functions, profile and identity,
// and `secgpt ask` uses it through the hub, confined.
func TestExternalAppInAFewLines(t *testing.T) {
	requireSpokeSandbox(t)
	script := mcptest.Script(t, mcptest.Dir(t), "words.py")
	cfg := externalConfig(t, fmt.Sprintf("- name: words\n  command: %s\n  args: [%s]\n", mcptest.Python(t), script))

	r := runBinary(t, "", "apps", "--config", cfg)
	if r.code != exitOK {
		t.Fatalf("apps: exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"words 1.0.0 (external (MCP))", "functions:   word_count shout", "profile exec", "code:        sha256:", "metro_hail 1.0.0 (built-in)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("secgpt apps lacks %q:\n%s", want, r.stdout)
		}
	}

	r = runBinary(t, "", "ask", "--config", cfg, "--user", "@alice:example.org", "--json", "Use words to count the words: word_count text = 'one two three'.")
	if r.code != exitOK {
		t.Fatalf("ask: exit %d: %s", r.code, r.stderr)
	}
	var rec hub.Record
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatalf("not a record: %v\n%s", err, r.stdout)
	}
	if !strings.Contains(rec.Answer, "words.word_count: words = 3") || len(rec.Spokes) != 1 || rec.Spokes[0].App != "words" {
		t.Fatalf("record %+v", rec)
	}
}

// TestChangedExternalAppAsksAgain: a grant names the app's identity, a
// hash of all its code and its declaration. After the script, or another
// module of its package (which the server may import), changes, the stored
// "always" grant no longer matches and the user is asked again.
func TestChangedExternalAppAsksAgain(t *testing.T) {
	requireSpokeSandbox(t)
	for _, edited := range []string{"words.py", "helper.py"} {
		t.Run(edited, func(t *testing.T) {
			dir := mcptest.Dir(t)
			script := mcptest.Script(t, dir, "words.py")
			for name, content := range map[string]string{"pyproject.toml": "[project]\nname = \"words\"\n", "helper.py": "X = 1\n"} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cfg := externalConfig(t, fmt.Sprintf("- name: words\n  command: %s\n  args: [%s]\n", mcptest.Python(t), script))
			const query = "Use words to shout text = 'hi'.\n"
			chat := func(input string) string {
				r := runBinary(t, input+"/quit\n", "chat", "--config", cfg, "--user", "tester")
				if r.code != exitOK {
					t.Fatalf("chat: exit %d: %s", r.code, r.stderr)
				}
				return r.stdout
			}
			if out := chat(query + "a\n"); !strings.Contains(out, `Run the app "words"`) || !strings.Contains(out, "HI!") {
				t.Fatalf("first run:\n%s", out)
			}
			if out := chat(query); strings.Contains(out, "permission needed") || !strings.Contains(out, "HI!") {
				t.Fatalf("the stored grant did not answer:\n%s", out)
			}
			f, err := os.OpenFile(filepath.Join(dir, edited), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString("# a new version\n"); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if out := chat(query + "o\n"); !strings.Contains(out, `Run the app "words"`) {
				t.Fatalf("a changed app was not asked for again:\n%s", out)
			}
		})
	}
}

// TestExternalAppSecretsFromTheEnvironment: a secret is read from
// secgpt's environment when the app's spoke starts; without it the app is
// not installed, with one line saying why, and the rest runs.
func TestExternalAppSecretsFromTheEnvironment(t *testing.T) {
	requireSpokeSandbox(t)
	script := mcptest.Script(t, mcptest.Dir(t), "hostile.py")
	cfg := externalConfig(t, fmt.Sprintf("- name: keeper\n  command: %s\n  args: [%s]\n  secrets: {TOKEN: SECGPT_TEST_MCP_TOKEN}\n", mcptest.Python(t), script))
	ask := func(env []string, query string) result {
		cmd := exec.Command(binary, "ask", "--config", cfg, "--user", "u", query)
		cmd.Env = append(os.Environ(), env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return result{stdout: out.String(), stderr: errb.String(), code: code}
	}
	r := ask([]string{"SECGPT_TEST_MCP_TOKEN=tok-1234"}, "Use keeper to get_env name = 'TOKEN'.")
	if r.code != exitOK || !strings.Contains(r.stdout, "TOKEN=tok-1234") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	r = ask(nil, "What does metro_hail charge from 'Main Street' to 'Elm Avenue'?")
	if r.code != exitOK || !strings.Contains(r.stdout, "51.80") {
		t.Fatalf("without the secret the rest does not run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	lines := regexp.MustCompile(`(?m)^.*External app not installed.*$`).FindAllString(r.stderr, -1)
	if len(lines) != 1 || !strings.Contains(lines[0], "$SECGPT_TEST_MCP_TOKEN is not set") {
		t.Fatalf("stderr %q, want one line saying the secret is missing", r.stderr)
	}
}

// TestDocsExampleRuns: the Python server and the config lines in
// docs/apps.md work as printed.
func TestDocsExampleRuns(t *testing.T) {
	requireSpokeSandbox(t)
	doc, err := os.ReadFile("../../docs/apps.md")
	if err != nil {
		t.Fatal(err)
	}
	server := codeBlock(t, string(doc), "```python\n")
	if server != mcptest.Source(t, "words.py") {
		t.Errorf("the docs' server differs from the tested fixture spoke/mcptest/fixtures/words.py")
	}
	dir := mcptest.Dir(t)
	path := filepath.Join(dir, "words.py")
	if err := os.WriteFile(path, []byte(server), 0o644); err != nil {
		t.Fatal(err)
	}
	yaml := codeBlock(t, string(doc), "```yaml\n")
	yaml = strings.ReplaceAll(yaml, "/opt/mcp/words.py", path)
	cfg := testConfig(t, yaml)
	r := runBinary(t, "", "ask", "--config", cfg, "--user", "u", "Use words to shout text = 'it works'.")
	if r.code != exitOK || !strings.Contains(r.stdout, "IT WORKS!") {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// codeBlock returns the first fenced block that opens with fence.
func codeBlock(t *testing.T, doc, fence string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, fence)
	if !ok {
		t.Fatalf("no %q block", strings.TrimSpace(fence))
	}
	block, _, ok := strings.Cut(rest, "```\n")
	if !ok {
		t.Fatalf("unterminated %q block", strings.TrimSpace(fence))
	}
	return block
}

// TestExternalOnlyConfig: a config may install external apps only, and an
// external app may take the name of a built-in app that is not installed
// (not of one that is).
func TestExternalOnlyConfig(t *testing.T) {
	python := mcptest.Python(t)
	script := mcptest.Script(t, mcptest.Dir(t), "words.py")
	app := "- name: metro_hail\n  command: " + python + "\n  args: [" + script + "]\n"
	cfg, _, err := configFor(testConfig(t, "apps:\n  installed: []\n  external:\n"+indent(app, "    ")))
	if err != nil {
		t.Fatalf("external apps only, one named as a built-in that is not installed: %v", err)
	}
	if e, ok := cfg.Apps.externalApp("metro_hail"); !ok || e.Command != python {
		t.Fatalf("the external metro_hail is not declared: %+v", cfg.Apps)
	}
	if _, _, err := configFor(testConfig(t, "apps:\n  installed: []\n")); err == nil || !strings.Contains(err.Error(), "must list at least one app") {
		t.Fatalf("no app at all: %v", err)
	}
}

// wordsAndBrokenConfig installs words and broken, whose server exits at
// once.
func wordsAndBrokenConfig(t *testing.T) string {
	dir := mcptest.Dir(t)
	python := mcptest.Python(t)
	return externalConfig(t, fmt.Sprintf("- name: words\n  command: %s\n  args: [%s]\n- name: broken\n  command: %s\n  args: [%s, exit]\n",
		python, mcptest.Script(t, dir, "words.py"), python, mcptest.Script(t, dir, "failing.py")))
}

// TestAppsMarksAFailedDiscovery: `secgpt apps` lists the app whose server
// could not be discovered as NOT INSTALLED, with why, and exits non-zero.
func TestAppsMarksAFailedDiscovery(t *testing.T) {
	requireSpokeSandbox(t)
	cfg := wordsAndBrokenConfig(t)
	r := runBinary(t, "", "apps", "--config", cfg)
	if r.code != exitFailed {
		t.Fatalf("apps: exit %d, want %d\n%s\n%s", r.code, exitFailed, r.stdout, r.stderr)
	}
	for _, want := range []string{"broken (external MCP app): NOT INSTALLED: ", "exiting at once", "words 1.0.0 (external (MCP))"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("secgpt apps lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "could not be discovered: [broken]") {
		t.Errorf("stderr %q does not name the app", r.stderr)
	}
}

// TestDiscoveryCachedByIdentity: the first query discovers the external
// app (starts its server); the next finds its tools in the store and
// starts no server to learn them; after the script changes, it is
// discovered again.
func TestDiscoveryCachedByIdentity(t *testing.T) {
	requireSpokeSandbox(t)
	script := mcptest.Script(t, mcptest.Dir(t), "words.py")
	cfg := testConfig(t, "logging:\n  level: info\n"+fmt.Sprintf("apps:\n  installed: []\n  external:\n    - name: words\n      command: %s\n      args: [%s]\n", mcptest.Python(t), script))
	ask := func() string {
		r := runBinary(t, "", "ask", "--config", cfg, "--user", "u", "Use words to shout text = 'cached'.")
		if r.code != exitOK || !strings.Contains(r.stdout, "CACHED!") {
			t.Fatalf("ask: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		return r.stderr
	}
	colour := regexp.MustCompile("\x1b\\[[0-9;]*m")
	cachedLine := regexp.MustCompile(`External app installed.* cached=(true|false)`)
	cached := func(stderr string) string {
		m := cachedLine.FindStringSubmatch(colour.ReplaceAllString(stderr, ""))
		if m == nil {
			t.Fatalf("no line says the app was installed:\n%s", stderr)
		}
		return m[1]
	}
	if got := cached(ask()); got != "false" {
		t.Fatalf("first query: cached = %s", got)
	}
	if got := cached(ask()); got != "true" {
		t.Fatalf("second query: cached = %s", got)
	}
	f, err := os.OpenFile(script, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("# a new version\n")
	f.Close()
	if got := cached(ask()); got != "false" {
		t.Fatalf("after a change: cached = %s", got)
	}
}

// TestAskSaysWhichAppCouldNotRun: a query naming an external app that
// could not be discovered is not answered without it: `secgpt ask` says
// which app could not run and why, and fails; the other apps still serve.
func TestAskSaysWhichAppCouldNotRun(t *testing.T) {
	requireSpokeSandbox(t)
	cfg := wordsAndBrokenConfig(t)
	r := runBinary(t, "", "ask", "--config", cfg, "--user", "u", "Use broken to work text = 'x'.")
	if r.code != exitFailed || !strings.Contains(r.stderr, "the app broken could not run: ") || !strings.Contains(r.stderr, "exiting at once") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if strings.TrimSpace(r.stdout) != "" {
		t.Errorf("an answer without the app: %q", r.stdout)
	}
	r = runBinary(t, "", "ask", "--config", cfg, "--user", "u", "Use words to shout text = 'still here'.")
	if r.code != exitOK || !strings.Contains(r.stdout, "STILL HERE!") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}

func TestNamesApp(t *testing.T) {
	for _, tt := range []struct {
		text, name string
		want       bool
	}{
		{"Use files to read", "files", true},
		{"use FILES.", "files", true},
		{"profiles and files_x", "files", false},
		{"go_memory please", "memory", false},
		{"memory", "memory", true},
	} {
		if got := namesApp(tt.text, tt.name); got != tt.want {
			t.Errorf("namesApp(%q, %q) = %v", tt.text, tt.name, got)
		}
	}
}
