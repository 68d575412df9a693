package hub_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/hub/hubtest"
)

// TestOnePromptPerRequest: every question a plan needs up front (running
// each app, sharing data the user did not type) is put to a consenter
// that can take several in one batch; each is still decided, audited and
// recorded on its own, and refusing one app leaves the other to run.
func TestOnePromptPerRequest(t *testing.T) {
	t.Run("the ride query asks once for both apps", func(t *testing.T) {
		sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{"metro_hail", "quick_ride"}})
		b := &hubtest.Batcher{}
		reply := ask(t, sys, alice, fareQuery, b)
		batches := b.Batches()
		if len(batches) != 1 || len(batches[0]) != 2 {
			t.Fatalf("batches = %d (%v), want one batch of two questions", len(batches), batches)
		}
		var apps []string
		for _, r := range batches[0] {
			apps = append(apps, r.App)
			if r.Category != hub.CategoryExec || !r.InPlan || r.Deadline != batches[0][0].Deadline {
				t.Errorf("question %+v, want an exec question in the plan with the batch's deadline", r)
			}
		}
		if !slices.Equal(apps, []string{"metro_hail", "quick_ride"}) {
			t.Errorf("apps asked = %v", apps)
		}
		if n := len(reply.Record.Consents); n != 2 {
			t.Errorf("consent records = %d, want one per question", n)
		}
		audit, err := sys.Hub.Audit(context.Background(), alice, 10)
		if err != nil || len(audit) != 2 {
			t.Fatalf("audit = %+v, %v; want each question on record", audit, err)
		}
	})
	t.Run("refusing one app of the batch", func(t *testing.T) {
		sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{"metro_hail", "quick_ride"}})
		b := &hubtest.Batcher{Recorder: hubtest.Recorder{Decide: func(r hub.ConsentRequest) hub.Decision {
			if r.App == "quick_ride" {
				return hub.DecisionDeny
			}
			return hub.DecisionOnce
		}}}
		reply := ask(t, sys, alice, fareQuery, b)
		if len(reply.Parts) != 1 || reply.Parts[0].App != "metro_hail" {
			t.Fatalf("parts = %+v, want metro_hail's only", reply.Parts)
		}
		if !slices.ContainsFunc(reply.Notes, func(n hub.Note) bool { return n.Text == "quick_ride was not run: you did not allow quick_ride to run" }) {
			t.Errorf("notes = %+v, want quick_ride's refusal", reply.Notes)
		}
	})
	t.Run("data the user did not type joins the batch", func(t *testing.T) {
		sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{"health_companion", "travel_mate"}, Behaviour: recallingPlanner()})
		b := &hubtest.Batcher{}
		ask(t, sys, alice, healthQuery, b)
		before := len(b.Batches())
		_, _ = sys.Hub.Handle(context.Background(), hub.Request{User: alice, Query: flightQuery, Consenter: b})
		batches := b.Batches()[before:]
		if len(batches) != 1 || len(batches[0]) != 2 || batches[0][0].Category != hub.CategoryData || batches[0][1].Category != hub.CategoryExec {
			t.Fatalf("batches = %+v, want one batch: the data, then running travel_mate", batches)
		}
	})
}

// TestWithin: the time left to answer, as people say it; a deadline a
// moment under 5 minutes away is "5 minutes" (it read "(in 4 min)").
func TestWithin(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{5*time.Minute - 40*time.Millisecond, "5 minutes"},
		{time.Minute, "1 minute"},
		{59 * time.Second, "59 seconds"},
		{time.Second, "1 second"},
		{-time.Second, "0 seconds"},
		{2 * time.Hour, "2 hours"},
		{90 * time.Minute, "90 minutes"},
	} {
		if got := hub.Within(tt.d); got != tt.want {
			t.Errorf("Within(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
