package hub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/hub/hubtest"
	"github.com/secgpt/secgpt/llm/simulator"
)

// What a query costs in model calls and prompt bytes (issue 9, "Costs"),
// in isolated and vanilla mode, with every built-in app installed (the
// default configuration) and the obedient model. Prompt bytes are every
// byte of a request the model reads (simulator.ChatRequest.PromptBytes).

// defaultApps are the apps the default configuration installs: every app
// of apps/all (this test binary registers test apps beside them).
var defaultApps = []string{"creative_muse", "drive", "email", "health_companion", "metro_hail", "quick_ride", "symptom_solver", "travel_mate", "weather"}

// costQueries are a one-app, a three-app and a no-app query.
var costQueries = []struct{ name, query string }{
	{"one-app", "Use metro_hail for a ride from 'Main Street' to 'Elm Avenue'."},
	{"three-app", "Compare the fares of metro_hail and quick_ride from 'Main Street' to 'Elm Avenue', and use email to read id = 'msg-0004'."},
	{"no-app", "What is the capital of France?"},
}

// costMeter counts the model calls and prompt bytes it sees.
type costMeter struct {
	mu           sync.Mutex
	calls, bytes int
}

func (m *costMeter) behaviour() simulator.Behaviour {
	obedient := simulator.Obedient()
	return behaviourFunc(func(ctx context.Context, req *simulator.ChatRequest) (simulator.Reply, error) {
		m.mu.Lock()
		m.calls++
		m.bytes += req.PromptBytes()
		m.mu.Unlock()
		return obedient.Reply(ctx, req)
	})
}

func (m *costMeter) take() (calls, bytes int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	calls, bytes = m.calls, m.bytes
	m.calls, m.bytes = 0, 0
	return calls, bytes
}

// cost runs query once on a fresh system in mode and returns what it cost.
func cost(tb testing.TB, mode, query string) (calls, bytes int) {
	tb.Helper()
	meter := &costMeter{}
	sys := hubtest.NewSystem(tb, hubtest.Options{Apps: defaultApps, Behaviour: meter.behaviour()})
	seedMailbox(tb, sys)
	ctx := context.Background()
	switch mode {
	case "isolated":
		if _, err := sys.Hub.Handle(ctx, hub.Request{User: alice, Query: query, Consenter: hub.AllowPlanned{}}); err != nil {
			tb.Fatalf("%s: %v", query, err)
		}
	case "vanilla":
		if _, err := sys.Vanilla().Handle(ctx, alice, query); err != nil {
			tb.Fatalf("%s: %v", query, err)
		}
	}
	return meter.take()
}

// BenchmarkPromptCost reports, per query and mode, the model calls and
// prompt bytes of one query: deterministic with the obedient model, so one
// iteration measures it (-benchtime=1x).
func BenchmarkPromptCost(b *testing.B) {
	for _, q := range costQueries {
		for _, mode := range []string{"isolated", "vanilla"} {
			b.Run(q.name+"/"+mode, func(b *testing.B) {
				var calls, bytes int
				for b.Loop() {
					calls, bytes = cost(b, mode, q.query)
				}
				b.ReportMetric(float64(calls), "model-calls")
				b.ReportMetric(float64(bytes), "prompt-bytes")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// TestPromptCostWithinBudget: over the mix of a one-app, a three-app and a
// no-app query, isolated mode sends the model at most 1.3 times the prompt
// bytes vanilla mode does (DESIGN §10).
func TestPromptCostWithinBudget(t *testing.T) {
	var isolated, plain int
	var rows []string
	for _, q := range costQueries {
		ic, ib := cost(t, "isolated", q.query)
		vc, vb := cost(t, "vanilla", q.query)
		isolated += ib
		plain += vb
		rows = append(rows, fmt.Sprintf("%s: isolated %d calls %d bytes, vanilla %d calls %d bytes", q.name, ic, ib, vc, vb))
	}
	ratio := float64(isolated) / float64(plain)
	b, _ := json.Marshal(rows)
	if ratio > 1.3 {
		t.Fatalf("isolated prompt bytes are %.2fx vanilla's over the mix, over 1.3x: %s", ratio, b)
	}
	t.Logf("isolated/vanilla prompt bytes over the mix: %.2fx %s", ratio, b)
}

// TestOneModelCallLikeVanilla: a request that needs no app, and one that
// names an annotation app and no other, cost one model call, as in vanilla
// mode: the planner's own answer, or the annotation app's spoke without a
// planner round, whose plan the request fixes.
func TestOneModelCallLikeVanilla(t *testing.T) {
	for _, query := range []string{costQueries[2].query, "Use symptom_solver: I have had a headache for two days."} {
		t.Run(query, func(t *testing.T) {
			ic, _ := cost(t, "isolated", query)
			vc, _ := cost(t, "vanilla", query)
			if ic != 1 || vc != 1 {
				t.Fatalf("%d model calls isolated and %d vanilla, want 1 and 1", ic, vc)
			}
		})
	}
}
