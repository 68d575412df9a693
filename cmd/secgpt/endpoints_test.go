package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/secgpt/secgpt/llm/simulator"
)

// llmConfig is testConfig with llm as its llm section.
func llmConfig(t *testing.T, llm string) string {
	t.Helper()
	cfg := testConfig(t, "")
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(raw), "llm:\n  provider: simulator\n", llm, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// profileConfig is testConfig with the simulated model answering as the
// named server profile.
func profileConfig(t *testing.T, profile string) string {
	return llmConfig(t, fmt.Sprintf("llm:\n  provider: simulator\n  simulator:\n    profile: %s\n", profile))
}

// TestDoctorReportsEachProfile runs `secgpt doctor` against the simulated
// model answering as each server, set up right and wrong.
func TestDoctorReportsEachProfile(t *testing.T) {
	tests := []struct {
		profile string
		code    int
		says    []string
	}{
		{"openai", 0, []string{"✓ server: OpenAI", "✓ structured output: works", "✓ tool calls: work"}},
		{"ollama", exitFailed, []string{"✓ server: Ollama 0.12.3", "✓ tool calls: work", "✗ context: 4096 tokens, too small", "OLLAMA_CONTEXT_LENGTH=32768"}},
		{"ollama-no-tools", exitFailed, []string{"✗ tool calls: fail: Ollama: this model cannot call tools"}},
		{"vllm", 0, []string{"✓ server: vLLM", "✓ structured output: works", "✓ tool calls: work", "✓ context: 32768 tokens"}},
		{"vllm-no-tools", exitFailed, []string{"✗ tool calls: fail: vLLM: start it with --enable-auto-tool-choice --tool-call-parser"}},
		{"vllm-wrong-parser", 0, []string{"✓ tool calls: work, but the server left the call as text"}},
		{"llamacpp", 0, []string{"✓ server: llama.cpp", "✓ tool calls: work", "✓ context: 32768 tokens"}},
		{"llamacpp-no-jinja", exitFailed, []string{"✗ tool calls: fail: llama.cpp: start llama-server with --jinja"}},
		{"openai-no-quota", exitFailed, []string{"✗ structured output: fail: the language model account has no quota left"}},
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			cfg := profileConfig(t, tt.profile)
			r := runBinary(t, "", "doctor", "--config", cfg)
			if r.code != tt.code {
				t.Errorf("exit %d, want %d\n%s%s", r.code, tt.code, r.stdout, r.stderr)
			}
			for _, want := range tt.says {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("doctor's report lacks %q:\n%s", want, r.stdout)
				}
			}
		})
	}
}

// TestCaseStudiesThroughEachProfile runs the case studies with the model's
// server answering as each server people run, set up as documented.
func TestCaseStudiesThroughEachProfile(t *testing.T) {
	for _, profile := range simulator.ServerProfiles() {
		t.Run(profile, func(t *testing.T) {
			r := runBinary(t, "", "casestudy", "--mode", "both", "--profile", profile, "--json")
			if r.code != 0 {
				t.Fatalf("casestudy exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
			}
			checkCaseRows(t, r.stdout)
		})
	}
}

// TestConversationThroughEachProfile holds a conversation in the terminal
// through each server's profile: the same app twice, so that its second
// step has the app's memory, and a question with no app.
func TestConversationThroughEachProfile(t *testing.T) {
	turns := "Use metro_hail from 'Main Street' to 'Elm Avenue'.\no\n" +
		"Use metro_hail from 'Main Street' to 'Elm Avenue' again.\no\n" +
		"What did I just ask?\n/quit\n"
	for _, profile := range simulator.ServerProfiles() {
		t.Run(profile, func(t *testing.T) {
			cfg := profileConfig(t, profile)
			r := runBinary(t, turns, "chat", "--config", cfg, "--user", "tester")
			if r.code != 0 {
				t.Fatalf("exit %d: %s\n%s", r.code, r.stdout, r.stderr)
			}
			if n := strings.Count(r.stdout, "fare = 51.80"); n != 2 {
				t.Errorf("%d fares in the conversation, want 2:\n%s", n, r.stdout)
			}
			if !strings.Contains(r.stdout, "Factual answer: What did I just ask?") {
				t.Errorf("the question with no app went unanswered:\n%s", r.stdout)
			}
		})
	}
}

// modelsSeen is the obedient model, noting the model names it is asked
// as.
type modelsSeen struct {
	mu    sync.Mutex
	names map[string]int
}

func (m *modelsSeen) Reply(ctx context.Context, req *simulator.ChatRequest) (simulator.Reply, error) {
	m.mu.Lock()
	m.names[req.Model]++
	m.mu.Unlock()
	return simulator.Obedient().Reply(ctx, req)
}

// TestRolesOnTheirOwnEndpoints gives the planner one endpoint and the
// spokes another, and checks each gets its role's requests only, under
// the model name it has there.
func TestRolesOnTheirOwnEndpoints(t *testing.T) {
	start := func() (*modelsSeen, string) {
		seen := &modelsSeen{names: map[string]int{}}
		srv := simulator.New(seen, simulator.Options{})
		url, err := srv.Start("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		return seen, url
	}
	small, smallURL := start()
	big, bigURL := start()
	cfg := llmConfig(t, fmt.Sprintf(
		"llm:\n  provider: openai\n  base_url: %s\n  api_key_env: NO_SUCH_KEY\n  endpoints:\n    big:\n      base_url: %s\n"+
			"  models:\n    planner: qwen3:4b\n    spoke: {endpoint: big, model: Qwen/Qwen3-32B}\n    vanilla: {endpoint: big, model: Qwen/Qwen3-32B}\n",
		smallURL, bigURL))
	r := runBinary(t, "", "ask", "--config", cfg, "--user", "u", "Use metro_hail from 'Main Street' to 'Elm Avenue'.")
	if r.code != 0 || !strings.Contains(r.stdout, "fare = 51.80") {
		t.Fatalf("exit %d: %s\n%s", r.code, r.stdout, r.stderr)
	}
	if fmt.Sprint(small.names) != "map[qwen3:4b:1]" || len(big.names) != 1 || big.names["Qwen/Qwen3-32B"] == 0 {
		t.Errorf("the planner's endpoint was asked for %v, the spokes' for %v", small.names, big.names)
	}
}

// TestDefaultTimeoutCoversAColdLoad: the first call to a local model
// waits while the server loads it, which Ollama allows 5 minutes.
func TestDefaultTimeoutCoversAColdLoad(t *testing.T) {
	if got := defaultConfig().LLM.Timeout; got < ollamaLoadTimeout {
		t.Errorf("a model call may take %v by default, less than a model load (%v)", got, ollamaLoadTimeout)
	}
	cfg, _, err := configFor("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LLM.Timeout < ollamaLoadTimeout {
		t.Errorf("the example config allows a model call %v", cfg.LLM.Timeout)
	}
}
