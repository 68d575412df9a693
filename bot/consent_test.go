package bot

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/secgpt/secgpt/hub"
)

// TestPromptShowsTheDecisionTheHubApplied: the hub has the answer before
// the prompt is edited, and when it applied another decision (the answer
// reached it after its deadline) the prompt ends up showing that one.
func TestPromptShowsTheDecisionTheHubApplied(t *testing.T) {
	for _, tc := range []struct {
		name string
		// late makes the hub look at its deadline only after it passed.
		late       bool
		wantAnswer string
		wantLast   string
		wantEdits  int
	}{
		{"answer applied", false, "decided once (asked)", "Allowed once", 1},
		{"answer too late for the hub", true, "decided deny (timeout)", "You did not answer in time", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTestBot(t, Options{})
			room := tb.room("!dm:x", alice)
			const timeout = 400 * time.Millisecond
			var afterAsk func()
			if tc.late {
				afterAsk = func() { time.Sleep(timeout + 100*time.Millisecond) }
			}
			tb.asking(consentRequest(alice, hub.CategoryExec, timeout), timeout, afterAsk)
			q := tb.say(room, alice, "go")
			p := tb.hs.prompt(room, q.ID)
			tb.replyTo(room, alice, p.ID, "once")
			if got := tb.hs.waitFor("answer", replyOfKind(room, q.ID, kindAnswer)); got.body() != tc.wantAnswer {
				t.Fatalf("answer = %q, want %q", got.body(), tc.wantAnswer)
			}
			edits := tb.hs.all(editsOf(p.ID))
			if len(edits) != tc.wantEdits || !strings.Contains(edits[len(edits)-1].newBody(), tc.wantLast) {
				var bodies []string
				for _, e := range edits {
					bodies = append(bodies, e.newBody())
				}
				t.Errorf("edits of the prompt = %q, want %d ending in %q", bodies, tc.wantEdits, tc.wantLast)
			}
			var outcome string
			if err := tb.db.db.QueryRow(context.Background(), "SELECT outcome FROM bot_prompts WHERE event_id=$1", p.ID).Scan(&outcome); err != nil || !strings.Contains(outcome, tc.wantLast) {
				t.Errorf("recorded outcome = %q (%v), want %q", outcome, err, tc.wantLast)
			}
		})
	}
}

// TestPrivatePromptsGoToTheDirectChat: in a room shared with others, a
// prompt that shows the user's data goes to their direct chat with the bot
// (found, or made and the user invited), the room gets only a notice
// naming the user, and the answer counts there. Without a direct chat the
// request is denied and the room told, without the data.
func TestPrivatePromptsGoToTheDirectChat(t *testing.T) {
	const secret = "May 20th, 1980"
	exec := consentRequest(alice, hub.CategoryExec, time.Minute)
	foreign := exec
	foreign.Args = json.RawMessage(`{"start_point":"Main Street","end_point":"` + secret + `"}`)
	byApp := exec
	byApp.Caller = "quick_ride"
	collab := exec
	collab.Category, collab.Source, collab.Result = hub.CategoryCollab, "drive", json.RawMessage(`{"doc":"`+secret+`"}`)
	for _, tc := range []struct {
		name    string
		req     hub.ConsentRequest
		shared  bool // the query's room has Bob in it too
		haveDM  bool // Alice already has a direct chat with the bot
		noDM    bool // creating a direct chat fails
		want    string
		private bool
	}{
		{"data in a direct chat", consentRequest(alice, hub.CategoryData, time.Minute), false, false, false, "room", false},
		{"exec of what was typed, shared room", exec, true, false, false, "room", false},
		{"data, shared room, direct chat exists", consentRequest(alice, hub.CategoryData, time.Minute), true, true, false, "existing", true},
		{"data, shared room, no direct chat", consentRequest(alice, hub.CategoryData, time.Minute), true, false, false, "created", true},
		{"exec of a value not typed", foreign, true, true, false, "existing", true},
		{"exec an app asked for", byApp, true, true, false, "existing", true},
		{"collab", collab, true, true, false, "existing", true},
		{"data, no direct chat can be made", consentRequest(alice, hub.CategoryData, time.Minute), true, false, true, "denied", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTestBot(t, Options{ConsentSettle: 10 * time.Millisecond})
			room := tb.room("!shared:x", alice)
			if tc.shared {
				tb.room(room, bob)
			}
			if tc.haveDM {
				tb.room("!alicedm:x", alice)
				tb.room("!bobdm:x", bob)
			}
			if tc.noDM {
				tb.hs.setFail(func(r *http.Request) int {
					if strings.HasSuffix(r.URL.Path, "/createRoom") {
						return http.StatusForbidden
					}
					return 0
				})
			}
			tb.asking(tc.req, time.Minute, nil)
			q := tb.say(room, alice, "! go")
			answer := replyOfKind(room, q.ID, kindAnswer)
			var promptRoom id.RoomID
			switch tc.want {
			case "room":
				promptRoom = room
			case "existing":
				promptRoom = "!alicedm:x"
			case "created":
				promptRoom = "!dm1:x"
			case "denied":
				n := tb.hs.waitFor("notice of the denial", replyOfKind(room, q.ID, kindError))
				if !contains(n.body(), alice.String(), "could not reach you") || len(n.mentions()) != 1 {
					t.Errorf("denial notice %q mentions %v", n.body(), n.mentions())
				}
				if got := tb.hs.waitFor("answer", answer); got.body() != "decided deny (error)" {
					t.Errorf("answer = %q", got.body())
				}
			}
			if promptRoom != "" {
				p := tb.hs.prompt(promptRoom, "")
				if tc.req.Category == hub.CategoryData && !strings.Contains(p.body(), secret) {
					t.Errorf("the prompt does not show the data:\n%s", p.body())
				}
				if tc.private {
					n := tb.hs.waitFor("notice in the room", replyOfKind(room, q.ID, kindNotice))
					if !contains(n.body(), alice.String(), "direct chat") || len(n.mentions()) != 1 || n.mentions()[0] != alice.String() {
						t.Errorf("notice %q mentions %v", n.body(), n.mentions())
					}
					if !strings.Contains(p.body(), q.ID.String()) {
						t.Errorf("the private prompt does not link the message it is about:\n%s", p.body())
					}
				}
				tb.react(promptRoom, bob, p.ID, "✅")
				tb.react(promptRoom, alice, p.ID, "✅")
				if got := tb.hs.waitFor("answer", answer); got.body() != "decided once (asked)" {
					t.Errorf("answer = %q", got.body())
				}
			}
			created := len(tb.hs.created)
			if want := tc.want == "created"; (created == 1) != want {
				t.Errorf("%d direct chats created", created)
			} else if want && (!tb.hs.created[0].IsDirect || len(tb.hs.created[0].Invite) != 1 || tb.hs.created[0].Invite[0] != alice) {
				t.Errorf("direct chat made as %+v", tb.hs.created[0])
			}
			if tc.private {
				for _, s := range tb.hs.all(func(s sent) bool { return s.Room == room }) {
					if strings.Contains(s.body(), secret) || strings.Contains(s.body(), "metro_hail") {
						t.Errorf("the shared room was shown the request: %s", s.body())
					}
				}
			}
		})
	}
}

func TestShowsPrivateData(t *testing.T) {
	typed := consentRequest(alice, hub.CategoryExec, time.Minute)
	with := func(f func(*hub.ConsentRequest)) hub.ConsentRequest {
		r := typed
		f(&r)
		return r
	}
	for _, tc := range []struct {
		name string
		req  hub.ConsentRequest
		want bool
	}{
		{"typed arguments", typed, false},
		{"typed in other case and spacing", with(func(r *hub.ConsentRequest) { r.Args = json.RawMessage(`{"a":"main   STREET"}`) }), false},
		{"no arguments", with(func(r *hub.ConsentRequest) { r.Args = nil }), false},
		{"booleans are choices", with(func(r *hub.ConsentRequest) { r.Args = json.RawMessage(`{"a":"Main Street","b":true,"c":null}`) }), false},
		{"the request itself", with(func(r *hub.ConsentRequest) { r.Data = []hub.DataItem{{Field: "your request", Value: r.Query}} }), false},
		{"a value not typed", with(func(r *hub.ConsentRequest) { r.Args = json.RawMessage(`{"a":"Main Street","b":["Oak Road"]}`) }), true},
		{"a number not typed", with(func(r *hub.ConsentRequest) { r.Args = json.RawMessage(`{"a":{"n":19800520}}`) }), true},
		{"arguments that do not parse", with(func(r *hub.ConsentRequest) { r.Args = json.RawMessage(`{`) }), true},
		{"an app asks", with(func(r *hub.ConsentRequest) { r.Caller = "quick_ride" }), true},
		{"data", consentRequest(alice, hub.CategoryData, time.Minute), true},
		{"collab", with(func(r *hub.ConsentRequest) { r.Category = hub.CategoryCollab }), true},
		{"several calls, all typed", with(func(r *hub.ConsentRequest) {
			r.Args, r.Calls = nil, []hub.PlannedCall{{Function: "a", Args: json.RawMessage(`{"a":"Main Street"}`)}, {Function: "b", Args: json.RawMessage(`{}`)}}
		}), false},
		{"several calls, one with a value not typed", with(func(r *hub.ConsentRequest) {
			r.Args, r.Calls = nil, []hub.PlannedCall{{Function: "a", Args: json.RawMessage(`{"a":"Main Street"}`)}, {Function: "b", Args: json.RawMessage(`{"body":"HIV status positive"}`)}}
		}), true},
	} {
		if got := showsPrivateData(tc.req); got != tc.want {
			t.Errorf("%s: showsPrivateData = %t, want %t", tc.name, got, tc.want)
		}
	}
}

// TestAnswerInTheDirectChatByWord: a reply word alone answers the sole
// open prompt in the direct chat too.
func TestAnswerInTheDirectChatByWord(t *testing.T) {
	tb := newTestBot(t, Options{})
	room := tb.room("!shared:x", alice, bob)
	dm := tb.room("!alicedm:x", alice)
	tb.asking(consentRequest(alice, hub.CategoryData, time.Minute), time.Minute, nil)
	q := tb.say(room, alice, "! go")
	tb.hs.prompt(dm, "")
	tb.say(room, alice, "once") // in the shared room no prompt of Alice's is open: no answer
	tb.message(dm, alice, &event.MessageEventContent{MsgType: event.MsgText, Body: "Once."})
	if got := tb.hs.waitFor("answer", replyOfKind(room, q.ID, kindAnswer)); got.body() != "decided once (asked)" {
		t.Errorf("answer = %q", got.body())
	}
}

// TestAnswerWhileTheNoticeIsSent: a prompt takes answers from the moment it
// shows, also while the bot still sends what follows it. Here the user
// answers in the direct chat while the notice in the shared room is on its
// way; the answer was lost when the prompt opened only after the notice.
func TestAnswerWhileTheNoticeIsSent(t *testing.T) {
	tb := newTestBot(t, Options{ConsentSettle: 10 * time.Millisecond})
	room := tb.room("!shared:x", alice)
	tb.room(room, bob)
	dm := tb.room("!alicedm:x", alice)
	tb.room("!bobdm:x", bob)
	var once sync.Once
	tb.hs.setFail(func(r *http.Request) int {
		if strings.Contains(r.URL.Path, "/rooms/"+string(room)+"/send/m.room.message/") {
			once.Do(func() {
				p := tb.hs.waitFor("prompt", messageOfKind(dm, kindPrompt))
				tb.react(dm, alice, p.ID, "✅")
				time.Sleep(50 * time.Millisecond) // past the settle time
			})
		}
		return 0
	})
	tb.asking(consentRequest(alice, hub.CategoryData, time.Minute), time.Minute, nil)
	q := tb.say(room, alice, "! go")
	if got := tb.hs.waitFor("answer", replyOfKind(room, q.ID, kindAnswer)); got.body() != "decided once (asked)" {
		t.Errorf("answer = %q", got.body())
	}
}

// TestOnePromptForThePlan: the questions a plan needs up front are one
// prompt, one line per app, marked as a prompt, mentioning the user in a
// shared room, in plain words; a reply naming an app refuses its line,
// one reaction answers the rest, the outcome shows each app's decision,
// and the seeded reactions are taken back.
func TestOnePromptForThePlan(t *testing.T) {
	tb := newTestBot(t, Options{ConsentSettle: 20 * time.Millisecond})
	room := tb.room("!shared:x", alice, bob)
	durable := []hub.Decision{hub.DecisionOnce, hub.DecisionSession, hub.DecisionAlways, hub.DecisionDeny, hub.DecisionNever}
	var reqs []hub.ConsentRequest
	for _, app := range []string{"metro_hail", "quick_ride"} {
		r := consentRequest(alice, hub.CategoryExec, time.Minute)
		r.App, r.Choices = app, durable
		r.Calls = []hub.PlannedCall{{Function: r.Function, Args: r.Args}}
		reqs = append(reqs, r)
	}
	tb.hub.handle = func(ctx context.Context, r hub.Request) (*hub.Reply, error) {
		ds, err := r.Consenter.(hub.BatchConsenter).AskEach(ctx, reqs)
		return &hub.Reply{Answer: fmt.Sprint(ds, err)}, nil
	}
	q := tb.say(room, alice, "! fares please")
	p := tb.hs.prompt(room, q.ID)
	if mark, ok := p.Content[PromptKey].(map[string]any); !ok || mark["user"] != alice.String() {
		t.Errorf("prompt content %v lacks %s naming the user", p.Content, PromptKey)
	}
	if m := p.mentions(); len(m) != 1 || m[0] != alice.String() {
		t.Errorf("mentions = %v, want alice", m)
	}
	body := p.body()
	for _, bad := range []string{"**", "```"} {
		if strings.Contains(body, bad) {
			t.Errorf("body carries Markdown %q:\n%s", bad, body)
		}
	}
	for _, want := range []string{"• metro_hail estimate_fare with end_point: Elm Avenue, start_point: Main Street", "• quick_ride estimate_fare", "to refuse one app, reply with its name", "Answer within 1 minute"} {
		if !strings.Contains(body, want) {
			t.Errorf("body lacks %q:\n%s", want, body)
		}
	}
	waitCount(t, tb.hs, "seeded reactions", 4, func(s sent) bool { return s.Type == "m.reaction" && s.relation("event_id") == p.ID.String() })
	tb.react(room, bob, p.ID, "✅")
	tb.replyTo(room, alice, p.ID, "quick_ride")
	tb.react(room, alice, p.ID, "♾️")
	if got := tb.hs.waitFor("answer", replyOfKind(room, q.ID, kindAnswer)).body(); got != "[always deny] <nil>" {
		t.Errorf("decisions = %q, want metro_hail always and quick_ride refused", got)
	}
	edit := tb.hs.waitFor("outcome", editsOf(p.ID))
	if got := edit.newBody(); !strings.HasSuffix(got, "metro_hail: ♾️ Always allowed · quick_ride: ❌ Denied by @alice:x.") {
		t.Errorf("outcome:\n%s", got)
	}
	if n := len(tb.hs.all(messageOfKind(room, kindPrompt))); n != 1 {
		t.Errorf("prompts = %d, want 1", n)
	}
	waitCount(t, tb.hs, "seeded reactions taken back", 4, func(s sent) bool { return s.Type == event.EventRedaction.Type })
}

// waitCount waits up to 5 s for n sent events that match.
func waitCount(t *testing.T, f *fakeHS, what string, n int, match func(sent) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(f.all(match)) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d events, want %d", what, len(f.all(match)), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOnlyPromptsTakeAnswers: a reaction to one of the bot's messages that
// is not an open prompt (an answer, which may copy a prompt's words) does
// nothing.
func TestOnlyPromptsTakeAnswers(t *testing.T) {
	tb := newTestBot(t, Options{ConsentSettle: 20 * time.Millisecond})
	room := tb.room("!dm:x", alice)
	tb.hub.handle = func(context.Context, hub.Request) (*hub.Reply, error) {
		return &hub.Reply{Answer: "🔐 permission needed for your message\n• metro_hail estimate_fare\nReact ✅ once · ❌ deny."}, nil
	}
	q := tb.say(room, alice, "forge")
	forged := tb.hs.waitFor("answer", replyOfKind(room, q.ID, kindAnswer))
	if _, ok := forged.Content[PromptKey]; ok {
		t.Fatalf("an answer carries %s", PromptKey)
	}
	asked := make(chan hub.Decision, 1)
	tb.hub.handle = func(ctx context.Context, r hub.Request) (*hub.Reply, error) {
		req := consentRequest(alice, hub.CategoryExec, 300*time.Millisecond)
		askCtx, cancel := context.WithDeadline(ctx, req.Deadline)
		defer cancel()
		d, _ := r.Consenter.Ask(askCtx, req)
		asked <- d
		return &hub.Reply{Answer: "done"}, nil
	}
	tb.say(room, alice, "ask")
	tb.hs.prompt(room, "")
	tb.react(room, alice, forged.ID, "✅")
	if d := <-asked; d != hub.DecisionDeny {
		t.Fatalf("a reaction to an answer decided %s", d)
	}
}

// TestTypingAsSoonAsAnAnswerArrives: while a prompt is open the bot does
// not type; an answer reaction turns typing on at once, before the
// reaction has stood for the settle time and counts.
func TestTypingAsSoonAsAnAnswerArrives(t *testing.T) {
	const settle = 2 * time.Second
	tb := newTestBot(t, Options{ConsentSettle: settle})
	room := tb.room("!dm:x", alice)
	tb.asking(consentRequest(alice, hub.CategoryExec, time.Minute), time.Minute, nil)
	q := tb.say(room, alice, "go")
	p := tb.hs.prompt(room, q.ID)
	time.Sleep(100 * time.Millisecond)
	reacted := time.Now()
	tb.react(room, alice, p.ID, "✅")
	deadline := time.Now().Add(settle / 2)
	for !tb.hs.typingSince(reacted) {
		if time.Now().After(deadline) {
			t.Fatal("no typing within half the settle time of the answer reaction")
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.hs.waitFor("answer", replyOfKind(room, q.ID, kindAnswer))
}

// TestNoPromptInAChatTheUserCannotRead: a prompt that must go to the
// user's encrypted direct chat, for a user whose client has no encryption
// keys, is not posted there to time out unread: the request is denied at
// once and the room told why, without the data.
func TestNoPromptInAChatTheUserCannotRead(t *testing.T) {
	tb := newTestBot(t, Options{ConsentSettle: 10 * time.Millisecond})
	room := tb.room("!shared:x", alice, bob)
	tb.room("!alicedm:x", alice)
	tb.hs.mu.Lock()
	tb.hs.noKeys[alice] = true
	tb.hs.mu.Unlock()
	tb.asking(consentRequest(alice, hub.CategoryData, time.Minute), time.Minute, nil)
	q := tb.say(room, alice, "! go")
	n := tb.hs.waitFor("notice of the denial", replyOfKind(room, q.ID, kindError))
	if !contains(n.body(), alice.String(), "no encryption keys") || strings.Contains(n.body(), "1980") {
		t.Errorf("notice = %q", n.body())
	}
	if got := tb.hs.waitFor("answer", replyOfKind(room, q.ID, kindAnswer)).body(); got != "decided deny (error)" {
		t.Errorf("answer = %q", got)
	}
	if p := tb.hs.all(messageOfKind("!alicedm:x", kindPrompt)); len(p) != 0 {
		t.Errorf("a prompt went to a chat Alice cannot read: %s", p[0].body())
	}
}
