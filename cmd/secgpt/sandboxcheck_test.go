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
// requires a row per attack, each blocked: the Go app's, then each
// interpreter's (CPython, Node), or the interpreter reported not run.
func TestSandboxCheckBlocksEveryAttack(t *testing.T) {
	if err := sandbox.Probe().Check(sandbox.Policy{Profile: sandbox.ProfileStrict}); err != nil {
		t.Skipf("the spoke sandbox cannot be applied on this kernel, so sandbox-check refuses to run: %v", err)
	}
	r := runBinary(t, "", "sandbox-check")
	if r.code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	sections := checkSections(r.stdout)
	requireBlocked(t, "Go", sections[""], sandboxcheck.Attacks())
	for _, in := range sandboxcheck.Interpreters() {
		section, ok := sections[in.Name]
		if !ok {
			t.Errorf("no section for %s", in.Name)
			continue
		}
		if _, err := in.Command(); err != nil {
			if !strings.Contains(section, "not run: ") {
				t.Errorf("%s is missing here (%v), but its section does not say it was not run:\n%s", in.Name, err, section)
			}
			continue
		}
		attacks, _ := sandboxcheck.InterpreterAttacks(in.Script)
		requireBlocked(t, in.Name, section, attacks)
	}
	if !strings.Contains(r.stdout, "attacks blocked (") {
		t.Errorf("no summary line:\n%s", r.stdout)
	}
}

// checkSections splits sandbox-check's output by runtime: "" for the Go
// app's, then each interpreter's from its "from NAME (" line.
func checkSections(out string) map[string]string {
	sections, name := map[string]string{}, ""
	for line := range strings.SplitSeq(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "from "); ok {
			if n, _, ok := strings.Cut(rest, " ("); ok {
				name = n
			}
		}
		sections[name] += line + "\n"
	}
	return sections
}

func requireBlocked(t *testing.T, runtime, section string, attacks []sandboxcheck.Attack) {
	t.Helper()
	for _, a := range attacks {
		row := ""
		for line := range strings.SplitSeq(section, "\n") {
			if strings.HasPrefix(line, a.Title+"  ") {
				row = line
			}
		}
		if fields := strings.Fields(strings.TrimPrefix(row, a.Title)); len(fields) == 0 || fields[0] != "yes" {
			t.Errorf("%s from %s: row %q, want it blocked", a.Name, runtime, row)
		}
	}
}
