package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/spoke/spoketest"
)

// binary is the secgpt binary under test, built by TestMain without the race
// detector (spokes run under an address-space limit it could not meet) and
// placed where the spokes' unprivileged uid can execute it.
var binary string

// spokeBin is the spoke binary under test, beside binary.
var spokeBin string

// binaryTags are build tags the tested binary gets beyond spoketest's:
// e2e in the end-to-end suite (its egress broker's test resolver).
var binaryTags string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "secgpt-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if err := os.Chmod(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		binary = filepath.Join(dir, "secgpt")
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		args := append([]string{"build"}, spoketest.BuildArgs...)
		if binaryTags != "" {
			args = append(args, "-tags", spoketest.BuildArgs[1]+","+binaryTags)
		}
		build := exec.Command(goTool, append(args, "-o", binary, ".")...)
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "failed to build secgpt: %v\n%s", err, out)
			return 1
		}
		// The spoke binary, beside secgpt as make build puts it.
		spokeBin = filepath.Join(dir, spokeBinaryName)
		build = exec.Command(goTool, append(args, "-o", spokeBin, "../secgpt-spoke")...)
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "failed to build secgpt-spoke: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}())
}

// testConfig writes a config using the simulated model, with its database
// and scratch directories in fresh temporary directories.
func testConfig(t *testing.T, extra string) string {
	t.Helper()
	dir := t.TempDir()
	scratch, err := os.MkdirTemp("", "secgpt-scratch-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeScratch(t, scratch) })
	if err := os.Chmod(scratch, 0o711); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("llm:\n  provider: simulator\ndatabase: %s\nspokes:\n  scratch_dir: %s\n%s", filepath.Join(dir, "secgpt.db"), filepath.Join(scratch, "s"), extra)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

type result struct {
	stdout, stderr string
	code           int
}

func runBinary(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Stdin = strings.NewReader(stdin)
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

func TestConfigErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown field", "llm:\n  modle: x\n", `unknown field "modle" in llm`},
		{"bad provider", "llm:\n  provider: gpt\n", "llm.provider: must be openai or simulator"},
		{"bad base URL", "llm:\n  base_url: ftp://x\n", "llm.base_url: must be an http or https URL"},
		{"key in the file", "llm:\n  api_key_env: sk-123-456\n", "llm.api_key_env: must name an environment variable"},
		{"missing planner model", "llm:\n  models:\n    planner: \"\"\n", "llm.models.planner: is required"},
		{"model on an unknown endpoint", "llm:\n  models:\n    spoke: {endpoint: big, model: qwen3}\n", `llm.models.spoke.endpoint: no endpoint named "big"`},
		{"model with a typo", "llm:\n  models:\n    spoke: {endpiont: big, model: qwen3}\n", `unknown field "endpiont" in a model`},
		{"endpoint without a URL", "llm:\n  endpoints:\n    big: {timeout: 1m}\n", "llm.endpoints.big.base_url: must be an http or https URL"},
		{"endpoint with a key in the file", "llm:\n  endpoints:\n    big: {base_url: \"http://x/v1\", api_key_env: sk-1}\n", "llm.endpoints.big.api_key_env: must name an environment variable"},
		{"unknown profile", "llm:\n  provider: simulator\n  simulator:\n    profile: tgi\n", "llm.simulator.profile: must be one of"},
		{"unknown app", "apps:\n  installed: [email, teleport]\n", `apps.installed[1]: no built-in app named "teleport"`},
		{"bad policy", "consent:\n  out_of_plan: maybe\n", "consent.out_of_plan: must be ask or deny"},
		{"bad duration", "deadlines:\n  step: soon\n", "config: "},
		{"negative budget", "budgets:\n  max_plan_steps: -1\n", "budgets.max_plan_steps: must be positive"},
		{"address space too small", "sandbox:\n  address_space_bytes: 1048576\n", "sandbox.address_space_bytes: must be 0"},
		{"scratch too small", "sandbox:\n  disk_bytes: 1024\n", "sandbox.disk_bytes: must be 0"},
		{"negative scratch age", "spokes:\n  disk: {max_idle: -1h}\n", "spokes.disk.max_idle: must be 0"},
		{"scratch holding the database", "database: /srv/secgpt/scratch/secgpt.db\nspokes:\n  scratch_dir: /srv/secgpt/scratch\n", "spokes.scratch_dir: holds the database"},
		{"per-app limits for an unknown app", "sandbox:\n  apps:\n    ghost: {cpu_seconds: 3}\n", "sandbox.apps.ghost: names an app that is not installed"},
		{"bad log level", "logging:\n  level: loud\n", "logging.level: must be"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := configFor(path)
			if err == nil {
				t.Fatal("config accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Fatalf("error = %q, want one line containing %q", msg, tt.want)
			}
		})
	}
}

func TestExampleConfigIsValid(t *testing.T) {
	cfg, _, err := configFor("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LLM.APIKeyEnv != "OPENAI_API_KEY" || len(cfg.Apps.Installed) == 0 {
		t.Fatalf("unexpected example config: %+v", cfg)
	}
}

func TestBadConfigExitsWithConfigCode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("consent:\n  out_of_plan: maybe\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runBinary(t, "", "ask", "--config", path, "--user", "u", "hi")
	if r.code != exitConfig || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "consent.out_of_plan") {
		t.Fatalf("exit %d, stderr %q; want exit %d and one line naming the field", r.code, r.stderr, exitConfig)
	}
}

func TestCaseStudiesAsPromised(t *testing.T) {
	r := runBinary(t, "", "casestudy", "--mode", "both", "--json")
	if r.code != 0 {
		t.Fatalf("casestudy exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	checkCaseRows(t, r.stdout)
}

// checkCaseRows checks `casestudy --mode both --json` output: in isolated
// mode no attack and every task done; in vanilla mode every attack.
func checkCaseRows(t *testing.T, out string) {
	t.Helper()
	var rows []struct {
		Case   string `json:"case"`
		Mode   string `json:"mode"`
		Attack bool   `json:"attack_succeeded"`
		Task   bool   `json:"task_done"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 14 {
		t.Fatalf("rows = %d, want 7 cases (the paper's four, ACE's three) × 2 modes", len(rows))
	}
	for _, row := range rows {
		switch row.Mode {
		case "isolated":
			if row.Attack || !row.Task {
				t.Errorf("%s isolated: attack=%t task=%t", row.Case, row.Attack, row.Task)
			}
		case "vanilla":
			if !row.Attack {
				t.Errorf("%s vanilla: the attack did not succeed, so the case tests nothing", row.Case)
			}
		}
	}
}

func TestAskJSONRecordsSpokesAndConsents(t *testing.T) {
	cfg := testConfig(t, "")
	r := runBinary(t, "", "ask", "--config", cfg, "--user", "@alice:example.org", "--json",
		"Could you please use both metro_hail and quick_ride to calculate the fares for a trip from 'Main Street' to 'Elm Avenue'? Compare the fares and select the cheaper option.")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var rec hub.Record
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatalf("not a record: %v\n%s", err, r.stdout)
	}
	fares := map[string]string{}
	pids := map[string]int{}
	for _, c := range rec.Calls {
		var res struct {
			Fare json.Number `json:"fare"`
		}
		_ = json.Unmarshal(c.Result, &res)
		fares[c.App] = res.Fare.String()
		pids[c.App] = c.SpokePID
	}
	if fares["metro_hail"] != "51.80" || fares["quick_ride"] != "57.00" {
		t.Fatalf("fares = %v", fares)
	}
	if pids["metro_hail"] == 0 || pids["metro_hail"] == pids["quick_ride"] {
		t.Fatalf("spoke pids = %v, want two child processes", pids)
	}
	if len(rec.Consents) != 2 || rec.Plan == nil || len(rec.Plan.Steps) != 2 {
		t.Fatalf("record lacks the plan or the consents: %+v", rec)
	}
}

func TestAskDenyAllNamesTheApp(t *testing.T) {
	cfg := testConfig(t, "")
	r := runBinary(t, "", "ask", "--config", cfg, "--user", "u", "--consent", "deny-all", "Use metro_hail from 'A' to 'B'.")
	if r.code != exitFailed || !strings.Contains(r.stderr, "you did not allow metro_hail to run") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestChatAsksInTheTerminal(t *testing.T) {
	cfg := testConfig(t, "")
	r := runBinary(t, "Use metro_hail from 'Main Street' to 'Elm Avenue'.\nx\no\n/grants\n/usage\n/quit\n", "chat", "--config", cfg, "--user", "tester")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"permission needed (exec)", `Run the app "metro_hail"`, "please answer with one of the choices", "fare = 51.80", "no stored permissions",
		"of your 2000000 tokens a day, at most 250000 for one request", "  the assistant: "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("chat output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestChatAsksOncePerRequest: the ride query's two apps are one question
// in the terminal, answered for all at once, where an app can be refused.
func TestChatAsksOncePerRequest(t *testing.T) {
	cfg := testConfig(t, "")
	query := "Could you please use both metro_hail and quick_ride to calculate the fares for a trip from 'Main Street' to 'Elm Avenue'? Compare the fares and select the cheaper option."
	r := runBinary(t, query+"\nonce except nobody\nonce except quick_ride\n/quit\n", "chat", "--config", cfg, "--user", "tester")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if n := strings.Count(r.stdout, "--- permission needed"); n != 1 {
		t.Errorf("prompts = %d, want 1:\n%s", n, r.stdout)
	}
	for _, want := range []string{"2 questions, one answer", "1. [metro_hail]", "2. [quick_ride]", "answer within 5 minutes", "please answer with one of the choices", "fare = 51.80", "quick_ride was not run: you did not allow quick_ride to run"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("chat output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestChatUnansweredConsentIsDenied(t *testing.T) {
	cfg := testConfig(t, "consent:\n  timeout: 300ms\n")
	// The prompt gets no line before its deadline; end of input comes later.
	cmd, stdin, out := startChat(t, cfg, "tester")
	fmt.Fprintln(stdin, "Use metro_hail from 'A' to 'B'.")
	waitFor(t, out, "metro_hail was not run: you did not answer in time")
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("chat: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "you did not answer in time: nothing was allowed") || strings.Contains(out.String(), "did not allow") {
		t.Fatalf("output:\n%s", out.String())
	}
}

// startChat starts `secgpt chat` for user, its stdout and stderr in out.
func startChat(t *testing.T, cfg, user string) (*exec.Cmd, io.WriteCloser, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(binary, "chat", "--config", cfg, "--user", user)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin, out
}

// syncBuffer collects a child's output while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in:\n%s", want, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
