package hub

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/secgpt/secgpt/store/storetest"
)

// TestDataGrantSubjectIsUnambiguous: a data grant names exactly the data
// shown, however its values are written.
func TestDataGrantSubjectIsUnambiguous(t *testing.T) {
	tests := []struct {
		name string
		a, b []DataItem
	}{
		{"a value holding a line break and a second item", []DataItem{{Field: "a", Value: "b\nc=d"}}, []DataItem{{Field: "a", Value: "b"}, {Field: "c", Value: "d"}}},
		{"a field holding the separator", []DataItem{{Field: "a=b", Value: "c"}}, []DataItem{{Field: "a", Value: "b=c"}}},
		{"an empty item", []DataItem{{Field: "a", Value: "b"}}, []DataItem{{Field: "a", Value: "b"}, {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := subject(ConsentRequest{Category: CategoryData, App: "travel_mate", Data: tt.a})
			b := subject(ConsentRequest{Category: CategoryData, App: "travel_mate", Data: tt.b})
			if a == b {
				t.Fatalf("%+v and %+v share the grant subject %s", tt.a, tt.b, a)
			}
		})
	}
	same := []DataItem{{Field: "notes", Value: "asthma"}}
	if subject(ConsentRequest{Category: CategoryData, App: "x", Data: same}) != subject(ConsentRequest{Category: CategoryData, App: "x", Data: same}) {
		t.Fatal("the same data got two subjects")
	}
}

// TestExecConsentShowsEveryPlannedCall: the question to run an app lists
// each of its planned calls with its own arguments, as the app gets them.
func TestExecConsentShowsEveryPlannedCall(t *testing.T) {
	h := &Hub{catalog: mustCatalog(t)}
	steps := []PlanStep{
		{ID: "s1", App: "post", Function: "read", Args: json.RawMessage(`{"id":"m1"}`)},
		{ID: "s2", App: "notes", Function: "keep", Args: json.RawMessage(`{}`)},
		{ID: "s3", App: "post", Function: "send", Args: json.RawMessage(`{"to":"eve@example.com","body":"x"}`)},
	}
	req := h.execRequest(&query{text: "q"}, steps, "post")
	if len(req.Calls) != 2 || req.Calls[0].Function != "read" || req.Calls[1].Function != "send" || len(req.Args) != 0 || !req.Irreversible {
		t.Fatalf("exec request = %+v, want both calls of post, irreversible", req)
	}
	// Each app of a plan of several writes its part from the whole
	// request: the question says so, as for a plan of one step.
	if len(req.Data) != 1 || req.Data[0] != (DataItem{Field: "your request", Value: "q"}) {
		t.Errorf("exec request shows the data %+v, want the user's request", req.Data)
	}
	req.Summary = summarize(req)
	for _, want := range []string{`read with {"id":"m1"}`, `send with {"to":"eve@example.com","body":"x"}`, "cannot be undone", "reads your request"} {
		if !strings.Contains(req.Summary, want) {
			t.Errorf("summary %q lacks %q", req.Summary, want)
		}
	}
	one := h.execRequest(&query{text: "q"}, steps, "notes")
	if one.Function != "keep" || string(one.Args) != `{}` || len(one.Calls) != 1 {
		t.Fatalf("single-call request = %+v", one)
	}
}

// TestExecConsentSaysWhatItCovers: the question shows which arguments the
// app will complete and which come from another app, and says that once
// covers exactly the calls shown while session and always cover the app's
// planned functions with any arguments.
func TestExecConsentSaysWhatItCovers(t *testing.T) {
	h := &Hub{catalog: mustCatalog(t)}
	steps := []PlanStep{
		{ID: "s1", App: "notes", Function: "keep", Args: json.RawMessage(`{}`)},
		{ID: "s2", App: "post", Function: "send", Args: json.RawMessage(`{"to":"eve@example.com"}`), InputsFrom: map[string]string{"body": "s1.note"}},
		{ID: "s3", App: "post", Function: "read", Args: json.RawMessage(`{}`)},
	}
	req := h.execRequest(&query{text: "q"}, steps, "post")
	if got := req.Calls[0]; strings.Join(got.Completes, ",") != "" || got.From["body"] != "notes.note" {
		t.Fatalf("send call = %+v, want body from notes.note and nothing to complete", got)
	}
	req.Choices = durableChoices
	req.Summary = summarize(req)
	for _, want := range []string{"body comes from notes.note", "Once allows exactly the calls shown", "for this session or always allows \"post\" to run the functions a request plans, with any arguments"} {
		if !strings.Contains(req.Summary, want) {
			t.Errorf("summary %q lacks %q", req.Summary, want)
		}
	}
	partial := h.execRequest(&query{text: "q"}, []PlanStep{{ID: "s1", App: "post", Function: "send", Args: json.RawMessage(`{"to":"eve@example.com"}`)}}, "post")
	partial.Summary = summarize(partial)
	if !strings.Contains(partial.Summary, "the app completes body") {
		t.Errorf("summary %q does not say the app completes body", partial.Summary)
	}
}

func mustCatalog(t *testing.T) *catalog {
	t.Helper()
	c, err := newCatalog(testSpecs())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// askCounter answers every consent with once and counts the questions.
type askCounter struct{ asked int }

func (a *askCounter) Ask(context.Context, ConsentRequest) (Decision, error) {
	a.asked++
	return DecisionOnce, nil
}

// TestCollabOnceCoversTheResultShown: allowing one app's result to reach
// another once covers that result, not a different one later in the
// request.
func TestCollabOnceCoversTheResultShown(t *testing.T) {
	h := &Hub{catalog: mustCatalog(t), store: storetest.Open(t), opts: Options{ConsentTimeout: time.Minute}}
	asker := &askCounter{}
	q := &query{id: "q1", user: "@a:x", session: "s1", text: "q", consenter: asker, once: map[string]bool{}, record: &Record{}}
	ask := func(result string) {
		t.Helper()
		req := ConsentRequest{Category: CategoryCollab, Source: "post", App: "notes", Function: "keep", Result: json.RawMessage(result), InPlan: true}
		if !h.decide(context.Background(), q, req).allows() {
			t.Fatalf("collab with %s denied", result)
		}
	}
	ask(`{"id":"m1"}`)
	ask(`{"id":"m1"}`)
	if asker.asked != 1 {
		t.Fatalf("asked %d times for one result, want once", asker.asked)
	}
	ask(`{"id":"m2"}`)
	if asker.asked != 2 {
		t.Fatalf("a different result was not asked about (asked %d times)", asker.asked)
	}
}

// TestADecisionOffTheRecordIsADenial: a consent the audit log cannot take
// is a denial (DESIGN §5), however it was answered.
func TestADecisionOffTheRecordIsADenial(t *testing.T) {
	for _, d := range []Decision{DecisionOnce, DecisionAlways} {
		t.Run(string(d), func(t *testing.T) {
			h := newTestHub(t, &fakeRunner{})
			q := newTestQuery(t, h, Plan{}, consentFunc(func(ConsentRequest) Decision { return d }))
			ctx := context.Background()
			if _, err := h.store.DB().Exec(ctx, `CREATE TRIGGER no_audit BEFORE INSERT ON audit_log BEGIN SELECT RAISE(ABORT, 'audit log unavailable'); END`); err != nil {
				t.Fatal(err)
			}
			req := ConsentRequest{Category: CategoryExec, App: "notes", Function: "keep", Args: json.RawMessage(`{}`), InPlan: true}
			if got := h.decide(ctx, q, req); got.allows() {
				t.Fatalf("decide() = %s with the audit log failing, want a denial", got)
			}
			if got := h.decide(ctx, q, req); got.allows() {
				t.Fatalf("decide() again = %s, want a denial: no earlier answer stands off the record", got)
			}
		})
	}
}
