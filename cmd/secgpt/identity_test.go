package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestIdentityCoversTheCode: editing any file the app can execute from
// what it declares changes its identity (a package's dependency in
// node_modules, a module run with -m from its working directory, a module
// on its PYTHONPATH, a file under a read-only path); editing data in a
// directory named in its arguments does not.
func TestIdentityCoversTheCode(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	entry := write("npm/node_modules/server/dist/index.js", "require('dep')")
	write("npm/node_modules/server/package.json", "{}")
	write("npm/node_modules/dep/lib.js", "module.exports = 1")
	write("py/work/mod.py", "print(1)")
	write("py/path/helper.py", "X = 1")
	write("extra/plugin.js", "1")
	write("data/report.txt", "data")
	python, err := os.Executable() // any executable file will do
	if err != nil {
		t.Fatal(err)
	}
	apps := map[string]ExternalApp{
		"node": {Name: "node", Command: python, Args: []string{entry, filepath.Join(root, "data")}, ReadOnly: []string{filepath.Join(root, "extra")}},
		"py": {Name: "py", Command: python, Args: []string{"-m", "mod"}, Dir: filepath.Join(root, "py/work"),
			Env: map[string]string{"PYTHONPATH": filepath.Join(root, "py/path")}},
	}
	tests := []struct {
		name, app, file string
		changes         bool
	}{
		{"a dependency in node_modules", "node", "npm/node_modules/dep/lib.js", true},
		{"the package's manifest", "node", "npm/node_modules/server/package.json", true},
		{"a new file in node_modules", "node", "npm/node_modules/dep/new.js", true},
		{"a file under a read-only path", "node", "extra/plugin.js", true},
		{"data in a directory named in args", "node", "data/report.txt", false},
		{"a module run with -m", "py", "py/work/mod.py", true},
		{"a module on PYTHONPATH", "py", "py/path/helper.py", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := apps[tt.app]
			before, err := e.codeIdentity()
			if err != nil {
				t.Fatal(err)
			}
			// The same size and, on coarse clocks, the same mtime: the
			// cache must still see the change.
			p := filepath.Join(root, tt.file)
			old, _ := os.ReadFile(p)
			write(tt.file, strings.ToUpper(string(old))+"!")
			now := time.Now()
			os.Chtimes(p, now, now)
			after, err := e.codeIdentity()
			if err != nil {
				t.Fatal(err)
			}
			if (before != after) != tt.changes {
				t.Fatalf("identity changed = %v, want %v", before != after, tt.changes)
			}
		})
	}
}

// TestIdentityLeavesScratchOut: paths in the user's scratch are the user's
// data: the identity is computed without them, the same for every user.
func TestIdentityLeavesScratchOut(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	plain := ExternalApp{Name: "a", Command: self}
	withScratch := plain
	withScratch.ReadOnly = []string{"{scratch}/data"}
	withScratch.Dir = "{scratch}/work"
	if _, err := withScratch.codeIdentity(); err != nil {
		t.Fatalf("identity with scratch paths: %v", err)
	}
	if roots := withScratch.codeRoots(); len(roots) != 1 || roots[0] != self {
		t.Fatalf("code roots %v, want only the command", roots)
	}
}

// TestIdentityCacheSurvivesARestart: a saved cache is read back, and an
// entry whose file changed since is not used.
func TestIdentityCacheSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.js")
	os.WriteFile(p, []byte("one"), 0o644)
	c := newHashCache()
	sum1, _, err := c.sum(p)
	if err != nil {
		t.Fatal(err)
	}
	cacheFile := filepath.Join(dir, "code-hashes.json")
	if err := c.save(cacheFile); err != nil {
		t.Fatal(err)
	}
	loaded := newHashCache()
	loaded.load(cacheFile)
	if got := loaded.files[p].Sum; got != sum1 {
		t.Fatalf("cache read back %q, want %q", got, sum1)
	}
	os.WriteFile(p, []byte("two"), 0o644)
	sum2, _, err := loaded.sum(p)
	if err != nil || sum2 == sum1 {
		t.Fatalf("a changed file kept its cached hash: %v", err)
	}
}
