package main

import (
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/sandbox"
)

// exactVersion is a pinned npm version: no range, no tag.
var exactVersion = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// npmPackage is an npm package name, scoped or not.
var npmPackage = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*$`)

// defaultAppsDir is where `secgpt apps add` installs packages: readable to
// the unprivileged uid that spokes run as under a root secgpt, so not
// under root's home.
func defaultAppsDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/secgpt/mcp-apps"
	}
	return filepath.Join(filepath.Dir(defaultConfig().Database), "mcp-apps")
}

// runAppsAdd installs an MCP server and prints its config entry:
//
//	secgpt apps add [--name N] [--into DIR] [--node PATH] npm:PKG@VERSION [ARG...]
//	secgpt apps add [--name N] [--python PATH] [--node PATH] PATH [ARG...]
//
// An npm package is installed pinned (no range, no tag), without running
// its install scripts, into DIR/PKG@VERSION; its bin script runs under
// Node, and its node_modules become readable to it. A path is a Python
// script (run by python3), a Node script, or an executable (a Go server).
// The entry says the app's code identity and has limits that real
// runtimes start under; paste it under apps.external.
func runAppsAdd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("apps add", stderr)
	name := fs.String("name", "", "the app's name (default: from the package or file name)")
	into := fs.String("into", defaultAppsDir(), "where npm packages are installed")
	node := fs.String("node", "", "the Node executable (default: node on PATH)")
	python := fs.String("python", "", "the Python executable (default: python3 on PATH)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 1 {
		return &usageError{msg: "apps add: give npm:PACKAGE@VERSION or the path of a server"}
	}
	source, extra := fs.Arg(0), fs.Args()[1:]
	var e ExternalApp
	var err error
	if spec, ok := strings.CutPrefix(source, "npm:"); ok {
		e, err = addNPM(ctx, spec, *into, *node, stderr)
	} else {
		e, err = addPath(source, *node, *python)
	}
	if err != nil {
		return err
	}
	e.Args = append(e.Args, extra...)
	if *name != "" {
		e.Name = *name
	}
	// The exec profile's limits, which real runtimes start under (Node
	// opens hundreds of files as it loads its modules), written out so
	// that the operator sees and may tune them.
	d := sandbox.DefaultLimitsFor(sandbox.ProfileExec)
	e.Limits = LimitsConfig{CPUSeconds: d.CPUSeconds, MemoryBytes: d.Memory, Tasks: d.Tasks, OpenFiles: d.OpenFiles}
	if err := (AppsConfig{External: []ExternalApp{e}}).validateExternal(map[string]bool{}); err != nil {
		return fmt.Errorf("apps add: the entry would not be valid: %w", err)
	}
	id, err := e.codeIdentity()
	if err != nil {
		return err
	}
	entry, err := yaml.Marshal([]externalEntry{entryOf(e)})
	if err != nil {
		return fmt.Errorf("failed to encode the config entry: %w", err)
	}
	fmt.Fprintf(stdout, "# secgpt apps add %s\n# code identity: %s\n# Paste under apps.external in the config; `secgpt apps` starts it and lists its tools.\n%s",
		strings.Join(args, " "), id, entry)
	return nil
}

// externalEntry is the config entry as printed: the fields a new app uses.
type externalEntry struct {
	Name     string            `yaml:"name"`
	Command  string            `yaml:"command"`
	Args     []string          `yaml:"args,omitempty,flow"`
	Env      map[string]string `yaml:"env,omitempty"`
	ReadOnly []string          `yaml:"read_only,omitempty,flow"`
	Limits   map[string]uint64 `yaml:"limits,omitempty,flow"`
}

func entryOf(e ExternalApp) externalEntry {
	return externalEntry{Name: e.Name, Command: e.Command, Args: e.Args, Env: e.Env, ReadOnly: e.ReadOnly,
		Limits: map[string]uint64{"cpu_seconds": e.Limits.CPUSeconds, "memory_bytes": e.Limits.MemoryBytes, "tasks": e.Limits.Tasks, "open_files": e.Limits.OpenFiles}}
}

// addNPM installs PKG@VERSION into into/PKG@VERSION and declares its bin.
func addNPM(ctx context.Context, spec, into, node string, stderr io.Writer) (ExternalApp, error) {
	at := strings.LastIndex(spec, "@")
	if at <= 0 {
		return ExternalApp{}, &usageError{msg: fmt.Sprintf("apps add: npm:%s has no version: pin one, as npm:PACKAGE@1.2.3", spec)}
	}
	pkg, version := spec[:at], spec[at+1:]
	switch {
	case !npmPackage.MatchString(pkg):
		return ExternalApp{}, &usageError{msg: fmt.Sprintf("apps add: %q is not an npm package name", pkg)}
	case !exactVersion.MatchString(version):
		return ExternalApp{}, &usageError{msg: fmt.Sprintf("apps add: %q is not an exact version: pin one, as 1.2.3 (no range, no tag)", version)}
	}
	node, err := findExecutable(node, "node")
	if err != nil {
		return ExternalApp{}, err
	}
	dir := filepath.Join(into, strings.ReplaceAll(pkg, "/", "+")+"@"+version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ExternalApp{}, fmt.Errorf("failed to create %s: %w", dir, err)
	}
	// Spokes' uid must be able to reach the install.
	for d := dir; d != filepath.Dir(into) && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			return ExternalApp{}, fmt.Errorf("failed to open %s to the apps' uid: %w", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
		fmt.Fprintf(stderr, "installing %s@%s into %s (its install scripts do not run)\n", pkg, version, dir)
		npm := exec.CommandContext(ctx, "npm", "install", "--prefix", dir, "--ignore-scripts", "--no-audit", "--no-fund",
			"--omit=dev", "--save-exact", pkg+"@"+version)
		npm.Stdout, npm.Stderr = stderr, stderr
		if err := npm.Run(); err != nil {
			return ExternalApp{}, fmt.Errorf("failed to install %s@%s with npm: %w", pkg, version, err)
		}
	}
	if err := exec.CommandContext(ctx, "chmod", "-R", "a+rX", dir).Run(); err != nil {
		return ExternalApp{}, fmt.Errorf("failed to make %s readable: %w", dir, err)
	}
	entry, err := binScript(filepath.Join(dir, "node_modules", pkg), pkg)
	if err != nil {
		return ExternalApp{}, err
	}
	return ExternalApp{
		Name: appNameOf(pkg), Command: node, Args: []string{entry},
		ReadOnly: []string{filepath.Join(dir, "node_modules")},
	}, nil
}

// binScript is the script a package's "bin" names: its only one, or the
// one named as the package.
func binScript(pkgDir, pkg string) (string, error) {
	b, err := os.ReadFile(filepath.Join(pkgDir, "package.json"))
	if err != nil {
		return "", fmt.Errorf("failed to read the package's manifest: %w", err)
	}
	var manifest struct {
		Bin any `json:"bin"`
	}
	if err := json.Unmarshal(b, &manifest); err != nil {
		return "", fmt.Errorf("failed to read the package's manifest: %w", err)
	}
	var rel string
	switch bin := manifest.Bin.(type) {
	case string:
		rel = bin
	case map[string]any:
		base := pkg[strings.LastIndex(pkg, "/")+1:]
		names := sortedNames(bin)
		pick := names
		if slices.Contains(names, base) {
			pick = []string{base}
		}
		if len(pick) != 1 {
			return "", fmt.Errorf("%s has %d executables (%s): install it by path, naming the server's script", pkg, len(names), strings.Join(names, ", "))
		}
		rel, _ = bin[pick[0]].(string)
	}
	if rel == "" {
		return "", fmt.Errorf("%s names no executable in its package.json (bin)", pkg)
	}
	path := filepath.Join(pkgDir, filepath.Clean("/"+rel))
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s's executable: %w", pkg, err)
	}
	return path, nil
}

// addPath declares a server by path: python3 for a .py script, node for
// a .js/.mjs/.cjs one, the file itself for an ELF executable.
func addPath(path, node, python string) (ExternalApp, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return ExternalApp{}, err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return ExternalApp{}, fmt.Errorf("apps add: %w", err)
	}
	base := strings.TrimSuffix(filepath.Base(abs), filepath.Ext(abs))
	e := ExternalApp{Name: appNameOf(base)}
	switch filepath.Ext(abs) {
	case ".py":
		if e.Command, err = findExecutable(python, "python3"); err != nil {
			return ExternalApp{}, err
		}
		e.Args = []string{abs}
	case ".js", ".mjs", ".cjs":
		if e.Command, err = findExecutable(node, "node"); err != nil {
			return ExternalApp{}, err
		}
		e.Args = []string{abs}
	default:
		f, err := elf.Open(abs)
		if err != nil {
			return ExternalApp{}, fmt.Errorf("apps add: %s is neither a Python or Node script nor an executable", abs)
		}
		f.Close()
		e.Command = abs
	}
	return e, nil
}

// findExecutable resolves an interpreter: given, else on PATH; absolute,
// without symlinks, an ELF file (the sandbox executes that file): a
// wrapper script (a version manager's shim) is asked for the interpreter
// it runs.
func findExecutable(given, name string) (string, error) {
	path := given
	if path == "" {
		p, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("apps add: no %s on PATH: %w", name, err)
		}
		path = p
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return "", fmt.Errorf("apps add: %w", err)
	}
	if f, err := elf.Open(abs); err == nil {
		f.Close()
		return abs, nil
	}
	ask := map[string][]string{"python3": {"-c", "import sys; print(sys.executable)"}, "node": {"-p", "process.execPath"}}[name]
	out, err := exec.Command(abs, ask...).Output()
	if err != nil {
		return "", fmt.Errorf("apps add: %s is not an executable file, and did not say which interpreter it runs: %w", abs, err)
	}
	return filepath.EvalSymlinks(strings.TrimSpace(string(out)))
}

// appNameOf makes an app name of a package or file name: lower case, runs
// of other characters as one underscore, the words "mcp" and "server"
// dropped where something else is left ("@modelcontextprotocol/server-memory"
// is memory).
func appNameOf(s string) string {
	s = s[strings.LastIndex(s, "/")+1:]
	var words []string
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !('a' <= r && r <= 'z' || '0' <= r && r <= '9') }) {
		if w != "mcp" && w != "server" {
			words = append(words, w)
		}
	}
	name := strings.Join(words, "_")
	if name != "" && !apps.ValidName(name) {
		name = "app_" + name
	}
	if name == "" || !apps.ValidName(name) {
		return "mcp_app"
	}
	return name
}
