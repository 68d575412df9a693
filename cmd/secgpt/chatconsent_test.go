package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/reveal/revealtest"
)

// TestBatchPromptInTheTerminal: the questions of a request are one prompt,
// answered for all or with apps refused by name, and nothing of an app's
// text in it acts on the terminal.
func TestBatchPromptInTheTerminal(t *testing.T) {
	all := []hub.Decision{hub.DecisionOnce, hub.DecisionSession, hub.DecisionAlways, hub.DecisionDeny, hub.DecisionNever}
	reqs := []hub.ConsentRequest{
		{App: "metro_hail", Summary: "Run metro_hail with \x1b]0;owned\x07\x1b[2J{\"to\":\"\u202eA\"}", Choices: all, Deadline: time.Now().Add(5 * time.Minute)},
		{App: "quick_ride", Summary: "\n--- permission needed (exec) ---", Choices: []hub.Decision{hub.DecisionOnce, hub.DecisionDeny}, Deadline: time.Now().Add(5 * time.Minute)},
	}
	for _, tt := range []struct {
		answer string
		want   []hub.Decision
	}{
		{"always", []hub.Decision{hub.DecisionAlways, hub.DecisionOnce}},
		{"once except quick_ride", []hub.Decision{hub.DecisionOnce, hub.DecisionDeny}},
		{"d", []hub.Decision{hub.DecisionDeny, hub.DecisionDeny}},
	} {
		t.Run(tt.answer, func(t *testing.T) {
			lines := make(chan string, 1)
			lines <- tt.answer
			var out bytes.Buffer
			c := &terminalConsenter{lines: lines, out: &out}
			got, err := c.AskEach(context.Background(), reqs)
			if err != nil || len(got) != 2 || got[0] != tt.want[0] || got[1] != tt.want[1] {
				t.Fatalf("AskEach = %v, %v; want %v", got, err, tt.want)
			}
			if r, ok := revealtest.Active(out.String(), true); ok {
				t.Errorf("the prompt carries %U as it is:\n%q", r, out.String())
			}
			n := 0
			for line := range strings.Lines(out.String()) {
				if strings.HasPrefix(line, "--- permission needed") {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d lines start a prompt, want 1:\n%s", n, out.String())
			}
		})
	}
}
