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

// TestSpokeIDRangeCheckedAtStart: a sandbox.spoke_ids range that meets a
// user of the machine (root's uid 0 is refused by its bounds, /etc/passwd's
// users by their ids) stops the binary at start with one line naming the
// field; a free range runs apps.
func TestSpokeIDRangeCheckedAtStart(t *testing.T) {
	for _, tt := range []struct {
		name, ids string
		bad       bool
	}{
		{"meets nobody and the users below it", "sandbox:\n  spoke_ids:\n    first: 1000\n    count: 65000\n", true},
		{"a free range", "sandbox:\n  spoke_ids:\n    first: 1950000000\n    count: 100\n", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, tt.ids)
			r := runBinary(t, "", "ask", "--config", cfg, "--user", "u", "Use metro_hail from 'A' to 'B'.")
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			refused := r.code == exitConfig && len(lines) == 1 && strings.Contains(lines[0], "sandbox.spoke_ids")
			if refused != tt.bad || (!tt.bad && r.code != 0) {
				t.Errorf("exit %d, stderr %q; want refused at start: %v (else exit 0)", r.code, r.stderr, tt.bad)
			}
		})
	}
}
