package llm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/llm/simulator"
)

// TestDiagnoseReportsEachProfile runs the start-up check against every
// profile, with the obedient model, and reads its lines: what works, and
// the fix for what does not.
func TestDiagnoseReportsEachProfile(t *testing.T) {
	works := func(check string) string { return check + ": ok " }
	tests := map[string][]string{
		"openai":            {"server: ok OpenAI", works("structured output") + "works", works("tool calls") + "work"},
		"openai-no-quota":   {"structured output: FAIL", "no quota left", "tool calls: FAIL"},
		"ollama":            {"server: ok Ollama 0.12.3", works("structured output"), works("tool calls"), "context: FAIL 4096 tokens, too small", "OLLAMA_CONTEXT_LENGTH=32768"},
		"ollama-no-tools":   {works("structured output"), "tool calls: FAIL", "cannot call tools"},
		"ollama-thinking":   {works("structured output"), works("tool calls")},
		"vllm":              {"server: ok vLLM", works("structured output"), works("tool calls"), "context: ok 32768 tokens"},
		"vllm-no-tools":     {"tool calls: FAIL", "--enable-auto-tool-choice --tool-call-parser"},
		"vllm-wrong-parser": {works("tool calls") + "work, but the server left the call as text", "--tool-call-parser"},
		"vllm-mistral":      {works("structured output"), works("tool calls")},
		"llamacpp":          {"server: ok llama.cpp", works("structured output"), works("tool calls"), "context: ok 32768 tokens"},
		"llamacpp-no-jinja": {works("structured output"), "tool calls: FAIL", "--jinja"},
	}
	if len(tests) != len(simulator.ProfileNames()) {
		t.Errorf("%d profiles checked of %d", len(tests), len(simulator.ProfileNames()))
	}
	for profile, wants := range tests {
		t.Run(profile, func(t *testing.T) {
			c, _ := onProfile(t, profile, simulator.Obedient(), llm.Config{MaxRetries: -1})
			var lines []string
			for _, f := range llm.Diagnose(context.Background(), c, "m") {
				status := "ok"
				if !f.OK {
					status = "FAIL"
				}
				lines = append(lines, fmt.Sprintf("%s: %s %s", f.Check, status, f.Say))
			}
			report := strings.Join(lines, "\n")
			t.Log("\n" + report)
			for _, want := range wants {
				if !strings.Contains(report, want) {
					t.Errorf("the report lacks %q:\n%s", want, report)
				}
			}
		})
	}
}
