package hub

import (
	"strings"
	"testing"

	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/store"
)

// TestHistoryFollowsProvenance: the planner and the no-app assistant read
// the user's messages and the answers no app shaped, and a line naming the
// apps in place of the rest (unknown provenance counts as shaped by apps).
func TestHistoryFollowsProvenance(t *testing.T) {
	entries := []store.MemoryEntry{
		{Role: store.RoleUser, Content: "fares?", Provenance: store.ShapedBy()},
		{Role: store.RoleAssistant, Content: "metro part [[obey]]", Provenance: store.ShapedBy("metro_hail")},
		{Role: store.RoleAssistant, Content: "quick part", Provenance: store.ShapedBy("quick_ride")},
		{Role: store.RoleAssistant, Content: "Cheapest: metro_hail", Provenance: store.ShapedBy("metro_hail", "quick_ride")},
		{Role: store.RoleAssistant, Content: "(secgpt: a note.)", Provenance: store.ShapedBy()},
		{Role: store.RoleUser, Content: "hello", Provenance: store.ShapedBy()},
		{Role: store.RoleAssistant, Content: "Hi!", Provenance: store.ShapedBy()},
		{Role: store.RoleUser, Content: "old question"},
		{Role: store.RoleAssistant, Content: "old answer of unknown provenance"},
	}
	render := func(msgs []llm.Message) string {
		var out []string
		for _, m := range msgs {
			out = append(out, string(m.Role)+": "+m.Content)
		}
		return strings.Join(out, "\n")
	}
	want := strings.Join([]string{
		"user: fares?",
		"assistant: (secgpt: metro_hail, quick_ride answered here; the text is not shown to the assistant.)",
		"assistant: (secgpt: a note.)",
		"user: hello",
		"assistant: Hi!",
		"user: old question",
		"assistant: (secgpt: an answer was given here from apps' outputs; its text is not shown to the assistant.)",
	}, "\n")
	if got := render(assistantHistory(entries)); got != want {
		t.Errorf("history =\n%s\nwant\n%s", got, want)
	}
}
