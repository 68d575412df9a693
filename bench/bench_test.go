package bench

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/apps/benchapps"
	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/llm/simulator"
)

func TestPercentile(t *testing.T) {
	values := []float64{0.4, 0.1, 0.3, 0.2}
	tests := []struct {
		name    string
		weights []float64
		q, want float64
	}{
		{"median, unweighted", nil, 0.5, 0.2},
		{"p75, unweighted", nil, 0.75, 0.3},
		{"p95, unweighted", nil, 0.95, 0.4},
		{"p0", nil, 0, 0.1},
		{"a heavy high value", []float64{7, 1, 1, 1}, 0.5, 0.4},
		{"a heavy low value", []float64{1, 7, 1, 1}, 0.5, 0.1},
		{"weights summing to one", []float64{0.25, 0.25, 0.25, 0.25}, 0.75, 0.3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(values, tt.weights, tt.q); got != tt.want {
				t.Errorf("percentile(%v, %v, %v) = %v, want %v", values, tt.weights, tt.q, got, tt.want)
			}
		})
	}
}

// TestPaperMixWeighsCategories: in the paper's mix, each category weighs
// its share of the paper's queries, however many queries it has here.
func TestPaperMixWeighsCategories(t *testing.T) {
	pair := func(over float64, isoBytes int) Pair {
		return Pair{Isolated: Measure{MS: 1000 * (1 + over), Usage: Usage{PromptBytes: isoBytes}},
			Vanilla: Measure{MS: 1000, Usage: Usage{PromptBytes: 100}}, Overhead: over}
	}
	var results []Result
	// One no-app query with no overhead and twice vanilla's bytes, three
	// single-app queries with a large overhead and vanilla's bytes:
	// unweighted the median is large, in the paper's mix (42 against 20)
	// small, and the bytes weigh likewise.
	results = append(results, Result{Query: Query{Category: NoApp}, Cold: pair(0, 200), Warm: pair(0, 200)})
	for range 3 {
		results = append(results, Result{Query: Query{Category: Single}, Cold: pair(1, 100), Warm: pair(1, 100)})
	}
	r := &Report{Queries: results}
	r.summarize()
	rows := map[string]Summary{}
	for _, s := range r.Summary {
		rows[s.Name] = s
	}
	if got := rows[overall].Cold.P50; got != 1 {
		t.Errorf("unweighted median = %v, want 1", got)
	}
	if got := rows[overallPaper].Cold.P50; got != 0 {
		t.Errorf("median in the paper's mix = %v, want 0", got)
	}
	if got := rows[overallPaper].Cold.Under; math.Abs(got-42.0/62) > 1e-9 {
		t.Errorf("share under 0.3x in the paper's mix = %v, want 42/62", got)
	}
	if got := rows[overallPaper].Cold.IsolatedMS; math.Abs(got-(42*1000+20*2000)/62.0) > 1e-9 {
		t.Errorf("mean isolated time in the paper's mix = %v", got)
	}
	if got := rows[overall].Cold.BytesRatio; math.Abs(got-500.0/400) > 1e-9 {
		t.Errorf("unweighted prompt bytes ratio = %v, want 1.25", got)
	}
	if got := rows[overallPaper].Cold.BytesRatio; math.Abs(got-(42*2+20*1)/62.0) > 1e-9 {
		t.Errorf("prompt bytes ratio in the paper's mix = %v, want 104/62", got)
	}
}

// TestQueriesFitTheirApps: every planned step calls an installed app's
// function with arguments its schema accepts (inputs filled), and takes
// inputs only from earlier steps; the query names each app it uses, and a
// no-app query none.
func TestQueriesFitTheirApps(t *testing.T) {
	benchapps.Register()
	installed := map[string]apps.Spec{}
	for _, name := range Installed() {
		a, ok := apps.Lookup(name)
		if !ok {
			t.Fatalf("%s is not built in", name)
		}
		installed[name] = a.Spec()
	}
	if len(installed) != 23 {
		t.Errorf("%d apps installed, want 23 as in the paper's runs", len(installed))
	}
	counts := map[Category]int{}
	for _, q := range Queries(0) {
		counts[q.Category]++
		for name := range installed {
			if strings.Contains(q.Text, name) != containsStep(q, name) {
				t.Errorf("%q: names %s but plans it %v", q.Text, name, containsStep(q, name))
			}
		}
		seen := map[string]bool{}
		for _, s := range q.Steps {
			fn, ok := installed[s.App].Function(s.Function)
			if !ok {
				t.Fatalf("%q: no function %s.%s", q.Text, s.App, s.Function)
			}
			args := map[string]any{}
			for k, v := range s.Args {
				args[k] = v
			}
			for arg, src := range s.InputsFrom {
				from, _, _ := strings.Cut(src, ".")
				if !seen[from] {
					t.Errorf("%q: %s takes an input from %s, not an earlier step", q.Text, s.ID, from)
				}
				args[arg] = 1 // a key; its type is checked by the chain's own test
				if arg == "carrier" {
					args[arg] = benchapps.Carriers[0]
				}
			}
			b, _ := json.Marshal(args)
			if err := apps.ValidateDocument(fn.Request, b); err != nil {
				t.Errorf("%q: %s's arguments %s do not fit: %v", q.Text, s.ID, b, err)
			}
			seen[s.ID] = true
		}
	}
	for _, c := range Categories {
		if counts[c] == 0 {
			t.Errorf("no query of %s", c)
		}
	}
	if short := Queries(1); len(short) != len(Categories) {
		t.Errorf("Queries(1) gave %d queries, want one per category", len(short))
	}
}

func containsStep(q Query, app string) bool {
	for _, s := range q.Steps {
		if s.App == app {
			return true
		}
	}
	return false
}

// TestModelChainsRoundByRound: as vanilla mode's assistant, the model
// makes a chain's calls one link per round, each with the key the last
// result gave, independent calls in one round, then answers; as a
// planner it writes the query's plan.
func TestModelChainsRoundByRound(t *testing.T) {
	benchapps.Register()
	queries := Queries(0)
	var chain, multi Query
	for _, q := range queries {
		if q.Category == Chain && q.Apps() == 3 {
			chain = q
		}
		if q.Category == Multi && q.Apps() == 4 {
			multi = q
		}
	}
	m := newModel(queries)
	var tools []llm.Tool
	for _, name := range Installed() {
		a, _ := apps.Lookup(name)
		for _, f := range a.Spec().Functions {
			tools = append(tools, llm.Tool{Name: apps.ToolName(name, f.Name), Parameters: f.Request})
		}
	}
	converse := func(q Query) (rounds [][]llm.ToolCall) {
		msgs := []llm.Message{{Role: llm.RoleSystem, Content: "You are an assistant."}, {Role: llm.RoleUser, Content: q.Text}}
		for range 10 {
			reply, err := m.Reply(context.Background(), &simulator.ChatRequest{Messages: msgs, Tools: tools})
			if err != nil {
				t.Fatal(err)
			}
			if len(reply.ToolCalls) == 0 {
				return rounds
			}
			rounds = append(rounds, reply.ToolCalls)
			msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, ToolCalls: reply.ToolCalls})
			for _, tc := range reply.ToolCalls {
				app, fn, _ := apps.SplitToolName(tc.Name)
				a, _ := apps.Lookup(app)
				out, err := a.Call(context.Background(), nil, fn, json.RawMessage(tc.Arguments))
				if err != nil {
					t.Fatalf("%s(%s): %v", tc.Name, tc.Arguments, err)
				}
				msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: tc.ID, Content: string(out)})
			}
		}
		t.Fatal("the model never answered")
		return nil
	}
	if rounds := converse(chain); len(rounds) != 3 || len(rounds[0]) != 1 || len(rounds[2]) != 1 ||
		rounds[2][0].Name != "bench_orders__last_order" || !strings.Contains(rounds[2][0].Arguments, "account_id") {
		t.Errorf("a chain of 3 took rounds %v, want one call per round, each taking the last key", rounds)
	}
	if rounds := converse(multi); len(rounds) != 1 || len(rounds[0]) != 4 {
		t.Errorf("4 independent apps took rounds %v, want one round of 4 calls", rounds)
	}
	plan, err := m.Reply(context.Background(), &simulator.ChatRequest{
		Messages:       []llm.Message{{Role: llm.RoleUser, Content: chain.Text}},
		ResponseFormat: &simulator.ResponseFormat{Type: "json_schema", JSONSchema: &llm.JSONSchema{Name: simulator.PlanSchemaName, Schema: json.RawMessage(`{}`)}},
	})
	if err != nil || !strings.Contains(plan.Content, `"inputs_from":{"account_id":"s2.account_id"}`) {
		t.Errorf("plan = %s, %v; want the chain's plan", plan.Content, err)
	}
}

// TestSweepQueriesAreDistinct: no user's query holds another's, so the
// model serves each user its own.
func TestSweepQueriesAreDistinct(t *testing.T) {
	var seen []string
	for i := range 220 {
		q := sweepQuery(i).Text
		for _, other := range seen {
			if strings.Contains(q, other) || strings.Contains(other, q) {
				t.Fatalf("sweep queries %q and %q contain each other", q, other)
			}
		}
		seen = append(seen, q)
	}
}
