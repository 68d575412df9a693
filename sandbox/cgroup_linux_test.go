//go:build linux

package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
	l := Limits{Memory: 96 << 20, Tasks: 40, CPUWeight: 50, CPUPercent: 150, Swap: 16 << 20}
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
		if _, err := os.Stat(cg.dirOf("memory.swap.max") + "/memory.swap.max"); err == nil {
			want["memory.swap.max"] = strconv.Itoa(16 << 20)
		}
		if cg.layout.noCPU == "" {
			want["cpu.weight"], want["cpu.max"] = "50", "150000 100000"
		}
	} else {
		want["memory.limit_in_bytes"] = strconv.Itoa(96 << 20)
		if cg.layout.memsw {
			want["memory.memsw.limit_in_bytes"] = strconv.Itoa(112 << 20)
		}
		if cg.layout.noCPU == "" {
			want["cpu.shares"], want["cpu.cfs_quota_us"], want["cpu.cfs_period_us"] = "512", "150000", "100000"
		}
	}
	if cg.layout.noCPU != "" {
		t.Logf("no CPU bound here: %s", cg.layout.noCPU)
	} else {
		// All spokes together weigh one task per processor.
		file, want := "cpu.shares", strconv.Itoa(min(1024*runtime.NumCPU(), 262144))
		if cg.layout.v2 {
			file, want = "cpu.weight", strconv.Itoa(min(100*runtime.NumCPU(), MaxCPUWeight))
		}
		if b, err := os.ReadFile(filepath.Join(cg.layout.parents[ctlCPU], file)); err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("the spokes' parent's %s = %q (%v), want %s", file, b, err, want)
		}
	}
	for _, r := range []string{"memory", "tasks"} {
		if b := CgroupBound(r); !strings.HasPrefix(b, "cgroup v") {
			t.Errorf("CgroupBound(%s) = %q", r, b)
		}
	}
	if b := CgroupBound("cpu"); (b == "") != (cg.layout.noCPU != "") {
		t.Errorf("CgroupBound(cpu) = %q with noCPU %q", b, cg.layout.noCPU)
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
	for _, d := range cg.unique() {
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

// BenchmarkCgroup measures what a cgroup costs a spoke's start and end:
// create it, write its bounds (memory, swap, tasks, CPU), move a process
// in, and remove it (the process moved back out first, as if it had
// ended).
func BenchmarkCgroup(b *testing.B) {
	if ok, why := CgroupSupport(); !ok {
		b.Skipf("no cgroup per spoke on this machine: %s", why)
	}
	p, err := os.StartProcess("/bin/sleep", []string{"sleep", "600"}, &os.ProcAttr{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Kill(); _, _ = p.Wait() }()
	pid := []byte(strconv.Itoa(p.Pid))
	for b.Loop() {
		cg, err := NewCgroup(DefaultLimitsFor(ProfileExec))
		if err != nil {
			b.Fatal(err)
		}
		if err := cg.Add(p.Pid); err != nil {
			b.Fatal(err)
		}
		for _, d := range cg.unique() {
			// Back to the hub's own cgroup, above the spokes' parent.
			if err := os.WriteFile(filepath.Join(filepath.Dir(filepath.Dir(d)), "cgroup.procs"), pid, 0); err != nil {
				b.Fatal(err)
			}
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
	stale := filepath.Join(layout.parents[ctlPids], strconv.Itoa(dead.Process.Pid)+"-0-1")
	live := filepath.Join(layout.parents[ctlPids], strconv.Itoa(os.Getppid())+"-0-1")
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
	cg, err := NewCgroup(DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Remove()
	if name := filepath.Base(cg.dirs[ctlMemory]); !strings.Contains(name, "-"+cgroupRun()+"-") {
		t.Errorf("cgroup %s carries no per-process token", name)
	}
}

// TestCgroupWrites: the files and values that bound a spoke's cgroup, in
// each layout, whether or not this machine has it: v2 with and without a
// delegated cpu controller, v1 with and without swap accounting and the
// cpu controller. memsw is lifted before the memory bound is written, as
// the kernel requires memsw ≥ limit_in_bytes.
func TestCgroupWrites(t *testing.T) {
	l := Limits{Memory: 64 << 20, Swap: 8 << 20, Tasks: 32, CPUWeight: 200, CPUPercent: 50}
	tests := []struct {
		name   string
		layout cgroupLayout
		want   string
	}{
		{"v2", cgroupLayout{v2: true},
			"memory.max=67108864 memory.swap.max=8388608 pids.max=32 cpu.weight=200 cpu.max=50000 100000"},
		{"v2 without cpu", cgroupLayout{v2: true, noCPU: "not delegated"},
			"memory.max=67108864 memory.swap.max=8388608 pids.max=32"},
		{"v1 with memsw and cpu", cgroupLayout{memsw: true},
			"memory.memsw.limit_in_bytes=-1 memory.limit_in_bytes=67108864 pids.max=32 memory.memsw.limit_in_bytes=75497472 cpu.shares=2048 cpu.cfs_period_us=100000 cpu.cfs_quota_us=50000"},
		{"v1 without memsw or cpu", cgroupLayout{noCPU: "not mounted"},
			"memory.limit_in_bytes=67108864 pids.max=32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, w := range tt.layout.writes(l) {
				got = append(got, w[0]+"="+w[1])
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("writes:\n got %s\nwant %s", strings.Join(got, " "), tt.want)
			}
		})
	}
	if shares := (cgroupLayout{}).writes(Limits{Memory: 1, Tasks: 1, CPUWeight: 1, CPUPercent: 10}); shares[2] != [2]string{"cpu.shares", "10"} {
		t.Errorf("weight 1: %v, want cpu.shares 10", shares[2])
	}
}

// TestOpenCgroup: the hub opens the cgroup the spawner made by its
// directories, and only a cgroup of this machine's layout.
func TestOpenCgroup(t *testing.T) {
	if ok, why := CgroupSupport(); !ok {
		t.Skipf("no cgroup per spoke on this machine: %s", why)
	}
	l := Limits{Memory: 96 << 20, Tasks: 40, CPUWeight: 100, CPUPercent: 100}
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
	// Its bounds are l's already: updating to l writes nothing (the
	// hub's claim of a spare whose limits are its spoke's), which a
	// value set behind its back shows.
	pidsMax := cg.dirOf("pids.max") + "/pids.max"
	if err := os.WriteFile(pidsMax, []byte("35"), 0); err != nil {
		t.Fatal(err)
	}
	if err := opened.Update(l); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(pidsMax); err != nil || strings.TrimSpace(string(b)) != "35" {
		t.Fatalf("pids.max = %q (%v) after an update to the bounds it had, want nothing written", b, err)
	}
	if err := opened.Update(Limits{Memory: 64 << 20, Tasks: 30, CPUWeight: 100, CPUPercent: 100}); err != nil {
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
