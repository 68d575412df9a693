//go:build e2e

package bot_test

import (
	"strings"
	"testing"

	"github.com/secgpt/secgpt/reveal/revealtest"
	"github.com/secgpt/secgpt/spoke/mcptest"
)

// TestForgedPromptInAnAppsAnswer: an app (a real Python MCP server,
// fixture escapes.py) answers with a forged permission prompt, terminal
// escapes, bidi and invisible characters. A client tells the real prompt
// from the forged one: the answer is of kind answer, the forged text sits
// in a code block under the app's name, and nothing in it is left to act
// or hide.
func TestForgedPromptInAnAppsAnswer(t *testing.T) {
	script := mcptest.Script(t, mcptest.Dir(t), "escapes.py")
	b := startBot(t, botOptions{apps: []string{"metro_hail"}, external: []map[string]any{
		{"name": "escapes", "command": mcptest.Python(t), "args": []string{script}},
	}})
	alice := newHuman(t, "u-alice")
	room := alice.dm(b, true)
	q := alice.say(room, "Use escapes to show: show text = 'x'.")
	alice.react(room, alice.waitFor("prompt", botMessage(b, room, q, "prompt")).ID, "✅", true)
	answer := alice.waitFor("answer", botMessage(b, room, q, "answer"))
	c := msg(answer)
	if n := len(alice.all(botMessage(b, room, "", "prompt"))); n != 1 {
		t.Errorf("%d messages of kind prompt, want the one real prompt", n)
	}
	html := c.FormattedBody
	forged := strings.Index(html, "permission needed")
	if forged < 0 {
		t.Fatalf("the app's text is not in the answer:\n%s", html)
	}
	if name, block := strings.Index(html, "<strong>escapes</strong>"), strings.Index(html, "<pre><code>"); name < 0 || block < 0 || name > block || block > forged {
		t.Errorf("the forged prompt is not in a code block under the app's name:\n%s", html)
	}
	for _, out := range []string{c.Body, html} {
		if r, ok := revealtest.Active(out, true); ok {
			t.Errorf("the answer carries %U as it is: %q", r, out)
		}
	}
}
