// Package hubtest assembles a real hub for tests: a SQLite store in a temp
// directory, a simulated model on loopback, and a spoke manager that
// runs spoketest's spoke binary (the test's TestMain must call
// spoketest.Main). It also provides recording consenters, and the
// non-isolated baseline over the same store, model and apps.
package hubtest

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/llm/simulator"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/spoke/spoketest"
	"github.com/secgpt/secgpt/store"
	"github.com/secgpt/secgpt/vanilla"
)

// Options choose what differs between tests; zero values are the defaults.
type Options struct {
	// Apps are the installed apps by name; they must be registered.
	Apps []string
	// Behaviour is the simulated model; default simulator.Obedient().
	Behaviour simulator.Behaviour
	Latency   time.Duration
	// Profile names the server the simulated model's server answers as
	// (simulator.ProfileNames); empty is OpenAI's API as documented.
	Profile string
	// APIKey is given to the hub's client, to check spokes never see it.
	APIKey string
	// Hub adjusts the hub's options before it is built.
	Hub func(*hub.Options)
	// Spokes adjusts the spoke manager's options.
	Spokes func(*spoke.Options)
	// Observe is told of each completion the simulated model answers,
	// with the usage it reports (what the endpoint bills).
	Observe func(req *simulator.ChatRequest, usage llm.Usage)
}

// System is a running hub and its parts.
type System struct {
	Hub    *hub.Hub
	Store  *store.Store
	Sim    *simulator.Server
	Model  *llm.Client
	Spokes *spoke.Manager
	Dir    string

	apps []apps.App
}

// Vanilla returns the non-isolated baseline over the system's store and
// model, with the system's built-in apps: what isolation is compared with.
func (s *System) Vanilla() *vanilla.Agent {
	return vanilla.New(vanilla.Options{LLM: s.Model, Store: s.Store, Apps: s.apps})
}

// NewSystem builds a System and closes it when the test ends.
func NewSystem(t testing.TB, opts Options) *System {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	st, err := store.Open(log.WithContext(ctx), filepath.Join(dir, "secgpt.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := opts.Behaviour
	if b == nil {
		b = simulator.Obedient()
	}
	simOpts := simulator.Options{Latency: opts.Latency, Model: "test", Observe: opts.Observe}
	if opts.Profile != "" {
		p, ok := simulator.LookupProfile(opts.Profile)
		if !ok {
			t.Fatalf("no simulator profile %q", opts.Profile)
		}
		simOpts.Profile = &p
	}
	sim := simulator.New(b, simOpts)
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	model, err := llm.NewClient(llm.Config{BaseURL: url, APIKey: opts.APIKey, Timeout: 30 * time.Second, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	if spoketest.Binary == "" {
		t.Fatal("hubtest needs the spoke binary: call os.Exit(spoketest.Main(m)) in TestMain")
	}
	sopts := spoke.Options{
		Binary: spoketest.Binary,
		Policy: spoketest.Policy(t),
		Log:    log,
	}
	if opts.Spokes != nil {
		opts.Spokes(&sopts)
	}
	mgr, err := spoke.NewManager(sopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mgr.Close)
	var specs []apps.Spec
	var installed []apps.App
	for _, name := range opts.Apps {
		a, ok := apps.Lookup(name)
		if !ok {
			t.Fatalf("app %q is not registered", name)
		}
		specs = append(specs, a.Spec())
		installed = append(installed, a)
	}
	hopts := hub.Options{
		Store: st, LLM: model, Runner: mgr, Apps: specs,
		Models: hub.Models{Planner: "planner", Spoke: "spoke", Vanilla: "vanilla"},
		Log:    log,
	}
	if opts.Hub != nil {
		opts.Hub(&hopts)
	}
	h, err := hub.New(ctx, hopts)
	if err != nil {
		t.Fatal(err)
	}
	return &System{Hub: h, Store: st, Sim: sim, Model: model, Spokes: mgr, Dir: dir, apps: installed}
}

// Recorder is a consenter that records every request and answers with
// Decide (default: AllowPlanned's answer).
type Recorder struct {
	Decide func(hub.ConsentRequest) hub.Decision

	mu       sync.Mutex
	requests []hub.ConsentRequest
}

var _ hub.Consenter = (*Recorder)(nil)

func (r *Recorder) Ask(ctx context.Context, req hub.ConsentRequest) (hub.Decision, error) {
	r.mu.Lock()
	r.requests = append(r.requests, req)
	r.mu.Unlock()
	if r.Decide == nil {
		return hub.AllowPlanned{}.Ask(ctx, req)
	}
	return r.Decide(req), nil
}

// Requests returns the requests asked so far.
func (r *Recorder) Requests() []hub.ConsentRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hub.ConsentRequest(nil), r.requests...)
}

// Batcher is a Recorder that also takes several questions at once, as a
// front end asking a person does; it records each batch.
type Batcher struct {
	Recorder

	mu      sync.Mutex
	batches [][]hub.ConsentRequest
}

var _ hub.BatchConsenter = (*Batcher)(nil)

func (b *Batcher) AskEach(ctx context.Context, reqs []hub.ConsentRequest) ([]hub.Decision, error) {
	b.mu.Lock()
	b.batches = append(b.batches, append([]hub.ConsentRequest(nil), reqs...))
	b.mu.Unlock()
	out := make([]hub.Decision, len(reqs))
	for i, req := range reqs {
		d, err := b.Ask(ctx, req)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// Batches returns the batches asked so far.
func (b *Batcher) Batches() [][]hub.ConsentRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]hub.ConsentRequest(nil), b.batches...)
}

// Never answers: it waits until the hub's deadline passes.
type Never struct{}

var _ hub.Consenter = Never{}

func (Never) Ask(ctx context.Context, _ hub.ConsentRequest) (hub.Decision, error) {
	<-ctx.Done()
	return "", ctx.Err()
}
