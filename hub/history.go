package hub

import (
	"fmt"
	"slices"
	"strings"

	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/store"
)

// Who reads what of the user's hub memory follows from each entry's
// provenance (DESIGN §3, "Text flow"): the planner and the no-app
// assistant read the user's own messages and the answers no app shaped;
// an app's spoke reads its own spoke memory, never hub memory. In place of
// each answer they may not read, they read a line the hub writes.
//
// DESIGN §3 once gave the planner the user-visible history, "the bot's
// final answers" included. That is narrowed here: an answer that a spoke
// wrote after reading raw app output (or a model wrote after reading such
// a spoke's result) would carry an instruction injected into an email, one
// turn later, to the one model whose output becomes the next request's
// capabilities. An answer no app shaped, the planner's own or the no-app
// assistant's, was written from the user's words and such answers only,
// so the planner reads it: it answers requests that need no app itself
// (see Hub.plan). Hub memory keeps the full answers for the user.

// assistantHistory is what the planner and the no-app assistant see of the
// conversation: the user's messages, the answers no app shaped, and in
// place of the others a line the hub writes, naming the apps that shaped
// them.
func assistantHistory(entries []store.MemoryEntry) []llm.Message {
	out := make([]llm.Message, 0, len(entries))
	var withheld []string // apps of the withheld entries in a row
	unknown := false
	flush := func() {
		if len(withheld) == 0 && !unknown {
			return
		}
		out = append(out, llm.Message{Role: llm.RoleAssistant, Content: withheldLine(withheld, unknown)})
		withheld, unknown = nil, false
	}
	for _, e := range entries {
		switch {
		case e.Role == store.RoleUser:
			flush()
			out = append(out, llm.Message{Role: llm.RoleUser, Content: e.Content})
		case e.Provenance.AppFree():
			flush()
			out = append(out, llm.Message{Role: llm.RoleAssistant, Content: e.Content})
		case !e.Provenance.Known:
			unknown = true
		default:
			for _, a := range e.Provenance.Apps {
				if !slices.Contains(withheld, a) {
					withheld = append(withheld, a)
				}
			}
		}
	}
	flush()
	return out
}

// withheldLine stands for answers that apps' output shaped.
func withheldLine(apps []string, unknown bool) string {
	if len(apps) == 0 || unknown {
		return "(secgpt: an answer was given here from apps' outputs; its text is not shown to the assistant.)"
	}
	return fmt.Sprintf("(secgpt: %s answered here; the text is not shown to the assistant.)", strings.Join(apps, ", "))
}
