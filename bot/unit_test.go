package bot

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/store"
	"github.com/secgpt/secgpt/store/storetest"
)

func TestReactionDecision(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want hub.Decision
		ok   bool
	}{
		{"✅", hub.DecisionOnce, true},
		{"✅\uFE0F", hub.DecisionOnce, true},
		{"🔁", hub.DecisionSession, true},
		{"♾️", hub.DecisionAlways, true},
		{"♾", hub.DecisionAlways, true},       // without the variation selector
		{"♾\uFE0E", hub.DecisionAlways, true}, // text presentation
		{"❌", hub.DecisionDeny, true},
		{"👍", hub.DecisionOnce, true},
		{"👍🏽", hub.DecisionOnce, true},       // skin tone
		{"👍🏿\uFE0F", hub.DecisionOnce, true}, // skin tone and selector
		{"👎🏻", hub.DecisionDeny, true},
		{"🚫", hub.DecisionNever, true},
		{" ✅ ", hub.DecisionOnce, true},
		{"🎉", "", false},
		{"", "", false},
		{"\uFE0F", "", false},
		{"✅✅", "", false},
		{"once", "", false},
	} {
		got, ok := reactionDecision(tc.key)
		if got != tc.want || ok != tc.ok {
			t.Errorf("reactionDecision(%q) = %q, %t; want %q, %t", tc.key, got, ok, tc.want, tc.ok)
		}
	}
}

func TestWordDecision(t *testing.T) {
	for _, tc := range []struct {
		text string
		want hub.Decision
		ok   bool
	}{
		{"once", hub.DecisionOnce, true},
		{" Session ", hub.DecisionSession, true},
		{"ALWAYS!", hub.DecisionAlways, true},
		{"deny.", hub.DecisionDeny, true},
		{"never", hub.DecisionNever, true},
		{"once please", "", false},
		{"yes", "", false},
		{"", "", false},
	} {
		got, ok := wordDecision(tc.text)
		if got != tc.want || ok != tc.ok {
			t.Errorf("wordDecision(%q) = %q, %t; want %q, %t", tc.text, got, ok, tc.want, tc.ok)
		}
	}
}

func TestAllowList(t *testing.T) {
	l, err := parseAllowList([]string{"@*:example.org", "@alice:other.net", "@ops-?:*.corp.example"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user  id.UserID
		allow bool
	}{
		{"@bob:example.org", true},
		{"@Bob:Example.ORG", true},
		{"@alice:other.net", true},
		{"@ops-1:eu.corp.example", true},
		{"@bob:other.net", false},
		{"@bob:example.org.evil.com", false},
		{"@bob:evil.com:example.org", false}, // * in the localpart never reaches into the server
		{"@x:sub.example.org", false},
		{"@ops-12:eu.corp.example", false},
		{"@ops-1:corp.example", false},
		{"bob:example.org", false},
		{"@:example.org", false},
		{"", false},
	} {
		if got := l.allows(tc.user); got != tc.allow {
			t.Errorf("allows(%q) = %t, want %t", tc.user, got, tc.allow)
		}
	}
	empty, _ := parseAllowList(nil)
	if empty.allows("@bob:example.org") {
		t.Error("an empty allow list allowed someone")
	}
	for _, bad := range []string{"*", "@*", "alice:example.org", "@a:[x]", "@a/b:x", "@:x"} {
		if err := CheckAllow([]string{bad}); err == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
}

func TestClassify(t *testing.T) {
	me := addressee{ID: "@secgpt:example.org", Names: []string{"secgpt", "Assistant"}}
	for _, tc := range []struct {
		name string
		in   incoming
		want request
		ok   bool
	}{
		{"direct chat", incoming{Body: "hello", Direct: true, Prefix: "!"}, request{Kind: kindQuery, Text: "hello"}, true},
		{"shared, not addressed", incoming{Body: "hello", Prefix: "!"}, request{}, false},
		{"shared, mentioned", incoming{Body: "Assistant: hello", Prefix: "!", MentionsBot: true}, request{Kind: kindQuery, Text: "hello"}, true},
		{"shared, name prefix", incoming{Body: "secgpt, hello", Prefix: "!"}, request{Kind: kindQuery, Text: "hello"}, true},
		{"shared, name without colon", incoming{Body: "secgpt hello", Prefix: "!"}, request{}, false},
		{"shared, user ID", incoming{Body: "@secgpt:example.org what now", Prefix: "!"}, request{Kind: kindQuery, Text: "what now"}, true},
		{"shared, pill", incoming{Body: "hi", FormattedBody: `<a href="https://matrix.to/#/@secgpt:example.org">x</a> hi`, Prefix: "!"}, request{Kind: kindQuery, Text: "hi"}, true},
		{"shared, reply to bot", incoming{Body: "and now?", Prefix: "!", RepliesToBot: true}, request{Kind: kindQuery, Text: "and now?"}, true},
		{"shared, prefix and space", incoming{Body: "! what is up", Prefix: "!"}, request{Kind: kindQuery, Text: "what is up"}, true},
		{"shared, command", incoming{Body: "!grants", Prefix: "!"}, request{Kind: kindCommand, Command: cmdGrants}, true},
		{"shared, command with args", incoming{Body: "!Revoke  metro_hail ", Prefix: "!"}, request{Kind: kindCommand, Command: cmdRevoke, Text: "metro_hail"}, true},
		{"shared, another bot's command", incoming{Body: "!weather", Prefix: "!"}, request{}, false},
		{"direct, unknown command", incoming{Body: "!weather", Prefix: "!", Direct: true}, request{Kind: kindCommand, Command: cmdUnknown, Text: "weather"}, true},
		{"mentioned, command", incoming{Body: "secgpt: !help", Prefix: "!"}, request{Kind: kindCommand, Command: cmdHelp}, true},
		{"room prefix", incoming{Body: "gpt!apps", Prefix: "gpt!"}, request{Kind: kindCommand, Command: cmdApps}, true},
		{"room prefix, other prefix ignored", incoming{Body: "!apps", Prefix: "gpt!"}, request{}, false},
		{"only the name", incoming{Body: "secgpt:", Prefix: "!"}, request{Kind: kindCommand, Command: cmdHelp}, true},
		{"only the prefix", incoming{Body: "!", Prefix: "!"}, request{Kind: kindCommand, Command: cmdHelp}, true},
		{"direct, empty", incoming{Body: "   ", Direct: true, Prefix: "!"}, request{Kind: kindCommand, Command: cmdHelp}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := classify(tc.in, me)
			if got != tc.want || ok != tc.ok {
				t.Errorf("classify(%+v) = %+v, %t; want %+v, %t", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestParseRevoke(t *testing.T) {
	for _, tc := range []struct {
		args, app string
		ok        bool
	}{
		{"metro_hail", "metro_hail", true},
		{"ALL", "", true},
		{"", "", false},
		{"a b", "", false},
	} {
		app, ok := parseRevoke(tc.args)
		if app != tc.app || ok != tc.ok {
			t.Errorf("parseRevoke(%q) = %q, %t", tc.args, app, ok)
		}
	}
}

func TestRateLimiter(t *testing.T) {
	r := newRateLimiter(3, time.Minute)
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if !r.allow("@a:x", t0) {
			t.Fatalf("message %d refused within the burst", i+1)
		}
	}
	if r.allow("@a:x", t0) {
		t.Error("fourth message in the same instant allowed")
	}
	if !r.allow("@b:x", t0) {
		t.Error("another user was limited by the first")
	}
	if r.allow("@a:x", t0.Add(19*time.Second)) {
		t.Error("a token came back before its time")
	}
	if !r.allow("@a:x", t0.Add(21*time.Second)) {
		t.Error("no token after a third of the window")
	}
	if !r.allow("@a:x", t0.Add(time.Hour)) || !r.allow("@a:x", t0.Add(time.Hour)) || !r.allow("@a:x", t0.Add(time.Hour)) || r.allow("@a:x", t0.Add(time.Hour)) {
		t.Error("a long pause refills to the burst, not beyond")
	}
}

// TestRenderPrompt: a prompt is plain words in its body (no Markdown
// marks), one line per app with its arguments as key: value, a relative
// deadline, and what an app or the model wrote shown whole, never as
// markup, with bidi and invisible characters as escapes.
func TestRenderPrompt(t *testing.T) {
	all := []hub.Decision{hub.DecisionOnce, hub.DecisionSession, hub.DecisionAlways, hub.DecisionDeny, hub.DecisionNever}
	exec := func(app, args string) hub.ConsentRequest {
		return hub.ConsentRequest{
			User: "@alice:example.org", Category: hub.CategoryExec, App: app, Function: "estimate_fare", InPlan: true, Choices: all,
			Calls: []hub.PlannedCall{{Function: "estimate_fare", Args: json.RawMessage(args)}},
			Data:  []hub.DataItem{{Field: "your request", Value: "q"}},
		}
	}
	view := promptView{user: "@alice:example.org", mention: true, within: 5*time.Minute - 30*time.Millisecond}
	ride := []hub.ConsentRequest{exec("metro_hail", `{"end_point":"Elm Avenue","start_point":"Main Street"}`), exec("quick_ride", `{"end_point":"Elm Avenue","start_point":"Main Street"}`)}
	head, foot, err := renderPrompt(ride, offeredChoices(ride), view)
	if err != nil {
		t.Fatal(err)
	}
	wantBody := "🔐 @alice:example.org: permission needed for your message\n" +
		"• metro_hail estimate_fare with end_point: Elm Avenue, start_point: Main Street\n" +
		"• quick_ride estimate_fare with end_point: Elm Avenue, start_point: Main Street\n" +
		"Each app reads your whole message to write its part of the answer."
	if head.Body != wantBody {
		t.Errorf("head =\n%s\nwant\n%s", head.Body, wantBody)
	}
	if want := "React ✅ once · 🔁 this session · ♾️ always · ❌ deny for all; to refuse one app, reply with its name. ✅ covers exactly what is shown; 🔁 and ♾️ let an app run the functions a request plans, with any arguments. Answer within 5 minutes; no answer means no."; foot.Body != want {
		t.Errorf("foot = %q\nwant  %q", foot.Body, want)
	}
	if !strings.Contains(head.HTML, `<a href="https://matrix.to/#/@alice:example.org">`) {
		t.Errorf("no pill for the user:\n%s", head.HTML)
	}

	hostile := exec("metro_hail", `{"end_point":"Elm Avenue `+"```"+` [click](https://evil.example) <img src=\"mxc://x/y\"> **bold**","start_point":"Main\u202eteertS \u200bx","via":"a\u3164b\u00a0c\\u202e"}`)
	head, _, _ = renderPrompt([]hub.ConsentRequest{hostile}, offeredChoices([]hub.ConsentRequest{hostile}), view)
	for _, bad := range []string{"<img", "<a href=\"https://evil", "<b>bold", "\u202e", "\u200b"} {
		if strings.Contains(head.HTML, bad) || strings.Contains(head.Body, bad) && bad[0] == '\\' {
			t.Errorf("prompt passes %q:\n%s\n%s", bad, head.Body, head.HTML)
		}
	}
	for _, want := range []string{`start_point: "Main\u202eteertS \u200bx"`, `[click](https://evil.example)`, `via: "a\u3164b\u00a0c\\u202e"`} {
		if !strings.Contains(head.Body, want) {
			t.Errorf("body lacks %q:\n%s", want, head.Body)
		}
	}

	out := hub.ConsentRequest{User: "@a:x", Category: hub.CategoryExec, App: "metro_hail", Caller: "quick_ride", Function: "estimate_fare", Args: json.RawMessage(`{"a":1}`),
		Warning: "This is not part of the plan for your request.", Choices: []hub.Decision{hub.DecisionOnce, hub.DecisionDeny}}
	head, foot, _ = renderPrompt([]hub.ConsentRequest{out}, offeredChoices([]hub.ConsentRequest{out}), promptView{within: time.Minute})
	if !strings.Contains(head.Body, "⚠️ metro_hail would be used by quick_ride: estimate_fare with a: 1 — This is not part of the plan") {
		t.Errorf("out-of-plan head:\n%s", head.Body)
	}
	if foot.Body != "React ✅ once · ❌ deny. Answer within 1 minute; no answer means no." {
		t.Errorf("out-of-plan foot offers more than once and deny: %s", foot.Body)
	}

	data := hub.ConsentRequest{User: "@a:x", Category: hub.CategoryData, App: "travel_mate", Data: []hub.DataItem{{Field: "date_of_birth", Value: "May 20th, 1980"}},
		Warning: "These values were not in your request.", Choices: []hub.Decision{hub.DecisionOnce, hub.DecisionDeny}}
	both := []hub.ConsentRequest{data, exec("travel_mate", `{}`)}
	head, _, _ = renderPrompt(both, offeredChoices(both), view)
	if !strings.Contains(head.Body, `⚠️ travel_mate would receive values you did not type in this message: date_of_birth: "May 20th, 1980" — These values were not in your request. (allowed once at most)`) {
		t.Errorf("data line:\n%s", head.Body)
	}
	collab := hub.ConsentRequest{User: "@a:x", Category: hub.CategoryCollab, App: "email", Source: "drive", Result: json.RawMessage(`{"docs":["secret plan"]}`)}
	head, _, _ = renderPrompt([]hub.ConsentRequest{collab}, nil, view)
	if !strings.Contains(head.Body, `email would receive drive's result: docs: ["secret plan"]`) {
		t.Errorf("collab prompt does not show the result:\n%s", head.Body)
	}
	// What cannot be shown whole is not shown in part.
	long := collab
	long.Result = json.RawMessage(`{"x":"` + strings.Repeat("x", maxDetailBytes) + `"}`)
	if _, _, err := renderPrompt([]hub.ConsentRequest{long}, nil, view); !errors.Is(err, errTooLongToShow) {
		t.Errorf("a request too long to show rendered (err %v)", err)
	}
}

func TestOutcomeLine(t *testing.T) {
	for _, tc := range []struct {
		o    outcome
		want string
	}{
		{outcome{kind: outcomeAnswered, decisions: []hub.Decision{hub.DecisionAlways, hub.DecisionAlways}, apps: []string{"a", "b"}, by: "@a:x"}, "♾️ Always allowed by @a:x."},
		{outcome{kind: outcomeAnswered, decisions: []hub.Decision{hub.DecisionOnce, hub.DecisionDeny}, apps: []string{"a", "b"}, by: "@a:x"}, "a: ✅ Allowed once · b: ❌ Denied by @a:x."},
		{outcome{kind: outcomeTimeout}, "⏱️ You did not answer in time, so nothing was allowed."},
		{outcome{kind: outcomeRestart}, "⌛ I restarted while this was open, so nothing was allowed and your message was not finished. Send it again if you still want it."},
	} {
		if got := outcomeLine(tc.o); got != tc.want {
			t.Errorf("outcomeLine(%+v) = %q, want %q", tc.o, got, tc.want)
		}
	}
}

func TestContentRendersMarkdownAsNotice(t *testing.T) {
	c := content("**fare** 51.80 <script>alert(1)</script> [link](https://matrix.to/#/@victim:example.org)")
	if c.MsgType != "m.notice" || c.Mentions == nil || len(c.Mentions.UserIDs) != 0 {
		t.Errorf("content is %s with mentions %+v", c.MsgType, c.Mentions)
	}
	if !strings.Contains(c.FormattedBody, "<strong>fare</strong>") || strings.Contains(c.FormattedBody, "<script>") {
		t.Errorf("formatted body: %s", c.FormattedBody)
	}
	long := content(strings.Repeat("é", maxAnswerBytes))
	if len(long.Body) > maxAnswerBytes+100 || !strings.Contains(long.Body, "cut") {
		t.Errorf("a long answer was not cut: %d bytes", len(long.Body))
	}
}

func TestCodeFences(t *testing.T) {
	if got := codeBlock("a ``` b"); !strings.HasPrefix(got, "````\n") {
		t.Errorf("codeBlock did not outgrow the content's fence: %q", got)
	}
	if got := code("`x`"); got != "`` `x` ``" {
		t.Errorf("code = %q", got)
	}
}

// TestInboxLifecycle covers the durable inbox on real SQLite: dedup,
// order, interrupted rows at start, and the pickle key kept once.
func TestInboxLifecycle(t *testing.T) {
	ctx := context.Background()
	st, db := openTestBotDB(t)
	row := func(evt string) inboxRow {
		return inboxRow{EventID: id.EventID(evt), RoomID: "!r:x", UserID: "@a:x", Kind: kindQuery, Body: evt, State: stateQueued}
	}
	for _, e := range []string{"$1", "$2", "$3"} {
		if added, err := db.add(ctx, row(e)); err != nil || !added {
			t.Fatalf("add %s: %t, %v", e, added, err)
		}
	}
	if added, err := db.add(ctx, row("$1")); err != nil || added {
		t.Fatalf("a replayed event was added again: %t, %v", added, err)
	}
	if n, _ := db.waiting(ctx, "@a:x"); n != 3 {
		t.Errorf("waiting = %d, want 3", n)
	}
	next, ok, err := db.next(ctx, "@a:x")
	if err != nil || !ok || next.EventID != "$1" {
		t.Fatalf("next = %+v, %t, %v", next, ok, err)
	}
	if err := db.setState(ctx, "$1", stateAnswered, "$answer"); err != nil {
		t.Fatal(err)
	}
	if err := db.setState(ctx, "$2", stateWorking, ""); err != nil {
		t.Fatal(err)
	}
	// $4's user hears of the restart otherwise (an open prompt's edit).
	if _, err := db.add(ctx, inboxRow{EventID: "$4", RoomID: "!r:x", UserID: "@b:x", Kind: kindQuery, Body: "$4", State: stateWorking}); err != nil {
		t.Fatal(err)
	}
	notice := func(r inboxRow) (reply, bool) {
		return reply{Row: r, Txn: "txn" + string(r.EventID), Text: "restarted", Kind: kindNotice, Done: stateInterrupted}, r.EventID != "$4"
	}
	if err := db.interruptWorking(ctx, notice); err != nil {
		t.Fatal(err)
	}
	if err := db.interruptWorking(ctx, notice); err != nil {
		t.Fatal(err)
	}
	sending, err := db.sending(ctx)
	if err != nil || len(sending) != 1 || sending[0].Row.EventID != "$2" || sending[0].Txn != "txn$2" || sending[0].Text != "restarted" || sending[0].Done != stateInterrupted {
		t.Fatalf("sending after interruptWorking = %+v, %v", sending, err)
	}
	var state string
	if err := st.DB().QueryRow(ctx, "SELECT state FROM bot_inbox WHERE event_id=$1", "$4").Scan(&state); err != nil || state != stateInterrupted {
		t.Errorf("a message without a notice is %q (%v), want interrupted", state, err)
	}
	if next, _, _ := db.next(ctx, "@a:x"); next.EventID != "$3" {
		t.Errorf("next after the interruption = %s, want $3", next.EventID)
	}
	if users, _ := db.queuedUsers(ctx); len(users) != 1 || users[0] != "@a:x" {
		t.Errorf("queuedUsers = %v", users)
	}
	if err := db.forget(ctx, "@a:x"); err != nil {
		t.Fatal(err)
	}
	var body string
	if err := st.DB().QueryRow(ctx, "SELECT body FROM bot_inbox WHERE event_id=$1", "$1").Scan(&body); err != nil || body != "" {
		t.Errorf("forget left %q (%v)", body, err)
	}

	k1, err := db.pickleKey(ctx, nil)
	if err != nil || len(k1) != 32 {
		t.Fatalf("pickleKey = %x, %v", k1, err)
	}
	k2, err := db.pickleKey(ctx, nil)
	if err != nil || string(k1) != string(k2) {
		t.Errorf("the generated pickle key changed: %x then %x (%v)", k1, k2, err)
	}
	if _, err := db.pickleKey(ctx, []byte("another key entirely")); err != ErrPickleKeyChanged {
		t.Errorf("a changed pickle key was accepted: %v", err)
	}
}

// TestPromptAnswers covers who may answer a prompt and when a reaction
// counts, without Matrix.
func TestPromptAnswers(t *testing.T) {
	ps := newPrompts(50*time.Millisecond, zerolog.Nop())
	open := func(evt id.EventID, choices ...hub.Decision) *openPrompt {
		p := &openPrompt{event: evt, room: "!r:x", user: "@a:x", choices: choices, answered: make(chan hub.Decision, 1)}
		ps.add(p)
		return p
	}
	all := []hub.Decision{hub.DecisionOnce, hub.DecisionSession, hub.DecisionAlways, hub.DecisionDeny, hub.DecisionNever}
	wait := func(p *openPrompt) (hub.Decision, bool) {
		select {
		case d := <-p.answered:
			return d, true
		case <-time.After(300 * time.Millisecond):
			return "", false
		}
	}

	p := open("$p1", all...)
	for _, r := range []struct {
		room      id.RoomID
		user      id.UserID
		key       string
		withdrawn bool
		what      string
	}{
		{"!r:x", "@b:x", "✅", false, "someone else's"},
		{"!r:x", "@secgpt:x", "✅", false, "the bot's own seed"},
		{"!r:x", "@a:x", "🎉", false, "an unknown"},
		{"!other:x", "@a:x", "✅", false, "another room's"},
		{"!r:x", "@a:x", "✅", true, "a withdrawn"},
	} {
		ps.react(r.room, "$p1", r.user, r.key, "$r")
		if r.withdrawn {
			ps.redacted("$r")
		}
		if d, ok := wait(p); ok {
			t.Fatalf("prompt answered %q by %s reaction", d, r.what)
		}
	}
	ps.react("!r:x", "$p1", "@a:x", "✅", "$r4")
	ps.react("!r:x", "$p1", "@a:x", "❌🏽", "$r5") // a later reaction replaces an earlier one
	if d, ok := wait(p); !ok || d != hub.DecisionDeny {
		t.Errorf("answer = %q, %t; want deny", d, ok)
	}
	ps.remove(p)

	p = open("$p2", hub.DecisionOnce, hub.DecisionDeny)
	if ps.soleOpen("!r:x", "@a:x") != "$p2" || ps.soleOpen("!r:x", "@b:x") != "" {
		t.Error("soleOpen")
	}
	if !ps.answer("!r:x", "$p2", "@a:x", hub.DecisionAlways) {
		t.Error("a reply to an open prompt was not consumed")
	}
	if !ps.answer("!r:x", "$p2", "@b:x", hub.DecisionOnce) {
		t.Error("another user's reply to an open prompt was not consumed")
	}
	if d, ok := wait(p); ok {
		t.Fatalf("prompt answered %q by a choice it does not offer or by another user", d)
	}
	ps.answer("!r:x", "$p2", "@a:x", hub.DecisionOnce)
	if d, ok := wait(p); !ok || d != hub.DecisionOnce {
		t.Errorf("reply answer = %q, %t", d, ok)
	}
	ps.remove(p)
	if ps.answer("!r:x", "$p2", "@a:x", hub.DecisionOnce) {
		t.Error("a closed prompt took an answer")
	}
}

// FuzzClassify feeds arbitrary message text through everything that reads
// it before the hub: classification, answer words and reaction keys. None
// may panic, and what classify returns must come from the message.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"!help", "! hi", "secgpt: !revoke all", "@secgpt:example.org", "👍🏽", "\xff\xfe", "!", ""} {
		f.Add(s, s, true)
	}
	me := addressee{ID: "@secgpt:example.org", Names: []string{"secgpt", "Sécgpt"}}
	f.Fuzz(func(t *testing.T, body, html string, direct bool) {
		req, ok := classify(incoming{Body: body, FormattedBody: html, Direct: direct, Prefix: "!"}, me)
		if ok && req.Kind == kindQuery && !strings.Contains(body, req.Text) {
			t.Errorf("query %q is not from the message %q", req.Text, body)
		}
		wordDecision(body)
		reactionDecision(body)
		normaliseKey(body)
	})
}

func TestHistoryEnd(t *testing.T) {
	const me = "@secgpt:x"
	member := func(user, m string) *event.Event {
		return &event.Event{Type: event.StateMember, StateKey: &[]string{user}[0], Content: event.Content{Raw: map[string]any{"membership": m}}}
	}
	// changed is a member event over a join: a new display name or avatar.
	changed := func(user, prev string) *event.Event {
		evt := member(user, "join")
		evt.Unsigned.PrevContent = &event.Content{Raw: map[string]any{"membership": prev, "displayname": "old"}}
		return evt
	}
	text := &event.Event{Type: event.EventMessage}
	for _, tc := range []struct {
		name     string
		timeline []*event.Event
		want     int
	}{
		{"no join: all live", []*event.Event{text, text}, 0},
		{"invite then messages then join", []*event.Event{text, member(me, "invite"), text, member(me, "join"), text}, 2},
		{"join without the invite", []*event.Event{text, text, member(me, "join"), text}, 3},
		{"someone else's join", []*event.Event{text, member("@a:x", "invite"), member("@a:x", "join"), text}, 0},
		{"left, invited again, joined again", []*event.Event{member(me, "join"), text, member(me, "leave"), text, member(me, "invite"), text, member(me, "join")}, 5},
		{"display name changed after messages sent while down", []*event.Event{text, text, changed(me, "join")}, 0},
		{"joined, then display name changed", []*event.Event{text, member(me, "join"), text, changed(me, "join"), text}, 2},
		{"join over a leave", []*event.Event{text, changed(me, "leave"), text}, 2},
	} {
		if got := historyEnd(tc.timeline, me); got != tc.want {
			t.Errorf("%s: historyEnd = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestHistoryMarksOutliveTheirSync: an event of a just-joined room's
// backlog stays history when its keys arrive later and it is handled after
// further syncs.
func TestHistoryMarksOutliveTheirSync(t *testing.T) {
	b := &Bot{opts: Options{UserID: "@secgpt:x"}}
	s := newSyncer(b)
	old := &event.Event{ID: "$old", Type: event.EventEncrypted}
	join := &event.Event{ID: "$join", Type: event.StateMember, StateKey: &[]string{"@secgpt:x"}[0], Content: event.Content{Raw: map[string]any{"membership": "join"}}}
	var joined mautrix.RespSync
	joined.Rooms.Join = map[id.RoomID]*mautrix.SyncJoinedRoom{"!r:x": {Timeline: mautrix.SyncTimeline{SyncEventsList: mautrix.SyncEventsList{Events: []*event.Event{old, join}}}}}
	ctx := context.WithValue(context.Background(), mautrix.SyncTokenContextKey, "s1")
	s.beforeDispatch(ctx, &joined, "s1")
	s.beforeDispatch(ctx, &mautrix.RespSync{}, "s2")
	if !s.isHistory(ctx, old) {
		t.Error("a backlog event decrypted after the next sync was taken as new")
	}
}

// TestForgetErasesPrompts: !forget blanks the text of the user's prompts,
// which show their data, and only theirs.
func TestForgetErasesPrompts(t *testing.T) {
	ctx := context.Background()
	st, db := openTestBotDB(t)
	for _, p := range []prompt{
		{EventID: "$a1", RoomID: "!r:x", UserID: "@a:x", Markdown: "date_of_birth = May 20th, 1980"},
		{EventID: "$a2", RoomID: "!r:x", UserID: "@a:x", Markdown: "symptoms = asthma"},
		{EventID: "$b1", RoomID: "!r:x", UserID: "@b:x", Markdown: "Bob's own"},
	} {
		if err := db.addPrompt(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.closePrompt(ctx, "$a1", promptDecided, "allowed"); err != nil {
		t.Fatal(err)
	}
	if err := db.forget(ctx, "@a:x"); err != nil {
		t.Fatal(err)
	}
	for evt, want := range map[id.EventID]string{"$a1": "", "$a2": "", "$b1": "Bob's own"} {
		var md string
		if err := st.DB().QueryRow(ctx, "SELECT markdown FROM bot_prompts WHERE event_id=$1", evt).Scan(&md); err != nil || md != want {
			t.Errorf("prompt %s keeps %q (%v), want %q", evt, md, err, want)
		}
	}
}

// TestTokensWaitForLateDecryption: while an encrypted event waits for its
// keys, the tokens of its response and later ones are not saved, so that a
// crash makes the homeserver send it again; once it is handled they are.
func TestTokensWaitForLateDecryption(t *testing.T) {
	ctx := context.Background()
	b := &Bot{opts: Options{UserID: "@secgpt:x"}, log: zerolog.Nop()}
	s := newSyncer(b)
	store := mautrix.NewMemorySyncStore()
	s.tokens = &deferredTokens{SyncStore: store, user: "@secgpt:x"}
	// As cryptohelper's handler: it settles "$now" at once and leaves
	// "$late" waiting.
	s.OnEventType(event.EventEncrypted, func(ctx context.Context, evt *event.Event) {
		if evt.ID == "$now" {
			s.settle(ctx, evt.ID)
		}
	})
	s.OnEventType(event.EventEncrypted, s.afterEncrypted)
	respond := func(token string, events ...string) {
		t.Helper()
		var timeline []string
		for _, e := range events {
			timeline = append(timeline, `{"type":"m.room.encrypted","event_id":"`+e+`","sender":"@a:x","origin_server_ts":1,"content":{"algorithm":"m.megolm.v1.aes-sha2","ciphertext":"x","session_id":"s","sender_key":"k","device_id":"D"}}`)
		}
		var resp mautrix.RespSync
		raw := `{"next_batch":"` + token + `","rooms":{"join":{"!r:x":{"timeline":{"events":[` + strings.Join(timeline, ",") + `]}}}}}`
		if err := json.Unmarshal([]byte(raw), &resp); err != nil {
			t.Fatal(err)
		}
		if err := s.ProcessResponse(ctx, &resp, "since"); err != nil {
			t.Fatal(err)
		}
	}
	saved := func() string {
		token, _ := store.LoadNextBatch(ctx, "@secgpt:x")
		return token
	}
	respond("t1", "$now")
	if got := saved(); got != "t1" {
		t.Errorf("after an event decrypted at once: saved %q, want t1", got)
	}
	respond("t2", "$late")
	respond("t3")
	if got := saved(); got != "t1" {
		t.Errorf("while an event waits for keys: saved %q, want t1 (the token before it)", got)
	}
	s.settle(ctx, "$late")
	if got := saved(); got != "t3" {
		t.Errorf("once it was handled: saved %q, want t3", got)
	}
	respond("t4")
	if got := saved(); got != "t4" {
		t.Errorf("saved %q, want t4", got)
	}
}

// openTestBotDB opens a throw-away store and the bot's tables in it.
func openTestBotDB(t *testing.T) (*store.Store, *botDB) {
	t.Helper()
	st := storetest.Open(t)
	db, err := openBotDB(context.Background(), st, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return st, db
}

// TestPlainWords: rates and removals are said in plain words, not in Go's
// duration syntax or as "0 ... in all".
func TestPlainWords(t *testing.T) {
	for _, c := range []struct {
		n    int
		per  time.Duration
		want string
	}{
		{10, time.Minute, "at most 10 messages a minute"},
		{1, time.Hour, "at most 1 message an hour"},
		{5, 30 * time.Second, "at most 5 messages every 30 seconds"},
		{20, 2 * time.Minute, "at most 20 messages every 2 minutes"},
		{3, 90 * time.Second, "at most 3 messages every 90 seconds"},
		{3, 1500 * time.Millisecond, "at most 3 messages every 1.5s"},
	} {
		if got := rateWords(c.n, c.per); got != c.want {
			t.Errorf("rateWords(%d, %s) = %q, want %q", c.n, c.per, got, c.want)
		}
	}
	for _, c := range []struct {
		n    int
		app  string
		want string
	}{
		{0, "", "You had no stored permissions, so there was nothing to remove."},
		{0, "metro_hail", "You had no stored permissions for `metro_hail`, so there was nothing to remove."},
		{1, "", "Removed your one stored permission. I will ask again next time."},
		{3, "", "Removed all 3 of your stored permissions. I will ask again next time."},
		{1, "metro_hail", "Removed 1 stored permission for `metro_hail`. I will ask again next time."},
		{2, "metro_hail", "Removed 2 stored permissions for `metro_hail`. I will ask again next time."},
	} {
		if got := revokedWords(c.n, c.app); got != c.want {
			t.Errorf("revokedWords(%d, %q) = %q, want %q", c.n, c.app, got, c.want)
		}
	}
}

// TestInboxWritesShareTheStoresCommits: the inbox's writes go through the
// store's group commit, so that many messages' writes, and the hub's,
// share one sync; each is durable when it returns.
func TestInboxWritesShareTheStoresCommits(t *testing.T) {
	ctx := context.Background()
	st, db := openTestBotDB(t)
	before := st.WriteStats().Writes
	row := inboxRow{EventID: "$1", RoomID: "!r:x", UserID: "@u:x", Kind: "text", Body: "hi", State: stateQueued}
	if added, err := db.add(ctx, row); err != nil || !added {
		t.Fatalf("add = %v, %v", added, err)
	}
	if err := db.setState(ctx, row.EventID, stateWorking, ""); err != nil {
		t.Fatal(err)
	}
	if err := db.startSending(ctx, reply{Row: row, Txn: "t1", Text: "fine", Kind: kindAnswer, Done: stateAnswered}); err != nil {
		t.Fatal(err)
	}
	if err := db.finishSending(ctx, row.EventID, stateAnswered, "$a"); err != nil {
		t.Fatal(err)
	}
	if got := st.WriteStats().Writes - before; got != 4 {
		t.Fatalf("%d writes went through the store's commits, want 4", got)
	}
	var state string
	if err := st.DB().QueryRow(ctx, "SELECT state FROM bot_inbox WHERE event_id=$1", row.EventID).Scan(&state); err != nil || state != stateAnswered {
		t.Fatalf("state = %q (%v), want %s", state, err, stateAnswered)
	}
}
