package spoke_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/sandbox"
)

// TestSpareSpokeInItsCgroup: a spoke started from a spare is in a cgroup
// of its own with its policy's memory and task bounds, as a spoke started
// directly is. Spares used to start outside any cgroup, so a spoke from a
// spare had no memory or task bound at all.
func TestSpareSpokeInItsCgroup(t *testing.T) {
	if ok, why := sandbox.CgroupSupport(); !ok {
		t.Skipf("no cgroup per spoke on this machine: %s", why)
	}
	opts, _ := spareOptions(t, 1)
	m := newManager(t, opts)
	spare := waitSpares(t, m, 1)[0]
	_, info, err := m.Run(context.Background(), key("@a:x", "echo"), step("say", `{"text":"hi"}`), &handler{})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Prestarted || info.PID != spare {
		t.Fatalf("info = %+v, want a cold start from spare %d", info, spare)
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(info.PID), "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	want := sandbox.DefaultLimits()
	bounds := map[string]string{"memory": "memory.limit_in_bytes", "pids": "pids.max"}
	found := 0
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 || !strings.Contains(parts[2], "/secgpt/") {
			continue
		}
		file, ok := bounds[parts[1]]
		if parts[0] == "0" {
			file, ok = "memory.max", true
		}
		if !ok {
			continue
		}
		dir := filepath.Join("/sys/fs/cgroup", parts[1], parts[2])
		if parts[0] == "0" {
			dir = filepath.Join("/sys/fs/cgroup", parts[2])
		}
		got, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Logf("cannot read %s: %v", file, err)
			continue
		}
		limit := strconv.FormatUint(want.Memory, 10)
		if strings.HasPrefix(file, "pids") {
			limit = strconv.FormatUint(want.Tasks, 10)
		}
		if strings.TrimSpace(string(got)) != limit {
			t.Errorf("%s = %s, want %s", file, strings.TrimSpace(string(got)), limit)
		}
		found++
	}
	if found == 0 {
		t.Fatalf("the spoke from a spare is in no spoke's cgroup:\n%s", b)
	}
}
