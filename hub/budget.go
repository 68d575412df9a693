package hub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/store"
)

// Budgets are the operator's bounds on what one user may spend: model
// tokens per request, per UTC day, and per app per UTC day, and the data
// each app may store for the user. Zero fields take the defaults noted,
// which a normal day does not reach (a request of a few apps costs some
// thousands of tokens) but a burn (32 prompts of 512 KiB are 4 million
// tokens) reaches within its first request.
type Budgets struct {
	TokensPerQuery   int64 // default 250,000
	TokensPerUserDay int64 // default 2,000,000
	// TokensPerAppDay bounds each app's spokes' calls for one user.
	TokensPerAppDay int64 // default 1,000,000
	DataBytes       int64 // per (user, app); default 16 MiB
	DataDocs        int64 // per (user, app); default 10,000
}

func (b *Budgets) setDefaults() {
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&b.TokensPerQuery, 250_000)
	def(&b.TokensPerUserDay, 2_000_000)
	def(&b.TokensPerAppDay, 1_000_000)
	def(&b.DataBytes, 16<<20)
	def(&b.DataDocs, 10_000)
}

// BudgetError is a model call refused because it would go over a token
// budget. Its message names the budget and when it resets.
type BudgetError struct {
	// Budget says which: "for this request", "a day for you", "a day for
	// <app> for you".
	Budget string
	Limit  int64
	// Used is what the budget had spent, Need what the call was estimated
	// to take.
	Used, Need int64
	// Resets is when the budget starts again; zero for the per-request one.
	Resets time.Time
	now    time.Time
}

func (e *BudgetError) Error() string {
	s := fmt.Sprintf("the model budget of %d tokens %s is spent: %d used, and the next model call needs about %d more",
		e.Limit, e.Budget, e.Used, e.Need)
	if !e.Resets.IsZero() {
		s += fmt.Sprintf("; it resets at %s, in %s", e.Resets.Format("15:04 MST"), e.Resets.Sub(e.now).Round(time.Minute))
	}
	return s
}

// ledger keeps today's token use of each user, as committed to the store
// plus what model calls under way have reserved, so that concurrent calls
// cannot pass a bound together. It loads a user's day from the store at
// its first use and writes each answer's cost through.
type ledger struct {
	st      *store.Store
	budgets Budgets
	now     func() time.Time

	mu    sync.Mutex
	users map[string]*dayUse
}

// dayUse is one user's use on one UTC day, in tokens.
type dayUse struct {
	day   string
	total int64
	apps  map[string]int64
}

func newLedger(st *store.Store, b Budgets, now func() time.Time) *ledger {
	b.setDefaults()
	if now == nil {
		now = time.Now
	}
	return &ledger{st: st, budgets: b, now: now, users: map[string]*dayUse{}}
}

// today returns the user's use today, loaded from the store at the first
// use of the day. l.mu must be held.
func (l *ledger) today(ctx context.Context, user string) (*dayUse, error) {
	day := store.Day(l.now())
	if u, ok := l.users[user]; ok && u.day == day {
		return u, nil
	}
	rows, err := l.st.DayUsage(ctx, user, day)
	if err != nil {
		return nil, err
	}
	u := &dayUse{day: day, apps: map[string]int64{}}
	for _, r := range rows {
		u.total += r.Tokens()
		u.apps[r.App] += r.Tokens()
	}
	l.users[user] = u
	return u, nil
}

// nextDay is the start of the UTC day after t.
func nextDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
}

// reservation is what a model call holds of the budgets while it runs.
type reservation struct {
	l    *ledger
	q    *query
	app  string
	use  *dayUse
	need int64
}

// reserve checks that a model call for q by app ("" for the hub's own
// calls) estimated at need tokens fits every budget, and holds need of
// each until release. A failure to read the day's use is a refusal: the
// budgets fail closed.
func (l *ledger) reserve(ctx context.Context, q *query, app string, need int64) (*reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	u, err := l.today(ctx, q.user)
	if err != nil {
		return nil, fmt.Errorf("failed to read today's model usage: %w", err)
	}
	now := l.now()
	over := func(budget string, limit, used int64, resets time.Time) error {
		return &BudgetError{Budget: budget, Limit: limit, Used: used, Need: need, Resets: resets, now: now}
	}
	b := l.budgets
	switch {
	case q.tokens+need > b.TokensPerQuery:
		return nil, over("for this request", b.TokensPerQuery, q.tokens, time.Time{})
	case u.total+need > b.TokensPerUserDay:
		return nil, over("a day for you", b.TokensPerUserDay, u.total, nextDay(now))
	case app != "" && u.apps[app]+need > b.TokensPerAppDay:
		return nil, over(fmt.Sprintf("a day for %s for you", app), b.TokensPerAppDay, u.apps[app], nextDay(now))
	}
	q.tokens += need
	u.total += need
	u.apps[app] += need
	return &reservation{l: l, q: q, app: app, use: u, need: need}, nil
}

// meter is the llm.Meter of the reserved call: it counts each answer's
// cost against the budgets and writes it to the store.
func (r *reservation) meter(ctx context.Context) llm.Meter {
	return func(cost llm.Usage) {
		n := int64(cost.PromptTokens + cost.CompletionTokens)
		r.l.mu.Lock()
		r.q.tokens += n
		if u, err := r.l.today(ctx, r.q.user); err == nil {
			u.total += n
			u.apps[r.app] += n
		}
		r.l.mu.Unlock()
		r.q.countTokens(n)
		rec := store.Usage{App: r.app, Calls: 1, PromptTokens: int64(cost.PromptTokens), CompletionTokens: int64(cost.CompletionTokens)}
		if cost.Estimated {
			rec.Estimated = n
		}
		// Nothing waits on it: the next write that waits commits it.
		if err := r.l.st.Later().AddUsage(context.WithoutCancel(ctx), r.q.user, store.Day(r.l.now()), rec); err != nil {
			zerolog.Ctx(ctx).Error().Err(err).Msg("Failed to record model usage")
		}
	}
}

// release gives back what the call reserved; its metered cost stays.
func (r *reservation) release() {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	r.q.tokens -= r.need
	r.use.total -= r.need
	r.use.apps[r.app] -= r.need
}

// addHubTime records the hub's time spent serving app's spoke for user.
func (l *ledger) addHubTime(ctx context.Context, user, app string, d time.Duration) {
	if d <= 0 {
		return
	}
	if err := l.st.Later().AddUsage(context.WithoutCancel(ctx), user, store.Day(l.now()), store.Usage{App: app, HubTime: d}); err != nil {
		zerolog.Ctx(ctx).Error().Err(err).Msg("Failed to record the hub's time")
	}
}

// complete makes one model call for q on behalf of app ("" for the hub's
// own) within the token budgets: call runs with a ctx that meters what the
// endpoint bills. A call that would go over a budget is not made: the
// error is a *BudgetError.
func (h *Hub) complete(ctx context.Context, q *query, app string, req llm.Request, call func(ctx context.Context) error) error {
	need := int64(llm.EstimateTokens(llm.PromptBytes(req.Messages, req.Tools)))
	if req.ResponseSchema != nil {
		need += int64(llm.EstimateTokens(len(req.ResponseSchema.Schema)))
	}
	r, err := h.ledger.reserve(ctx, q, app, need)
	if err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Str("app", appLabel(app)).Msg("Refused a model call over budget")
		return err
	}
	defer r.release()
	return call(llm.WithMeter(ctx, r.meter(ctx)))
}

// UsageReport is one user's use today and the bounds it counts against.
type UsageReport struct {
	Day string
	// Apps is each app's use today; App "" is the hub's own calls (the
	// planner and the no-app assistant).
	Apps   []store.Usage
	Tokens int64
	// Data is what each installed app stores for the user, by app.
	Data    map[string]store.DataUsage
	Budgets Budgets
	// Resets is when the daily budgets start again.
	Resets time.Time
	// HubTimePerStep bounds the hub's time serving one step (zero: none
	// set in the hub's options).
	HubTimePerStep time.Duration
}

// Usage returns the user's use of models and storage today.
func (h *Hub) Usage(ctx context.Context, user string) (UsageReport, error) {
	now := h.ledger.now()
	rep := UsageReport{Day: store.Day(now), Budgets: h.ledger.budgets, Resets: nextDay(now),
		Data: map[string]store.DataUsage{}, HubTimePerStep: h.opts.HubTimePerStep}
	var err error
	if rep.Apps, err = h.store.DayUsage(ctx, user, rep.Day); err != nil {
		return UsageReport{}, err
	}
	for _, u := range rep.Apps {
		rep.Tokens += u.Tokens()
	}
	for _, app := range h.catalog.names {
		d, err := h.store.DataUsage(ctx, user, app)
		if err != nil {
			return UsageReport{}, err
		}
		if d.Docs > 0 {
			rep.Data[app] = d
		}
	}
	return rep, nil
}

// errOverBudget reports whether err is a refusal for a budget.
func errOverBudget(err error) (*BudgetError, bool) {
	var be *BudgetError
	ok := errors.As(err, &be)
	return be, ok
}
