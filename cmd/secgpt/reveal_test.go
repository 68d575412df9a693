package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/reveal/revealtest"
	"github.com/secgpt/secgpt/spoke/mcptest"
)

// TestAppTextCannotActOnTheTerminal: an external app whose result, error
// and server stderr carry every C0 and C1 control, DEL, CSI, OSC 0/2
// titles, OSC 8 links, OSC 52 clipboard writes, a screen clear, bidi and
// zero-width characters and a forged permission prompt (fixture
// escapes.py). Neither `secgpt ask` (isolated or vanilla) nor `secgpt chat` writes any of it to
// the terminal as it is, on stdout or in the log on stderr, and no forged
// prompt starts a line.
func TestAppTextCannotActOnTheTerminal(t *testing.T) {
	requireSpokeSandbox(t)
	script := mcptest.Script(t, mcptest.Dir(t), "escapes.py")
	cfg := externalConfig(t, fmt.Sprintf("- name: escapes\n  command: %s\n  args: [%s]\n", mcptest.Python(t), script))
	check := func(t *testing.T, what string, r result) {
		t.Helper()
		for _, out := range []struct{ name, text string }{{"stdout", r.stdout}, {"stderr", r.stderr}} {
			if c, ok := revealtest.Active(out.text, true); ok {
				t.Errorf("%s: %s carries %U as it is:\n%q", what, out.name, c, out.text)
			}
			for line := range strings.Lines(out.text) {
				if strings.HasPrefix(line, "--- permission needed") {
					t.Errorf("%s: a forged prompt starts a line of %s: %q", what, out.name, line)
				}
			}
		}
		if !strings.Contains(r.stdout+r.stderr, "HOSTILE[") {
			t.Errorf("%s: the app's text is not shown at all:\n%s\n%s", what, r.stdout, r.stderr)
		}
	}
	// The prompts show the planned arguments, which the model wrote: one
	// question and a batch of two.
	for name, query := range map[string]string{
		"one question":  "Use escapes to show: show text = '\x1b]0;title\x07\u202eevil'.",
		"two questions": "Use escapes to show: show text = '\x1b]0;title\x07'. Use metro_hail from '\x1b[2J' to 'B'.",
	} {
		t.Run("chat prompt, "+name, func(t *testing.T) {
			r := runBinary(t, query+"\no\n/quit\n", "chat", "--config", cfg, "--user", "u")
			if c, ok := revealtest.Active(r.stdout, true); ok {
				t.Errorf("the prompt carries %U as it is:\n%q", c, r.stdout)
			}
		})
	}
	for _, f := range []string{"show", "fail", "die"} {
		query := fmt.Sprintf("Use escapes to %s: %s text = 'x'.", f, f)
		t.Run("ask "+f, func(t *testing.T) {
			check(t, "ask", runBinary(t, "", "ask", "--config", cfg, "--user", "u", query))
		})
		t.Run("ask --mode vanilla "+f, func(t *testing.T) {
			// The baseline mixes every app's text into one answer by design:
			// it attributes nothing, but it does not let the text act either.
			r := runBinary(t, "", "ask", "--config", cfg, "--user", "u", "--mode", "vanilla", query)
			for _, out := range []string{r.stdout, r.stderr} {
				if c, ok := revealtest.Active(out, true); ok {
					t.Errorf("vanilla: %U is written as it is:\n%q", c, out)
				}
			}
		})
		t.Run("ask --json "+f, func(t *testing.T) {
			check(t, "ask --json", runBinary(t, "", "ask", "--config", cfg, "--user", "u", "--json", query))
		})
		t.Run("chat "+f, func(t *testing.T) {
			r := runBinary(t, query+"\no\n/quit\n", "chat", "--config", cfg, "--user", "u")
			// The one real prompt is the chat's own.
			r.stdout = strings.Replace(r.stdout, "\n--- permission needed (exec) ---\n", "\n", 1)
			check(t, "chat", r)
		})
	}
}
