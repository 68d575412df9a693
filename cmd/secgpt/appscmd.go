package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/apps"
)

// runApps lists the installed apps. Each external app's server is started
// and asked for its tools (the cache of discovery is refreshed, not read):
// an app that could not be discovered is marked NOT INSTALLED, with why,
// and the command fails.
func runApps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "add" {
		return runAppsAdd(ctx, args[1:], stdout, stderr)
	}
	fs := newFlags("apps", stderr)
	configPath := fs.String("config", "", "config file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, _, err := configFor(*configPath)
	if err != nil {
		return err
	}
	for _, name := range cfg.Apps.Installed {
		a, _ := apps.Lookup(name)
		printApp(stdout, a.Spec(), cfg.appLimits(name))
	}
	var cache discoveryCache
	if len(cfg.Apps.External) > 0 {
		st, err := openStore(ctx, cfg.Database)
		if err != nil {
			return &startupError{err: err}
		}
		defer st.Close()
		cache = refresh{st}
	}
	declared := cfg.Apps.External
	specs, failed := discoverExternal(ctx, &cfg, cache, zerolog.Nop())
	var names []string
	for _, e := range declared {
		if err := failed[e.Name]; err != nil {
			fmt.Fprintf(stdout, "%s (external MCP app): NOT INSTALLED: %s\n", e.Name, oneLine(err.Error(), 1200))
			names = append(names, e.Name)
		}
	}
	for _, s := range specs {
		printApp(stdout, s, cfg.appLimits(s.Name))
	}
	if len(names) > 0 {
		slices.Sort(names)
		return fmt.Errorf("%d external app(s) could not be discovered: %v (see above)", len(names), names)
	}
	return nil
}

// refresh is a discovery cache that is written, never read.
type refresh struct{ discoveryCache }

func (refresh) Discovery(context.Context, string, string) (json.RawMessage, bool, error) {
	return nil, false, nil
}

var errNotYet = errors.New("not yet")

func runAppsAdd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errNotYet
}
