package hub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/hub/hubtest"
	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/llm/simulator"
)

// recallingPlanner is the obedient model, but as a planner it also puts
// into travel_mate's special_requirements the symptoms the user gave in an
// earlier message, which the planner sees: data the user did not type in
// the request it plans.
func recallingPlanner() simulator.Behaviour {
	obedient := simulator.Obedient()
	symptoms := regexp.MustCompile(`symptoms = '([^']*)'`)
	return behaviourFunc(func(ctx context.Context, req *simulator.ChatRequest) (simulator.Reply, error) {
		r, err := obedient.Reply(ctx, req)
		if err != nil || !simulator.ResponseFormatNamed(simulator.PlanSchemaName)(req) || !strings.Contains(simulator.LastUser(req), "travel_mate") {
			return r, err
		}
		recalled := ""
		for _, m := range req.Messages[:len(req.Messages)-1] {
			if s := symptoms.FindStringSubmatch(m.Content); m.Role == llm.RoleUser && s != nil {
				recalled = s[1]
			}
		}
		if recalled == "" {
			return r, nil
		}
		var plan map[string][]map[string]any
		if err := json.Unmarshal([]byte(r.Content), &plan); err != nil {
			return r, err
		}
		for _, st := range plan["steps"] {
			st["args"].(map[string]any)["special_requirements"] = recalled
		}
		b, err := json.Marshal(plan)
		return simulator.Reply{Content: string(b)}, err
	})
}

// TestDataNotInTheQueryNeedsAConsentThatShowsIt: a planner that puts the
// user's earlier words into a step's arguments needs the user's consent,
// which shows them; refused, the step does not run, and the user is told.
func TestDataNotInTheQueryNeedsAConsentThatShowsIt(t *testing.T) {
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprintf("allow=%t", allow), func(t *testing.T) {
			sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{"health_companion", "travel_mate"}, Behaviour: recallingPlanner()})
			var shown []hub.DataItem
			rec := &hubtest.Recorder{Decide: func(r hub.ConsentRequest) hub.Decision {
				if r.Category == hub.CategoryData {
					shown = r.Data
					if allow {
						return hub.DecisionOnce
					}
					return hub.DecisionDeny
				}
				return hub.DecisionOnce
			}}
			ask(t, sys, alice, healthQuery, rec)
			reply, err := sys.Hub.Handle(context.Background(), hub.Request{User: alice, Query: flightQuery, Consenter: rec})
			if len(shown) == 0 || !strings.Contains(shown[0].Value, "heart surgery") || shown[0].Field != "special_requirements" {
				t.Fatalf("data consent showed %+v, want the health details going to special_requirements", shown)
			}
			bookings, lerr := sys.Store.ListDocs(context.Background(), alice, "travel_mate", "bookings", 10)
			if lerr != nil {
				t.Fatal(lerr)
			}
			if !allow {
				var he *hub.Error
				if !errors.As(err, &he) || !strings.Contains(he.Message, "travel_mate.book_flight was not run: you did not allow sharing") || len(bookings) != 0 {
					t.Fatalf("Handle() = %+v, %v with %d bookings; want the step not run, and the user told", reply, err, len(bookings))
				}
				return
			}
			if err != nil || len(bookings) != 1 || !bytes.Contains(bookings[0].Body, []byte("heart surgery")) {
				t.Fatalf("bookings = %+v, %v; want the flight booked with what the user allowed", bookings, err)
			}
		})
	}
}

// TestWarnedPromptsOfferOnlyOnce: data the user did not type comes with a
// warning, and a warned question offers only once and deny: no answer
// stands beyond the request, so the same data is asked about each time.
func TestWarnedPromptsOfferOnlyOnce(t *testing.T) {
	sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{"health_companion", "travel_mate"}, Behaviour: recallingPlanner()})
	rec := &hubtest.Recorder{Decide: func(r hub.ConsentRequest) hub.Decision {
		if slices.Contains(r.Choices, hub.DecisionAlways) {
			return hub.DecisionAlways
		}
		return hub.DecisionOnce
	}}
	ask(t, sys, alice, healthQuery, rec)
	ask(t, sys, alice, flightQuery, rec)
	ask(t, sys, alice, flightQuery, rec)
	var data []hub.ConsentRequest
	for _, r := range rec.Requests() {
		if r.Category == hub.CategoryData {
			data = append(data, r)
		}
	}
	if len(data) != 2 {
		t.Fatalf("data consents = %d, want the same data asked about each time", len(data))
	}
	for _, r := range data {
		if r.Warning == "" || !slices.Equal(r.Choices, []hub.Decision{hub.DecisionOnce, hub.DecisionDeny}) {
			t.Errorf("data consent offers %v with warning %q; want a warned question offering only once and deny", r.Choices, r.Warning)
		}
	}
}
