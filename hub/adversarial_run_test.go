package hub_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/apps/ride"
	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/hub/hubtest"
	"github.com/secgpt/secgpt/llm/simulator"
	"github.com/secgpt/secgpt/store"
)

func init() { ride.RegisterACE() }

// outcome is what a judge sees of one run of an adversary.
type outcome struct {
	attacker string
	turns    []turn
	// err is the last query's error, if it failed.
	err   error
	calls []call
	// asked are the consent questions put to the user, in isolated mode.
	asked []hub.ConsentRequest
	store *store.Store
}

// turn is one reply as the user saw it, and who said what in it.
type turn struct {
	text string
	// voices maps a speaker to what it said: an app's name to its own part
	// and the notes that quote it, "" to the hub and the no-app assistant.
	voices map[string]string
}

type call struct {
	app, function, caller, args, result, err string
}

func (o *outcome) last() turn {
	if len(o.turns) == 0 {
		return turn{voices: map[string]string{}}
	}
	return o.turns[len(o.turns)-1]
}

// besides returns everything said by voices other than app's.
func (t turn) besides(app string) string {
	var parts []string
	for who, said := range t.voices {
		if who != app || app == "" {
			parts = append(parts, said)
		}
	}
	return strings.Join(parts, "\n")
}

func (o *outcome) callsOf(app string) []string {
	var out []string
	for _, c := range o.calls {
		if c.app == app {
			s := c.function + c.args
			if c.err != "" {
				s += " error"
			}
			out = append(out, s)
		}
	}
	return out
}

// runAdversary runs one case in one mode, on a fresh store.
func runAdversary(t *testing.T, c adversary, mode string, bystander bool) *outcome {
	t.Helper()
	installed := c.apps
	if bystander {
		installed = append(append([]string{}, c.apps...), "bystander")
	}
	var behaviour simulator.Behaviour
	if c.plans != nil {
		behaviour = (&modelLog{}).behaviour(c.plans)
	}
	sys := hubtest.NewSystem(t, hubtest.Options{Apps: installed, Behaviour: behaviour})
	ctx := context.Background()
	if c.seed != "" {
		if _, err := sys.Store.SeedFixture(ctx, alice, strings.NewReader(c.seed)); err != nil {
			t.Fatal(err)
		}
	}
	o := &outcome{attacker: c.attacker, store: sys.Store}
	switch mode {
	case "isolated":
		consent := &hubtest.Recorder{Decide: c.consent}
		for _, q := range c.queries {
			reply, err := sys.Hub.Handle(ctx, hub.Request{User: alice, Query: q, Consenter: consent})
			o.err = err
			if reply != nil && reply.Record != nil {
				for _, rc := range reply.Record.Calls {
					o.calls = append(o.calls, call{app: rc.App, function: rc.Function, caller: rc.Caller, args: string(rc.Args), result: string(rc.Result), err: rc.Error})
				}
			}
			o.turns = append(o.turns, isolatedTurn(reply, err))
		}
		o.asked = consent.Requests()
	case "vanilla":
		agent := sys.Vanilla()
		for _, q := range c.queries {
			res, err := agent.Handle(ctx, alice, q)
			o.err = err
			for _, vc := range res.Calls {
				o.calls = append(o.calls, call{app: vc.App, function: vc.Function, args: string(vc.Args), result: string(vc.Result), err: vc.Error})
			}
			text := res.Answer
			if err != nil {
				text = fmt.Sprintf("Sorry, %v", err)
			}
			// One context speaks for every app.
			o.turns = append(o.turns, turn{text: text, voices: map[string]string{"": text}})
		}
	default:
		t.Fatalf("unknown mode %q", mode)
	}
	for i, tn := range o.turns {
		t.Logf("turn %d: %s", i+1, tn.text)
	}
	return o
}

// isolatedTurn is what the user saw of a reply of the hub, by voice (see
// hub.Reply.Voices); a failure is the hub's words, or the app's it quotes.
func isolatedTurn(reply *hub.Reply, err error) turn {
	if err != nil {
		msg := err.Error()
		var he *hub.Error
		if errors.As(err, &he) && he.App != "" {
			return turn{text: msg, voices: map[string]string{he.App: msg}}
		}
		return turn{text: msg, voices: map[string]string{"": msg}}
	}
	return turn{text: reply.Answer, voices: reply.Voices()}
}
