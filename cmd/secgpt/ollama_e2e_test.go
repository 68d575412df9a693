//go:build e2e

package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/llm/ollamatest"
	"github.com/secgpt/secgpt/llm/simulator"
)

// TestAgainstRealOllama runs secgpt against a real Ollama, built from the
// Go module proxy, with a tiny model the test writes: the doctor, a query
// with every role on Ollama, and a conversation whose planner is the
// simulated model (which plans the app the query names, and answers a
// query that names none) and whose spokes are on Ollama, the same app
// twice so that its second step has memory.
// The answers are nonsense; every request secgpt sent must have been
// accepted and answered with a completion the client reads.
func TestAgainstRealOllama(t *testing.T) {
	srv := ollamatest.Start(t, 65536)
	llmSection := fmt.Sprintf("llm:\n  provider: openai\n  base_url: %s\n  api_key_env: \"\"\n  models: {planner: %[2]s, spoke: %[2]s, vanilla: %[2]s}\n", srv.URL, ollamatest.Model)
	apps := "apps:\n  installed: [metro_hail, quick_ride]\n"

	r := runBinary(t, "", "doctor", "--config", llmConfig(t, llmSection+apps))
	for _, want := range []string{"✓ server: Ollama 0.12.3", "✓ structured output: works", "✓ context: 65536 tokens"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("doctor's report lacks %q:\n%s%s", want, r.stdout, r.stderr)
		}
	}

	r = runBinary(t, "", "ask", "--config", llmConfig(t, llmSection+apps), "--user", "u",
		"Use metro_hail and quick_ride to compare the fares from 'Main Street' to 'Elm Avenue'.")
	checkNoEndpointError(t, r)

	planner := simulator.New(simulator.Obedient(), simulator.Options{})
	plannerURL, err := planner.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { planner.Close() })
	mixed := fmt.Sprintf("llm:\n  provider: openai\n  base_url: %s\n  api_key_env: \"\"\n  endpoints:\n    ollama:\n      base_url: %s\n"+
		"  models:\n    planner: obedient\n    spoke: {endpoint: ollama, model: %[3]s}\n    vanilla: {endpoint: ollama, model: %[3]s}\n",
		plannerURL, srv.URL, ollamatest.Model)
	turns := "Use metro_hail from 'Main Street' to 'Elm Avenue'.\no\n" +
		"Use metro_hail from 'Main Street' to 'Elm Avenue' again.\no\n" +
		"What did I just ask?\n/quit\n"
	r = runBinary(t, turns, "chat", "--config", llmConfig(t, mixed+apps), "--user", "tester")
	checkNoEndpointError(t, r)
	if planner.Calls() != 3 {
		t.Errorf("the planner got %d calls, want 3", planner.Calls())
	}
	// The doctor's two, the planner's for the query (which, if it plans
	// nothing, answers itself), and one spoke for each turn of the
	// conversation that names an app: the last turn names none, and the
	// planner, the simulated model, answers it.
	n, refused := srv.Completions()
	if n < 5 {
		t.Errorf("Ollama got %d chat completions, want at least 5", n)
	}
	for _, e := range refused {
		t.Errorf("Ollama answered %d %.500s\nto %.2000s", e.Status, e.Response, e.Request)
	}
}

// checkNoEndpointError fails t if secgpt said a model endpoint failed in
// a way that is not the model's nonsense: a request refused, an endpoint
// down, a server not set up, an answer it could not read.
func checkNoEndpointError(t *testing.T, r result) {
	t.Helper()
	out := r.stdout + r.stderr
	for _, bad := range []string{"rejected the request", "is unavailable", "not set up", "did not answer in time", "failed to decode"} {
		if strings.Contains(out, bad) {
			t.Errorf("secgpt said %q:\n%s", bad, out)
		}
	}
	if t.Failed() {
		t.Logf("secgpt's output:\n%s", out)
	}
}
