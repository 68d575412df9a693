package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/sandbox"
)

// TestProtectionReport: the start-up report has a line for each
// protection issue 11 names, each on or off with why, and cgroup limits
// that are on name the bounds of both profiles.
func TestProtectionReport(t *testing.T) {
	cfg, _, err := configFor(testConfig(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	lines := protectionLines(cfg, sandbox.Probe())
	shape := regexp.MustCompile(`^[a-z_ ]+: (on|off)\b.* \(.+\)$`)
	disk := regexp.MustCompile(`^disk quota: (enforced|checked, not enforced)\b.*; .+$`)
	for _, want := range []string{"uid separation", "mount view", "cgroup per spoke", "cgroup limits", "disk quota", "budgets"} {
		var line string
		for _, l := range lines {
			if strings.HasPrefix(l, want+": ") {
				line = l
			}
		}
		if line == "" {
			t.Errorf("no line for %s in %q", want, lines)
			continue
		}
		if !shape.MatchString(line) && !(want == "disk quota" && disk.MatchString(line)) {
			t.Errorf("%q does not say on or off and why", line)
		}
		if want == "cgroup limits" && strings.Contains(line, ": on ") && !strings.Contains(line, "external apps: memory 1024 MiB") {
			t.Errorf("%q does not name the exec profile's bounds", line)
		}
	}
}
