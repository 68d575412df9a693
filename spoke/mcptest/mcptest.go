// Package mcptest runs external apps (MCP servers) in tests: the fixture
// servers (Python and Node scripts in fixtures/ and the hostile ones in
// apps/hostile/scripts, and a Go server built with the
// SDK's server side in mcpserver/) and the wiring that gives a spoke
// manager their declarations, environments and sandbox policies, as
// cmd/secgpt does. The test binary must call spoketest.Main in TestMain.
//
// It must never be imported by production code.
package mcptest

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/apps/hostile/scripts"
	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/spoke/spoketest"
)

//go:embed fixtures/*.py fixtures/*.js fixtures/*.mjs
var fixtures embed.FS

// Dir returns a new directory, removed when the test ends, that every uid
// may enter: spokes run as 65534 under a root hub, and t.TempDir's parents
// are private.
func Dir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "mcptest-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// fixture returns the text of the fixture name: fixtures/name, or the
// hostile servers that sandbox-check ships (apps/hostile/scripts).
func fixture(name string) ([]byte, error) {
	if name == scripts.Python || name == scripts.Node {
		return scripts.Source(name)
	}
	return fixtures.ReadFile("fixtures/" + name)
}

// Script writes the fixture name into dir, readable by all, and returns
// its path.
func Script(tb testing.TB, dir, name string) string {
	tb.Helper()
	b, err := fixture(name)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// Source returns the text of the fixture name.
func Source(tb testing.TB, name string) string {
	tb.Helper()
	b, err := fixture(name)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// Python returns the system's python3, or skips the test.
func Python(tb testing.TB) string {
	tb.Helper()
	for _, p := range []string{"/usr/bin/python3", "/usr/local/bin/python3"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	tb.Skipf("no system python3 for the Python MCP fixtures: %v", os.ErrNotExist)
	return ""
}

var (
	goServerOnce sync.Once
	goServerPath string
	goServerErr  error
)

// GoServer builds the Go fixture server (mcpserver) once per test process,
// statically, into a directory every uid may enter, and returns its path.
func GoServer(tb testing.TB) string {
	tb.Helper()
	goServerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mcptest-bin-")
		if err != nil {
			goServerErr = err
			return
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			goServerErr = err
			return
		}
		goServerPath = filepath.Join(dir, "mcpserver")
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		build := exec.Command(goTool, "build", "-tags", "netgo,osusergo", "-o", goServerPath, "github.com/secgpt/secgpt/spoke/mcptest/mcpserver")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			goServerErr = fmt.Errorf("failed to build the Go MCP fixture: %v\n%s", err, out)
		}
	})
	if goServerErr != nil {
		tb.Fatal(goServerErr)
	}
	return goServerPath
}

// App is one external app of a test.
type App struct {
	// Decl is the declaration; Decl.Egress is set from Egress.
	Decl spoke.External
	// Env is the server's whole environment, secrets included.
	Env map[string]string
	// Egress are the app's declared egress domains.
	Egress []string
	// Description, when set, is the spec's description (as the config's).
	Description string
}

// Wiring gives a spoke manager external apps the way cmd/secgpt does: a
// policy per spoke (the proxy profile with egress) and each app's
// declaration and environment. Built-in apps get the strict policy.
type Wiring struct {
	// Limits are every spoke's limits; zero fields take the defaults.
	Limits sandbox.Limits
	// AllowWeaker is the operator's opt-out.
	AllowWeaker bool
	// Namespaces gives every spoke new namespaces, as the config's
	// sandbox.namespaces does; an app with egress always has them.
	Namespaces bool
	// Logs collects every spoke's log (JSON lines), the servers' stderr
	// and the egress proxies' refusals included.
	Logs *Buffer

	scratch *spoketest.Scratch
	mu      sync.Mutex
	apps    map[string]*App
}

// NewWiring returns the wiring of apps, with scratch directories under a
// fresh root.
func NewWiring(tb testing.TB, list ...App) *Wiring {
	tb.Helper()
	w := &Wiring{scratch: spoketest.NewScratch(tb), apps: map[string]*App{}, Logs: &Buffer{}}
	for i := range list {
		a := list[i]
		a.Decl.Egress = len(a.Egress) > 0
		w.apps[a.Decl.Name] = &a
	}
	return w
}

// ScratchRoot is the root of the spokes' scratch directories.
func (w *Wiring) ScratchRoot() string { return w.scratch.Root() }

// ScratchDir is the scratch directory of k's (user, app).
func (w *Wiring) ScratchDir(k spoke.Key) (string, error) { return w.scratch.Dir(k) }

func (w *Wiring) app(name string) (*App, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a, ok := w.apps[name]
	return a, ok
}

// Policy is the spoke manager's policy function.
func (w *Wiring) Policy(k spoke.Key) (sandbox.Policy, error) {
	scratch, err := w.scratch.Dir(k)
	if err != nil {
		return sandbox.Policy{}, err
	}
	p := sandbox.Policy{Profile: sandbox.ProfileStrict, Limits: w.Limits, Scratch: scratch, AllowWeaker: w.AllowWeaker, Namespaces: w.Namespaces}
	if _, ok := w.app(k.App); ok {
		// An external app's data outlives its spokes, as in the product.
		p.KeepScratch = true
	}
	if a, ok := w.app(k.App); ok && a.Decl.Egress {
		p.Profile, p.Namespaces = sandbox.ProfileProxy, true
	}
	return p, nil
}

// Extra gives an external app's spoke its declaration and environment.
func (w *Wiring) Extra(k spoke.Key) ([]string, []byte, error) {
	a, ok := w.app(k.App)
	if !ok {
		return nil, nil, nil
	}
	decl := a.Decl
	if spoke.IsDiscovery(k) {
		decl.Functions = ""
	}
	return spoke.ExternalLaunch(decl, a.Env)
}

// Spokes sets a manager's options to this wiring (for hubtest.Options).
func (w *Wiring) Spokes(o *spoke.Options) {
	o.Policy, o.Extra = w.Policy, w.Extra
	o.Log = zerolog.New(w.Logs).Level(zerolog.DebugLevel)
	o.LogLevel = zerolog.DebugLevel
}

// Manager returns a spoke manager for these apps, closed when the test
// ends.
func (w *Wiring) Manager(tb testing.TB, adjust func(*spoke.Options)) *spoke.Manager {
	tb.Helper()
	opts := spoke.Options{Binary: spoketest.Binary}
	w.Spokes(&opts)
	if adjust != nil {
		adjust(&opts)
	}
	m, err := spoke.NewManager(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(m.Close)
	return m
}

// Discover describes every app with a discovery manager of its own, as
// cmd/secgpt does at start, and returns their specs completed as cmd
// completes them: egress domains, a description, an identity. From then on
// the app's spokes refuse a server whose tools changed.
func (w *Wiring) Discover(tb testing.TB, names ...string) []apps.Spec {
	tb.Helper()
	specs, err := w.TryDiscover(names...)
	if err != nil {
		tb.Fatal(err)
	}
	return specs
}

// TryDiscover is Discover returning the first failure.
func (w *Wiring) TryDiscover(names ...string) ([]apps.Spec, error) {
	m, err := spoke.NewManager(spoke.Options{Binary: spoketest.Binary, Policy: w.Policy, Extra: w.Extra,
		Log: zerolog.New(w.Logs).Level(zerolog.DebugLevel), LogLevel: zerolog.DebugLevel})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var specs []apps.Spec
	for _, name := range names {
		a, ok := w.app(name)
		if !ok {
			return nil, fmt.Errorf("no app %q in the wiring", name)
		}
		spec, err := spoke.Describe(context.Background(), m, name)
		if err != nil {
			return nil, err
		}
		spec.Egress = a.Egress
		if a.Description != "" {
			spec.Description = a.Description
		}
		id, err := json.Marshal(a.Decl)
		if err != nil {
			return nil, err
		}
		spec.Identity = string(id)
		if err := spec.Validate(); err != nil {
			return nil, err
		}
		w.mu.Lock()
		a.Decl.Functions = spoke.FunctionsDigest(spec.Functions)
		w.mu.Unlock()
		specs = append(specs, spec)
	}
	return specs, nil
}

// Buffer is a log writer safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
