// Package llmtest gives tests of other packages a real llm.Client talking
// over HTTP to a simulated model. It must never be imported outside tests.
package llmtest

import (
	"testing"

	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/llm/simulator"
)

// Model is the model name requests should carry.
const Model = simulator.DefaultModel

// Start serves b on a loopback port until the test ends and returns a
// client for it, with retries disabled so that faults surface at once.
func Start(t testing.TB, b simulator.Behaviour, opts simulator.Options) (*llm.Client, *simulator.Server) {
	t.Helper()
	srv := simulator.New(b, opts)
	baseURL, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("failed to start simulator: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("failed to close simulator: %v", err)
		}
	})
	client, err := llm.NewClient(llm.Config{BaseURL: baseURL, MaxRetries: -1})
	if err != nil {
		t.Fatalf("failed to create llm client: %v", err)
	}
	return client, srv
}
