package hub

import (
	"fmt"
	"slices"
	"strings"

	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/store"
)

// Who reads what of the user's hub memory follows from each entry's
// provenance (DESIGN §3, "Text flow"): the planner reads the user's own
// messages only; the no-app assistant reads those and the answers no app
// shaped; an app's spoke reads its own spoke memory, never hub memory.
// In place of each answer a model may not read, it reads a line the hub
// writes.

// answerWithheld stands for each earlier answer in the planner's history.
const answerWithheld = "(secgpt: an answer was given here. The planner is not shown its text, which was written from apps' outputs.)"

// plannerHistory is what the planner sees of the conversation: the user's
// own messages, and in place of each answer a line the hub writes.
//
// DESIGN §3 once gave the planner the user-visible history, "the bot's
// final answers" included. That is narrowed here: an answer is written by
// a spoke that read raw app output (or by a model that read such a
// spoke's result), so an instruction injected into an email would reach,
// one turn later, the one model whose output becomes the next request's
// capabilities. Hub memory keeps the full answers for the user.
func plannerHistory(entries []store.MemoryEntry) []llm.Message {
	out := make([]llm.Message, 0, len(entries))
	for i, e := range entries {
		switch {
		case e.Role == store.RoleUser:
			out = append(out, llm.Message{Role: llm.RoleUser, Content: e.Content})
		case i == 0 || entries[i-1].Role == store.RoleUser:
			// One line for the answer's parts together.
			out = append(out, llm.Message{Role: llm.RoleAssistant, Content: answerWithheld})
		}
	}
	return out
}

// vanillaHistory is what the no-app assistant sees of the conversation:
// the user's messages, the answers no app shaped, and in place of the
// others a line the hub writes, naming the apps that shaped them.
func vanillaHistory(entries []store.MemoryEntry) []llm.Message {
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
