package hub

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestNamedApps(t *testing.T) {
	cat := testCatalog(t) // metro_hail, quick_ride, muse
	tests := []struct {
		query string
		want  string // named apps, sorted, comma-separated
	}{
		{"Use metro_hail from 'A' to 'B'.", "metro_hail"},
		{"METRO_HAIL or Quick_Ride?", "metro_hail,quick_ride"},
		{"metro_hail's fare, then quick_ride.", "metro_hail,quick_ride"},
		{"(metro_hail)/quick_ride", "metro_hail,quick_ride"},
		{"metro_hailing is not an app", ""},
		{"xmetro_hail and metro_hail2 are other words", ""},
		{"metro hail, quick-ride", ""},
		{"a muse, amused", "muse"},
		{"nothing named", ""},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			if got := strings.Join(sortedKeys(cat.namedApps(tt.query)), ","); got != tt.want {
				t.Fatalf("namedApps(%q) = %q, want %q", tt.query, got, tt.want)
			}
		})
	}
}

func TestFollowNamedApps(t *testing.T) {
	plan := Plan{Steps: []PlanStep{
		{ID: "s1", App: "metro_hail", Function: "estimate_fare"},
		{ID: "s2", App: "email", Function: "send_email"},
		{ID: "s3", App: "metro_hail", Function: "book", InputsFrom: map[string]string{"fare": "s1.fare"}},
		{ID: "s4", App: "metro_hail", Function: "book", DependsOn: []string{"s2"}},
		{ID: "s5", App: "metro_hail", Function: "book", DependsOn: []string{"s4"}},
	}}
	tests := []struct {
		name              string
		named             []string
		wantKept, wantOut string
	}{
		{"no app named: the plan stands", nil, "s1,s2,s3,s4,s5", ""},
		{"others dropped, with what waits on them", []string{"metro_hail"}, "s1,s3", "s2,s4,s5"},
		{"every app named", []string{"metro_hail", "email"}, "s1,s2,s3,s4,s5", ""},
		{"a named app the plan does not use", []string{"quick_ride"}, "", "s1,s2,s3,s4,s5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			named := map[string]bool{}
			for _, n := range tt.named {
				named[n] = true
			}
			kept, dropped := followNamedApps(plan, named)
			if got := stepIDs(kept.Steps); got != tt.wantKept {
				t.Errorf("kept %s, want %s", got, tt.wantKept)
			}
			var out []PlanStep
			for _, d := range dropped {
				out = append(out, d.PlanStep)
			}
			if got := stepIDs(out); got != tt.wantOut {
				t.Errorf("dropped %s, want %s", got, tt.wantOut)
			}
			if kept.Steps == nil {
				t.Error("kept plan has nil steps")
			}
		})
	}
}

func stepIDs(steps []PlanStep) string {
	var ids []string
	for _, s := range steps {
		ids = append(ids, s.ID)
	}
	return strings.Join(ids, ",")
}

// TestGuardStepTurnsAPanicIntoTheStepsError: a bug that panics in one step
// fails that step, with a message naming its app, and nothing waits for it.
func TestGuardStepTurnsAPanicIntoTheStepsError(t *testing.T) {
	h := &Hub{}
	r := newStepRun(PlanStep{ID: "s1", App: "metro_hail"})
	h.guardStep(context.Background(), r, func() { panic("boom") })
	var herr *Error
	if !errors.As(r.partErr, &herr) || !strings.Contains(herr.Message, "metro_hail") {
		t.Fatalf("step error = %v, want an error naming metro_hail", r.partErr)
	}
	select {
	case <-r.known:
	default:
		t.Fatal("the step's output is still awaited after its panic")
	}
}
