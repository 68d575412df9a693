package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/hub/egress"
	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/reveal"
	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/scratch"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/store"
)

// newLogger logs to w. Log lines carry text apps, models and Matrix users
// wrote, so neither format lets it act on a terminal: the console format
// escapes every value and colours only a terminal, and JSON lines carry
// what a terminal would act on as \u escapes.
func newLogger(cfg LoggingConfig, w io.Writer) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(cfg.Level)
	if err != nil {
		lvl = zerolog.WarnLevel
	}
	if cfg.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !isTerminal(w), FormatPrepare: revealFields}
	} else {
		w = revealJSON{w}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

// revealFields escapes every string of a console log line before it is
// formatted.
func revealFields(fields map[string]any) error {
	for k, v := range fields {
		fields[k] = reveal.Value(v)
	}
	return nil
}

// revealJSON writes JSON log lines with what a terminal would act on as
// \u escapes (zerolog writes one line per Write).
type revealJSON struct{ w io.Writer }

func (r revealJSON) Write(p []byte) (int, error) {
	if _, err := r.w.Write(reveal.JSON(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// system is everything a front end needs, assembled from the config.
type system struct {
	cfg    Config
	log    zerolog.Logger
	store  *store.Store
	models *modelEndpoints
	spokes *spoke.Manager
	hub    *hub.Hub
	// scratch is the spokes' scratch root; stopReaping ends its reaper
	// and waits for it.
	scratch     *scratch.Root
	stopReaping func()
	// unavailable are the declared external apps that could not be
	// discovered, and why.
	unavailable map[string]error
}

// openSystem assembles the store, the model endpoint, the spoke manager
// and the hub, whose egress broker reaches the internet.
func openSystem(ctx context.Context, cfg Config, log zerolog.Logger) (*system, error) {
	return openSystemWith(ctx, cfg, newEgress(cfg), log)
}

// openSystemWith is openSystem with another egress broker (the sandbox
// check's, which runs offline).
func openSystemWith(ctx context.Context, cfg Config, egress hub.Egress, log zerolog.Logger) (*system, error) {
	s := &system{cfg: cfg, log: log}
	st, err := openStore(ctx, cfg.Database)
	if err != nil {
		return nil, err
	}
	s.store = st
	if s.models, err = startModels(cfg); err != nil {
		s.Close()
		return nil, err
	}
	var spokes *spoke.Manager
	if s.scratch, err = newScratch(cfg, st, func(user, app string) bool { return runs(spokes, user, app) }, log); err != nil {
		s.Close()
		return nil, err
	}
	// Before the spoke manager, which must know what discovery found.
	external, unavailable := discoverExternal(ctx, &cfg, st, s.scratch, log)
	s.unavailable = unavailable
	s.cfg = cfg
	if spokes, err = newSpokeManager(cfg, s.scratch, log); err != nil {
		s.Close()
		return nil, err
	}
	s.spokes = spokes
	s.stopReaping = reapScratch(ctx, s.scratch)
	var specs []apps.Spec
	for _, name := range cfg.Apps.Installed {
		a, _ := apps.Lookup(name)
		specs = append(specs, a.Spec())
	}
	specs = append(specs, external...)
	runner := quotaRunner{Manager: spokes, cfg: cfg, root: s.scratch}
	if s.hub, err = newHub(ctx, cfg, st, s.models.router, runner, s.scratch, specs, egress, log); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// openStore opens the database, creating its directory (0700) if needed.
func openStore(ctx context.Context, path string) (*store.Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("failed to create database directory: %w", err)
	}
	return store.Open(ctx, path)
}

func (s *system) Close() {
	if s.stopReaping != nil {
		s.stopReaping()
	}
	if s.spokes != nil {
		s.spokes.Close()
	}
	if s.scratch != nil {
		if err := s.scratch.Close(); err != nil {
			s.log.Warn().Err(err).Msg("Scratch images left mounted")
		}
	}
	if s.models != nil {
		s.models.close()
	}
	if s.store != nil {
		_ = s.store.Close()
	}
}

// sandboxLimits are the default limits of a built-in app's spoke, with the
// config's overrides for every spoke, for the strict profile and then for
// the app.
func sandboxLimits(cfg SandboxConfig, app string) sandbox.Limits {
	return overrideLimits(sandbox.DefaultLimits(), cfg.LimitsConfig, cfg.Profiles[string(sandbox.ProfileStrict)], cfg.Apps[app])
}

// overrideLimits sets in l every limit that an override, in order, sets.
func overrideLimits(l sandbox.Limits, overrides ...LimitsConfig) sandbox.Limits {
	set := func(limit *uint64, override uint64) {
		if override > 0 {
			*limit = override
		}
	}
	for _, o := range overrides {
		set(&l.CPUSeconds, o.CPUSeconds)
		set(&l.AddressSpace, o.AddressSpaceBytes)
		set(&l.FileSize, o.FileSizeBytes)
		set(&l.OpenFiles, o.OpenFiles)
		set(&l.Memory, o.MemoryBytes)
		set(&l.Tasks, o.Tasks)
		set(&l.CPUWeight, o.CPUWeight)
		set(&l.CPUPercent, o.CPUPercent)
		set(&l.Swap, o.SwapBytes)
		set(&l.DiskBytes, o.DiskBytes)
		set(&l.DiskFiles, o.DiskFiles)
	}
	return l
}

// checkScratch makes sure, at start, that spokes will be able to use their
// scratch directories: the root exists (0711, as spoke.ScratchDir keeps
// it) and the uid spokes run as can pass through every directory down to
// it. Otherwise every approved request would fail later, one by one.
func checkScratch(cfg Config) error {
	// The spokes' ids first: the scratch must be reachable by them.
	if r := cfg.Sandbox.SpokeIDs; r != (IDRangeConfig{}) {
		if err := sandbox.SetIDRange(sandbox.IDRange{First: r.First, Count: r.Count}); err != nil {
			return &configError{err: fmt.Errorf("config: sandbox.spoke_ids: %w", err)}
		}
	}
	root := cfg.Spokes.ScratchDir
	bad := func(format string, args ...any) error {
		return &configError{err: fmt.Errorf("config: spokes.scratch_dir: %s", fmt.Sprintf(format, args...))}
	}
	if err := os.MkdirAll(root, 0o711); err != nil {
		return bad("cannot create %s: %v", root, err)
	}
	if err := os.Chmod(root, 0o711); err != nil {
		return bad("cannot make %s passable: %v", root, err)
	}
	if err := sandbox.ReachableBySpokes(root); err != nil {
		return bad("the apps' sandboxed user cannot reach %s (%v); choose a directory every user may pass through, such as /var/lib/secgpt/scratch", root, err)
	}
	return nil
}

// checkSandbox prints what the kernel offers, one line per protection, and
// refuses to start when a protection is missing, unless the operator opted
// out in the config, which is logged loudly.
func checkSandbox(cfg Config, stderr io.Writer, log zerolog.Logger) error {
	caps := sandbox.Probe()
	for _, line := range protectionLines(cfg, caps) {
		fmt.Fprintln(stderr, "sandbox:", line)
	}
	if bin, err := spokeBinary(cfg); err == nil {
		// A missing one fails the start where the spokes' manager starts.
		fmt.Fprintln(stderr, "sandbox: apps run in", bin+", started by a spawner process, not by this one")
	}
	err := caps.Check(sandbox.Policy{Profile: sandbox.ProfileStrict, Limits: sandboxLimits(cfg.Sandbox, ""), Namespaces: cfg.Sandbox.Namespaces})
	if err == nil && os.Geteuid() == 0 && !caps.UIDs {
		// A root hub's spokes each run as an id of their own.
		err = fmt.Errorf("uid separation: %s", caps.UIDsDetail)
	}
	if err == nil {
		return nil
	}
	if !cfg.Sandbox.AllowWeaker {
		return fmt.Errorf("failed to confine apps on this machine (%w): refusing to run them; sandbox.allow_weaker_sandbox: true runs them anyway, with weaker isolation", err)
	}
	fmt.Fprintln(stderr, "sandbox: *** WARNING: apps run WITHOUT full confinement (sandbox.allow_weaker_sandbox is set):", err)
	log.Error().Err(err).Msg("*** SANDBOX WEAKENED by the operator's config: apps run without full confinement")
	return nil
}

// newScratch opens the spokes' scratch root, whose directories st names;
// running says whether a spoke of (user, app) runs, whose scratch is not
// reaped.
func newScratch(cfg Config, st *store.Store, running func(user, app string) bool, log zerolog.Logger) (*scratch.Root, error) {
	return scratch.New(scratch.Options{
		Dir: cfg.Spokes.ScratchDir, IDs: st, MaxIdle: cfg.Spokes.Disk.MaxIdle, Reserve: cfg.Spokes.Disk.ReserveBytes,
		Running: running, Log: log.With().Str("component", "scratch").Logger(),
	})
}

// runs reports whether m runs a spoke of (user, app); app is a scratch
// label (see scratchOwner).
func runs(m *spoke.Manager, user, app string) bool {
	if m == nil {
		return false
	}
	for k := range m.PIDs() {
		if u, a := scratchOwner(k); u == user && a == app {
			return true
		}
	}
	return false
}

// scratchOwner names the (user, app) a spoke's scratch belongs to: a
// vanilla spoke's app and a discovery spoke's user have names of their
// own, which no app and no Matrix user can have.
func scratchOwner(k spoke.Key) (user, app string) {
	user, app = k.User, k.App
	if spoke.IsDiscovery(k) {
		user = "(discovery)"
	}
	if app == "" {
		app = "(vanilla)"
	}
	return user, app
}

// reapScratch reaps root's idle scratch now and periodically, until the
// returned function is called, which waits for the reaper to stop.
func reapScratch(ctx context.Context, root *scratch.Root) func() {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		root.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// scratchTimeout bounds naming and mounting a spoke's scratch.
const scratchTimeout = 10 * time.Second

// spokePolicy gives every spoke its sandbox: the app's profile, the
// configured limits, and a private scratch directory per (user, app) from
// root, which bounds it where the spoke cannot (see scratch.Root.Dir).
func spokePolicy(cfg Config, root *scratch.Root) spoke.PolicyFunc {
	return func(k spoke.Key) (sandbox.Policy, error) {
		p, err := appPolicy(cfg, k)
		if err != nil {
			return sandbox.Policy{}, err
		}
		p.KeepScratch = p.KeepScratch || !sandbox.OwnScratch(p)
		l := p.Limits.WithDefaults(p.Profile)
		ctx, cancel := context.WithTimeout(context.Background(), scratchTimeout)
		defer cancel()
		user, app := scratchOwner(k)
		if p.Scratch, err = root.Dir(ctx, user, app, p.KeepScratch, scratch.Quota{Bytes: l.DiskBytes, Files: l.DiskFiles}); err != nil {
			return sandbox.Policy{}, err
		}
		return p, nil
	}
}

// quotaRunner runs steps on its Manager, first refusing the step of a
// spoke whose scratch the hub keeps and is over its quota where that quota
// is checked, not enforced (scratch.Root.Check): a spoke lives across
// steps, and what it wrote counts against the next.
type quotaRunner struct {
	*spoke.Manager
	cfg  Config
	root *scratch.Root
}

var _ hub.Runner = quotaRunner{}

func (r quotaRunner) Run(ctx context.Context, key spoke.Key, step spoke.Step, h spoke.Handler) (spoke.Result, spoke.Info, error) {
	if p, err := appPolicy(r.cfg, key); err == nil && (p.KeepScratch || !sandbox.OwnScratch(p)) {
		l := p.Limits.WithDefaults(p.Profile)
		user, app := scratchOwner(key)
		err := r.root.Check(ctx, user, app, scratch.Quota{Bytes: l.DiskBytes, Files: l.DiskFiles})
		if refusal, ok := errors.AsType[spoke.Refusal](err); ok {
			return spoke.Result{}, spoke.Info{}, spoke.Refused(key, refusal)
		} else if err != nil {
			return spoke.Result{}, spoke.Info{}, err
		}
	}
	return r.Manager.Run(ctx, key, step, h)
}

// appPolicy is the sandbox of k's spoke but for its scratch directory.
func appPolicy(cfg Config, k spoke.Key) (sandbox.Policy, error) {
	if e, ok := cfg.Apps.externalApp(k.App); ok {
		return externalPolicy(cfg, e), nil
	}
	profile := sandbox.Profile(apps.ProfileStrict)
	if k.App != "" {
		a, ok := apps.Lookup(k.App)
		if !ok {
			return sandbox.Policy{}, fmt.Errorf("no app %q", k.App)
		}
		profile = sandbox.Profile(a.Spec().Profile)
	}
	return sandbox.Policy{
		Profile:     profile,
		Limits:      sandboxLimits(cfg.Sandbox, k.App),
		Namespaces:  cfg.Sandbox.Namespaces,
		AllowWeaker: cfg.Sandbox.AllowWeaker,
	}, nil
}

func newSpokeManager(cfg Config, root *scratch.Root, log zerolog.Logger) (*spoke.Manager, error) {
	opts := spokeOptions(cfg, root, log)
	bin, err := spokeBinary(cfg)
	if err != nil {
		return nil, err
	}
	opts.Binary = bin
	return spoke.NewManager(opts)
}

// spokeBinaryName is the spoke binary's name beside secgpt's (make build
// puts it there).
const spokeBinaryName = "secgpt-spoke"

// spokeBinary is the binary every spoke runs: spokes.binary, or
// secgpt-spoke beside this executable. There is no fallback to this
// binary: a missing spoke binary is an error at start.
func spokeBinary(cfg Config) (string, error) {
	path := cfg.Spokes.Binary
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("failed to find this executable, beside which the spoke binary is: %w", err)
		}
		path = filepath.Join(filepath.Dir(exe), spokeBinaryName)
	}
	st, err := os.Stat(path)
	if err == nil && (!st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0) {
		err = errors.New("not an executable file")
	}
	if err != nil {
		return "", fmt.Errorf("failed to find the spoke binary %s (make build puts %s beside secgpt; spokes.binary names another): %w", path, spokeBinaryName, err)
	}
	return path, nil
}

// spokeOptions configures the spoke manager from cfg, but for the binary
// (see spokeBinary).
func spokeOptions(cfg Config, root *scratch.Root, log zerolog.Logger) spoke.Options {
	lvl, err := zerolog.ParseLevel(cfg.Logging.Level)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	if cfg.Spokes.MaxSpares == 0 {
		// None for expected spokes: the manager reads 0 as its default.
		cfg.Spokes.MaxSpares = -1
	}
	return spoke.Options{
		Policy:             spokePolicy(cfg, root),
		Extra:              externalExtra(cfg),
		MaxFrame:           cfg.Spokes.MaxFrameBytes,
		StartTimeout:       cfg.Deadlines.SpokeStart,
		StepTimeout:        cfg.Deadlines.Step,
		IdleTimeout:        cfg.Spokes.IdleTimeout,
		MaxFramesPerSecond: cfg.Spokes.MaxFramesPerSecond,
		MaxHubTime:         cfg.Budgets.HubTimePerStep,
		Spares:             cfg.Spokes.Spares,
		MaxSpares:          cfg.Spokes.MaxSpares,
		SparePolicy: sandbox.Policy{
			Profile:     sandbox.ProfileStrict,
			Namespaces:  cfg.Sandbox.Namespaces,
			AllowWeaker: cfg.Sandbox.AllowWeaker,
		},
		LogLevel: lvl,
		Log:      log.With().Str("component", "spoke").Logger(),
	}
}

// newEgress is the hub's egress broker. A response travels base64 in a JSON
// frame, so its body is bounded well under the frame limit.
func newEgress(cfg Config) *egress.Broker {
	opts := egress.Options{MaxResponseBytes: int64(cfg.Spokes.MaxFrameBytes) * 6 / 10}
	if egressForTests != nil {
		egressForTests(&opts)
	}
	return egress.New(opts)
}

// egressForTests is nil but in the end-to-end tests' binary (egress_e2e.go,
// built with the e2e tag only), where it points the broker's resolver and
// dialer at a loopback test server.
var egressForTests func(*egress.Options)

func newHub(ctx context.Context, cfg Config, st *store.Store, model hub.LLM, runner hub.Runner, scratch hub.Scratch, specs []apps.Spec, egress hub.Egress, log zerolog.Logger) (*hub.Hub, error) {
	return hub.New(ctx, hub.Options{
		Store: st, LLM: model, Runner: runner, Scratch: scratch, Apps: specs, Egress: egress,
		Models:              hubModels(cfg.LLM.Models),
		OutOfPlan:           hub.OutOfPlan(cfg.Consent.OutOfPlan),
		ConsentTimeout:      cfg.Consent.Timeout,
		RequestTimeout:      cfg.Deadlines.Request,
		SessionIdle:         cfg.Sessions.IdleTimeout,
		MaxQueryBytes:       cfg.Budgets.MaxQueryBytes,
		MaxPlanSteps:        cfg.Budgets.MaxPlanSteps,
		MaxLLMCallsPerStep:  cfg.Budgets.MaxLLMCallsPerStep,
		MaxLLMCallsPerQuery: cfg.Budgets.MaxLLMCallsPerQuery,
		MaxPromptBytes:      cfg.Budgets.MaxPromptBytes,
		HistoryEntries:      cfg.Budgets.HistoryEntries,
		MemoryEntries:       cfg.Budgets.MemoryEntries,
		Budgets: hub.Budgets{
			TokensPerQuery: cfg.Budgets.TokensPerQuery, TokensPerUserDay: cfg.Budgets.TokensPerUserDay,
			TokensPerAppDay: cfg.Budgets.TokensPerAppDay,
			DataBytes:       cfg.Budgets.DataBytesPerApp, DataDocs: cfg.Budgets.DataDocsPerApp,
		},
		HubTimePerStep: cfg.Budgets.HubTimePerStep,
		Log:            log.With().Str("component", "hub").Logger(),
	})
}

// hubModels names each role's model as the router knows it.
func hubModels(m ModelsConfig) hub.Models {
	apps := map[string]string{}
	for app, ref := range m.Apps {
		apps[app] = ref.key()
	}
	return hub.Models{Planner: m.Planner.key(), Spoke: m.Spoke.key(), Vanilla: m.Vanilla.key(), Apps: apps}
}

// caseStudyHub builds the isolated system the case studies run, with the
// default configuration and scratch space under dir.
func caseStudyHub(dir string, log zerolog.Logger) func(ctx context.Context, st *store.Store, model *llm.Client, installed []apps.Spec) (*hub.Hub, func(), error) {
	return func(ctx context.Context, st *store.Store, model *llm.Client, installed []apps.Spec) (*hub.Hub, func(), error) {
		h, mgr, err := isolatedSystem(ctx, dir, st, model, installed, log)
		if err != nil {
			return nil, nil, err
		}
		return h, mgr.Close, nil
	}
}

// isolatedSystem is the product's isolated system with the default
// configuration, over st and model, with scratch space in a new directory
// under dir: for the case studies and the benchmark.
func isolatedSystem(ctx context.Context, dir string, st *store.Store, model *llm.Client, installed []apps.Spec, log zerolog.Logger) (*hub.Hub, *spoke.Manager, error) {
	cfg := defaultConfig()
	work, err := spokeWorkDir(dir, "scratch-")
	if err != nil {
		return nil, nil, err
	}
	cfg.Spokes.ScratchDir = work
	// Nothing here lives long enough to reap.
	cfg.Spokes.Disk.MaxIdle = 0
	root, err := newScratch(cfg, st, nil, log)
	if err != nil {
		return nil, nil, err
	}
	mgr, err := newSpokeManager(cfg, root, log)
	if err != nil {
		return nil, nil, err
	}
	h, err := newHub(ctx, cfg, st, model, mgr, root, installed, newEgress(cfg), log)
	if err != nil {
		mgr.Close()
		return nil, nil, err
	}
	return h, mgr, nil
}

// spokeWorkDir creates a new temporary directory in parent (the system's
// when "") for spokes' scratch directories to live under: a spoke, under
// a uid of its own, must pass through it, and may list nothing in it.
func spokeWorkDir(parent, prefix string) (string, error) {
	dir, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return "", fmt.Errorf("failed to create a work directory: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("failed to open the work directory to spokes: %w", err)
	}
	return dir, nil
}
