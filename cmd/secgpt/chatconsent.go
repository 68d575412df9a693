package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/reveal"
)

var _ hub.BatchConsenter = (*terminalConsenter)(nil)

// AskEach shows every question of a request at once, one numbered line per
// question, and takes one answer for all of them; the answer may name
// apps to refuse ("once except quick_ride"): their questions are denied.
func (t *terminalConsenter) AskEach(ctx context.Context, reqs []hub.ConsentRequest) ([]hub.Decision, error) {
	if len(reqs) == 1 {
		d, err := t.Ask(ctx, reqs[0])
		return []hub.Decision{d}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var offered []hub.Decision
	fmt.Fprintf(t.out, "\n--- permission needed: %d questions, one answer ---\n", len(reqs))
	for i, r := range reqs {
		fmt.Fprintf(t.out, "%d. [%s] %s\n", i+1, reveal.Line(r.App), reveal.Line(r.Summary))
		for _, c := range r.Choices {
			if !slices.Contains(offered, c) {
				offered = append(offered, c)
			}
		}
	}
	var choices []string
	for _, c := range offered {
		choices = append(choices, fmt.Sprintf("[%s]%s", string(c)[:1], string(c)[1:]))
	}
	deny := func() []hub.Decision { return slices.Repeat([]hub.Decision{hub.DecisionDeny}, len(reqs)) }
	for {
		fmt.Fprintf(t.out, "%s for all, or e.g. \"once except APP\"? (answer within %s; no answer means deny) ", strings.Join(choices, " "), hub.Within(time.Until(reqs[0].Deadline)))
		select {
		case line, ok := <-t.lines:
			if !ok {
				fmt.Fprintln(t.out, "\nno more input: denied")
				return deny(), nil
			}
			if ds, ok := batchAnswer(line, reqs); ok {
				return ds, nil
			}
			fmt.Fprintln(t.out, "please answer with one of the choices, optionally followed by except and the apps to refuse")
		case <-ctx.Done():
			fmt.Fprintln(t.out, "\nyou did not answer in time: nothing was allowed")
			return deny(), ctx.Err()
		}
	}
}

// batchAnswer reads "DECISION [except APP...]" into one decision per
// question: each takes the decision (hub.ConsentRequest.Take), and the
// questions about the apps named after except are denied.
func batchAnswer(line string, reqs []hub.ConsentRequest) ([]hub.Decision, bool) {
	fields := strings.Fields(strings.ToLower(line))
	if len(fields) == 0 {
		return nil, false
	}
	d, known := decisionKeys[fields[0]]
	if !known {
		return nil, false
	}
	var refused []string
	if len(fields) > 1 {
		if fields[1] != "except" || len(fields) == 2 {
			return nil, false
		}
		refused = fields[2:]
		for _, app := range refused {
			if !slices.ContainsFunc(reqs, func(r hub.ConsentRequest) bool { return strings.ToLower(r.App) == app }) {
				return nil, false
			}
		}
	}
	out := make([]hub.Decision, len(reqs))
	for i, r := range reqs {
		out[i] = r.Take(d)
		if slices.Contains(refused, strings.ToLower(r.App)) {
			out[i] = hub.DecisionDeny
		}
	}
	return out, true
}
