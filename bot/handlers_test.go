package bot

import (
	"context"
	"strings"
	"testing"
	"time"

	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/secgpt/secgpt/hub"
)

// TestAnswerWordsReachOnlyTheirPrompt: an answer word replying to a closed
// prompt is consumed with a notice and never decides the user's newer
// prompt; one that replies to nothing (a thread's fallback reply included)
// answers the sole open prompt.
func TestAnswerWordsReachOnlyTheirPrompt(t *testing.T) {
	tb := newTestBot(t, Options{})
	room := tb.room("!dm:x", alice)
	tb.asking(consentRequest(alice, hub.CategoryExec, time.Minute), time.Minute, nil)

	q1 := tb.say(room, alice, "first")
	p1 := tb.hs.prompt(room, q1.ID)
	tb.replyTo(room, alice, p1.ID, "deny")
	tb.hs.waitFor("first answer", replyOfKind(room, q1.ID, kindAnswer))

	q2 := tb.say(room, alice, "second")
	p2 := tb.hs.prompt(room, q2.ID)
	late := tb.replyTo(room, alice, p1.ID, "once")
	if got := tb.hs.waitFor("notice on the late answer", replyOfKind(room, late.ID, kindNotice)); !strings.Contains(got.body(), "already closed") {
		t.Errorf("notice = %q", got.body())
	}
	// Bob's reply to Alice's closed prompt is consumed silently.
	bobs := tb.replyTo(room, bob, p1.ID, "once")
	time.Sleep(100 * time.Millisecond) // replies are handled at once; their notices are sent in the background
	if e := tb.hs.all(editsOf(p2.ID)); len(e) != 0 {
		t.Fatalf("a reply to the closed prompt decided the open one: %s", e[0].newBody())
	}
	if r := tb.hs.all(func(s sent) bool { return s.relation("in_reply_to") == bobs.ID.String() }); len(r) != 0 {
		t.Errorf("the bot answered another user's reply to a closed prompt: %s", r[0].body())
	}

	// A message in a thread carries in_reply_to only as a fallback: it is
	// no reply to that event, and answers the sole open prompt.
	c := &event.MessageEventContent{MsgType: event.MsgText, Body: "once"}
	c.RelatesTo = (&event.RelatesTo{}).SetThread("$thread", p1.ID)
	tb.message(room, alice, c)
	if got := tb.hs.waitFor("second prompt decided", editsOf(p2.ID)); !strings.Contains(got.newBody(), "Allowed once") {
		t.Errorf("second prompt: %s", got.newBody())
	}
	if got := tb.hs.waitFor("second answer", replyOfKind(room, q2.ID, kindAnswer)); !strings.Contains(got.body(), "decided once") {
		t.Errorf("second answer: %s", got.body())
	}
}

// TestCancelFloodIsNotAnsweredByAFlood: !cancel acts at once, outside the
// queue, but its notices count against the user's rate, and beyond it one
// refusal is sent per window.
func TestCancelFloodIsNotAnsweredByAFlood(t *testing.T) {
	tb := newTestBot(t, Options{RateMessages: 3, RateWindow: time.Minute})
	room := tb.room("!dm:x", alice)
	for range 20 {
		tb.say(room, alice, "!cancel")
	}
	tb.hs.waitFor("a refusal", messageOfKind(room, kindError))
	time.Sleep(200 * time.Millisecond) // let any further sends arrive
	if n := len(tb.hs.all(messageOfKind(room, kindNotice))); n != 3 {
		t.Errorf("%d cancel notices for 20 !cancel at 3 per minute, want 3", n)
	}
	if n := len(tb.hs.all(messageOfKind(room, kindError))); n != 1 {
		t.Errorf("%d refusals, want 1", n)
	}
}

// TestLengthLimitIgnoresReplyFallback: the quoted text a client adds to a
// reply is not the user's and does not count against the length limit.
func TestLengthLimitIgnoresReplyFallback(t *testing.T) {
	tb := newTestBot(t, Options{MaxMessageBytes: 100})
	room := tb.room("!dm:x", alice)
	for _, tc := range []struct {
		name, body string
		replyTo    id.EventID
		want       string
	}{
		{"short reply, long quote", "> <@bob:x> " + strings.Repeat("quoted ", 40) + "\n\n!help", "$earlier", kindReply},
		{"long message", strings.Repeat("a", 101), "", kindError},
		{"long reply", "> <@bob:x> hi\n\n" + strings.Repeat("a", 101), "$earlier", kindError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &event.MessageEventContent{MsgType: event.MsgText, Body: tc.body}
			if tc.replyTo != "" {
				c.RelatesTo = (&event.RelatesTo{}).SetReplyTo(tc.replyTo)
			}
			evt := tb.message(room, alice, c)
			got := tb.hs.waitFor("reply", func(s sent) bool { return s.relation("in_reply_to") == evt.ID.String() })
			if got.kind() != tc.want {
				t.Errorf("reply is %s (%q), want %s", got.kind(), got.body(), tc.want)
			}
		})
	}
}

// TestQueuedMessageIsAcknowledged: a message that waits behind another of
// the user's gets a ⏳ reaction; one served at once gets none.
func TestQueuedMessageIsAcknowledged(t *testing.T) {
	tb := newTestBot(t, Options{})
	room := tb.room("!dm:x", alice)
	release := make(chan struct{})
	tb.hub.handle = func(ctx context.Context, _ hub.Request) (*hub.Reply, error) {
		<-release
		return &hub.Reply{Answer: "fine"}, nil
	}
	first := tb.say(room, alice, "first")
	tb.waitState(t, first.ID, stateWorking)
	second := tb.say(room, alice, "second")
	tb.hs.waitFor("⏳ on the waiting message", func(s sent) bool {
		return s.Type == "m.reaction" && s.relation("event_id") == second.ID.String() && s.relation("key") == queuedReaction
	})
	close(release)
	tb.waitState(t, second.ID, stateAnswered)
	if r := tb.hs.all(func(s sent) bool { return s.Type == "m.reaction" && s.relation("event_id") == first.ID.String() }); len(r) != 0 {
		t.Errorf("the message served at once got reactions: %+v", r)
	}
}
