package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/bench"
	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/store"
)

// runBench runs `secgpt bench` (package bench): the table on stdout, the
// whole report as JSON in a file.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", stderr)
	latency := fs.Duration("latency", bench.DefaultLatency, "simulated model latency per call, in both modes")
	perCategory := fs.Int("per-category", 0, "queries of each category to run (0: all)")
	users := fs.String("users", "1,10,50,100,200", "the concurrency sweep's numbers of users arriving at once (\"\": no sweep)")
	sweepOnly := fs.Bool("sweep-only", false, "run only the concurrency sweep, not the queries' table")
	out := fs.String("json", "bench.json", "file to write the full report to")
	logLevel := fs.String("log-level", "error", "log level")
	cpuProfile := fs.String("cpuprofile", "", "write this process's CPU profile (the hub's and the simulated model's) to the file")
	profileWarm := fs.Bool("profile-warm", false, "profile only the sweep's first warm wave (with --cpuprofile; choose it with --users)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	levels, err := parseLevels(*users)
	switch {
	case err != nil:
		return &usageError{msg: "bench: --users: " + err.Error()}
	case *latency < 0 || *perCategory < 0:
		return &usageError{msg: "bench: --latency and --per-category must not be negative"}
	case fs.NArg() != 0:
		return &usageError{msg: "bench: takes no arguments"}
	}
	dir, err := spokeWorkDir("", "secgpt-bench-")
	if err != nil {
		return &startupError{err: err}
	}
	defer os.RemoveAll(dir)
	log := newLogger(LoggingConfig{Level: *logLevel, Format: "console"}, stderr)
	var aroundWarm func() func()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("failed to create the CPU profile: %w", err)
		}
		defer f.Close()
		if *profileWarm {
			// One profile: of the first warm wave (a level of the sweep);
			// the others run unprofiled.
			var once sync.Once
			aroundWarm = func() (end func()) {
				end = func() {}
				once.Do(func() {
					if err := pprof.StartCPUProfile(f); err != nil {
						log.Error().Err(err).Msg("Failed to start the CPU profile")
						return
					}
					end = pprof.StopCPUProfile
				})
				return end
			}
		} else {
			if err := pprof.StartCPUProfile(f); err != nil {
				return fmt.Errorf("failed to start the CPU profile: %w", err)
			}
			defer pprof.StopCPUProfile()
		}
	}
	report, err := bench.Run(ctx, bench.Options{
		Build: func(ctx context.Context, st *store.Store, model *llm.Client, installed []apps.Spec) (bench.System, error) {
			h, mgr, err := isolatedSystem(ctx, dir, st, model, installed, log)
			if err != nil {
				return bench.System{}, err
			}
			return bench.System{Hub: h, Spares: mgr.Spares, RestSpares: mgr.RestSpares, Close: mgr.Close}, nil
		},
		Dir: dir, Latency: *latency, PerCategory: *perCategory, Users: levels, SweepOnly: *sweepOnly, AroundWarm: aroundWarm, Progress: stderr, Log: log,
	})
	if err != nil {
		return err
	}
	report.Print(stdout)
	b, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return fmt.Errorf("failed to encode the report: %w", err)
	}
	if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("failed to write the report: %w", err)
	}
	fmt.Fprintf(stdout, "\nThe full report is in %s.\n", *out)
	if len(report.Failures) > 0 {
		return fmt.Errorf("%d benchmark runs failed", len(report.Failures))
	}
	return nil
}

// parseLevels reads a comma-separated list of positive numbers.
func parseLevels(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a number of users", f)
		}
		out = append(out, n)
	}
	return out, nil
}
