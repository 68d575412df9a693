package main

import (
	"strings"
	"testing"

	"github.com/secgpt/secgpt/apps/hostile"
	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/sandboxcheck"
)

// TestConfigCannotInstallHostile: the hostile app is linked into the
// binary for sandbox-check, but no configuration can install it.
func TestConfigCannotInstallHostile(t *testing.T) {
	path := testConfig(t, "apps:\n  installed: ["+hostile.Name+"]\n")
	r := runBinary(t, "", "apps", "--config", path)
	if r.code != exitConfig || !strings.Contains(r.stderr, `no built-in app named "`+hostile.Name+`"`) {
		t.Fatalf("exit %d, stderr %q; want exit %d refusing the app", r.code, r.stderr, exitConfig)
	}
	r = runBinary(t, "", "apps")
	if r.code != exitOK || strings.Contains(r.stdout, hostile.Name) {
		t.Fatalf("exit %d; the default installed apps include %s:\n%s", r.code, hostile.Name, r.stdout)
	}
}

// TestSandboxCheckBlocksEveryAttack runs `secgpt sandbox-check` and
// requires a row per attack, each blocked.
func TestSandboxCheckBlocksEveryAttack(t *testing.T) {
	if err := sandbox.Probe().Check(sandbox.Policy{Profile: sandbox.ProfileStrict}); err != nil {
		t.Skipf("the spoke sandbox cannot be applied on this kernel, so sandbox-check refuses to run: %v", err)
	}
	r := runBinary(t, "", "sandbox-check")
	if r.code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, a := range sandboxcheck.Attacks() {
		row := ""
		for line := range strings.SplitSeq(r.stdout, "\n") {
			if strings.HasPrefix(line, a.Title+"  ") {
				row = line
			}
		}
		if fields := strings.Fields(strings.TrimPrefix(row, a.Title)); len(fields) == 0 || fields[0] != "yes" {
			t.Errorf("%s: row %q, want it blocked", a.Name, row)
		}
	}
}
