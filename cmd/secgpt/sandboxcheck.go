package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/secgpt/secgpt/apps/hostile"
	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/sandboxcheck"
	"github.com/secgpt/secgpt/spoke"
)

// The hostile app is linked into this binary, which re-executes itself as
// every spoke, but it is registered only where no configuration can
// install it: here in a spoke child (init runs before main dispatches the
// child), and in runSandboxCheck's hub. A child hosts only the app its hub
// names, and only the sandbox check's hub has the hostile app installed;
// every other hub's config is validated against a registry without it.
func init() {
	if spoke.IsChild() {
		hostile.Register()
	}
}

// Settings of the check that differ from the default configuration, so
// that it ends in seconds: the CPU limit (RLIMIT_CPU is what stops the spin
// attack) and a spoke's deadline per step (what stops a spoke that stalls).
const (
	// 4, not 2: Node's collector, churning at the memory bound, spent 3 s
	// of CPU (RLIMIT_CPU's hard limit) before the kernel's memory kill.
	checkCPUSeconds = 4
	// checkScriptMemory is an interpreter's memory bound, lowered so that
	// it fills it within its CPU limit: the memory bound, not the CPU
	// limit, must be what stops the allocation.
	checkScriptMemory = 256 << 20
	checkStepLimit    = 15 * time.Second
)

// runSandboxCheck runs the hostile app through this binary's own hub and
// spoke wiring, offline, attack by attack, and prints whether each was
// blocked and how; then the same attacks from the hostile scripts
// (apps/hostile/scripts) in the machine's python3 and node, each an
// external app as a user's MCP server is. It fails if any attack was not
// blocked; an interpreter the machine lacks is reported as not run.
func runSandboxCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("sandbox-check", stderr)
	showLog := fs.Bool("log", false, "print the hub's log (JSON lines) after the table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{msg: "sandbox-check takes no arguments"}
	}
	dir, err := spokeWorkDir("", "secgpt-sandbox-check-")
	if err != nil {
		return &startupError{err: err}
	}
	defer os.RemoveAll(dir)

	cfg := defaultConfig()
	hostile.Register()
	cfg.LLM.Provider = "simulator"
	cfg.Database = filepath.Join(dir, "hub", "secgpt.db")
	cfg.Spokes.ScratchDir = filepath.Join(dir, "scratch")
	cfg.Apps.Installed = []string{hostile.Name, sandboxcheck.VictimApp}
	cfg.Sandbox.CPUSeconds = checkCPUSeconds
	cfg.Deadlines.Step = checkStepLimit
	cfg.Logging = LoggingConfig{Level: "info", Format: "json"}
	interpreters, err := declareInterpreters(&cfg, filepath.Join(dir, "scripts"))
	if err != nil {
		return &startupError{err: err}
	}
	if err := cfg.validate(); err != nil {
		return &configError{err: err}
	}
	logs := &sandboxcheck.Logs{}
	log := newLogger(cfg.Logging, logs)
	if err := checkSandbox(cfg, stdout, log); err != nil {
		return &startupError{err: err}
	}
	limits := sandboxLimits(cfg.Sandbox, hostile.Name)
	fmt.Fprintf(stdout, "limits: %s\n", describeLimits(limits))
	fmt.Fprintln(stdout, "network: offline; the egress broker resolves and dials through a simulated DNS and internet (sandboxcheck.Lab)")

	lab, err := sandboxcheck.NewLab(cfg.Spokes.ScratchDir)
	if err != nil {
		return &startupError{err: err}
	}
	defer lab.Close()
	lab.Database = cfg.Database
	// The product's wiring, with the lab's offline egress broker.
	sys, err := openSystemWith(ctx, cfg, lab.Egress(), log)
	if err != nil {
		return &startupError{err: err}
	}
	defer sys.Close()

	var sum checkSummary
	opts := sandboxcheck.Options{Hub: sys.hub, Lab: lab, Logs: logs, Limits: limits, AttemptTimeout: 2 * checkStepLimit,
		Scratch: func(user, app string) (string, error) { return sys.scratch.Path(ctx, user, app) }}
	if err := sum.run(ctx, stdout, "the Go hostile app", opts, sandboxcheck.Controls(), sandboxcheck.Attacks()); err != nil {
		return err
	}
	for _, in := range interpreters {
		fmt.Fprintf(stdout, "\nfrom %s (%s):\n", in.Name, in.App)
		if in.notRun != "" {
			fmt.Fprintf(stdout, "not run: %s\n", in.notRun)
			sum.notRun = append(sum.notRun, in.Name+": "+in.notRun)
			continue
		}
		if err := sys.unavailable[in.App]; err != nil {
			fmt.Fprintf(stdout, "FAILED: the hostile script could not run: %s\n", oneLine(err.Error(), 600))
			sum.failed++
			continue
		}
		opts.App, opts.Limits = in.App, sys.cfg.appLimits(in.App)
		fmt.Fprintf(stdout, "command: %s %s\nlimits: %s\n", in.command, in.Script, describeLimits(opts.Limits))
		attacks, skipped := sandboxcheck.InterpreterAttacks(in.Script)
		for _, title := range sortedNames(skipped) {
			fmt.Fprintf(stdout, "not made: %s: %s\n", title, skipped[title])
		}
		if err := sum.run(ctx, stdout, in.Name, opts, sandboxcheck.InterpreterControls(in.Script), attacks); err != nil {
			return err
		}
	}
	if *showLog {
		fmt.Fprintf(stdout, "\nhub log:\n%s", logs.String())
	}
	return sum.verdict(stdout)
}

// checkInterpreter is one interpreter the check attacks from.
type checkInterpreter struct {
	sandboxcheck.Interpreter
	command string
	// notRun says why the machine cannot run it; "" when it can.
	notRun string
}

// declareInterpreters writes the hostile scripts into dir and declares one
// external app per interpreter the machine has, as a user would declare
// an MCP server, with the Go app's one egress domain.
func declareInterpreters(cfg *Config, dir string) ([]checkInterpreter, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("failed to create the scripts' directory: %w", err)
	}
	var out []checkInterpreter
	for _, in := range sandboxcheck.Interpreters() {
		c := checkInterpreter{Interpreter: in}
		command, err := in.Command()
		if err != nil {
			c.notRun = err.Error()
			out = append(out, c)
			continue
		}
		script, err := in.WriteScript(dir)
		if err != nil {
			return nil, err
		}
		c.command = command
		cfg.Apps.External = append(cfg.Apps.External, ExternalApp{
			Name: in.App, Command: command, Args: []string{script}, Egress: []string{hostile.EgressDomain},
			Limits: LimitsConfig{MemoryBytes: checkScriptMemory},
		})
		out = append(out, c)
	}
	return out, nil
}

// checkSummary counts the verdicts of every runtime.
type checkSummary struct {
	attacks, notBlocked, failed int
	runtimes                    []string
	notRun                      []string
}

// run prints the controls and a table of the attacks of one runtime.
func (s *checkSummary) run(ctx context.Context, stdout io.Writer, runtime string, opts sandboxcheck.Options, controls, attacks []sandboxcheck.Attack) error {
	runner, err := sandboxcheck.NewRunner(opts)
	if err != nil {
		return &startupError{err: err}
	}
	fmt.Fprintln(stdout)
	for _, c := range controls {
		v := runner.Run(ctx, c)
		state := "succeeded, as it must"
		if !v.OK() {
			state = "FAILED: " + strings.Join(v.Problems, "; ")
			s.failed++
		}
		fmt.Fprintf(stdout, "control: %s: %s (%s)\n", v.Title, state, oneLine(v.How, 200))
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ATTACK\tBLOCKED\tHOW")
	for _, a := range attacks {
		v := runner.Run(ctx, a)
		blocked, how := "yes", v.How
		if !v.Blocked {
			blocked, how = "NO", strings.Join(append([]string{v.How}, v.Problems...), "; ")
			s.notBlocked++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", v.Title, blocked, oneLine(how, 400))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("failed to print the table: %w", err)
	}
	s.attacks += len(attacks)
	s.runtimes = append(s.runtimes, fmt.Sprintf("%d from %s", len(attacks), runtime))
	return nil
}

// verdict prints the summary; it fails if an attack was not blocked or a
// control failed.
func (s *checkSummary) verdict(stdout io.Writer) error {
	switch {
	case s.notBlocked > 0:
		return fmt.Errorf("%d of %d attacks were not blocked", s.notBlocked, s.attacks)
	case s.failed > 0:
		return fmt.Errorf("%d controls or runtimes failed: the check cannot see an attack succeed", s.failed)
	}
	fmt.Fprintf(stdout, "\nall %d attacks blocked (%s)\n", s.attacks, strings.Join(s.runtimes, ", "))
	for _, n := range s.notRun {
		fmt.Fprintf(stdout, "not run: %s\n", n)
	}
	return nil
}

func describeLimits(l sandbox.Limits) string {
	return fmt.Sprintf("%s; cpu lowered for the check; step deadline %v (lowered for the check)", limitsLine(l, false), checkStepLimit)
}
