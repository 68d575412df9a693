// Package hub is the trusted centre of secgpt: it plans each request, turns
// the plan into the request's capability set, asks the user's consent,
// brokers every model call and every exchange between spokes, composes
// the answer, and keeps the user's memory and grants.
//
// # Text flow
//
// The invariant that makes isolation mean something for language (DESIGN
// §3): text that app A wrote (its description, function and schema prose,
// result strings, error text), and text a model wrote after reading it,
// reaches only A's own spoke and the user, attributed to A. It never
// reaches the planner, another app's spoke, the no-app (vanilla) spoke,
// or a model context that holds another app's result or decides another
// app's step. Across an app boundary only typed values move: numbers,
// booleans, members of small enums (at most 16, each an identifier-like
// token), and strings the user typed (a whole span of the request); each
// move of the user's data or of another app's result is shown in a
// consent. App, function and property names, which must be identifiers,
// are not free text. What follows from it:
//
//   - The planner reads the hub's instructions, the user's own messages
//     and the answers no app shaped, and a catalogue of identifiers and
//     typed signatures (signature.go): no description, no schema prose;
//     only the apps the request names, or all when it names none. An
//     invalid step fails alone (parsePlan). Its context holding no app's
//     text, it answers a request that needs no app itself, in its one
//     round (planner.go).
//   - Each app writes its own part of the answer in its own spoke, from its
//     own result; the cross-app part is written from the typed fields the
//     apps share only (combiner.go). The Reply says who said what, and its
//     plain text puts an app's name on every line of the app's words, a
//     failure's included (reply.go).
//   - Hub memory keeps each entry's provenance; the planner and the no-app
//     assistant read only the answers no app shaped (history.go).
//   - Values cross between apps only typed (typed.go): inputs_from and
//     app-to-app calls refuse free text, results lose it.
//   - A once-answer to run an app covers exactly the calls its prompt
//     showed, each in its own step's run, adding only the arguments the
//     prompt said the app completes (capabilities); any other call is
//     asked again.
//
// # Consent
//
// A request asks once: the questions its plan needs before any spoke
// starts (running each app, sharing values the user did not type) go to
// a BatchConsenter together, one prompt (askPlan, ask.go); what is known
// only later (a call outside the plan, an irreversible action, a result
// going to another app) is asked on its own. Each question is decided,
// audited and recorded on its own, as if asked alone. A warned question
// (outside the plan, data the user did not type) offers only once and
// deny.
//
// # Budgets
//
// What a user's requests may cost is bounded (budget.go): every model call,
// the planner's as an app's, is checked against the user's token budgets
// (per request, per UTC day, per app per day) before it is made, on an
// estimate of its prompt, and counted from what the endpoint bills; a call
// over a budget is refused with the budget named, never cut short. Each
// app's stored data is bounded per user, and the runner bounds the hub's
// own time serving a step. Every decision is on record before what it
// allows happens (an app's network request included), or is a denial.
//
// The hub holds the only LLM client. It never runs app code (spokes do),
// never lets text from an app widen what a request may do, passes on
// every checked document only in its canonical encoding, and fails closed:
// an error while deciding is a denial.
package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/store"
)

// LLM is the hub's model endpoint. It is safe for concurrent use.
type LLM interface {
	Complete(ctx context.Context, req llm.Request) (llm.Response, error)
	// CompleteJSON asks for a document matching req.ResponseSchema and calls
	// check on each answer; it retries once when check fails.
	CompleteJSON(ctx context.Context, req llm.Request, check func([]byte) error) ([]byte, error)
}

var (
	_ LLM = (*llm.Client)(nil)
	_ LLM = (*llm.Router)(nil)
)

// Runner runs steps in spokes.
type Runner interface {
	Run(ctx context.Context, key spoke.Key, step spoke.Step, h spoke.Handler) (spoke.Result, spoke.Info, error)
	// StopUser stops every spoke of the user.
	StopUser(user string)
}

var _ Runner = (*spoke.Manager)(nil)

// Scratch holds the spokes' scratch directories on the hub's disk.
type Scratch interface {
	// Forget removes every scratch directory of the user, whose spokes
	// have stopped.
	Forget(ctx context.Context, user string) error
}

// Egress performs one HTTP exchange for an app, only to the registrable
// domains it declared, and refuses anything else with an error that says
// why. Implementations fail closed; they are safe for concurrent use.
type Egress interface {
	// Do returns, whatever the outcome, the origins the request was sent
	// to (data left the machine), in order: a refusal after a request
	// went out (a response over the limit, a redirect refused) still sent it.
	Do(ctx context.Context, app string, domains []string, req spoke.HTTPRequest) (resp spoke.HTTPResponse, sent []string, err error)
}

// OutOfPlan is the policy for requests the plan did not name.
type OutOfPlan string

const (
	// OutOfPlanAsk puts the request to the user, with a warning.
	OutOfPlanAsk OutOfPlan = "ask"
	// OutOfPlanDeny refuses it without asking.
	OutOfPlanDeny OutOfPlan = "deny"
)

// Models names the model for each role; Apps overrides Spoke per app.
type Models struct {
	Planner string
	Spoke   string
	Vanilla string
	Apps    map[string]string
}

// Options configure a Hub. Zero durations and limits take the defaults noted.
type Options struct {
	Store  *store.Store
	LLM    LLM
	Runner Runner
	// Scratch holds the spokes' scratch directories; nil when the
	// runner's spokes have none that outlives them.
	Scratch Scratch
	// Apps are the installed apps' specs.
	Apps   []apps.Spec
	Models Models
	// Egress serves apps' HTTP; nil refuses every request.
	Egress    Egress
	OutOfPlan OutOfPlan

	ConsentTimeout time.Duration // default 5 min
	// RequestTimeout bounds a whole query, model calls and consent waits
	// included; each spoke's own time per step is bounded by the runner.
	RequestTimeout time.Duration // default 15 min
	SessionIdle    time.Duration // default 1 h

	MaxQueryBytes       int // default 8 KiB
	MaxPlanSteps        int // default 16
	MaxLLMCallsPerStep  int // default 8
	MaxLLMCallsPerQuery int // default 32
	MaxPromptBytes      int // default 512 KiB per completion request
	MaxCallDepth        int // default 3
	HistoryEntries      int // default 20
	MemoryEntries       int // default 20

	// Budgets bound each user's model tokens and each app's stored data.
	Budgets Budgets
	// HubTimePerStep is the bound the runner puts on the hub's time
	// serving one step's spoke (spoke.Options.MaxHubTime), shown to users.
	HubTimePerStep time.Duration

	Log zerolog.Logger
}

func (o *Options) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defInt := func(i *int, v int) {
		if *i <= 0 {
			*i = v
		}
	}
	def(&o.ConsentTimeout, 5*time.Minute)
	def(&o.RequestTimeout, 15*time.Minute)
	def(&o.SessionIdle, time.Hour)
	defInt(&o.MaxQueryBytes, 8<<10)
	defInt(&o.MaxPlanSteps, 16)
	defInt(&o.MaxLLMCallsPerStep, 8)
	defInt(&o.MaxLLMCallsPerQuery, 32)
	defInt(&o.MaxPromptBytes, 512<<10)
	defInt(&o.MaxCallDepth, 3)
	defInt(&o.HistoryEntries, 20)
	defInt(&o.MemoryEntries, 20)
	if o.OutOfPlan == "" {
		o.OutOfPlan = OutOfPlanAsk
	}
}

// Hub serves queries. It is safe for concurrent use by many users.
type Hub struct {
	opts    Options
	store   *store.Store
	llm     LLM
	runner  Runner
	catalog *catalog
	ledger  *ledger
	log     zerolog.Logger

	userMu sync.Mutex
	users  map[string]*userState
}

// New returns a Hub. A hub starting up ends every earlier session: session
// grants do not survive a restart.
func New(ctx context.Context, opts Options) (*Hub, error) {
	if opts.Store == nil || opts.LLM == nil || opts.Runner == nil {
		return nil, errors.New("hub needs a store, an LLM and a runner")
	}
	if opts.OutOfPlan != "" && opts.OutOfPlan != OutOfPlanAsk && opts.OutOfPlan != OutOfPlanDeny {
		return nil, fmt.Errorf("unknown out-of-plan policy %q", opts.OutOfPlan)
	}
	opts.setDefaults()
	cat, err := newCatalog(opts.Apps)
	if err != nil {
		return nil, err
	}
	if _, err := opts.Store.EndAllSessions(ctx, "restart"); err != nil {
		return nil, fmt.Errorf("failed to end earlier sessions: %w", err)
	}
	return &Hub{
		opts: opts, store: opts.Store, llm: opts.LLM, runner: opts.Runner,
		catalog: cat, ledger: newLedger(opts.Store, opts.Budgets, nil), log: opts.Log, users: map[string]*userState{},
	}, nil
}

// Apps returns the installed apps' specs, in installed order.
func (h *Hub) Apps() []apps.Spec {
	out := make([]apps.Spec, 0, len(h.catalog.names))
	for _, n := range h.catalog.names {
		out = append(out, h.catalog.specs[n])
	}
	return out
}

// Request is one query from one user.
type Request struct {
	User  string
	Query string
	// Consenter answers this query's consent requests.
	Consenter Consenter
}

// Error is a failure to serve a query, with a message fit for the user.
type Error struct {
	Message string
	// App is the app whose words Message quotes (its error text), which
	// makes the message that app's text; "" when the hub wrote it all.
	App string
	Err error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Message
	}
	return e.Message + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Plain is the message as a front end that shows plain text writes it:
// when it quotes an app, every line under the app's name, as the Reply's
// Answer writes an app's words.
func (e *Error) Plain() string { return labelled(e.App, e.Message) }

func userError(err error, format string, args ...any) *Error {
	return &Error{Message: fmt.Sprintf(format, args...), Err: err}
}

// query is the state of one request.
type query struct {
	id, user, session, text string
	// epoch is the user's epoch when the query started (see userState).
	epoch uint64
	// arrived is when the query arrived.
	arrived   time.Time
	consenter Consenter
	caps      *capabilities

	mu       sync.Mutex
	once     map[string]bool
	llmCalls int
	record   *Record

	// tokens is what the query's model calls cost and reserved; the
	// ledger's lock guards it.
	tokens int64
}

// countTokens adds n tokens billed to the query's record.
func (q *query) countTokens(n int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.record.Tokens += n
}

func (q *query) onceGranted(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.once[key]
}

func (q *query) grantOnce(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.once[key] = true
}

// spendLLMCall counts a model call against the query's budget.
func (q *query) spendLLMCall(limit int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.llmCalls >= limit {
		return false
	}
	q.llmCalls++
	q.record.LLMCalls = q.llmCalls
	return true
}

func randomID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("hub: crypto/rand failed: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// errSessionEnded refuses work of a query whose session was ended, or
// whose user's memory was erased, while it ran.
var errSessionEnded = errors.New("your session ended or your memory was erased while this request ran")

// userState serialises one user's session changes and fences off the
// queries that started before one. Each end of a session and each erasure
// of memory is a new epoch: a query keeps the epoch it started in, and may
// start a spoke or write the user's memory only while that is still the
// user's epoch (see whileCurrent). Forget and Reset cancel the older
// queries and wait until none of them is inside such work before they stop
// the user's spokes and change the store, so no spoke of an ended session
// outlives the change and no erased memory is written again.
type userState struct {
	mu sync.Mutex
	// changed is signalled when busy falls or an end completes.
	changed *sync.Cond
	epoch   uint64
	// ending is set while an end waits for busy to fall to zero; lock waits
	// it out, so no new query starts meanwhile.
	ending bool
	// busy counts the spoke runs and memory writes under way.
	busy int
	// cancels ends each running query, by query ID.
	cancels map[string]context.CancelFunc
}

// userState returns the user's state, created on first use.
func (h *Hub) userState(user string) *userState {
	h.userMu.Lock()
	defer h.userMu.Unlock()
	st, ok := h.users[user]
	if !ok {
		st = &userState{cancels: map[string]context.CancelFunc{}}
		st.changed = sync.NewCond(&st.mu)
		h.users[user] = st
	}
	return st
}

// lock takes the user's lock once no end is under way.
func (st *userState) lock() {
	st.mu.Lock()
	for st.ending {
		st.changed.Wait()
	}
}

// endEpoch starts a new epoch for the user: it cancels the queries of the
// old one, waits until none is starting a spoke or writing memory, and
// stops the user's spokes. st.mu must be held; it is released while waiting.
func (h *Hub) endEpoch(st *userState, user string) {
	st.epoch++
	st.ending = true
	for _, cancel := range st.cancels {
		cancel()
	}
	for st.busy > 0 {
		st.changed.Wait()
	}
	h.runner.StopUser(user)
	st.ending = false
	st.changed.Broadcast()
}

// whileCurrent runs fn, which starts spokes or writes the user's memory,
// only if q's epoch is still the user's; an end of the epoch waits for it.
func (h *Hub) whileCurrent(q *query, fn func() error) error {
	st := h.userState(q.user)
	st.mu.Lock()
	if st.epoch != q.epoch {
		st.mu.Unlock()
		return errSessionEnded
	}
	st.busy++
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		st.busy--
		st.changed.Broadcast()
		st.mu.Unlock()
	}()
	return fn()
}

// session returns the user's active session, starting one if there is none
// or the last one has been idle too long, and registers q, whose epoch it
// sets, to be cancelled when the epoch ends.
func (h *Hub) session(ctx context.Context, q *query, cancel context.CancelFunc) (string, error) {
	st := h.userState(q.user)
	st.lock()
	defer st.mu.Unlock()
	s, ok, err := h.store.ActiveSession(ctx, q.user)
	if err != nil {
		return "", fmt.Errorf("failed to read session: %w", err)
	}
	if !ok || time.Since(s.LastActive) >= h.opts.SessionIdle {
		if ok {
			h.endEpoch(st, q.user)
			if err := h.store.EndSession(ctx, q.user, s.ID, "idle"); err != nil {
				return "", fmt.Errorf("failed to end idle session: %w", err)
			}
		}
		if s, err = h.store.StartSession(ctx, q.user); err != nil {
			return "", fmt.Errorf("failed to start session: %w", err)
		}
	} else if err := h.store.Later().TouchSession(ctx, q.user, s.ID); err != nil {
		// Queued (Later): nothing waits on the session's last activity.
		return "", fmt.Errorf("failed to touch session: %w", err)
	}
	q.epoch = st.epoch
	st.cancels[q.id] = cancel
	return s.ID, nil
}

// done unregisters a finished query.
func (h *Hub) done(q *query) {
	st := h.userState(q.user)
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.cancels, q.id)
}

// Reset ends the user's session: session grants end, the user's spokes stop,
// and queries still running are cancelled and can start no spoke.
func (h *Hub) Reset(ctx context.Context, user string) error {
	st := h.userState(user)
	st.lock()
	defer st.mu.Unlock()
	h.endEpoch(st, user)
	s, ok, err := h.store.ActiveSession(ctx, user)
	if err != nil {
		return fmt.Errorf("failed to read session: %w", err)
	}
	if ok {
		if err := h.store.EndSession(ctx, user, s.ID, "reset"); err != nil {
			return fmt.Errorf("failed to end session: %w", err)
		}
	}
	return nil
}

// Forget erases the user's hub memory and every app's memory of the user,
// its scratch directories included. The user's spokes, which hold app
// memory, stop; queries still running are cancelled and can write nothing
// back.
func (h *Hub) Forget(ctx context.Context, user string) error {
	st := h.userState(user)
	st.lock()
	defer st.mu.Unlock()
	h.endEpoch(st, user)
	// The memory first: a scratch that cannot be removed must not keep
	// the memory from being erased.
	err := h.store.ForgetUser(ctx, user)
	if h.opts.Scratch != nil {
		err = errors.Join(err, h.opts.Scratch.Forget(ctx, user))
	}
	if err != nil {
		return fmt.Errorf("failed to forget user: %w", err)
	}
	return nil
}

// Grants lists the user's stored grants.
func (h *Hub) Grants(ctx context.Context, user string) ([]store.Grant, error) {
	return h.store.ListGrants(ctx, user)
}

// Revoke removes the user's grants for app, or all grants when app is "".
func (h *Hub) Revoke(ctx context.Context, user, app string) (int, error) {
	return h.store.RevokeGrants(ctx, user, app)
}

// Audit returns the user's latest decisions, newest first.
func (h *Hub) Audit(ctx context.Context, user string, limit int) ([]store.AuditEntry, error) {
	return h.store.RecentAudit(ctx, user, limit)
}

// Handle serves one query. A failure the user should hear about is a *Error.
func (h *Hub) Handle(ctx context.Context, req Request) (*Reply, error) {
	switch {
	case req.User == "":
		return nil, userError(nil, "no user given")
	case req.Consenter == nil:
		return nil, userError(nil, "no way to ask for consent")
	case len(req.Query) > h.opts.MaxQueryBytes:
		return nil, userError(nil, "your message is too long (%d bytes; the limit is %d)", len(req.Query), h.opts.MaxQueryBytes)
	case !utf8.ValidString(req.Query):
		return nil, userError(nil, "your message is not valid text")
	}
	text := req.Query
	if len(text) == 0 {
		return nil, userError(nil, "your message is empty")
	}
	q := &query{id: randomID(), user: req.User, text: text, consenter: req.Consenter, once: map[string]bool{}, arrived: time.Now()}
	q.record = &Record{QueryID: q.id, User: q.user, Query: text}
	log := h.log.With().Str("user", q.user).Str("query_id", q.id).Logger()
	ctx = log.WithContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, h.opts.RequestTimeout)
	defer cancel()
	sess, err := h.session(ctx, q, cancel)
	if err != nil {
		return nil, userError(err, "I could not open your session")
	}
	defer h.done(q)
	q.session = sess
	start := time.Now()

	named := h.catalog.namedApps(text)
	// Spares for its spokes start while the planner's model runs.
	h.expect(q, sortedKeys(named))
	history, err := h.store.HubMemory(ctx, q.user, h.opts.HistoryEntries)
	if err != nil {
		return nil, userError(err, "I could not read your conversation history")
	}
	plan, invalid, err := h.plan(ctx, q, history, named)
	if err != nil {
		q.record.Error = err.Error()
		var pe *PlanError
		if be, ok := errOverBudget(err); ok {
			return &Reply{Record: q.record}, userError(err, "I did not plan your request: %s", be.Error())
		}
		if errors.As(err, &pe) {
			// Why the plan was refused names its fields and steps: the
			// log and the record say it, the user gets what to do.
			return &Reply{Record: q.record}, userError(err, "I could not make a usable plan for your request; please try again, perhaps in other words")
		}
		return &Reply{Record: q.record}, describeLLMError(err, "I could not plan your request")
	}
	plan, notNamed := followNamedApps(plan, named)
	dropped := append(invalid, notNamed...)
	if len(plan.Steps) > 0 || len(dropped) > 0 || strings.TrimSpace(plan.Answer) == "" {
		// The planner's own answer stands only when it planned nothing:
		// beside steps it would speak for apps, run or not.
		plan.Answer = ""
	}
	q.record.Plan, q.record.Dropped = &plan, dropped
	q.caps = newCapabilities(plan)
	log.Info().Int("steps", len(plan.Steps)).Int("dropped", len(dropped)).Msg("Planned request")

	reply, err := h.execute(ctx, q, plan, history)
	if err != nil {
		q.record.Error = err.Error()
		return &Reply{Record: q.record}, err
	}
	reply.Notes = append(planNotes(plan, dropped, named), reply.Notes...)
	reply.compose()
	err = h.whileCurrent(q, func() error { return h.store.RecordTurn(ctx, q.user, text, reply.memory()...) })
	if err != nil {
		q.record.Error = err.Error()
		return &Reply{Record: q.record}, userError(err, "I could not save this conversation turn")
	}
	q.record.Answer, q.record.Parts, q.record.Summary, q.record.Notes = reply.Answer, reply.Parts, reply.Summary, reply.Notes
	q.record.DurationMS = time.Since(start).Milliseconds()
	log.Info().Int64("duration_ms", q.record.DurationMS).Int("llm_calls", q.record.LLMCalls).Msg("Answered request")
	reply.Record = q.record
	return reply, nil
}

// describeLLMError turns a model failure into a message for the user.
func describeLLMError(err error, what string) *Error {
	if e, ok := llm.AsError(err); ok {
		return userError(err, "%s: %s", what, e.UserMessage())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return userError(err, "%s: it took too long", what)
	}
	return userError(err, "%s", what)
}
