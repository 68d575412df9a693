// Package bench is `secgpt bench`: the performance benchmark in the shape
// of the paper's Table IV (IsolateGPT, NDSS 2025). It runs the same
// queries, in the paper's four categories (one app; 2 to 13 apps; chains
// of 2 to 5 apps collaborating through typed values; no app) and with
// annotation apps beside them, on the isolated system and on the vanilla
// baseline, interleaved, with one simulated model latency for both; and
// it sends many users' first queries at once (the concurrency sweep).
//
// It owns the benchmark's queries, its simulated model (a capable model
// that plans each query as its table says and, in vanilla mode, makes the
// same calls round by round), the measurements and their report. It never
// changes what it measures: the isolated system is the product's,
// assembled by the caller (BuildSystem), and the baseline is package
// vanilla's.
package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/apps"
	_ "github.com/secgpt/secgpt/apps/annotation" // creative_muse, symptom_solver
	"github.com/secgpt/secgpt/apps/benchapps"
	_ "github.com/secgpt/secgpt/apps/ride" // metro_hail, quick_ride
	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/llm/simulator"
	"github.com/secgpt/secgpt/store"
)

// DefaultLatency is the simulated model's default time per call: about a
// real endpoint's for a short answer.
const DefaultLatency = time.Second

// System is an isolated system the benchmark drives.
type System struct {
	Hub *hub.Hub
	// Spares returns how many spokes are started ahead of need;
	// RestSpares, how many the system keeps so at rest.
	Spares, RestSpares func() int
	// Close releases the system (its spokes).
	Close func()
}

// BuildSystem assembles the product's isolated system over st and the
// model endpoint, with the given apps installed.
type BuildSystem func(ctx context.Context, st *store.Store, model *llm.Client, installed []apps.Spec) (System, error)

// Options configure a benchmark run.
type Options struct {
	Build BuildSystem
	// Dir holds the run's databases.
	Dir string
	// Latency is the simulated model's time per call, in both modes.
	Latency time.Duration
	// PerCategory bounds the queries of each category; 0 runs all.
	PerCategory int
	// Users are the sweep's numbers of users arriving at once; none skips
	// the sweep.
	Users []int
	// SweepOnly skips the queries' table: only the sweep runs.
	SweepOnly bool
	// AroundWarm, if set, is called as each of the sweep's warm waves
	// starts, and what it returns as the wave ends (to profile them).
	AroundWarm func() (end func())
	// Progress, if set, gets a line per query and per sweep level.
	Progress io.Writer
	Log      zerolog.Logger
}

// Run runs the benchmark and returns its report. An error is a benchmark
// that could not run; queries that failed are in the report (Failures).
func Run(ctx context.Context, opts Options) (*Report, error) {
	benchapps.Register()
	var installed []apps.App
	for _, name := range Installed() {
		a, ok := apps.Lookup(name)
		if !ok {
			return nil, fmt.Errorf("app %q is not built in", name)
		}
		installed = append(installed, a)
	}
	queries := Queries(opts.PerCategory)
	known := slices.Clone(queries)
	// Each level's users and as many more (see Level).
	for i := range 2 * slices.Max(append(opts.Users, 0)) {
		known = append(known, sweepQuery(i))
	}
	meter := &meter{}
	sim := simulator.New(newModel(known), simulator.Options{Latency: opts.Latency, Model: "bench", Observe: meter.observe})
	baseURL, err := sim.Start("127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("failed to start the simulated model: %w", err)
	}
	defer sim.Close()
	client, err := llm.NewClient(llm.Config{BaseURL: baseURL, Timeout: time.Minute})
	if err != nil {
		return nil, fmt.Errorf("failed to create the model client: %w", err)
	}
	r := &runner{opts: opts, installed: installed, client: client, meter: meter}
	report := &Report{Settings: Settings{
		LatencyMS: float64(opts.Latency) / float64(time.Millisecond), Apps: len(installed), CPUs: runtime.NumCPU(),
		Started: time.Now().UTC().Format(time.RFC3339), Machine: measureMachine(),
	}}
	start := time.Now()
	if !opts.SweepOnly {
		if report.Queries, err = r.runQueries(ctx, queries); err != nil {
			return nil, err
		}
	}
	report.summarize()
	if len(opts.Users) > 0 {
		if report.Sweep, err = r.sweep(ctx, opts.Users); err != nil {
			return nil, err
		}
		for _, l := range report.Sweep {
			for _, b := range []Burst{l.Cold, l.Learned, l.Warm} {
				if b.Errors > 0 {
					report.Failures = append(report.Failures, fmt.Sprintf("%d users at once: %d failed, the first: %s", l.Users, b.Errors, b.Error))
				}
			}
		}
	}
	report.Settings.DurationS = time.Since(start).Seconds()
	return report, nil
}

// runner is one benchmark run.
type runner struct {
	opts      Options
	installed []apps.App
	client    *llm.Client
	meter     *meter
	dbs       int
}

// openStore opens a fresh database in the run's directory.
func (r *runner) openStore(ctx context.Context, name string) (*store.Store, error) {
	r.dbs++
	return store.Open(ctx, filepath.Join(r.opts.Dir, fmt.Sprintf("%02d-%s.db", r.dbs, name)))
}

// specs are the installed apps' specs.
func (r *runner) specs() []apps.Spec {
	out := make([]apps.Spec, len(r.installed))
	for i, a := range r.installed {
		out[i] = a.Spec()
	}
	return out
}

func (r *runner) progress(format string, args ...any) {
	if r.opts.Progress != nil {
		fmt.Fprintf(r.opts.Progress, format+"\n", args...)
	}
}

// meter counts model calls, prompt bytes and reported tokens.
type meter struct {
	mu    sync.Mutex
	usage Usage
}

// Usage is what a run cost the model.
type Usage struct {
	Calls            int `json:"model_calls"`
	PromptBytes      int `json:"prompt_bytes"`
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

func (u *Usage) add(o Usage) {
	u.Calls += o.Calls
	u.PromptBytes += o.PromptBytes
	u.PromptTokens += o.PromptTokens
	u.CompletionTokens += o.CompletionTokens
}

func (m *meter) observe(req *simulator.ChatRequest, u llm.Usage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.usage.add(Usage{Calls: 1, PromptBytes: req.PromptBytes(), PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens})
}

// take returns what was used since the last take.
func (m *meter) take() Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.usage
	m.usage = Usage{}
	return u
}
