//go:build linux

package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCgroupLifecycle creates a spoke's cgroup, checks the bounds the
// kernel holds, and removes it with a process still inside.
func TestCgroupLifecycle(t *testing.T) {
	if ok, why := CgroupSupport(); !ok {
		t.Skipf("no cgroup per spoke on this machine: %s", why)
	}
	l := Limits{Memory: 96 << 20, Tasks: 40}
	start := time.Now()
	cg, err := NewCgroup(l)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Since(start)
	defer cg.Remove()
	want := map[string]string{"pids.max": "40"}
	if cg.layout.v2 {
		want["memory.max"] = strconv.Itoa(96 << 20)
	} else {
		want["memory.limit_in_bytes"] = strconv.Itoa(96 << 20)
	}
	for file, v := range want {
		b, err := os.ReadFile(cg.dirOf(file) + "/" + file)
		if err != nil || strings.TrimSpace(string(b)) != v {
			t.Errorf("%s = %q (%v), want %s", file, b, err, v)
		}
	}
	p, err := os.StartProcess("/bin/sleep", []string{"sleep", "60"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cg.Add(p.Pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _, _ = p.Wait(); close(done) }()
	start = time.Now()
	cg.Remove()
	removed := time.Since(start)
	for _, d := range cg.dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s still there after Remove: %v", d, err)
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the process in the cgroup survived Remove")
	}
	t.Logf("cgroup created in %v, removed (killing one process) in %v", created, removed)
}

// BenchmarkCgroup measures what a cgroup costs a spoke's start beyond the
// one write of Add: create it, write its bounds, remove it.
func BenchmarkCgroup(b *testing.B) {
	if ok, why := CgroupSupport(); !ok {
		b.Skipf("no cgroup per spoke on this machine: %s", why)
	}
	for b.Loop() {
		cg, err := NewCgroup(Limits{Memory: 1 << 30, Tasks: 256})
		if err != nil {
			b.Fatal(err)
		}
		cg.Remove()
	}
}

// TestStaleCgroupsAreSwept: an empty cgroup left by a process that no
// longer runs is removed; one of a running process, or one that still
// holds a task, is kept; a cgroup of an earlier process with this PID
// cannot collide with a new one (names carry a per-process token).
func TestStaleCgroupsAreSwept(t *testing.T) {
	if ok, why := CgroupSupport(); !ok {
		t.Skipf("no cgroup per spoke on this machine: %s", why)
	}
	layout, _ := cgroups()
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(layout.pids, strconv.Itoa(dead.Process.Pid)+"-0-1")
	live := filepath.Join(layout.pids, strconv.Itoa(os.Getppid())+"-0-1")
	for _, d := range []string{stale, live} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	defer syscall.Rmdir(live)
	defer syscall.Rmdir(stale)
	sweepStaleCgroups(layout)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale cgroup %s kept (%v)", stale, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("cgroup of a running process removed: %v", err)
	}
	cg, err := NewCgroup(Limits{Memory: 64 << 20, Tasks: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Remove()
	if name := filepath.Base(cg.dirs[0]); !strings.Contains(name, "-"+cgroupRun+"-") {
		t.Errorf("cgroup %s carries no per-process token", name)
	}
}

// TestOpenCgroup: the hub opens the cgroup the spawner made by its
// directories, and only a cgroup of this machine's layout.
func TestOpenCgroup(t *testing.T) {
	if ok, why := CgroupSupport(); !ok {
		t.Skipf("no cgroup per spoke on this machine: %s", why)
	}
	l := Limits{Memory: 96 << 20, Tasks: 40}
	cg, err := NewCgroup(l)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Remove()
	opened, err := OpenCgroup(cg.Dirs(), l)
	if err != nil {
		t.Fatal(err)
	}
	if opened.Memory != l.Memory || opened.OOMKills() != 0 {
		t.Fatalf("opened %+v, want memory %d and no OOM kill", opened, l.Memory)
	}
	if err := opened.Update(Limits{Memory: 64 << 20, Tasks: 30}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cg.dirOf("pids.max") + "/pids.max")
	if err != nil || strings.TrimSpace(string(b)) != "30" {
		t.Fatalf("pids.max = %q (%v) after the update through the opened cgroup, want 30", b, err)
	}
	other := cg.Dirs()
	other[0] = "/tmp/" + filepath.Base(other[0])
	for _, dirs := range [][]string{nil, other, append(cg.Dirs(), "/sys/fs/cgroup/x")} {
		if _, err := OpenCgroup(dirs, l); err == nil {
			t.Errorf("OpenCgroup(%v) opened a cgroup outside this machine's layout", dirs)
		}
	}
}
