package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnreachableScratchFailsAtStart: a scratch directory the apps'
// sandboxed user cannot reach stops every front end at start, with one
// line naming the field and the config exit code, instead of failing each
// approved request later with an internal path in the answer.
func TestUnreachableScratchFailsAtStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("spokes run as the hub's own uid unless it is root: any scratch directory it can use, they can reach")
	}
	private := t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(private, "config.yaml")
	text := fmt.Sprintf("llm:\n  provider: simulator\ndatabase: %s\nspokes:\n  scratch_dir: %s\n", filepath.Join(private, "secgpt.db"), filepath.Join(private, "scratch"))
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"ask", "--config", cfg, "--user", "u", "Use metro_hail from 'A' to 'B'."},
		{"chat", "--config", cfg, "--user", "u"},
	} {
		r := runBinary(t, "Use metro_hail from 'A' to 'B'.\no\n/quit\n", args...)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != exitConfig || len(lines) != 1 || !strings.Contains(lines[0], "spokes.scratch_dir") || !strings.Contains(lines[0], "cannot reach") {
			t.Errorf("%s: exit %d, stderr %q, stdout %q; want exit %d and one line naming spokes.scratch_dir", args[0], r.code, r.stderr, r.stdout, exitConfig)
		}
	}
}
