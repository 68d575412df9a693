package hub_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/hub/hubtest"
	"github.com/secgpt/secgpt/llm/simulator"
)

// The provenance test of issue 9: every request the hub and the spokes
// send to the model is recorded, whole (messages, tools with their
// schemas, response format), and read for the markers the marker apps put
// in every text they write (description, function and schema prose,
// result strings, error text). Over multi-app, collaboration, no-app and
// multi-turn queries: the planner's requests hold no marker; no request
// holds two apps' markers; a request holding an app's markers offers no
// other app's function but by name, and only where the plan lets the app
// call it; the no-app assistant's and the combiner's requests hold none.
// The planner answers the no-app query itself, in its one request, and a
// later planner reads that answer (no app shaped it) but no app's part.

// markerApps are spoketest's marker apps and their markers.
var markerApps = map[string]string{"marker_a": "MKA~", "marker_b": "MKB~", "marker_c": "MKC~"}

// modelLog records every request to the model.
type modelLog struct {
	mu       sync.Mutex
	requests []*simulator.ChatRequest
}

func (l *modelLog) behaviour(plans map[string]string) simulator.Behaviour {
	obedient := simulator.Obedient()
	return behaviourFunc(func(ctx context.Context, req *simulator.ChatRequest) (simulator.Reply, error) {
		l.mu.Lock()
		l.requests = append(l.requests, req)
		l.mu.Unlock()
		if simulator.ResponseFormatNamed(simulator.PlanSchemaName)(req) {
			if p, ok := plans[simulator.LastUser(req)]; ok {
				return simulator.Reply{Content: p}, nil
			}
		}
		return obedient.Reply(ctx, req)
	})
}

func (l *modelLog) take() []*simulator.ChatRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.requests
	l.requests = nil
	return out
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Trim(string(b), `"`)
}

// markersIn returns the marker apps whose markers the request holds,
// anywhere in it.
func markersIn(t *testing.T, req *simulator.ChatRequest) []string {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for app, mk := range markerApps {
		if strings.Contains(string(b), mk) {
			out = append(out, app)
		}
	}
	slices.Sort(out)
	return out
}

const otherAppTool = "A function of another app. Only its name is known here; the hub decides whether you may use it."

func TestTextStaysWithItsApp(t *testing.T) {
	const (
		multi   = "Use marker_a and marker_b to measure 'apple'."
		chain   = "Use marker_a to measure 'apple', then marker_b to scale it by that value."
		relay   = "Use marker_a to relay, and marker_b to measure 'apple'."
		failing = "Use marker_c to fail."
		noApp   = "What is the capital of France?"
		again   = "Use marker_a to measure 'pear'."
	)
	plans := map[string]string{
		chain: `{"steps":[{"id":"s1","app":"marker_a","function":"measure","args":{"item":"apple"}},` +
			`{"id":"s2","app":"marker_b","function":"measure","args":{"item":"apple"},"inputs_from":{"scale":"s1.value"}}]}`,
		relay: `{"steps":[{"id":"s1","app":"marker_a","function":"relay","args":{}},` +
			`{"id":"s2","app":"marker_b","function":"measure","args":{"item":"apple"},"depends_on":["s1"]}]}`,
	}
	log := &modelLog{}
	sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{"marker_a", "marker_b", "marker_c", "metro_hail"}, Behaviour: log.behaviour(plans)})
	var noAppAnswer string // the planner's answer to noApp, which no app shaped
	tests := []struct {
		query string
		// pairs are the apps the plan lets call each other's functions:
		// steps linked by a dependency (see capabilities).
		pairs map[string]string
		check func(t *testing.T, reply *hub.Reply, err error)
	}{
		{multi, nil, func(t *testing.T, reply *hub.Reply, err error) {
			if err != nil || len(reply.Parts) != 2 || reply.Summary == nil || strings.Join(reply.Summary.Apps, ",") != "marker_a,marker_b" {
				t.Fatalf("reply = %+v, %v; want two parts and a summary from both apps' typed fields", reply, err)
			}
		}},
		{chain, map[string]string{"marker_a": "marker_b", "marker_b": "marker_a"}, func(t *testing.T, reply *hub.Reply, err error) {
			if err != nil || !strings.Contains(reply.Answer, "value = 25") {
				t.Fatalf("reply = %+v, %v; want marker_b to measure 'apple' (5) scaled by marker_a's value (5)", reply, err)
			}
		}},
		{relay, map[string]string{"marker_a": "marker_b", "marker_b": "marker_a"}, func(t *testing.T, reply *hub.Reply, err error) {
			if err != nil {
				t.Fatal(err)
			}
			called := false
			for _, c := range reply.Record.Calls {
				called = called || c.App == "marker_b" && c.Caller == "marker_a" && c.Error == ""
			}
			if !called {
				t.Fatalf("marker_a did not call marker_b: %+v", reply.Record.Calls)
			}
		}},
		{failing, nil, func(t *testing.T, reply *hub.Reply, err error) {
			if err != nil || len(reply.Parts) != 1 || reply.Parts[0].App != "marker_c" || !strings.Contains(reply.Parts[0].Text, "MKC~ERROR") {
				t.Fatalf("reply = %+v, %v; want marker_c's error in its own part", reply, err)
			}
		}},
		{noApp, nil, func(t *testing.T, reply *hub.Reply, err error) {
			if err != nil || len(reply.Parts) != 1 || reply.Parts[0].App != "" || reply.Record.LLMCalls != 1 {
				t.Fatalf("reply = %+v, %v; want the planner's own answer, in one model call", reply, err)
			}
			noAppAnswer = reply.Parts[0].Text
		}},
		{again, nil, func(t *testing.T, reply *hub.Reply, err error) {
			if err != nil || len(reply.Parts) != 1 {
				t.Fatalf("reply = %+v, %v", reply, err)
			}
		}},
	}
	seen := map[string]int{} // requests holding each app's text
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			reply, err := sys.Hub.Handle(context.Background(), hub.Request{User: alice, Query: tt.query, Consenter: hub.AllowPlanned{}})
			tt.check(t, reply, err)
			requests := log.take()
			if len(requests) == 0 {
				t.Fatal("no model request recorded")
			}
			for i, req := range requests {
				marked := markersIn(t, req)
				role := req.Model
				if simulator.ResponseFormatNamed(simulator.PlanSchemaName)(req) {
					role = "planner"
					if tt.query == again && !strings.Contains(mustJSON(t, req), mustJSON(t, noAppAnswer)) {
						t.Errorf("request %d: the planner does not read the earlier answer no app shaped", i)
					}
				}
				switch {
				case role == "planner" && len(marked) > 0:
					t.Errorf("request %d: the planner read %v's text", i, marked)
				case role == "vanilla" && len(marked) > 0:
					t.Errorf("request %d: the no-app assistant or the combiner read %v's text", i, marked)
				case len(marked) > 1:
					t.Errorf("request %d (%s) holds the text of %v", i, role, marked)
				}
				if len(marked) != 1 {
					continue
				}
				seen[marked[0]]++
				for _, tool := range req.Tools {
					app, _, _ := strings.Cut(tool.Name, "__")
					if app == marked[0] {
						continue
					}
					if tt.pairs[marked[0]] != app || tool.Description != otherAppTool || string(tool.Parameters) != `{"type":"object"}` {
						t.Errorf("request %d, holding %s's text, offers %s (%q, %s)", i, marked[0], tool.Name, tool.Description, tool.Parameters)
					}
				}
			}
		})
	}
	// The apps' text did reach their own spokes, or the test shows nothing.
	for app := range markerApps {
		if seen[app] == 0 {
			t.Errorf("no request held %s's text", app)
		}
	}
	// Each part of each answer is kept with the app that wrote it.
	mem, err := sys.Store.HubMemory(context.Background(), alice, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range mem {
		for app, mk := range markerApps {
			if strings.Contains(e.Content, mk) && !slices.Equal(e.Provenance.Apps, []string{app}) {
				t.Errorf("memory entry %q holds %s's text but is kept as %+v's", e.Content, app, e.Provenance)
			}
		}
	}
}
