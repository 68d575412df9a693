package bot

// A fake homeserver and a bot wired to it, for tests of the handlers, the
// worker and the consent prompts without a real homeserver (the end-to-end
// tests have one).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/store"
	"github.com/secgpt/secgpt/store/storetest"
)

const (
	testBotID = id.UserID("@secgpt:x")
	alice     = id.UserID("@alice:x")
	bob       = id.UserID("@bob:x")
)

// sent is one event the bot sent.
type sent struct {
	Room    id.RoomID
	Type    string
	Txn     string
	ID      id.EventID
	Content map[string]any
}

func (s sent) body() string {
	b, _ := s.Content["body"].(string)
	return b
}

func (s sent) kind() string {
	k, _ := s.Content[KindKey].(string)
	return k
}

// relation returns a field of m.relates_to ("event_id", "rel_type", "key"),
// or the in_reply_to event for "in_reply_to".
func (s sent) relation(field string) string {
	rel, _ := s.Content["m.relates_to"].(map[string]any)
	if field == "in_reply_to" {
		r, _ := rel["m.in_reply_to"].(map[string]any)
		v, _ := r["event_id"].(string)
		return v
	}
	v, _ := rel[field].(string)
	return v
}

func (s sent) mentions() []any {
	m, _ := s.Content["m.mentions"].(map[string]any)
	u, _ := m["user_ids"].([]any)
	return u
}

// fakeHS is the part of the client-server API the bot uses while serving:
// sending events, typing, listing joined rooms and creating rooms.
type fakeHS struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	n       int
	events  []sent
	byTxn   map[string]id.EventID
	joined  []id.RoomID
	created []mautrix.ReqCreateRoom
	// noKeys are users without a device with encryption keys.
	noKeys map[id.UserID]bool
	// typing are the bot's typing notices, in order.
	typing []typingAt
	// fail, if set, may fail a request with a status code (0: serve it).
	fail func(r *http.Request) int
	// lost, if set, is called after a sent event was stored; true loses
	// the response (the client sees 502), as a crash or a cut would.
	lost    func(s sent) bool
	changed chan struct{}
}

func newFakeHS(t *testing.T) *fakeHS {
	f := &fakeHS{t: t, byTxn: map[string]id.EventID{}, noKeys: map[id.UserID]bool{}, changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /_matrix/client/v3/rooms/{room}/send/{type}/{txn}", f.send)
	mux.HandleFunc("PUT /_matrix/client/v3/rooms/{room}/redact/{event}/{txn}", f.send)
	mux.HandleFunc("PUT /_matrix/client/v3/rooms/{room}/typing/{user}", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Typing bool `json:"typing"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.typing = append(f.typing, typingAt{on: req.Typing, at: time.Now()})
		f.mu.Unlock()
		_, _ = io.WriteString(w, "{}")
	})
	mux.HandleFunc("POST /_matrix/client/v3/keys/query", func(w http.ResponseWriter, r *http.Request) {
		var req mautrix.ReqQueryKeys
		_ = json.NewDecoder(r.Body).Decode(&req)
		keys := map[id.UserID]map[id.DeviceID]any{}
		f.mu.Lock()
		for u := range req.DeviceKeys {
			keys[u] = map[id.DeviceID]any{}
			if !f.noKeys[u] {
				keys[u]["DEVICE"] = map[string]any{"user_id": u, "device_id": "DEVICE", "algorithms": []string{string(id.AlgorithmMegolmV1)}, "keys": map[string]string{}}
			}
		}
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"device_keys": keys})
	})
	mux.HandleFunc("GET /_matrix/client/v3/joined_rooms", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"joined_rooms": f.joined})
	})
	mux.HandleFunc("POST /_matrix/client/v3/createRoom", func(w http.ResponseWriter, r *http.Request) {
		var req mautrix.ReqCreateRoom
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.created = append(f.created, req)
		room := id.RoomID(fmt.Sprintf("!dm%d:x", len(f.created)))
		f.joined = append(f.joined, room)
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"room_id": room})
	})
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		fail := f.fail
		f.mu.Unlock()
		if fail != nil {
			if code := fail(r); code != 0 {
				w.WriteHeader(code)
				_, _ = fmt.Fprintf(w, `{"errcode":"M_UNKNOWN","error":"failed by the test (%d)"}`, code)
				return
			}
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeHS) send(w http.ResponseWriter, r *http.Request) {
	var c map[string]any
	if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	txn := r.PathValue("txn")
	if evt, ok := f.byTxn[txn]; ok {
		// The spec's idempotence: the same transaction is the same event.
		_ = json.NewEncoder(w).Encode(map[string]any{"event_id": evt})
		return
	}
	f.n++
	evt := id.EventID(fmt.Sprintf("$bot%d", f.n))
	f.byTxn[txn] = evt
	typ := r.PathValue("type")
	if redacts := r.PathValue("event"); redacts != "" {
		typ, c["redacts"] = event.EventRedaction.Type, redacts
	}
	f.events = append(f.events, sent{Room: id.RoomID(r.PathValue("room")), Type: typ, Txn: txn, ID: evt, Content: c})
	close(f.changed)
	f.changed = make(chan struct{})
	if f.lost != nil && f.lost(f.events[len(f.events)-1]) {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"event_id": evt})
}

// typingAt is one typing notice.
type typingAt struct {
	on bool
	at time.Time
}

// typingSince reports whether the bot turned typing on after t.
func (f *fakeHS) typingSince(t time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.typing {
		if n.on && n.at.After(t) {
			return true
		}
	}
	return false
}

func (f *fakeHS) setFail(fail func(r *http.Request) int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fail
}

// all returns the events sent so far that match.
func (f *fakeHS) all(match func(sent) bool) []sent {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sent
	for _, e := range f.events {
		if match(e) {
			out = append(out, e)
		}
	}
	return out
}

// waitFor returns the first sent event that matches, waiting up to 5 s.
func (f *fakeHS) waitFor(what string, match func(sent) bool) sent {
	f.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		f.mu.Lock()
		changed := f.changed
		f.mu.Unlock()
		if got := f.all(match); len(got) > 0 {
			return got[0]
		}
		select {
		case <-changed:
		case <-deadline:
			f.t.Fatalf("no %s was sent; sent: %+v", what, f.all(func(sent) bool { return true }))
		}
	}
}

// prompt waits for the prompt replying to q (or, for q "", any prompt in
// room) and for its seeded reactions, which the bot sends once the prompt
// takes answers.
func (f *fakeHS) prompt(room id.RoomID, q id.EventID) sent {
	f.t.Helper()
	match := messageOfKind(room, kindPrompt)
	if q != "" {
		match = replyOfKind(room, q, kindPrompt)
	}
	p := f.waitFor("prompt", match)
	f.waitFor("seeded reaction", func(s sent) bool { return s.Type == "m.reaction" && s.relation("event_id") == p.ID.String() })
	return p
}

// Matchers of sent events.

func messageOfKind(room id.RoomID, kind string) func(sent) bool {
	return func(s sent) bool {
		return s.Type == "m.room.message" && s.Room == room && s.kind() == kind && s.relation("rel_type") != "m.replace"
	}
}

func replyOfKind(room id.RoomID, to id.EventID, kind string) func(sent) bool {
	return func(s sent) bool { return messageOfKind(room, kind)(s) && s.relation("in_reply_to") == to.String() }
}

func editsOf(target id.EventID) func(sent) bool {
	return func(s sent) bool {
		return s.Type == "m.room.message" && s.relation("rel_type") == "m.replace" && s.relation("event_id") == target.String()
	}
}

func (s sent) newBody() string {
	nc, _ := s.Content["m.new_content"].(map[string]any)
	b, _ := nc["body"].(string)
	return b
}

// fakeHub is a hub whose Handle the test writes.
type fakeHub struct {
	handle func(ctx context.Context, req hub.Request) (*hub.Reply, error)
	// forget, when set, serves Forget.
	forget func(ctx context.Context, user string) error
}

var _ Hub = (*fakeHub)(nil)

func (h *fakeHub) Handle(ctx context.Context, req hub.Request) (*hub.Reply, error) {
	return h.handle(ctx, req)
}
func (h *fakeHub) Reset(context.Context, string) error { return nil }
func (h *fakeHub) Forget(ctx context.Context, user string) error {
	if h.forget != nil {
		return h.forget(ctx, user)
	}
	return nil
}
func (h *fakeHub) Grants(context.Context, string) ([]store.Grant, error) { return nil, nil }
func (h *fakeHub) Revoke(context.Context, string, string) (int, error)   { return 0, nil }
func (h *fakeHub) Audit(context.Context, string, int) ([]store.AuditEntry, error) {
	return nil, nil
}
func (h *fakeHub) Usage(context.Context, string) (hub.UsageReport, error) {
	return hub.UsageReport{}, nil
}
func (h *fakeHub) Apps() []apps.Spec { return nil }

// testBot is a Bot on real SQLite and the fake homeserver, running its
// workers but not syncing: the test hands it events.
type testBot struct {
	*Bot
	hs    *fakeHS
	hub   *fakeHub
	state mautrix.StateStore
	store *store.Store
	// dbPath is the store's file.
	dbPath string
	n      int
	// stop ends the bot's run context, as a crash would end its work.
	stop func()
}

func newTestBot(t *testing.T, opts Options) *testBot {
	t.Helper()
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "secgpt.db")
	st := storetest.OpenAt(t, dbPath)
	hs := newFakeHS(t)
	fh := &fakeHub{handle: func(context.Context, hub.Request) (*hub.Reply, error) {
		return &hub.Reply{Answer: "fine"}, nil
	}}
	opts.Homeserver, opts.UserID, opts.Password = hs.srv.URL, testBotID, "unused"
	opts.Allow = []string{"@*:x"}
	opts.Store, opts.Hub, opts.Log = st, fh, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	b, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := mautrix.NewClient(hs.srv.URL, testBotID, "token")
	if err != nil {
		t.Fatal(err)
	}
	cli.DefaultHTTPRetries = 0
	cli.Log = zerolog.Nop()
	cli.StateStore = mautrix.NewMemoryStateStore()
	b.cli = cli
	b.syncer = newSyncer(b)
	b.retryWaits = []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}
	tb := &testBot{Bot: b, hs: hs, hub: fh, state: cli.StateStore, store: st, dbPath: dbPath}
	tb.run()
	t.Cleanup(tb.stop)
	return tb
}

// run gives the bot a new run context, as a start does.
func (tb *testBot) run() {
	runCtx, cancel := context.WithCancel(tb.log.WithContext(context.Background()))
	tb.bgMu.Lock()
	tb.runCtx, tb.stopping = runCtx, false
	tb.bgMu.Unlock()
	tb.stop = func() {
		tb.bgMu.Lock()
		tb.stopping = true
		tb.bgMu.Unlock()
		cancel()
		tb.wg.Wait()
	}
}

// restart stops the bot's work and starts again on the same database, as a
// crash and a start would: what the database holds is all that survives.
func (tb *testBot) restart(t *testing.T) {
	t.Helper()
	tb.stop()
	tb.queueMu.Lock()
	tb.queues = map[id.UserID]*userQueue{}
	tb.queueMu.Unlock()
	tb.run()
	if err := tb.resume(tb.runCtx); err != nil {
		t.Fatal(err)
	}
}

// room makes a room whose joined members are the bot and users.
func (tb *testBot) room(room id.RoomID, users ...id.UserID) id.RoomID {
	ctx := context.Background()
	for _, u := range append([]id.UserID{testBotID}, users...) {
		if err := tb.state.SetMembership(ctx, room, u, event.MembershipJoin); err != nil {
			panic(err)
		}
	}
	tb.hs.mu.Lock()
	tb.hs.joined = append(tb.hs.joined, room)
	tb.hs.mu.Unlock()
	return room
}

// live makes a timeline event of a joined room, as sync would hand it over.
func (tb *testBot) live(room id.RoomID, sender id.UserID, typ event.Type, c any) *event.Event {
	tb.n++
	evt := &event.Event{ID: id.EventID(fmt.Sprintf("$in%d", tb.n)), RoomID: room, Sender: sender, Type: typ, Timestamp: time.Now().UnixMilli()}
	evt.Content.Parsed = c
	evt.Mautrix.EventSource = event.SourceJoin | event.SourceTimeline
	return evt
}

// say hands the bot a text message and returns its event.
func (tb *testBot) say(room id.RoomID, sender id.UserID, text string) *event.Event {
	return tb.message(room, sender, &event.MessageEventContent{MsgType: event.MsgText, Body: text})
}

func (tb *testBot) message(room id.RoomID, sender id.UserID, c *event.MessageEventContent) *event.Event {
	evt := tb.live(room, sender, event.EventMessage, c)
	tb.onMessage(context.Background(), evt)
	return evt
}

// replyTo hands the bot text replying to target.
func (tb *testBot) replyTo(room id.RoomID, sender id.UserID, target id.EventID, text string) *event.Event {
	c := &event.MessageEventContent{MsgType: event.MsgText, Body: text}
	c.RelatesTo = (&event.RelatesTo{}).SetReplyTo(target)
	return tb.message(room, sender, c)
}

// react hands the bot a reaction.
func (tb *testBot) react(room id.RoomID, sender id.UserID, target id.EventID, key string) {
	c := &event.ReactionEventContent{RelatesTo: event.RelatesTo{Type: event.RelAnnotation, EventID: target, Key: key}}
	tb.onReaction(context.Background(), tb.live(room, sender, event.EventReaction, c))
}

// inboxState reads a message's inbox state.
func (tb *testBot) inboxState(t *testing.T, evt id.EventID) string {
	t.Helper()
	var state string
	if err := tb.db.db.QueryRow(context.Background(), "SELECT state FROM bot_inbox WHERE event_id=$1", evt).Scan(&state); err != nil {
		t.Fatalf("inbox row %s: %v", evt, err)
	}
	return state
}

// waitState waits for a message's inbox state.
func (tb *testBot) waitState(t *testing.T, evt id.EventID, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := tb.inboxState(t, evt)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("inbox state of %s = %s, want %s", evt, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// consentRequest is a request as the hub fills it, for user, answerable
// once or denied, due in d.
func consentRequest(user id.UserID, category hub.Category, d time.Duration) hub.ConsentRequest {
	req := hub.ConsentRequest{
		User: user.String(), Category: category, App: "metro_hail", Function: "estimate_fare",
		Query: "Use metro_hail to estimate the fare from 'Main Street' to 'Elm Avenue'.", InPlan: true,
		Args:     json.RawMessage(`{"start_point":"Main Street","end_point":"Elm Avenue"}`),
		Choices:  []hub.Decision{hub.DecisionOnce, hub.DecisionDeny},
		Deadline: time.Now().Add(d),
		// As the hub writes it: the values are in the summary.
		Summary: `Run the app "metro_hail" (function estimate_fare) with {"start_point":"Main Street","end_point":"Elm Avenue"}.`,
	}
	if category == hub.CategoryData {
		req.App, req.Args = "travel_mate", nil
		req.Data = []hub.DataItem{{Field: "date_of_birth", Value: "May 20th, 1980"}}
		req.Summary = `Share with the app "travel_mate" data that you did not type in this request: date_of_birth = "May 20th, 1980";`
	}
	return req
}

// asking makes the hub ask req once per query, deciding as the real hub
// does (an answer after its deadline is a timeout), and answer with the
// decision it applied.
func (tb *testBot) asking(req hub.ConsentRequest, timeout time.Duration, afterAsk func()) {
	tb.hub.handle = func(ctx context.Context, r hub.Request) (*hub.Reply, error) {
		askCtx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		req.Deadline, _ = askCtx.Deadline()
		d, err := r.Consenter.Ask(askCtx, req)
		if afterAsk != nil {
			afterAsk()
		}
		source := sourceAsked
		switch {
		case (err == nil && askCtx.Err() != nil) || (err != nil && askCtx.Err() == context.DeadlineExceeded):
			d, source = hub.DecisionDeny, sourceTimeout
		case err != nil:
			d, source = hub.DecisionDeny, "error"
		}
		rec := &hub.Record{Consents: []hub.ConsentRecord{{
			Category: req.Category, App: req.App, Function: req.Function, Args: req.Args, Data: req.Data,
			InPlan: req.InPlan, Decision: d, Source: source,
		}}}
		return &hub.Reply{Answer: fmt.Sprintf("decided %s (%s)", d, source), Record: rec}, nil
	}
}

func contains(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
