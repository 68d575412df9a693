package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/vanilla"
)

// The two modes.
const (
	Isolated = "isolated"
	Vanilla  = "vanilla"
)

// Result is one query's measurements: its first run by a new user (cold:
// no spoke of the user runs yet) and the same query again (warm), each in
// both modes.
type Result struct {
	Query
	Cold Pair `json:"cold"`
	Warm Pair `json:"warm"`
}

// Pair is one query run in both modes.
type Pair struct {
	Isolated Measure `json:"isolated"`
	Vanilla  Measure `json:"vanilla"`
	// Overhead is the isolated time over the vanilla time, minus one.
	Overhead float64 `json:"overhead"`
}

// Measure is one query run in one mode.
type Measure struct {
	MS float64 `json:"ms"`
	Usage
	// Error says why the run failed or did not do what the query asked.
	Error string `json:"error,omitempty"`
}

// runQueries runs every query cold then warm, isolated and vanilla one
// after the other (which goes first alternates from query to query).
func (r *runner) runQueries(ctx context.Context, queries []Query) ([]Result, error) {
	isoStore, err := r.openStore(ctx, Isolated)
	if err != nil {
		return nil, err
	}
	defer isoStore.Close()
	vanStore, err := r.openStore(ctx, Vanilla)
	if err != nil {
		return nil, err
	}
	defer vanStore.Close()
	sys, err := r.opts.Build(ctx, isoStore, r.client, r.specs())
	if err != nil {
		return nil, fmt.Errorf("failed to assemble the isolated system: %w", err)
	}
	defer sys.Close()
	agent := vanilla.New(vanilla.Options{LLM: r.client, Store: vanStore, Apps: r.installed, Log: r.opts.Log})

	results := make([]Result, len(queries))
	for i, q := range queries {
		user := fmt.Sprintf("@bench-q%02d:bench.invalid", i)
		modes := []string{Isolated, Vanilla}
		if i%2 == 1 {
			slices.Reverse(modes)
		}
		res := Result{Query: q}
		for _, pair := range []*Pair{&res.Cold, &res.Warm} {
			for _, mode := range modes {
				if mode == Isolated {
					pair.Isolated = r.runIsolated(ctx, sys.Hub, user, q)
				} else {
					pair.Vanilla = r.runVanilla(ctx, agent, user, q)
				}
			}
			pair.Overhead = pair.Isolated.MS/pair.Vanilla.MS - 1
		}
		// The user's spokes stop, so that the next query starts cold.
		if err := sys.Hub.Reset(ctx, user); err != nil {
			return nil, fmt.Errorf("failed to end a benchmark user's session: %w", err)
		}
		results[i] = res
		r.progress("%-13s %5.0f ms isolated, %5.0f ms vanilla cold; %5.0f, %5.0f warm  %s",
			q.Category, res.Cold.Isolated.MS, res.Cold.Vanilla.MS, res.Warm.Isolated.MS, res.Warm.Vanilla.MS, clip(q.Text, 60))
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return results, nil
}

func (r *runner) runIsolated(ctx context.Context, h *hub.Hub, user string, q Query) Measure {
	r.meter.take()
	start := time.Now()
	reply, err := h.Handle(ctx, hub.Request{User: user, Query: q.Text, Consenter: hub.AllowPlanned{}})
	run := Measure{MS: msSince(start), Usage: r.meter.take()}
	switch {
	case err != nil:
		run.Error = err.Error()
	case len(q.Steps) == 0:
		if len(reply.Parts) != 1 || reply.Parts[0].App != "" {
			run.Error = "the answer is not the no-app assistant's"
		}
	default:
		var done []string
		for _, c := range reply.Record.Calls {
			if c.Error == "" && c.Caller == "" {
				done = append(done, c.App+"."+c.Function)
			}
		}
		run.Error = missing(q, done, false)
	}
	return run
}

func (r *runner) runVanilla(ctx context.Context, agent *vanilla.Agent, user string, q Query) Measure {
	r.meter.take()
	start := time.Now()
	res, err := agent.Handle(ctx, user, q.Text)
	run := Measure{MS: msSince(start), Usage: r.meter.take()}
	if err != nil {
		run.Error = err.Error()
		return run
	}
	var done []string
	for _, c := range res.Calls {
		if c.Error == "" {
			done = append(done, c.App+"."+c.Function)
		}
	}
	// Vanilla mode has no annotation step: the annotation is in its
	// system prompt.
	run.Error = missing(q, done, true)
	return run
}

// missing says which planned calls were not made without error, or "".
func missing(q Query, done []string, skipAnnotation bool) string {
	var out []string
	for _, s := range q.Steps {
		if skipAnnotation && s.Function == "respond" {
			continue
		}
		if !slices.Contains(done, s.App+"."+s.Function) {
			out = append(out, s.App+"."+s.Function)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "not run: " + strings.Join(out, ", ")
}

func msSince(t time.Time) float64 { return float64(time.Since(t)) / float64(time.Millisecond) }

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
