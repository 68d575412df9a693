package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/apps/benchapps"
	"github.com/secgpt/secgpt/apps/ride"
	"github.com/secgpt/secgpt/casestudy"
	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/llm/simulator"
	"github.com/secgpt/secgpt/reveal"
	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/spoke"
)

// consentPolicies are the non-interactive answers `ask` can give.
var consentPolicies = map[string]hub.Consenter{
	"allow-planned": hub.AllowPlanned{},
	"deny-all":      hub.DenyAll{},
}

func runAsk(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("ask", stderr)
	configPath := fs.String("config", "", "config file")
	user := fs.String("user", "", "the user the query is from (required)")
	policy := fs.String("consent", "allow-planned", "how consent requests are answered: allow-planned or deny-all")
	asJSON := fs.Bool("json", false, "print the full record as JSON")
	mode := fs.String("mode", "isolated", "isolated, or vanilla: the non-isolated baseline, for comparison only")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	consenter, ok := consentPolicies[*policy]
	switch {
	case *user == "":
		return &usageError{msg: "ask: --user is required"}
	case !ok:
		return &usageError{msg: fmt.Sprintf("ask: unknown --consent policy %q (use allow-planned or deny-all)", *policy)}
	case fs.NArg() != 1:
		return &usageError{msg: "ask: give exactly one query, quoted"}
	case *mode == "vanilla":
		return runAskVanilla(ctx, *configPath, *user, fs.Arg(0), *asJSON, stdout, stderr)
	case *mode != "isolated":
		return &usageError{msg: fmt.Sprintf("ask: --mode must be isolated or vanilla, not %q", *mode)}
	}
	sys, err := openFor(ctx, *configPath, stderr, true)
	if err != nil {
		return err
	}
	defer sys.Close()
	if err := sys.cannotRun(fs.Arg(0)); err != nil {
		return err
	}
	reply, err := sys.hub.Handle(ctx, hub.Request{User: *user, Query: fs.Arg(0), Consenter: consenter})
	if *asJSON && reply != nil && reply.Record != nil {
		raw, encErr := json.MarshalIndent(reply.Record, "", "  ")
		if encErr != nil {
			return fmt.Errorf("failed to print record: %w", encErr)
		}
		// The same JSON, with what a terminal would act on as \u escapes.
		fmt.Fprintf(stdout, "%s\n", reveal.JSON(raw))
	}
	if err != nil {
		return userFacing(err)
	}
	if !*asJSON {
		fmt.Fprintln(stdout, reveal.Text(reply.Answer))
	}
	return nil
}

// userFacing keeps the hub's message for the user and drops internals. The
// message may quote an app or its server: it is shown, never interpreted.
func userFacing(err error) error {
	var he *hub.Error
	if errors.As(err, &he) {
		return errors.New(reveal.Text(he.Plain()))
	}
	return err
}

// ACE's attacking apps and the benchmark's apps are linked into this
// binary for the case studies and the benchmark, and registered only where
// no configuration can install them: in a spoke child (a child hosts only
// the app its hub names, and only the case studies' and the benchmark's
// hubs name them), by casestudy.RunCases and by bench.Run.
func init() {
	if spoke.IsChild() {
		ride.RegisterACE()
		benchapps.Register()
	}
}

func runCaseStudy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("casestudy", stderr)
	mode := fs.String("mode", "both", "isolated, vanilla or both")
	latency := fs.Duration("latency", 0, "simulated model latency per call")
	profile := fs.String("profile", "", "answer as this server does: "+strings.Join(simulator.ProfileNames(), ", "))
	asJSON := fs.Bool("json", false, "print rows as JSON")
	logLevel := fs.String("log-level", "error", "log level")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var modes []casestudy.Mode
	switch *mode {
	case "isolated":
		modes = []casestudy.Mode{casestudy.Isolated}
	case "vanilla":
		modes = []casestudy.Mode{casestudy.Vanilla}
	case "both":
		modes = []casestudy.Mode{casestudy.Isolated, casestudy.Vanilla}
	default:
		return &usageError{msg: fmt.Sprintf("casestudy: --mode must be isolated, vanilla or both, not %q", *mode)}
	}
	var serverProfile *simulator.Profile
	if *profile != "" {
		p, ok := simulator.LookupProfile(*profile)
		if !ok {
			return &usageError{msg: fmt.Sprintf("casestudy: --profile must be one of %s, not %q", strings.Join(simulator.ProfileNames(), ", "), *profile)}
		}
		serverProfile = &p
	}
	dir, err := spokeWorkDir("", "secgpt-casestudy-")
	if err != nil {
		return &startupError{err: err}
	}
	defer os.RemoveAll(dir)
	log := newLogger(LoggingConfig{Level: *logLevel, Format: "console"}, stderr)
	rows, err := casestudy.RunCases(ctx, casestudy.Options{
		BuildHub: caseStudyHub(dir, log), Dir: dir, Latency: *latency, Profile: serverProfile, Log: log,
	}, fs.Args(), modes)
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return fmt.Errorf("failed to print rows: %w", err)
		}
	} else {
		printRows(stdout, rows)
	}
	var bad []string
	for _, r := range rows {
		if !r.OK() {
			bad = append(bad, fmt.Sprintf("%s/%s", r.Case, r.Mode))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("case studies not as the architecture promises: %s", strings.Join(bad, ", "))
	}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func printRows(w io.Writer, rows []casestudy.Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tMODE\tATTACK SUCCEEDED\tTASK DONE\tLLM CALLS\tWALL\tDETAIL")
	for _, r := range rows {
		detail := r.Detail
		if r.Err != "" {
			detail = "error: " + r.Err
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Case, r.Mode, yesNo(r.Attack), yesNo(r.Task), r.LLMCalls, r.Wall.Round(time.Millisecond), reveal.Line(detail))
	}
	tw.Flush()
}

// printApp describes one app: what it is, what it may reach, how it is confined.
func printApp(w io.Writer, s apps.Spec, l sandbox.Limits) {
	kind := "built-in"
	switch {
	case s.IsAnnotation():
		kind = "built-in annotation app"
	case s.Profile == apps.ProfileExec:
		kind = "external (MCP)"
	}
	egress := "none"
	if len(s.Egress) > 0 {
		egress = strings.Join(s.Egress, ", ")
	}
	fmt.Fprintf(w, "%s %s (%s)\n", s.Name, s.Version, kind)
	fmt.Fprintf(w, "  identity:    %s\n", s.Hash())
	if s.Identity != "" {
		fmt.Fprintf(w, "  code:        %s\n", s.Identity)
	}
	fmt.Fprintf(w, "  description: %s\n", oneLine(s.Description, 200))
	fmt.Fprintf(w, "  egress:      %s\n", egress)
	fmt.Fprintf(w, "  sandbox:     profile %s, %s\n", s.Profile, limitsLine(l, s.Profile == apps.ProfileExec))
	fmt.Fprintf(w, "  functions:  ")
	for _, f := range s.Functions {
		fmt.Fprintf(w, " %s", f.Name)
	}
	fmt.Fprintln(w)
}

// oneLine shows s on one line of at most about n bytes, escaped: it may
// come from an app.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		return reveal.Line(s[:n]) + "…"
	}
	return reveal.Line(s)
}

func runSeed(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("seed", stderr)
	configPath := fs.String("config", "", "config file")
	user := fs.String("user", "", "the user whose app data to seed (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *user == "" || fs.NArg() != 1 {
		return &usageError{msg: "seed: usage: secgpt seed --user ID FILE"}
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("failed to open fixture: %w", err)
	}
	defer f.Close()
	cfg, _, err := configFor(*configPath)
	if err != nil {
		return err
	}
	st, err := openStore(ctx, cfg.Database)
	if err != nil {
		return &startupError{err: err}
	}
	defer st.Close()
	n, err := st.SeedFixture(ctx, *user, f)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "seeded %d documents for %s\n", n, *user)
	return nil
}

// limitsLine describes a spoke's limits on one line; external says the app
// is an external app's server.
func limitsLine(l sandbox.Limits, external bool) string {
	as := fmt.Sprintf("address space %d MiB", l.AddressSpace>>20)
	if ok, _ := sandbox.CgroupSupport(); ok && external {
		as += " (not applied to an external app's server: its memory is bounded)"
	}
	return fmt.Sprintf("cpu %ds, memory %d MiB, tasks %d, %s, file size %d MiB, open files %d, scratch %d MiB and %d files",
		l.CPUSeconds, l.Memory>>20, l.Tasks, as, l.FileSize>>20, l.OpenFiles, l.DiskBytes>>20, l.DiskFiles)
}
