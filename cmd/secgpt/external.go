package main

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/hub/egress"
	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/scratch"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/store"
)

// ExternalApp declares an external app: an MCP server over stdio that
// runs, like every app, in a sandboxed spoke of its own (docs/apps.md).
// Declared apps are installed; their names may be built-in apps' that are
// not installed.
type ExternalApp struct {
	Name string `yaml:"name" json:"name"`
	// Command is the absolute path of the server's ELF executable; a
	// script's interpreter, with the script in Args.
	Command string   `yaml:"command" json:"command"`
	Args    []string `yaml:"args" json:"args,omitempty"`
	// Dir is the server's working directory, readable to it; default its
	// scratch directory.
	Dir string `yaml:"dir" json:"dir,omitempty"`
	// Env is the server's environment: nothing else is inherited.
	Env map[string]string `yaml:"env" json:"env,omitempty"`
	// Secrets maps a variable the server sees to the variable of secgpt's
	// own environment it is read from, when the app's spoke starts.
	Secrets map[string]string `yaml:"secrets" json:"secrets,omitempty"`
	// Egress are the registrable domains the app may reach through the
	// hub's egress broker; none means no network at all.
	Egress []string `yaml:"egress" json:"egress,omitempty"`
	// Description replaces the server's own instructions as the app's
	// description (both are third-party text to the planner).
	Description string `yaml:"description" json:"description,omitempty"`
	// Profile is the sandbox profile: exec, the default and only one.
	Profile string `yaml:"profile" json:"profile,omitempty"`
	// Limits override the sandbox limits for this app.
	Limits LimitsConfig `yaml:"limits" json:"limits"`
	// ReadOnly are further absolute paths the server may read.
	ReadOnly []string `yaml:"read_only" json:"read_only,omitempty"`
	// ReadWrite are further absolute paths the server may read and write.
	// Here, in ReadOnly, Args and Dir, a leading {scratch} stands for the
	// (user, app)'s scratch directory (created on need).
	ReadWrite []string `yaml:"read_write" json:"read_write,omitempty"`

	// identity and functions are what discovery found at start (see
	// discoverExternal): a spoke is refused a changed app.
	identity, functions string
}

// reservedEnv are variables the spoke sets for an external app itself.
var reservedEnv = append(spoke.ScratchEnv(), spoke.ProxyEnv...)

// validateExternal checks every declaration, each problem one line naming
// the field, and marks the declared apps installed in seen.
func (a AppsConfig) validateExternal(seen map[string]bool) error {
	for i, e := range a.External {
		field := fmt.Sprintf("apps.external[%d]", i)
		bad := func(sub, format string, args ...any) error {
			return fmt.Errorf("config: %s%s: %s", field, sub, fmt.Sprintf(format, args...))
		}
		// A built-in app's name is free while that app is not installed.
		switch _, builtin := apps.Lookup(e.Name); {
		case !apps.ValidName(e.Name):
			return bad(".name", "%q is not a valid app name: use lower-case letters, digits and single underscores, starting with a letter", e.Name)
		case builtin && seen[e.Name]:
			return bad(".name", "%q is the name of a built-in app that is installed (apps.installed)", e.Name)
		case seen[e.Name]:
			return bad(".name", "%q is installed twice", e.Name)
		}
		if err := checkCommand(e.Command); err != nil {
			return bad(".command", "%v", err)
		}
		for j, arg := range e.Args {
			if strings.ContainsRune(arg, 0) {
				return bad(fmt.Sprintf(".args[%d]", j), "contains a NUL byte")
			}
		}
		if e.Dir != "" {
			if err := checkDeclaredPath(e.Dir, true); err != nil {
				return bad(".dir", "%v", err)
			}
		}
		for j, p := range e.ReadOnly {
			if err := checkDeclaredPath(p, false); err != nil {
				return bad(fmt.Sprintf(".read_only[%d]", j), "%v", err)
			}
		}
		for j, p := range e.ReadWrite {
			if err := checkDeclaredPath(p, true); err != nil {
				return bad(fmt.Sprintf(".read_write[%d]", j), "%v", err)
			}
			if p == "/" {
				return bad(fmt.Sprintf(".read_write[%d]", j), "may not be the root directory")
			}
		}
		for _, k := range sortedNames(e.Env) {
			if err := checkVariable(k, e.Env[k]); err != nil {
				return bad(".env."+k, "%v", err)
			}
		}
		for _, k := range sortedNames(e.Secrets) {
			if err := checkVariable(k, ""); err != nil {
				return bad(".secrets."+k, "%v", err)
			}
			if _, dup := e.Env[k]; dup {
				return bad(".secrets."+k, "is also set in env")
			}
			if !envName.MatchString(e.Secrets[k]) {
				return bad(".secrets."+k, "must name a variable of secgpt's environment, not %q (the secret itself never goes in the file)", e.Secrets[k])
			}
		}
		if len(e.Egress) > apps.MaxEgressDomains {
			return bad(".egress", "more than %d domains", apps.MaxEgressDomains)
		}
		for j, d := range e.Egress {
			if _, err := egress.RegistrableDomain(d); err != nil {
				return bad(fmt.Sprintf(".egress[%d]", j), "%v", err)
			}
		}
		if len(e.Description) > apps.MaxDescription {
			return bad(".description", "longer than %d bytes", apps.MaxDescription)
		}
		if e.Profile != "" && e.Profile != string(apps.ProfileExec) {
			return bad(".profile", "must be %s, the profile of external apps, not %q", apps.ProfileExec, e.Profile)
		}
		if err := e.Limits.validate(field + ".limits"); err != nil {
			return err
		}
		seen[e.Name] = true
	}
	return nil
}

// checkCommand requires an absolute path to an executable ELF file: the
// sandbox executes that file and nothing else, so a script's interpreter
// is the command.
func checkCommand(path string) error {
	if err := checkExisting(path, false); err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not an ELF executable: for a script, name its interpreter (for example /usr/bin/python3) as command and the script in args", path)
	}
	f.Close()
	return nil
}

// checkDeclaredPath requires a path in the scratch directory
// ("{scratch}/…", made when the spoke starts) or an existing clean
// absolute path (a directory if dir).
func checkDeclaredPath(path string, dir bool) error {
	if rest, ok := strings.CutPrefix(path, spoke.ScratchPlaceholder); ok {
		if rest != "" && (!strings.HasPrefix(rest, "/") || filepath.Clean(rest) != rest || strings.Contains(rest, "..")) {
			return fmt.Errorf("%q: after %s comes nothing or a clean path starting with /", path, spoke.ScratchPlaceholder)
		}
		return nil
	}
	return checkExisting(path, dir)
}

// checkExisting requires a clean absolute path that exists (a directory if
// dir).
func checkExisting(path string, dir bool) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("%q is not a clean absolute path", path)
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s does not exist or cannot be read: %w", path, err)
	}
	if dir && !st.IsDir() {
		return fmt.Errorf("%s is not a directory", path)
	}
	return nil
}

func checkVariable(name, value string) error {
	switch {
	case !envName.MatchString(name):
		return errors.New("is not a valid environment variable name")
	case slices.Contains(reservedEnv, name):
		return errors.New("is set by secgpt itself (the app's scratch directory or its egress proxy)")
	case strings.ContainsRune(value, 0):
		return errors.New("contains a NUL byte")
	}
	return nil
}

// externalApp returns the declaration of the external app name.
func (a AppsConfig) externalApp(name string) (ExternalApp, bool) {
	for _, e := range a.External {
		if e.Name == name && name != "" {
			return e, true
		}
	}
	return ExternalApp{}, false
}

// limits are the app's sandbox limits: the exec profile's defaults (its
// server's profile: the spoke's cgroup holds the server), the config's for
// every spoke and for the app, then its declaration's.
func (e ExternalApp) limits(sb SandboxConfig) sandbox.Limits {
	return overrideLimits(sandbox.DefaultLimitsFor(sandbox.ProfileExec), sb.LimitsConfig, sb.Apps[e.Name], e.Limits)
}

// appLimits are the sandbox limits of any installed app.
func (c Config) appLimits(name string) sandbox.Limits {
	if e, ok := c.Apps.externalApp(name); ok {
		return e.limits(c.Sandbox)
	}
	return sandboxLimits(c.Sandbox, name)
}

// externalPolicy is the sandbox of an external app's spoke but for its
// scratch directory, which it keeps across spokes: strict for the spoke
// itself, which starts the server under the exec profile (see
// spoke.External); with egress the proxy profile, in a network namespace
// of its own, whose loopback carries the app's only way out.
func externalPolicy(cfg Config, e ExternalApp) sandbox.Policy {
	p := sandbox.Policy{
		Profile:     sandbox.ProfileStrict,
		Limits:      e.limits(cfg.Sandbox),
		KeepScratch: true,
		Namespaces:  cfg.Sandbox.Namespaces,
		AllowWeaker: cfg.Sandbox.AllowWeaker,
	}
	if len(e.Egress) > 0 {
		p.Profile, p.Namespaces = sandbox.ProfileProxy, true
	}
	return p
}

// externalExtra gives an external app's spoke its declaration and its
// environment, secrets read from secgpt's environment now. After discovery
// it refuses an app whose command, scripts or declaration changed.
func externalExtra(cfg Config) func(spoke.Key) ([]string, []byte, error) {
	return func(k spoke.Key) ([]string, []byte, error) {
		e, ok := cfg.Apps.externalApp(k.App)
		if !ok {
			return nil, nil, nil
		}
		decl := spoke.External{
			Name: e.Name, Command: e.Command, Args: e.Args, Dir: e.Dir, ReadOnly: e.ReadOnly, ReadWrite: e.ReadWrite,
			Description: e.Description, Egress: len(e.Egress) > 0, CallTimeout: cfg.Deadlines.Step * 3 / 4,
		}
		if !spoke.IsDiscovery(k) && e.identity != "" {
			id, err := e.codeIdentity()
			if err != nil {
				return nil, nil, err
			}
			if id != e.identity {
				return nil, nil, fmt.Errorf("app %s changed on disk since secgpt started (its command, scripts or declaration); restart secgpt to install the new version, which will ask for permission again", e.Name)
			}
			decl.Functions = e.functions
		}
		env, err := e.environment()
		if err != nil {
			return nil, nil, err
		}
		return spoke.ExternalLaunch(decl, env)
	}
}

// environment is the app's whole environment: its variables, and its
// secrets read from secgpt's environment now.
func (e ExternalApp) environment() (map[string]string, error) {
	env := map[string]string{}
	for k, v := range e.Env {
		env[k] = v
	}
	for _, k := range sortedNames(e.Secrets) {
		v, ok := os.LookupEnv(e.Secrets[k])
		if !ok {
			return nil, fmt.Errorf("app %s: secret %s: $%s is not set in secgpt's environment", e.Name, k, e.Secrets[k])
		}
		env[k] = v
	}
	return env, nil
}

// discoveryCache keeps what discovery found, by app and code identity
// (the store).
type discoveryCache interface {
	Discovery(ctx context.Context, app, identity string) (json.RawMessage, bool, error)
	PutDiscovery(ctx context.Context, app, identity string, spec json.RawMessage) error
}

var _ discoveryCache = (*store.Store)(nil)

// discoveryFormat versions what the cache holds: a secgpt that reads tools
// differently changes it, and discovers every app again.
const discoveryFormat = "discovery v1 "

// discoverExternal describes every declared external app and returns
// their specs: the functions its server lists, completed from the
// declaration (egress, description, code identity). What a cache (may be
// nil) holds for the app's current identity is used as is, and no server
// starts; otherwise the app is described in a discovery spoke of its own
// (no user, no data) and the cache keeps what it found. An app that cannot
// be discovered is not installed: it is dropped from cfg, with one error
// line in the log (which is secgpt's stderr), and the rest runs. failed
// says why, per app.
func discoverExternal(ctx context.Context, cfg *Config, cache discoveryCache, root *scratch.Root, log zerolog.Logger) (specs []apps.Spec, failed map[string]error) {
	if len(cfg.Apps.External) == 0 {
		return nil, nil
	}
	failed = map[string]error{}
	caps := sandbox.Probe()
	hashes := codeHashesFile(cfg.Database)
	fileHashes.load(hashes)
	found := make([]apps.Spec, len(cfg.Apps.External))
	errs := make([]error, len(cfg.Apps.External))
	cached := make([]bool, len(cfg.Apps.External))
	var missing []int
	walked := map[string]string{}
	for i := range cfg.Apps.External {
		e := &cfg.Apps.External[i]
		found[i], errs[i] = e.cached(ctx, cache, walked)
		if cached[i] = found[i].Name != ""; errs[i] == nil && !cached[i] {
			missing = append(missing, i)
		}
	}
	if err := fileHashes.save(hashes); err != nil {
		log.Warn().Err(err).Msg("Code hashes not cached")
	}
	if len(missing) > 0 {
		// Discovery starts one spoke per external app, none of them strict.
		discovery := *cfg
		discovery.Spokes.Spares = 0
		mgr, err := newSpokeManager(discovery, root, log)
		if err != nil {
			for _, i := range missing {
				errs[i] = err
			}
		} else {
			defer mgr.Close()
			ctx, cancel := context.WithTimeout(ctx, cfg.Deadlines.SpokeStart+cfg.Deadlines.Step)
			defer cancel()
			var wg sync.WaitGroup
			for _, i := range missing {
				e := &cfg.Apps.External[i]
				wg.Go(func() { found[i], errs[i] = describeExternal(ctx, mgr, cache, e) })
			}
			wg.Wait()
		}
	}
	var kept []ExternalApp
	for i, e := range cfg.Apps.External {
		if errs[i] != nil {
			failed[e.Name] = errs[i]
			log.Error().Str("app", e.Name).Msg("External app not installed: " + oneLine(errs[i].Error(), 600))
			continue
		}
		if len(e.Egress) > 0 && !(caps.UserNS && caps.NetNS) {
			log.Error().Str("app", e.Name).Msg("*** SANDBOX WEAKENED: external app " + e.Name + " has no network namespace of its own (sandbox.allow_weaker_sandbox): its egress proxy listens on the machine's loopback")
		}
		log.Info().Str("app", e.Name).Str("version", found[i].Version).Int("functions", len(found[i].Functions)).Bool("cached", cached[i]).Msg("External app installed")
		kept = append(kept, e)
		specs = append(specs, found[i])
	}
	cfg.Apps.External = kept
	return specs, failed
}

// cached identifies the app (walked: see codeIdentityIn) and returns what
// cache holds for that identity, checked as a fresh discovery is: a spec without a name when
// nothing is cached (or cache is nil).
func (e *ExternalApp) cached(ctx context.Context, cache discoveryCache, walked map[string]string) (apps.Spec, error) {
	id, err := e.codeIdentityIn(walked)
	if err != nil {
		return apps.Spec{}, err
	}
	e.identity = id
	// A secret missing from secgpt's environment fails the app now, as
	// its spoke's start would.
	if _, err := e.environment(); err != nil {
		return apps.Spec{}, err
	}
	if cache == nil {
		return apps.Spec{}, nil
	}
	b, ok, err := cache.Discovery(ctx, e.Name, discoveryFormat+id)
	if err != nil || !ok {
		return apps.Spec{}, err
	}
	var spec apps.Spec
	if err := json.Unmarshal(b, &spec); err != nil || spec.Name != e.Name {
		return apps.Spec{}, nil // a damaged entry: discover again
	}
	return e.complete(spec)
}

// describeExternal discovers one app, already identified, in a spoke and
// records in the cache (may be nil) what it found.
func describeExternal(ctx context.Context, mgr *spoke.Manager, cache discoveryCache, e *ExternalApp) (apps.Spec, error) {
	spec, err := spoke.Describe(ctx, mgr, e.Name)
	if err != nil {
		return apps.Spec{}, err
	}
	if spec, err = e.complete(spec); err != nil {
		return apps.Spec{}, err
	}
	if cache != nil {
		b, err := json.Marshal(spec)
		if err != nil {
			return apps.Spec{}, fmt.Errorf("failed to encode the spec of app %s: %w", e.Name, err)
		}
		if err := cache.PutDiscovery(ctx, e.Name, discoveryFormat+e.identity, b); err != nil {
			zerolog.Ctx(ctx).Warn().Err(err).Str("app", e.Name).Msg("Discovery not cached")
		}
	}
	return spec, nil
}

// complete fills in what the declaration says of a described app, checks
// it, and records in e what its later spokes must match.
func (e *ExternalApp) complete(spec apps.Spec) (apps.Spec, error) {
	spec.Profile = apps.ProfileExec
	spec.Egress = e.Egress
	spec.Identity = e.identity
	if e.Description != "" {
		spec.Description = e.Description
	}
	if err := spec.Validate(); err != nil {
		return apps.Spec{}, err
	}
	for _, f := range spec.Functions {
		for _, schema := range []json.RawMessage{f.Request, f.Response} {
			if err := apps.CheckSchema(schema); err != nil {
				return apps.Spec{}, fmt.Errorf("%s: function %s: %w", e.Name, f.Name, err)
			}
		}
	}
	e.functions = spoke.FunctionsDigest(spec.Functions)
	return spec, nil
}
