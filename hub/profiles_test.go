package hub_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/hub/hubtest"
	"github.com/secgpt/secgpt/llm/simulator"
)

// The hub's real planner request through each server people run, as the
// simulator's profiles reproduce them (issue 14, items 1 and 2).

// TestSchemasTakeEveryGrammarEngine plans and runs steps of apps whose
// arguments have regex patterns (email addresses), through each server: a
// grammar compiler must take the plan's schema and the tools' schemas at
// once (llama.cpp compiles both).
func TestSchemasTakeEveryGrammarEngine(t *testing.T) {
	for _, profile := range simulator.ServerProfiles() {
		t.Run(profile, func(t *testing.T) {
			plans := &planRequests{next: simulator.Obedient()}
			sys := hubtest.NewSystem(t, hubtest.Options{
				Apps: []string{"metro_hail", "quick_ride", "email", "travel_mate", "health_companion"}, Behaviour: plans, Profile: profile,
			})
			reply := ask(t, sys, alice, fareQuery, &hubtest.Recorder{})
			if !strings.Contains(reply.Answer, "fare = 51.80") || !strings.Contains(reply.Answer, "fare = 57.00") {
				t.Errorf("answer %q", reply.Answer)
			}
			reply = ask(t, sys, alice, "Use email to send_email to 'bob@example.com' with the subject 'Fares' and the body 'Both fares are in.'", &hubtest.Recorder{})
			sent := false
			for _, c := range reply.Record.Calls {
				sent = sent || (c.App == "email" && c.Function == "send_email" && c.Error == "")
			}
			if !sent {
				t.Errorf("no email sent: %q %+v", reply.Answer, reply.Record.Calls)
			}
			if n := len(plans.schemas()); n != 2 {
				t.Errorf("the planner was asked %d times with a response schema, want once a query", n)
			}
		})
	}
}

// TestPlansHoldNoInventedArguments asks for a fare without its end point,
// through each server. A server that enforces the plan's schema as a
// grammar fills every argument the schema requires, whatever the planner
// was told: the plan must require none, so that the spoke completes what
// the user did not say, and no invented value may reach an app.
func TestPlansHoldNoInventedArguments(t *testing.T) {
	for _, profile := range simulator.ServerProfiles() {
		t.Run(profile, func(t *testing.T) {
			plans := &planRequests{next: simulator.Obedient()}
			sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{"metro_hail"}, Behaviour: plans, Profile: profile})
			reply, _ := sys.Hub.Handle(context.Background(), hub.Request{User: alice, Query: "Use metro_hail from 'Main Street'.", Consenter: &hubtest.Recorder{}})
			if reply == nil || reply.Record == nil || reply.Record.Plan == nil {
				t.Fatalf("no plan: %+v", reply)
			}
			for _, step := range reply.Record.Plan.Steps {
				if strings.Contains(string(step.Args), "invented") {
					t.Errorf("step %s of the plan has arguments the server's grammar invented: %s", step.ID, step.Args)
				}
			}
			for _, c := range reply.Record.Calls {
				if strings.Contains(string(c.Args), "invented") {
					t.Errorf("%s.%s ran with arguments the server's grammar invented: %s", c.App, c.Function, c.Args)
				}
			}
		})
	}
}

// planRequests is a behaviour that notes the planner's response schemas.
type planRequests struct {
	next simulator.Behaviour
	mu   sync.Mutex
	seen []json.RawMessage
}

func (p *planRequests) Reply(ctx context.Context, req *simulator.ChatRequest) (simulator.Reply, error) {
	if rf := req.ResponseFormat; rf != nil && rf.JSONSchema != nil && rf.JSONSchema.Name == simulator.PlanSchemaName {
		p.mu.Lock()
		p.seen = append(p.seen, rf.JSONSchema.Schema)
		p.mu.Unlock()
	}
	return p.next.Reply(ctx, req)
}

func (p *planRequests) schemas() []json.RawMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]json.RawMessage(nil), p.seen...)
}
