package hub_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/hub/hubtest"
	"github.com/secgpt/secgpt/llm/simulator"
)

func TestBadPlansAreRefusedClearly(t *testing.T) {
	planner := simulator.Scripted(simulator.Rule{
		Name: "bad plan", When: func(r *simulator.ChatRequest) bool { return r.ResponseFormat != nil },
		Then: func(*simulator.ChatRequest) simulator.Reply { return simulator.Reply{Content: `{"steps": [`} },
	})
	sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{"metro_hail"}, Behaviour: planner})
	_, err := sys.Hub.Handle(context.Background(), hub.Request{User: alice, Query: "anything", Consenter: hub.AllowPlanned{}})
	var he *hub.Error
	if !errors.As(err, &he) || !strings.Contains(he.Message, "plan") || !strings.Contains(he.Message, "returned an answer that could not be used") {
		t.Fatalf("Handle() error = %v, want a plan refusal", err)
	}
	if sys.Sim.Calls() != 2 {
		t.Fatalf("planner calls = %d, want one retry", sys.Sim.Calls())
	}
}

// TestRefusedPlanIsToldWithoutInternals: a plan the hub refuses is told in
// words for the user (what to do), not with the plan's fields, a decoding
// error or step ids; the reason stays in the record.
func TestRefusedPlanIsToldWithoutInternals(t *testing.T) {
	planner := simulator.Scripted(simulator.Rule{
		Name: "plan of the wrong shape", When: func(r *simulator.ChatRequest) bool { return r.ResponseFormat != nil },
		Then: func(*simulator.ChatRequest) simulator.Reply { return simulator.Reply{Content: `{"steps": 5}`} },
	})
	sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{"metro_hail"}, Behaviour: planner})
	reply, err := sys.Hub.Handle(context.Background(), hub.Request{User: alice, Query: "anything", Consenter: hub.AllowPlanned{}})
	var he *hub.Error
	if !errors.As(err, &he) {
		t.Fatalf("Handle() error = %v, want a hub.Error", err)
	}
	for _, internal := range []string{"json", "Go ", "struct", "steps", "object"} {
		if strings.Contains(he.Message, internal) {
			t.Errorf("the message shows %q: %q", internal, he.Message)
		}
	}
	if !strings.Contains(he.Message, "try again") {
		t.Errorf("the message does not say what to do: %q", he.Message)
	}
	if reply == nil || reply.Record == nil || !strings.Contains(reply.Record.Error, "not a plan object") {
		t.Errorf("the reason is not in the record: %+v", reply)
	}
}

// TestAnInvalidStepFailsAloneWithANote: a step the hub cannot run is
// dropped, with a note in the hub's words naming the app; the rest of the
// plan runs.
func TestAnInvalidStepFailsAloneWithANote(t *testing.T) {
	good := `{"id":"s1","app":"metro_hail","function":"estimate_fare","args":{"start_point":"Main Street","end_point":"Elm Avenue"}}`
	tests := []struct {
		name, step, want string
	}{
		{"unknown app", `{"id":"s2","app":"teleport","function":"go","args":{}}`, "a step of teleport (go) was not run: it names an app that is not installed"},
		{"arguments fail the schema", `{"id":"s2","app":"quick_ride","function":"estimate_fare","args":{"start_point":12}}`, "a step of quick_ride (estimate_fare) was not run: its arguments do not fit quick_ride.estimate_fare"},
		{"a dependency on an invalid step", `{"id":"s2","app":"quick_ride","function":"estimate_fare","args":{},"depends_on":["s9"]}`, "a step of quick_ride (estimate_fare) was not run: it waits for a step that does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spy := &plannerSpy{}
			sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{"metro_hail", "quick_ride"}, Behaviour: spy.behaviour(func(*simulator.ChatRequest) string {
				return `{"steps":[` + good + `,` + tt.step + `]}`
			})})
			reply := ask(t, sys, alice, "Fares from 'Main Street' to 'Elm Avenue'?", hub.AllowPlanned{})
			if !strings.Contains(reply.Answer, "fare = 51.80") || !strings.Contains(reply.Answer, "(secgpt: "+tt.want+".)") {
				t.Fatalf("answer = %q, want metro_hail's fare and the note %q", reply.Answer, tt.want)
			}
			if len(reply.Record.Dropped) != 1 || reply.Record.Dropped[0].ID != "s2" {
				t.Fatalf("dropped = %+v, want s2", reply.Record.Dropped)
			}
		})
	}
}
