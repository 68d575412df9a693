package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/bench"
)

// TestBenchRuns: a short `secgpt bench` (one query per category, no model
// latency, a sweep of 1 and 3 users) runs every query in both modes, as
// planned, and writes the table and the report; its figures are not
// judged here (the machine is shared).
func TestBenchRuns(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bench.json")
	r := runBinary(t, "", "bench", "--latency", "0", "--per-category", "1", "--users", "1,3", "--json", out)
	if r.code != 0 {
		t.Fatalf("bench exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"overall, paper's mix", "single app", "no app", "annotation", "Users arriving at once", "The paper"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, r.stdout)
		}
	}
	report := readReport(t, out)
	if len(report.Queries) != len(bench.Categories) || len(report.Failures) != 0 || len(report.Sweep) != 2 {
		t.Fatalf("report: %d queries, %d sweep levels, failures %v", len(report.Queries), len(report.Sweep), report.Failures)
	}
	for _, q := range report.Queries {
		for _, p := range []bench.Pair{q.Cold, q.Warm} {
			if p.Isolated.Calls == 0 || p.Vanilla.Calls == 0 || p.Isolated.PromptBytes == 0 {
				t.Errorf("%q: no model use measured: %+v", q.Text, p)
			}
		}
		if q.Category == bench.NoApp && q.Cold.Isolated.Calls != 1 {
			t.Errorf("a no-app query took %d model calls isolated, want 1", q.Cold.Isolated.Calls)
		}
	}
	if l := report.Sweep[1]; l.Users != 3 || l.Cold.Errors != 0 || l.Cold.Processes < 3 || l.Cold.SpokeRSS == 0 {
		t.Errorf("sweep level = %+v, want 3 users served by at least 3 spoke processes", l)
	}
}

// TestBenchSweepOnly: --sweep-only runs the sweep alone, and each wave
// counts the kernel entries it cost (page faults, context switches).
func TestBenchSweepOnly(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bench.json")
	r := runBinary(t, "", "bench", "--latency", "0", "--sweep-only", "--users", "2", "--json", out)
	if r.code != 0 {
		t.Fatalf("bench exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "Isolated against vanilla") || !strings.Contains(r.stdout, "switches/query") {
		t.Errorf("the table is not the sweep's alone:\n%s", r.stdout)
	}
	report := readReport(t, out)
	if len(report.Queries) != 0 || len(report.Sweep) != 1 || len(report.Failures) != 0 {
		t.Fatalf("report: %d queries, %d sweep levels, failures %v", len(report.Queries), len(report.Sweep), report.Failures)
	}
	if c := report.Sweep[0].Cold; c.FaultsPerQuery == 0 || c.SwitchesPerQuery == 0 || c.SpokeFaultsPerQuery == 0 {
		t.Errorf("cold wave = %+v, want its faults and switches counted", c)
	}
}

// readReport reads the report a bench run wrote.
func readReport(t *testing.T, path string) bench.Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var report bench.Report
	if err := json.Unmarshal(b, &report); err != nil {
		t.Fatal(err)
	}
	return report
}

func TestBenchRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--users", "10,x"}, {"--latency", "-1s"}, {"extra"}} {
		if r := runBinary(t, "", append([]string{"bench"}, args...)...); r.code != exitUsage {
			t.Errorf("bench %v: exit %d, want %d", args, r.code, exitUsage)
		}
	}
}
