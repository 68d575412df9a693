package spoke

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// What an external app's server finds on disk: a home, XDG directories and
// a temporary directory in its (user, app)'s scratch, so that a server that
// keeps state (the memory server's memory.jsonl) keeps it per user and
// across sessions with no path in the config; and declared paths that may
// name that scratch.

// ScratchPlaceholder, leading a declared path or argument, stands for the
// (user, app)'s scratch directory: "{scratch}/notes".
const ScratchPlaceholder = "{scratch}"

// scratchEnv are the variables that point a server into its scratch, each
// with its directory relative to the scratch.
var scratchEnv = []struct{ name, dir string }{
	{"HOME", "."},
	{"XDG_CONFIG_HOME", ".config"},
	{"XDG_DATA_HOME", ".local/share"},
	{"XDG_STATE_HOME", ".local/state"},
	{"XDG_CACHE_HOME", ".cache"},
	{"TMPDIR", "tmp"},
}

// ScratchEnv are the environment variables the spoke sets for an external
// app itself; a declaration may not set them.
func ScratchEnv() []string {
	names := make([]string, len(scratchEnv))
	for i, e := range scratchEnv {
		names[i] = e.name
	}
	return names
}

// expandScratch replaces a leading ScratchPlaceholder of s with scratch.
func expandScratch(s, scratch string) string {
	rest, ok := strings.CutPrefix(s, ScratchPlaceholder)
	if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
		return s
	}
	return filepath.Clean(scratch + rest)
}

// withScratch returns decl with every placeholder expanded, and creates its
// read-write directories under scratch. A placeholder without a scratch
// directory is an error.
func withScratch(decl External, scratch string) (External, error) {
	uses := func(list ...string) bool {
		return slices.ContainsFunc(list, func(s string) bool { return strings.HasPrefix(s, ScratchPlaceholder) })
	}
	if scratch == "" {
		if uses(decl.Args...) || uses(decl.ReadOnly...) || uses(decl.ReadWrite...) || uses(decl.Dir) {
			return decl, fmt.Errorf("app %s names %s but its spoke has no scratch directory", decl.Name, ScratchPlaceholder)
		}
		return decl, nil
	}
	expand := func(list []string) []string {
		out := make([]string, len(list))
		for i, s := range list {
			out[i] = expandScratch(s, scratch)
		}
		return out
	}
	decl.Args, decl.ReadOnly, decl.ReadWrite = expand(decl.Args), expand(decl.ReadOnly), expand(decl.ReadWrite)
	decl.Dir = expandScratch(decl.Dir, scratch)
	for _, path := range append(slices.Clone(decl.ReadWrite), decl.Dir) {
		if within(path, scratch) {
			if err := os.MkdirAll(path, 0o700); err != nil {
				return decl, fmt.Errorf("failed to create %s for app %s: %w", path, decl.Name, err)
			}
		}
	}
	return decl, nil
}

// scratchVars returns env with the scratch variables added (HOME, XDG_*,
// TMPDIR), after creating their directories, and a leading
// ScratchPlaceholder in a declared value expanded (the memory server's
// MEMORY_FILE_PATH: "{scratch}/memory.jsonl").
func scratchVars(env []string, scratch string) ([]string, error) {
	if scratch == "" {
		return env, nil
	}
	for i, v := range env {
		if k, val, ok := strings.Cut(v, "="); ok {
			env[i] = k + "=" + expandScratch(val, scratch)
		}
	}
	for _, e := range scratchEnv {
		dir := filepath.Join(scratch, e.dir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("failed to create %s: %w", dir, err)
		}
		env = slices.DeleteFunc(env, func(v string) bool { return strings.HasPrefix(v, e.name+"=") })
		env = append(env, e.name+"="+dir)
	}
	return env, nil
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
