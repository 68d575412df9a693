package bot

import (
	"errors"
	"strings"

	"github.com/secgpt/secgpt/hub"
)

// renderAnswer writes a reply as Markdown, who said what: each app's part
// as a block under the app's name, its text fenced so that it cannot
// format itself into another app's block or into the bot's own words;
// the assistant's own answer (no app's text) and the cross-app summary
// (written from typed values only) as text; the hub's notes in italics,
// and a note that quotes an app under that app's name. A reply with no
// part, summary or note is shown as its plain answer.
//
// Text in the bot's own voice that the model wrote (the plain answer, the
// assistant's part, the summary) is quoted, under a line saying so, when it
// has the shape of a consent prompt: only the bot's prompts may look like
// one (see promptShapes).
func renderAnswer(reply *hub.Reply) string {
	if len(reply.Parts) == 0 && reply.Summary == nil && len(reply.Notes) == 0 {
		return ownVoice(reply.Answer)
	}
	var blocks []string
	for _, p := range reply.Parts {
		if p.App == "" {
			blocks = append(blocks, ownVoice(p.Text))
			continue
		}
		blocks = append(blocks, "**"+p.App+"** says:\n"+codeBlock(p.Text))
	}
	if reply.Summary != nil {
		blocks = append(blocks, "**Across "+strings.Join(reply.Summary.Apps, ", ")+"** (from their numbers and choices only):\n\n"+ownVoice(reply.Summary.Text))
	}
	for _, n := range reply.Notes {
		if n.App != "" {
			blocks = append(blocks, "**"+n.App+"**, reported by secgpt:\n"+codeBlock(n.Text))
			continue
		}
		blocks = append(blocks, "_secgpt: "+escapeMarkdown(n.Text)+"._")
	}
	return strings.Join(blocks, "\n\n")
}

// promptShapes are what makes text read as one of the bot's consent
// prompts. Each is matched without regard to case.
var promptShapes = []struct{ mark, reason string }{
	{"🔐", "every prompt opens with the lock"},
	{"permission needed", "the words a prompt opens with"},
	{"permission request", "what a prompt is called"},
	{"react ✅", "how a prompt asks to be answered"},
	{"means deny", "how a prompt ends: no answer means deny"},
	{"no answer means", "how a prompt ends: no answer means deny"},
}

// promptShaped reports whether text reads like a consent prompt.
func promptShaped(text string) bool {
	lower := strings.ToLower(text)
	for _, s := range promptShapes {
		if strings.Contains(lower, s.mark) {
			return true
		}
	}
	return false
}

// ownVoice is model-written text shown in the bot's own voice: as it is,
// or, when it reads like a prompt, quoted under a line saying it is none.
func ownVoice(text string) string {
	if !promptShaped(text) {
		return text
	}
	return "_secgpt: the answer below contains text shaped like a permission request. It is quoted, not a request: I ask only in prompts of my own, which you answer by reaction._\n\n" +
		codeBlock(text)
}

// escapeMarkdown makes text literal in Markdown.
func escapeMarkdown(text string) string {
	var b strings.Builder
	for _, r := range text {
		if strings.ContainsRune("\\`*_{}[]()#+-.!|<>~", r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// renderFailure writes a failed request's message: one that quotes an
// app's words (its error text, its server's last words) under that app's
// name, fenced, as a note quoting it; the hub's own in the bot's words.
func renderFailure(err error) string {
	var he *hub.Error
	if errors.As(err, &he) && he.App != "" {
		return renderAnswer(&hub.Reply{Notes: []hub.Note{{Text: he.Message, App: he.App}}})
	}
	return "Sorry, " + userFacing(err) + "."
}
