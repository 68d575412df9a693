package bot

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/secgpt/secgpt/hub"
)

// maxDetailBytes bounds the details block of a prompt; Matrix events are at
// most 64 KiB. A request longer than that is not cut but denied: a cut could
// hide the very part that matters (see errTooLongToShow).
const maxDetailBytes = 16 << 10

// errTooLongToShow denies a request whose details do not fit a prompt.
var errTooLongToShow = errors.New("the request is too long to show in full in a prompt")

// renderPrompt writes a consent prompt as Markdown: the head (who wants
// what, the warning, the details) and the foot (how to answer, until when).
// Everything that comes from an app or the model is inside a fenced code
// block, so it cannot format itself into something else.
func renderPrompt(req hub.ConsentRequest, offered []choice, now time.Time) (head, foot string, err error) {
	shown, err := details(req)
	if err != nil {
		return "", "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "🔐 **Permission needed** for %s: %s.\n\n", req.User, plainWords(req))
	if !req.InPlan {
		b.WriteString("⚠️ **WARNING: this was not in the plan for your message.** Allow it only if you expected it.\n\n")
	}
	if req.Irreversible {
		b.WriteString("⚠️ **This cannot be undone**, so I ask every time.\n\n")
	}
	b.WriteString(codeBlock(shown))
	var legend, words []string
	for _, c := range offered {
		if c.Emoji != "" {
			legend = append(legend, c.Emoji+" "+c.Legend)
			words = append(words, "`"+c.Word+"`")
		}
	}
	foot = fmt.Sprintf("React %s (or reply %s). No answer by %s (in %s) means deny.",
		strings.Join(legend, " · "), strings.Join(words, ", "), req.Deadline.UTC().Format("15:04:05 MST"), humanDuration(req.Deadline.Sub(now)))
	return b.String(), foot, nil
}

// plainWords says in a few words which app wants what. App and function
// names are validated identifiers; they are still shown as code.
func plainWords(req hub.ConsentRequest) string {
	app := code(req.App)
	switch req.Category {
	case hub.CategoryExec:
		if req.Caller != "" {
			return fmt.Sprintf("the app %s wants to use the app %s (function %s)", code(req.Caller), app, code(req.Function))
		}
		return fmt.Sprintf("the app %s wants to run its function %s", app, code(req.Function))
	case hub.CategoryData:
		return fmt.Sprintf("the app %s would receive data of yours that you did not type in this message", app)
	case hub.CategoryCollab:
		return fmt.Sprintf("the result of the app %s would be given to the app %s", code(req.Source), app)
	}
	return fmt.Sprintf("the app %s asks for %s", app, code(string(req.Category)))
}

// details is the request in full: the hub's summary, which shows the
// arguments, result, data and warning exactly as the app would get them,
// then who and what it concerns. It fails if that does not fit a prompt.
func details(req hub.ConsentRequest) (string, error) {
	var b strings.Builder
	b.WriteString(req.Summary)
	b.WriteString("\n\n")
	field := func(name, value string) {
		if value != "" {
			fmt.Fprintf(&b, "%-9s %s\n", name+":", value)
		}
	}
	field("app", req.App)
	field("caller", req.Caller)
	field("source", req.Source)
	field("function", req.Function)
	if b.Len() > maxDetailBytes {
		return "", errTooLongToShow
	}
	return strings.TrimRight(b.String(), "\n"), nil
}

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
// choices that req accepts.
func offeredChoices(req hub.ConsentRequest) []choice {
	var out []choice
	for _, c := range choices {
		for _, d := range req.Choices {
			if c.Decision == d {
				out = append(out, c)
			}
		}
	}
	return out
}

// outcomeLine is the line an answered prompt ends with.
func outcomeLine(o outcome) string {
	switch o.kind {
	case outcomeAnswered:
		c, _ := choiceFor(o.decision)
		return fmt.Sprintf("**%s** by %s.", c.Outcome, o.by)
	case outcomeTimeout:
		return "**⏱️ No answer in time: denied.**"
	case outcomeCancelled:
		return "**⏹️ Cancelled: denied.**"
	case outcomeNotApplied:
		return "**❌ Denied: the answer could not be applied.**"
	}
	// outcomeRestart: the bot stopped while the prompt was open.
	return "**⌛ Expired (restart): denied.** Send your message again if you still want it."
}

// outcome is how a prompt ended.
type outcome struct {
	kind     outcomeKind
	decision hub.Decision
	by       string
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

// humanDuration says how long d is, roughly.
func humanDuration(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%d h", int(d.Hours()))
	case d >= time.Minute:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	default:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	}
}
