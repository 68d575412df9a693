// Command secgpt is a personal LLM assistant whose third-party apps run
// isolated: each in its own sandboxed process, with a trusted hub that plans
// every request, mediates every exchange and asks the user's permission.
//
// This package owns flags, configuration, logging and wiring. It is the only
// place that exits the process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	_ "github.com/secgpt/secgpt/apps/all"
	"github.com/secgpt/secgpt/reveal"
	"github.com/secgpt/secgpt/spoke"
)

// Exit codes, one per failure class.
const (
	exitOK      = 0
	exitFailed  = 1 // the command ran and failed (a query, a case study)
	exitUsage   = 2
	exitConfig  = 3
	exitStartup = 4 // store, model endpoint, sandbox or hub could not start
)

// usageError is a bad command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// configError is a bad configuration.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// startupError is a failure to assemble the system.
type startupError struct{ err error }

func (e *startupError) Error() string { return e.err.Error() }
func (e *startupError) Unwrap() error { return e.err }

const usage = `usage: secgpt <command> [flags]

commands:
  chat        talk to the assistant in the terminal; consent prompts appear here
  bot         run the Matrix bot: secgpt bot --config FILE (see its bot section)
  ask         answer one query for a script: secgpt ask --user ID [--consent POLICY] [--json] [--mode isolated|vanilla] "query"
              (vanilla: the non-isolated baseline, for comparison only)
  casestudy   run the paper's case studies: secgpt casestudy [--mode isolated|vanilla|both] [--profile SERVER] [NAME...]
  doctor      check each model endpoint: which server, structured output, tool calls, context window
  bench       measure isolated against vanilla in the shape of the paper's Table IV, and users arriving at once:
              secgpt bench [--latency 1s] [--per-category N] [--users 1,10,50,100,200] [--json FILE]
  apps        list the installed apps, starting each external app's server: secgpt apps [--config FILE]
              (exits 1 when an external app could not be discovered)
              secgpt apps add [--name N] [--into DIR] npm:PACKAGE@VERSION | PATH [ARG...]: install an
              MCP server and print its config entry
  sandbox-check  run a hostile app against the sandbox, offline, and print each attack: blocked or not, and how
  seed        load a fixture into a user's app data: secgpt seed --user ID FILE

Every command takes --config FILE (see config.example.yaml); without it the
SQLite default and an endpoint from the environment are used.`

func main() {
	// A spoke is this binary re-executed: dispatch before anything else runs.
	if spoke.IsChild() {
		os.Exit(spoke.ChildMain())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "secgpt:", reveal.Text(err.Error()))
	var ue *usageError
	var ce *configError
	var se *startupError
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &ce):
		return exitConfig
	case errors.As(err, &se):
		return exitStartup
	default:
		return exitFailed
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return &usageError{msg: "no command given"}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "chat":
		return runChat(ctx, rest, stdin, stdout, stderr)
	case "bot":
		return runBot(ctx, rest, stderr)
	case "ask":
		return runAsk(ctx, rest, stdout, stderr)
	case "casestudy":
		return runCaseStudy(ctx, rest, stdout, stderr)
	case "bench":
		return runBench(ctx, rest, stdout, stderr)
	case "sandbox-check":
		return runSandboxCheck(ctx, rest, stdout, stderr)
	case "doctor":
		return runDoctor(ctx, rest, stdout, stderr)
	case "apps":
		return runApps(ctx, rest, stdout, stderr)
	case "seed":
		return runSeed(ctx, rest, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	default:
		fmt.Fprintln(stderr, usage)
		return &usageError{msg: fmt.Sprintf("unknown command %q", cmd)}
	}
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &usageError{msg: "help requested"}
		}
		return &usageError{msg: err.Error()}
	}
	return nil
}

// configFor loads the config file, or the defaults plus the environment.
// The note says where the model comes from when no file chose it.
func configFor(path string) (Config, string, error) {
	var cfg Config
	var note string
	if path != "" {
		c, err := loadConfig(path)
		if err != nil {
			return Config{}, "", &configError{err: err}
		}
		cfg = c
	} else {
		cfg = defaultConfig()
		note = cfg.applyEnvironment()
	}
	if err := cfg.validate(); err != nil {
		return Config{}, "", &configError{err: err}
	}
	return cfg, note, nil
}

// openFor loads the config and assembles the system. A command that serves
// one query (oneQuery) starts no spoke ahead of need.
func openFor(ctx context.Context, path string, stderr io.Writer, oneQuery bool) (*system, error) {
	cfg, note, err := configFor(path)
	if err != nil {
		return nil, err
	}
	if oneQuery {
		cfg.Spokes.Spares = 0
	}
	if note != "" {
		fmt.Fprintln(stderr, note)
	}
	if err := checkScratch(cfg); err != nil {
		return nil, err
	}
	log := newLogger(cfg.Logging, stderr)
	if err := checkSandbox(cfg, stderr, log); err != nil {
		return nil, &startupError{err: err}
	}
	sys, err := openSystem(ctx, cfg, log)
	if err != nil {
		return nil, &startupError{err: err}
	}
	return sys, nil
}
