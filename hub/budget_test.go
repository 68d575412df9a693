package hub_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/secgpt/secgpt/apps/hostile"
	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/hub/hubtest"
	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/llm/simulator"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/store"
)

// billed counts the tokens the simulated endpoint reports, as it would
// bill them.
type billed struct{ tokens, calls atomic.Int64 }

func (b *billed) observe(_ *simulator.ChatRequest, u llm.Usage) {
	b.tokens.Add(int64(u.PromptTokens + u.CompletionTokens))
	b.calls.Add(1)
}

// hostileReport is what the hostile app reported of its attempt, from the
// query's record; nil if it reported nothing.
func hostileReport(reply *hub.Reply) *hostile.Result {
	if reply == nil || reply.Record == nil {
		return nil
	}
	for _, c := range reply.Record.Calls {
		var r hostile.Result
		if c.App == hostile.Name && c.Source == "hub" && c.Result != nil && json.Unmarshal(c.Result, &r) == nil {
			return &r
		}
	}
	return nil
}

const burnQuery = "hostile burn count = '32' bytes = '524000'"

// TestTokenBurnIsRefusedAtTheBudget: an app that sends prompts of 512 KiB
// one after another (32 would be 4 million tokens; the per-step call limit
// alone let 8 through, two million tokens with the simulated model's
// answers, which repeat the prompt) is refused at the request's budget,
// and the user is told which budget stopped it. The check before a call
// knows its prompt, not its answer: the bill passes the budget by at most
// the answer of the last call let through.
func TestTokenBurnIsRefusedAtTheBudget(t *testing.T) {
	var bill billed
	sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{hostile.Name}, Observe: bill.observe})
	reply, err := sys.Hub.Handle(context.Background(), hub.Request{User: alice, Query: burnQuery, Consenter: hub.AllowPlanned{}})
	t.Logf("billed %d tokens in %d model calls; error: %v", bill.tokens.Load(), bill.calls.Load(), err)
	var he *hub.Error
	if !errors.As(err, &he) || he.App != "" || !strings.Contains(he.Message, "the model budget of 250000 tokens for this request is spent") {
		t.Errorf("Handle error = %v, want the hub's refusal naming the request's budget", err)
	}
	// What a harness (secgpt sandbox-check) reads: the budget. The step's
	// result, refused with it, is not kept.
	var be *hub.BudgetError
	if !errors.As(err, &be) || be.Budget != "for this request" || be.Limit != 250_000 {
		t.Errorf("Handle error = %#v, want a *hub.BudgetError for the request's budget", err)
	}
	const oneAnswer = 524000/4 + 100
	if got := bill.tokens.Load(); got > 250_000+oneAnswer {
		t.Errorf("the endpoint billed %d tokens, over the request's budget of 250000 and one answer", got)
	}
	if reply != nil && reply.Record.Tokens <= 0 {
		t.Errorf("Record.Tokens = %d, want what was billed", reply.Record.Tokens)
	}
	// Usage is written without waiting for durability: it lands soon.
	var recorded int64
	var usage []store.Usage
	for deadline := time.Now().Add(5 * time.Second); recorded != bill.tokens.Load() && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var err error
		if usage, err = sys.Store.DayUsage(context.Background(), alice, store.Day(time.Now())); err != nil {
			t.Fatal(err)
		}
		recorded = 0
		for _, u := range usage {
			recorded += u.Tokens()
		}
	}
	if recorded != bill.tokens.Load() {
		t.Errorf("recorded %d tokens (%+v), the endpoint billed %d", recorded, usage, bill.tokens.Load())
	}
}

// TestDailyBudgetsStopTheNextRequest: the per-user and per-app daily
// budgets refuse a request once spent, name the budget and when it
// resets, and !usage's report shows the day's figures; the planner's
// calls count for the user, not for the app.
func TestDailyBudgetsStopTheNextRequest(t *testing.T) {
	tests := []struct {
		name    string
		budgets hub.Budgets
		want    string
	}{
		{"per user", hub.Budgets{TokensPerUserDay: 130_000}, "the model budget of 130000 tokens a day for you is spent"},
		{"per app", hub.Budgets{TokensPerAppDay: 130_000}, "the model budget of 130000 tokens a day for hostile for you is spent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var bill billed
			sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{hostile.Name}, Observe: bill.observe,
				Hub: func(o *hub.Options) { o.Budgets = tt.budgets }})
			// 30,000 tokens of prompt, as many of answer: two such
			// requests fit, a third does not.
			query := "hostile burn count = '1' bytes = '120000'"
			for i := 0; i < 2; i++ {
				if _, err := sys.Hub.Handle(context.Background(), hub.Request{User: alice, Query: query, Consenter: hub.AllowPlanned{}}); err != nil {
					t.Fatalf("request %d within the budget: %v", i+1, err)
				}
			}
			_, err := sys.Hub.Handle(context.Background(), hub.Request{User: alice, Query: query, Consenter: hub.AllowPlanned{}})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "it resets at 00:00 UTC") {
				t.Fatalf("third request: %v, want a refusal saying %q and when it resets", err, tt.want)
			}
			if got := bill.tokens.Load(); got > 130_000 {
				t.Errorf("billed %d tokens, over the budget of 130000", got)
			}
			// Usage is written without waiting for durability: it lands soon.
			var rep hub.UsageReport
			for deadline := time.Now().Add(5 * time.Second); rep.Tokens != bill.tokens.Load() && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				var err error
				if rep, err = sys.Hub.Usage(context.Background(), alice); err != nil {
					t.Fatal(err)
				}
			}
			var planner, app int64
			for _, u := range rep.Apps {
				switch u.App {
				case "":
					planner = u.Tokens()
				case hostile.Name:
					app = u.Tokens()
				}
			}
			if planner <= 0 || app < 120_000 || rep.Tokens != planner+app || rep.Tokens != bill.tokens.Load() {
				t.Errorf("usage report %+v: planner %d, hostile %d; billed %d", rep, planner, app, bill.tokens.Load())
			}
			if rep.Resets.Sub(time.Now()) > 24*time.Hour || rep.Resets.Hour() != 0 {
				t.Errorf("Resets = %v, want the next UTC midnight", rep.Resets)
			}
			// Another user's budget is their own.
			if _, err := sys.Hub.Handle(context.Background(), hub.Request{User: bob, Query: query, Consenter: hub.AllowPlanned{}}); err != nil {
				t.Errorf("another user was refused: %v", err)
			}
		})
	}
}

// cpuTime is this process's CPU time, user and system.
func cpuTime(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestRefusedFramesCannotKeepTheHubBusy: an app that sends model requests
// over the prompt limit (each read and refused by the hub, at almost no
// cost to the spoke's own time) is stopped once the hub's time serving
// the step passes its bound, and named; the hub's CPU time over the whole
// request stays within a few times the bound. Before the charge, 5000
// such frames kept the hub at a core for the whole request.
func TestRefusedFramesCannotKeepTheHubBusy(t *testing.T) {
	const bound = 500 * time.Millisecond
	sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{hostile.Name},
		Hub:    func(o *hub.Options) { o.RequestTimeout = 30 * time.Second },
		Spokes: func(o *spoke.Options) { o.MaxHubTime = bound }})
	before, start := cpuTime(t), time.Now()
	_, err := sys.Hub.Handle(context.Background(), hub.Request{User: alice, Query: "hostile grind frames = '5000' bytes = '900000'", Consenter: hub.AllowPlanned{}})
	spent, took := cpuTime(t)-before, time.Since(start)
	t.Logf("hub CPU %v in %v; error: %v", spent, took, err)
	var he *hub.Error
	if !errors.Is(err, spoke.ErrHubTime) || !errors.As(err, &he) || !strings.HasPrefix(he.Message, "hostile kept the hub busy for ") ||
		!strings.HasSuffix(he.Message, "in one step, over its bound of 500ms, and was stopped") {
		t.Errorf("Handle error = %v, want hostile stopped and named for the hub's time", err)
	}
	if spent > 4*bound+time.Second {
		t.Errorf("the hub spent %v of CPU on the request, want about the bound of %v", spent, bound)
	}
	// The hub goes on serving.
	if _, err := sys.Hub.Handle(context.Background(), hub.Request{User: bob, Query: "hostile fill count = '1' bytes = '10'", Consenter: hub.AllowPlanned{}}); err != nil {
		t.Errorf("the hub did not serve another user afterwards: %v", err)
	}
}

// TestDataFillStopsAtTheQuota: an app storing 100 MiB in its own data is
// refused at the per-(user, app) bound with a refusal that names it.
func TestDataFillStopsAtTheQuota(t *testing.T) {
	// The hub's time is not what this test bounds: under the race
	// detector, 81 puts of 200 KiB take more than its default.
	sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{hostile.Name}, Spokes: func(o *spoke.Options) { o.MaxHubTime = time.Minute }})
	reply, err := sys.Hub.Handle(context.Background(), hub.Request{User: alice, Query: "hostile fill count = '512' bytes = '204800'", Consenter: hub.AllowPlanned{}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := sys.Store.DataUsage(context.Background(), alice, hostile.Name)
	if err != nil {
		t.Fatal(err)
	}
	r := hostileReport(reply)
	t.Logf("stored %d bytes in %d documents; the app saw: %+v", got.Bytes, got.Docs, r)
	if got.Bytes > 16<<20 {
		t.Errorf("stored %d bytes, over the default bound of %d", got.Bytes, 16<<20)
	}
	if r == nil || r.Outcome != hostile.Blocked || !strings.Contains(r.Detail, "over its limit of 16777216") {
		t.Errorf("the app's report = %+v, want a refusal naming the limit", r)
	}
	// Another user's data is counted on its own.
	if _, err := sys.Hub.Handle(context.Background(), hub.Request{User: bob, Query: "hostile fill count = '1' bytes = '10'", Consenter: hub.AllowPlanned{}}); err != nil {
		t.Fatal(err)
	}
	if d, _ := sys.Store.DataUsage(context.Background(), bob, hostile.Name); d.Docs != 1 {
		t.Errorf("bob's data = %+v, want his one document", d)
	}
}

// TestPlannerOverBudgetIsRefused: with the day's budget spent, the request
// is refused before its plan, with the budget named; no model call is made.
func TestPlannerOverBudgetIsRefused(t *testing.T) {
	var bill billed
	sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{hostile.Name}, Observe: bill.observe,
		Hub: func(o *hub.Options) { o.Budgets = hub.Budgets{TokensPerUserDay: 10} }})
	_, err := sys.Hub.Handle(context.Background(), hub.Request{User: alice, Query: burnQuery, Consenter: hub.AllowPlanned{}})
	var he *hub.Error
	if !errors.As(err, &he) || !strings.HasPrefix(he.Message, "I did not plan your request: the model budget of 10 tokens a day for you is spent") {
		t.Errorf("Handle error = %v, want the planner refused for the day's budget", err)
	}
	if n := bill.calls.Load(); n != 0 {
		t.Errorf("%d model calls were made", n)
	}
}
