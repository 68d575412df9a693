package bot

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/reveal"
)

// maxDetailBytes bounds the details block of a prompt; Matrix events are at
// most 64 KiB. A request longer than that is not cut but denied: a cut could
// hide the very part that matters (see errTooLongToShow).
const maxDetailBytes = 16 << 10

// errTooLongToShow denies a request whose details do not fit a prompt.
var errTooLongToShow = errors.New("the request is too long to show in full in a prompt")

// codeBlock fences text with more backticks than it contains in a row.
func codeBlock(text string) string {
	fence := strings.Repeat("`", max(3, longestRun(text, '`')+1))
	return fence + "\n" + text + "\n" + fence + "\n"
}

// code writes text as inline code that its own backticks cannot end.
func code(text string) string {
	text = strings.ReplaceAll(text, "\n", " ")
	if text == "" {
		return "` `"
	}
	fence := strings.Repeat("`", longestRun(text, '`')+1)
	if strings.HasPrefix(text, "`") || strings.HasSuffix(text, "`") {
		return fence + " " + text + " " + fence
	}
	return fence + text + fence
}

func longestRun(s string, c byte) int {
	best, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			run++
			best = max(best, run)
		} else {
			run = 0
		}
	}
	return best
}

// offeredChoices are the prompt's answers, in the order shown: those of
// choices that any of reqs accepts (each line takes the answer as
// hub.ConsentRequest.Take says).
func offeredChoices(reqs []hub.ConsentRequest) []choice {
	var out []choice
	for _, c := range choices {
		if slices.ContainsFunc(reqs, func(r hub.ConsentRequest) bool { return slices.Contains(r.Choices, c.Decision) }) {
			out = append(out, c)
		}
	}
	return out
}

// outcomeLine is the line a closed prompt ends with, in plain words.
func outcomeLine(o outcome) string {
	switch o.kind {
	case outcomeAnswered:
		return answeredLine(o) + " by " + o.by + "."
	case outcomeTimeout:
		return "⏱️ You did not answer in time, so nothing was allowed."
	case outcomeCancelled:
		return "⏹️ Stopped, so nothing was allowed."
	case outcomeNotApplied:
		return "❌ Denied: the answer could not be applied."
	}
	// outcomeRestart: the bot stopped while the prompt was open.
	return "⌛ I restarted while this was open, so nothing was allowed and your message was not finished. Send it again if you still want it."
}

// answeredLine tells the decisions: one outcome when every line took the
// same, else each app's.
func answeredLine(o outcome) string {
	if len(o.decisions) == 0 {
		return ""
	}
	same := !slices.ContainsFunc(o.decisions, func(d hub.Decision) bool { return d != o.decisions[0] })
	if same {
		c, _ := choiceFor(o.decisions[0])
		return c.Outcome
	}
	var parts []string
	for i, d := range o.decisions {
		c, _ := choiceFor(d)
		part := reveal.Quoted(o.apps[i]) + ": " + c.Outcome
		if !slices.Contains(parts, part) {
			parts = append(parts, part)
		}
	}
	return strings.Join(parts, " · ")
}

// outcome is how a prompt ended.
type outcome struct {
	kind outcomeKind
	// decisions are the decision of each line, about apps[i].
	decisions []hub.Decision
	apps      []string
	by        string
}

type outcomeKind int

const (
	outcomeAnswered outcomeKind = iota
	outcomeTimeout
	outcomeCancelled
	outcomeRestart
	// outcomeNotApplied: the hub denied what the prompt had shown as the
	// user's answer.
	outcomeNotApplied
)

// helpText lists the commands.
func helpText(prefix string) string {
	var b strings.Builder
	b.WriteString("I am secgpt, an assistant whose apps each run in their own sandbox. Ask me anything; I ask your permission before an app runs or sees your data, with a message you answer by reaction.\n\n")
	for _, c := range commandList {
		name := prefix + c.Name
		if c.Args != "" {
			name += " " + c.Args
		}
		fmt.Fprintf(&b, "- %s: %s\n", code(name), c.Help)
	}
	return b.String()
}
