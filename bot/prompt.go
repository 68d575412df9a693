package bot

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/reveal"
)

// A consent prompt is written twice, as plain text (the body, what
// notifications and clients without HTML show; no Markdown marks) and as
// HTML, both built here from the requests: nothing an app or the model
// wrote is parsed as Markdown or HTML. Values are shown whole, with
// control, bidi and invisible characters as escapes.

// PromptKey is the content key that marks a consent prompt: the bot acts
// on answers only to events it sent with it and recorded as open prompts.
// An answer cannot carry it: the bot writes every key of its messages.
const PromptKey = "org.secgpt.prompt"

// promptText is a piece of a prompt in both forms.
type promptText struct {
	Body string `json:"body"`
	HTML string `json:"html"`
}

func (t *promptText) add(body, htm string) {
	t.Body += body
	t.HTML += htm
}

// plus joins two pieces with a line break.
func (t promptText) plus(o promptText) promptText {
	if t.Body == "" {
		return o
	}
	return promptText{Body: t.Body + "\n" + o.Body, HTML: t.HTML + "<br>" + o.HTML}
}

// promptView is what a prompt shows besides the requests.
type promptView struct {
	// user answers the prompt; mentioned in a room shared with others.
	user    id.UserID
	mention bool
	// origin links the user's message when the prompt is in their direct
	// chat, away from the room of the message.
	origin string
	// within is how long the user has to answer.
	within time.Duration
}

// renderPrompt writes a prompt for reqs: the head (whose request, one line
// per app with what it would run or receive, warnings) and the foot (how
// to answer, within how long). It fails if the prompt is too long to show
// in full.
func renderPrompt(reqs []hub.ConsentRequest, offered []choice, v promptView) (head, foot promptText, err error) {
	who := promptText{}
	if v.mention {
		who.add(v.user.String()+": ", fmt.Sprintf(`<a href="%s">%s</a>: `, html.EscapeString(matrixTo(v.user.String())), html.EscapeString(v.user.String())))
	}
	if v.origin != "" {
		who.add("about your message in a room shared with others ("+v.origin+"): ", fmt.Sprintf(`about <a href="%s">your message</a> in a room shared with others: `, html.EscapeString(v.origin)))
	}
	head.add("🔐 ", "🔐 ")
	head.add(who.Body, who.HTML)
	head.add("permission needed for your message", "<b>permission needed</b> for your message")
	readsRequest := false
	for _, app := range promptApps(reqs) {
		for _, r := range reqs {
			if r.App != app {
				continue
			}
			head = head.plus(requestLine(r, offered))
			readsRequest = readsRequest || r.Category == hub.CategoryExec && slices.ContainsFunc(r.Data, func(d hub.DataItem) bool { return d.Field == hub.RequestField })
		}
	}
	if readsRequest {
		head = head.plus(promptText{Body: "Each app reads your whole message to write its part of the answer.", HTML: "<i>Each app reads your whole message to write its part of the answer.</i>"})
	}
	if len(head.Body)+len(head.HTML) > maxDetailBytes {
		return promptText{}, promptText{}, errTooLongToShow
	}
	var legend []string
	for _, c := range offered {
		if c.Emoji != "" {
			legend = append(legend, c.Emoji+" "+c.Legend)
		}
	}
	f := "React " + strings.Join(legend, " · ")
	if len(promptApps(reqs)) > 1 {
		f += " for all; to refuse one app, reply with its name."
	} else {
		f += "."
	}
	if slices.ContainsFunc(offered, func(c choice) bool { return c.Decision == hub.DecisionSession }) {
		f += " ✅ covers exactly what is shown; 🔁 and ♾️ let an app run the functions a request plans, with any arguments."
	}
	f += " Answer within " + hub.Within(v.within) + "; no answer means no."
	foot.add(f, html.EscapeString(f))
	return head, foot, nil
}

// promptApps lists the apps of reqs in order of first mention.
func promptApps(reqs []hub.ConsentRequest) []string {
	var out []string
	for _, r := range reqs {
		if !slices.Contains(out, r.App) {
			out = append(out, r.App)
		}
	}
	return out
}

// requestLine is one request: the app, what it would run or receive,
// its warnings, and what it accepts when that is less than the prompt.
func requestLine(r hub.ConsentRequest, offered []choice) promptText {
	var t promptText
	mark := "• "
	if r.Warning != "" || r.Irreversible {
		mark = "⚠️ "
	}
	t.add(mark, mark)
	name := func(s string) { t.add(reveal.Quoted(s), "<code>"+html.EscapeString(reveal.Quoted(s))+"</code>") }
	word := func(s string) { t.add(s, html.EscapeString(s)) }
	name(r.App)
	switch {
	case r.Category == hub.CategoryData:
		word(" would receive values you did not type in this message: ")
		for i, d := range r.Data {
			if i > 0 {
				word(", ")
			}
			keyValue(&t, d.Field, d.Value)
		}
	case r.Category == hub.CategoryCollab:
		word(" would receive ")
		name(r.Source)
		word("'s result: ")
		args(&t, r.Result)
	case r.Caller != "":
		word(" would be used by ")
		name(r.Caller)
		word(": ")
		name(r.Function)
		word(" with ")
		args(&t, r.Args)
	case len(r.Calls) > 0:
		for i, c := range r.Calls {
			if i > 0 {
				word(";")
			}
			word(" ")
			name(c.Function)
			if len(c.Args) > 0 && string(c.Args) != "{}" {
				word(" with ")
				args(&t, c.Args)
			}
			for _, a := range c.Completes {
				word(" (the app fills in ")
				name(a)
				word(")")
			}
			for _, a := range slices.Sorted(maps.Keys(c.From)) {
				word(" (")
				name(a)
				word(" from ")
				name(c.From[a])
				word(", asked before it is copied)")
			}
		}
	default:
		word(" ")
		name(r.Function)
		word(" with ")
		args(&t, r.Args)
	}
	if r.Warning != "" {
		word(" — " + r.Warning)
	}
	if r.Irreversible {
		word(" This cannot be undone, so I ask every time.")
	}
	narrower := slices.ContainsFunc(offered, func(c choice) bool { return !slices.Contains(r.Choices, c.Decision) })
	if narrower && slices.Contains(r.Choices, hub.DecisionOnce) && !slices.Contains(r.Choices, hub.DecisionAlways) {
		word(" (allowed once at most)")
	}
	return t
}

// args shows a JSON object as key: value pairs; anything else as JSON.
func args(t *promptText, raw json.RawMessage) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil || len(obj) == 0 {
		s := reveal.Quoted(string(raw))
		if len(raw) == 0 {
			s = "{}"
		}
		t.add(s, "<code>"+html.EscapeString(s)+"</code>")
		return
	}
	for i, k := range slices.Sorted(maps.Keys(obj)) {
		if i > 0 {
			t.add(", ", ", ")
		}
		var s string
		if json.Unmarshal(obj[k], &s) == nil {
			keyValue(t, k, s)
			continue
		}
		// Numbers, booleans, arrays and objects as their JSON.
		shown := reveal.Quoted(string(obj[k]))
		t.add(reveal.Quoted(k)+": "+shown, html.EscapeString(reveal.Quoted(k))+": <code>"+html.EscapeString(shown)+"</code>")
	}
}

// plainValue is a value shown without quotes: words, digits and a few
// marks that cannot be read as the start of another key or value.
var plainValue = regexp.MustCompile(`^[\p{L}\p{N}]+([ .'/@#+&-]?[\p{L}\p{N}]+)*\.?$`)

// keyValue shows "key: value", quoting a value that is not plain words.
func keyValue(t *promptText, k, v string) {
	k = reveal.Quoted(k)
	shown := v
	if !plainValue.MatchString(v) {
		shown = `"` + strings.ReplaceAll(reveal.Quoted(v), `"`, `\"`) + `"`
	}
	t.add(k+": "+shown, html.EscapeString(k)+": <code>"+html.EscapeString(shown)+"</code>")
}

// promptMark is the structured field a prompt carries (PromptKey).
type promptMark struct {
	User    id.UserID `json:"user"`
	Apps    []string  `json:"apps"`
	Choices []string  `json:"choices"`
	// Expires is the deadline, Unix milliseconds.
	Expires int64 `json:"expires"`
}

// promptContent is a prompt's event content: a notice, mentioning the
// user when the view says so, marked as a prompt.
func promptContent(t promptText, mentioned id.UserID) *event.MessageEventContent {
	c := &event.MessageEventContent{MsgType: event.MsgNotice, Body: t.Body, Format: event.FormatHTML, FormattedBody: t.HTML, Mentions: &event.Mentions{}}
	if mentioned != "" {
		c.Mentions.UserIDs = []id.UserID{mentioned}
	}
	return c
}

// storedPrompt is what closing a prompt needs, kept in the database so
// that a restart can close the prompts it left open.
type storedPrompt struct {
	Head   promptText   `json:"head"`
	Mark   promptMark   `json:"mark"`
	Seeded []id.EventID `json:"seeded,omitempty"`
}

func (a *askedPrompt) stored() string {
	b, _ := json.Marshal(storedPrompt{Head: a.head, Mark: a.mark, Seeded: a.seeded})
	return string(b)
}

// readStoredPrompt reads prompt.Markdown; a prompt erased by !forget has
// nothing left to show but its outcome.
func readStoredPrompt(text string) storedPrompt {
	var sp storedPrompt
	_ = json.Unmarshal([]byte(text), &sp)
	return sp
}

// closePromptEvent edits a prompt to show its outcome instead of how to
// answer, and takes back the reactions the bot seeded on it.
func (b *Bot) closePromptEvent(ctx context.Context, room id.RoomID, evt id.EventID, sp storedPrompt, o outcome) {
	line := outcomeLine(o)
	text := sp.Head.plus(promptText{Body: line, HTML: "<b>" + html.EscapeString(line) + "</b>"})
	c := promptContent(text, "")
	c.SetEdit(evt)
	if _, err := b.cli.SendMessageEvent(ctx, room, event.EventMessage, &event.Content{Parsed: c, Raw: map[string]any{KindKey: kindPrompt, PromptKey: sp.Mark}}); err != nil {
		b.log.Warn().Err(err).Str("prompt", evt.String()).Msg("Failed to show a prompt's outcome")
	}
	for _, r := range sp.Seeded {
		if _, err := b.cli.RedactEvent(ctx, room, r); err != nil {
			b.log.Warn().Err(err).Str("prompt", evt.String()).Msg("Failed to take back a seeded reaction")
		}
	}
}
