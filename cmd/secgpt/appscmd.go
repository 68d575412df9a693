package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/scratch"
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
	var root *scratch.Root
	if len(cfg.Apps.External) > 0 {
		st, err := openStore(ctx, cfg.Database)
		if err != nil {
			return &startupError{err: err}
		}
		defer st.Close()
		cache = refresh{st}
		if root, err = newScratch(cfg, st, nil, zerolog.Nop()); err != nil {
			return &startupError{err: err}
		}
		// After discovery's spokes, which discoverExternal stops.
		defer root.Close()
	}
	declared := cfg.Apps.External
	specs, failed := discoverExternal(ctx, &cfg, cache, root, zerolog.Nop())
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

// cannotRun says which external app a query names (as a whole word, the
// way an app is named) could not be discovered, and why: the query is not
// answered without it, as if it were not installed. nil when the query
// names none.
func (s *system) cannotRun(query string) error {
	var msgs []string
	for _, name := range sortedNames(s.unavailable) {
		if namesApp(query, name) {
			msgs = append(msgs, fmt.Sprintf("the app %s could not run: %s", name, oneLine(s.unavailable[name].Error(), 600)))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; ") + " (secgpt apps says more)")
}

// namesApp reports whether text holds name as a whole word (letters,
// digits and underscores), case-insensitively.
func namesApp(text, name string) bool {
	text, name = strings.ToLower(text), strings.ToLower(name)
	word := func(b byte) bool { return b == '_' || 'a' <= b && b <= 'z' || '0' <= b && b <= '9' }
	for i := 0; ; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(name)
		if (start == 0 || !word(text[start-1])) && (end == len(text) || !word(text[end])) {
			return true
		}
		i = start + 1
	}
}
