package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/reveal"
	"github.com/secgpt/secgpt/vanilla"
)

// vanillaWarning is printed whenever a query runs without isolation.
const vanillaWarning = "secgpt: *** VANILLA MODE: the non-isolated baseline, for comparison only. Every app's text and results share one model context, apps run in this process or as plain child processes (external apps' servers with the machine's network and files), and nothing is asked: no consent, no sandbox, no egress broker."

// runAskVanilla answers one query in vanilla mode: the configured apps,
// external ones included, and model, in one context (package vanilla).
// It is never the default and says so on stderr.
func runAskVanilla(ctx context.Context, configPath, user, query string, asJSON bool, stdout, stderr io.Writer) error {
	fmt.Fprintln(stderr, vanillaWarning)
	cfg, note, err := configFor(configPath)
	if err != nil {
		return err
	}
	if note != "" {
		fmt.Fprintln(stderr, note)
	}
	st, err := openStore(ctx, cfg.Database)
	if err != nil {
		return &startupError{err: err}
	}
	defer st.Close()
	models, err := startModels(cfg)
	if err != nil {
		return &startupError{err: err}
	}
	defer models.close()
	var list []apps.App
	for _, name := range cfg.Apps.Installed {
		a, _ := apps.Lookup(name)
		list = append(list, a)
	}
	for _, e := range cfg.Apps.External {
		a, err := startVanillaMCP(ctx, e)
		if err != nil {
			fmt.Fprintf(stderr, "secgpt: %s (external MCP app) not started: %s\n", e.Name, reveal.Line(err.Error()))
			continue
		}
		defer a.Close()
		list = append(list, a)
	}
	agent := vanilla.New(vanilla.Options{LLM: models.router, Store: st, Apps: list, Model: cfg.LLM.Models.Vanilla.key(), HistoryEntries: cfg.Budgets.HistoryEntries})
	res, err := agent.Handle(ctx, user, query)
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if encErr := enc.Encode(res); encErr != nil {
			return fmt.Errorf("failed to print result: %w", encErr)
		}
	}
	if err != nil {
		return err
	}
	if !asJSON {
		fmt.Fprintln(stdout, reveal.Text(res.Answer))
	}
	return nil
}

// startVanillaMCP starts an external app's server for the baseline, with
// the environment its spoke would give it and a private temporary
// directory as its home unless it sets one.
func startVanillaMCP(ctx context.Context, e ExternalApp) (*vanilla.MCPApp, error) {
	env, err := e.environment()
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"HOME", "TMPDIR"} {
		if _, ok := env[k]; !ok {
			if env[k], err = os.MkdirTemp("", "secgpt-vanilla-"+e.Name+"-"); err != nil {
				return nil, fmt.Errorf("failed to make a directory for %s: %w", e.Name, err)
			}
		}
	}
	vars := make([]string, 0, len(env))
	for k, v := range env {
		vars = append(vars, k+"="+v)
	}
	sort.Strings(vars)
	return vanilla.StartMCP(ctx, vanilla.MCPServer{Name: e.Name, Command: e.Command, Args: e.Args, Dir: e.Dir, Env: vars, Description: e.Description})
}
