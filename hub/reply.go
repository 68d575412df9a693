package hub

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/secgpt/secgpt/store"
)

// Reply is the answer to a query, by who said what, and the record of how
// it was made. Front ends show each part attributed to its app: an app's
// words are its own, and an app may say anything about itself, so only its
// name beside them tells the user whose claim it is.
type Reply struct {
	// Answer is the plain composition of the parts, the summary and the
	// notes, for front ends that show one text (chat, ask, the case
	// studies): each part in plan order with its app's name before every
	// line of it (a part of no app bare), then the summary, then each
	// note as "(secgpt: …)", or, for a note quoting an app, like that
	// app's part. An app's line breaks of any kind start a labelled line,
	// and its other control characters are replaced, so no line of an
	// app's text reads as another app's or as secgpt's.
	Answer string
	// Parts are the answer's parts. Each app that produced a result wrote
	// its own part in its own spoke, from its own result, its own memory
	// and the user's request; nothing of another app's reached it. A
	// request that no app served has one part, with App "".
	Parts []Part
	// Summary is the cross-app part of a request served by several apps
	// (compare, choose, total), written by a model that saw only the
	// user's request and, per app, the typed fields its result has in
	// common with another app's: numbers, booleans, and members of small
	// enums that every app with the field declares. Nil when no two apps
	// share such a field.
	Summary *Summary
	// Notes are what the hub itself tells the user: steps that did not run
	// and why, apps that failed. A note that quotes an app's words (its
	// error text) names that app.
	Notes  []Note
	Record *Record
}

// Part is one part of an answer.
type Part struct {
	// App wrote the part in its own spoke; "" is the no-app assistant,
	// which saw no app's text.
	App string `json:"app"`
	// Step and Function are the plan step the part answers, for an app.
	Step     string `json:"step,omitempty"`
	Function string `json:"function,omitempty"`
	Text     string `json:"text"`
}

// Summary is the cross-app part of an answer.
type Summary struct {
	Text string `json:"text"`
	// Apps are the apps whose typed fields it was written from.
	Apps []string `json:"apps"`
}

// Note is something the hub tells the user.
type Note struct {
	Text string `json:"text"`
	// App is the app whose words the note quotes; "" for the hub's own
	// words, which name apps only by their names.
	App string `json:"app,omitempty"`
}

// noteOf is the note that tells the user of a failure.
func noteOf(err error) Note {
	var e *Error
	if errors.As(err, &e) {
		return Note{Text: e.Message, App: e.App}
	}
	return Note{Text: err.Error()}
}

// Voices returns who said what in the reply: each app's name to its parts
// and the notes that quote it, "" to the words of the hub and of the
// no-app assistant (its answer, the cross-app summary, the hub's notes),
// each joined by line breaks in reply order. What an app says is its own
// claim; a front end or a judge that must tell whose claim a line is
// reads it here.
func (r *Reply) Voices() map[string]string {
	voices := map[string]string{}
	say := func(who, text string) {
		if voices[who] != "" {
			voices[who] += "\n"
		}
		voices[who] += text
	}
	for _, p := range r.Parts {
		say(p.App, p.Text)
	}
	if r.Summary != nil {
		say("", r.Summary.Text)
	}
	for _, n := range r.Notes {
		say(n.App, n.Text)
	}
	return voices
}

// compose writes the reply's plain Answer from its structure.
func (r *Reply) compose() {
	var blocks []string
	for _, p := range r.Parts {
		blocks = append(blocks, labelled(p.App, p.Text))
	}
	if r.Summary != nil {
		blocks = append(blocks, r.Summary.Text)
	}
	for _, n := range r.Notes {
		if n.App != "" {
			blocks = append(blocks, labelled(n.App, n.Text))
			continue
		}
		blocks = append(blocks, "(secgpt: "+n.Text+".)")
	}
	r.Answer = strings.Join(blocks, "\n\n")
}

// labelled writes app's words with "app: " before each of their lines.
// Any line break (CR, VT, FF, NEL, LS, PS as much as LF) starts a
// labelled line, and any other control character (a terminal's escape
// sequences) becomes U+FFFD: nothing in the words can end, hide or
// overwrite the label. The words of no app ("") are kept as written.
func labelled(app, text string) string {
	if app == "" {
		return text
	}
	var b strings.Builder
	b.WriteString(app + ":")
	start := true // at the start of a line's words
	for i, r := range text {
		switch {
		case r == '\n' || r == '\v' || r == '\f' || r == '\u0085' || r == '\u2028' || r == '\u2029' ||
			r == '\r' && !strings.HasPrefix(text[i+1:], "\n"):
			b.WriteString("\n" + app + ":")
			start = true
			continue
		case r == '\r':
			continue // the CR of a CRLF
		case r != '\t' && unicode.IsControl(r):
			r = utf8.RuneError
		}
		if start {
			b.WriteByte(' ')
			start = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// memory is the reply as hub memory keeps it: each part, the summary and
// each note as its own entry, with the apps that shaped it.
func (r *Reply) memory() []store.AnswerPart {
	var out []store.AnswerPart
	shaped := func(app string) store.Provenance {
		if app == "" {
			return store.ShapedBy()
		}
		return store.ShapedBy(app)
	}
	for _, p := range r.Parts {
		out = append(out, store.AnswerPart{Content: p.Text, Provenance: shaped(p.App)})
	}
	if r.Summary != nil {
		out = append(out, store.AnswerPart{Content: r.Summary.Text, Provenance: store.ShapedBy(r.Summary.Apps...)})
	}
	for _, n := range r.Notes {
		out = append(out, store.AnswerPart{Content: "(secgpt: " + n.Text + ".)", Provenance: shaped(n.App)})
	}
	return out
}
