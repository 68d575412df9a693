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
	checkCPUSeconds = 2
	checkStepLimit  = 15 * time.Second
)

// runSandboxCheck runs the hostile app through this binary's own hub and
// spoke wiring, offline, attack by attack, and prints whether each was
// blocked and how. It fails if any attack was not blocked.
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
	runner, err := sandboxcheck.NewRunner(sandboxcheck.Options{
		Hub: sys.hub, Lab: lab, Logs: logs, Limits: limits,
		AttemptTimeout: 2 * checkStepLimit,
	})
	if err != nil {
		return &startupError{err: err}
	}

	failed := 0
	fmt.Fprintln(stdout)
	for _, c := range sandboxcheck.Controls() {
		v := runner.Run(ctx, c)
		state := "succeeded, as it must"
		if !v.OK() {
			state = "FAILED: " + strings.Join(v.Problems, "; ")
			failed++
		}
		fmt.Fprintf(stdout, "control: %s: %s (%s)\n", v.Title, state, v.How)
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ATTACK\tBLOCKED\tHOW")
	attacks := sandboxcheck.Attacks()
	notBlocked := 0
	for _, a := range attacks {
		v := runner.Run(ctx, a)
		blocked, how := "yes", v.How
		if !v.Blocked {
			blocked, how = "NO", strings.Join(append([]string{v.How}, v.Problems...), "; ")
			notBlocked++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", v.Title, blocked, oneLine(how, 400))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("failed to print the table: %w", err)
	}
	if *showLog {
		fmt.Fprintf(stdout, "\nhub log:\n%s", logs.String())
	}
	switch {
	case notBlocked > 0:
		return fmt.Errorf("%d of %d attacks were not blocked", notBlocked, len(attacks))
	case failed > 0:
		return fmt.Errorf("%d controls failed: the check cannot see an attack succeed", failed)
	}
	fmt.Fprintf(stdout, "\nall %d attacks blocked\n", len(attacks))
	return nil
}

func describeLimits(l sandbox.Limits) string {
	return fmt.Sprintf("%s; cpu lowered for the check; step deadline %v (lowered for the check)", limitsLine(l, false), checkStepLimit)
}
