package spoke_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/secgpt/secgpt/spoke"
)

// liveProcess reports whether pid runs and is not a zombie.
func liveProcess(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// childrenOf lists the pids whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if parentOf(e.Name()) == strconv.Itoa(pid) {
			c, _ := strconv.Atoi(e.Name())
			out = append(out, c)
		}
	}
	return out
}

// TestSpokesAreNotTheHubsChildren: the hub forks no spoke itself; its
// spawner does, and the hub still kills the spoke's process group and
// learns how it ended.
func TestSpokesAreNotTheHubsChildren(t *testing.T) {
	m := newManager(t, spoke.Options{})
	k := key("@a:x", "echo")
	_, info, err := m.Run(context.Background(), k, step("say", `{"text":"hi"}`), &handler{})
	if err != nil {
		t.Fatal(err)
	}
	sp := spoke.SpawnerPID(m)
	if sp == 0 || parentOf(strconv.Itoa(sp)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("spawner %d is not this process's child", sp)
	}
	if got := parentOf(strconv.Itoa(info.PID)); got != strconv.Itoa(sp) {
		t.Fatalf("spoke %d has parent %s, want the spawner %d", info.PID, got, sp)
	}
	m.StopUser("@a:x")
	waitGone(t, info.PID)
}

// TestSpawnerDeathMidBurst: when the spawner dies while spokes start, the
// starts in flight fail with a clear error, every spoke it started dies,
// and the next start runs a new spawner.
func TestSpawnerDeathMidBurst(t *testing.T) {
	m := newManager(t, spoke.Options{})
	// A first spoke starts the spawner.
	if _, _, err := m.Run(context.Background(), key("@first:x", "echo"), step("say", `{"text":"hi"}`), &handler{}); err != nil {
		t.Fatal(err)
	}
	sp := spoke.SpawnerPID(m)
	const n = 12
	var wg sync.WaitGroup
	errs := make([]error, n)
	pids := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, info, err := m.Run(context.Background(), key(fmt.Sprintf("@u%d:x", i), "echo"), step("say", `{"text":"hi"}`), &handler{})
			errs[i], pids[i] = err, info.PID
		}()
	}
	// Kill it once some spokes of the burst run.
	deadline := time.Now().Add(10 * time.Second)
	for len(childrenOf(t, sp)) < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	started := childrenOf(t, sp)
	if err := syscall.Kill(sp, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	failed := 0
	for i, err := range errs {
		if err == nil {
			continue
		}
		failed++
		var f *spoke.Failure
		if !errors.As(err, &f) || !(errors.Is(err, spoke.ErrSpawnerDied) || errors.Is(err, spoke.ErrCrashed)) {
			t.Errorf("start %d: %v, want a failure naming the spawner's death or the spoke's", i, err)
		}
	}
	t.Logf("%d of %d starts failed; %d spokes ran when the spawner died", failed, n, len(started))
	// No orphan: every spoke the dead spawner started is gone.
	for _, pid := range append(started, pids...) {
		if pid == 0 {
			continue
		}
		deadline := time.Now().Add(5 * time.Second)
		for liveProcess(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("spoke %d outlived its spawner", pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// A spoke that was ready is known dead; the next run starts afresh
	// through a new spawner.
	res, info, err := m.Run(context.Background(), key("@u0:x", "echo"), step("say", `{"text":"again"}`), &handler{})
	if err != nil || res.Error != "" || !info.Cold {
		t.Fatalf("run after the spawner died: %+v %+v %v", res, info, err)
	}
	if now := spoke.SpawnerPID(m); now == 0 || now == sp {
		t.Fatalf("spawner %d, want a new one (the old was %d)", now, sp)
	}
}

// sockets returns the socket inodes among pid's descriptors.
func sockets(t *testing.T, pid int) []string {
	t.Helper()
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err == nil && strings.HasPrefix(target, "socket:") {
			out = append(out, target)
		}
	}
	return out
}

// TestSpawnerChildrenHoldOnlyTheirOwnChannel: a descriptor the hub passes
// for one spoke reaches that spoke alone. Spares are looked at: they have
// not confined themselves yet, so Enter has closed nothing they inherited.
func TestSpawnerChildrenHoldOnlyTheirOwnChannel(t *testing.T) {
	opts, _ := spareOptions(t, 3)
	m := newManager(t, opts)
	spares := waitSpares(t, m, 3)
	seen := map[string]int{}
	for _, pid := range spares {
		socks := sockets(t, pid)
		if len(socks) != 1 {
			t.Errorf("spare %d holds sockets %v, want its ISC channel alone", pid, socks)
		}
		for _, s := range socks {
			if other, ok := seen[s]; ok {
				t.Errorf("spares %d and %d share %s", other, pid, s)
			}
			seen[s] = pid
		}
	}
	// The spawner keeps its channel to the hub and nothing of a spoke's.
	if socks := sockets(t, spoke.SpawnerPID(m)); len(socks) != 1 {
		t.Errorf("spawner holds sockets %v, want its channel to the hub alone", socks)
	}
	for s, pid := range seen {
		for _, own := range sockets(t, spoke.SpawnerPID(m)) {
			if own == s {
				t.Errorf("spawner holds spare %d's channel %s", pid, s)
			}
		}
	}
}

// hubCPU is this process's own CPU time (user and system, every thread);
// its children's, the spawner's and the spokes', are not in it.
func hubCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// coldStarts runs one step on n spokes started at once, each cold, and
// returns the hub's CPU time per spoke.
func coldStarts(tb testing.TB, m *spoke.Manager, round, n int) time.Duration {
	tb.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	before := hubCPU(tb)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := spoke.Key{User: fmt.Sprintf("@u%d:x", i), App: "echo", Session: strconv.Itoa(round)}
			res, info, err := m.Run(context.Background(), k, step("say", `{"text":"hi"}`), &handler{})
			if err == nil && (res.Error != "" || !info.Cold) {
				err = fmt.Errorf("result %+v, info %+v", res, info)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	spent := hubCPU(tb) - before
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	return spent / time.Duration(n)
}

// maxHubCPUPerColdSpoke bounds the hub's own CPU per cold spoke in the
// test: the goal is 3 ms (issue 13) on the static binary; the race
// detector, which this test may run under, multiplies the hub's Go code's
// cost several times.
const maxHubCPUPerColdSpoke = 15 * time.Millisecond

// TestColdBurstHubCPU: 50 spokes started at once cost the hub a bounded
// CPU time each: the spawner, not the hub, forks them.
func TestColdBurstHubCPU(t *testing.T) {
	// A loaded machine may take long to start 50: the CPU is measured.
	m := newManager(t, spoke.Options{StartTimeout: time.Minute})
	coldStarts(t, m, 0, 1) // the spawner, and the probe of the sandbox
	per := coldStarts(t, m, 1, 50)
	t.Logf("hub CPU per cold spoke, 50 at once: %v", per)
	if per > maxHubCPUPerColdSpoke {
		t.Fatalf("hub CPU per cold spoke %v, want ≤ %v", per, maxHubCPUPerColdSpoke)
	}
}

// BenchmarkColdStartHubCPU reports the hub's own CPU time per cold spoke,
// in bursts of 10 spokes started at once.
func BenchmarkColdStartHubCPU(b *testing.B) {
	m := newManager(b, spoke.Options{StartTimeout: time.Minute})
	coldStarts(b, m, 0, 1)
	var total time.Duration
	round := 0
	for b.Loop() {
		round++
		total += coldStarts(b, m, round, 10)
		b.StopTimer()
		for k := range m.PIDs() {
			m.StopUser(k.User)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(total)/float64(round)/1e6, "hub-cpu-ms/spoke")
}

// TestWarmSpokeDeadAtRestRunsAfresh: a warm spoke that died at rest, its
// death not yet seen by the hub (its spawner, stopped here, has not
// reported it), ran nothing of the next step, which runs on a fresh spoke
// instead of failing the user's query.
func TestWarmSpokeDeadAtRestRunsAfresh(t *testing.T) {
	m := newManager(t, spoke.Options{})
	k := key("@rest:x", "echo")
	_, first, err := m.Run(context.Background(), k, step("say", `{"text":"hi"}`), &handler{})
	if err != nil {
		t.Fatal(err)
	}
	sp := spoke.SpawnerPID(m)
	if err := syscall.Kill(sp, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := make(chan struct{})
	defer func() { <-resumed }()
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		_ = syscall.Kill(sp, syscall.SIGCONT)
		close(resumed)
		t.Fatal(err)
	}
	// The channel's end closes as the spoke dies; its wait status stays
	// with the stopped spawner until it runs again.
	go func() {
		defer close(resumed)
		time.Sleep(300 * time.Millisecond)
		_ = syscall.Kill(sp, syscall.SIGCONT)
	}()
	time.Sleep(50 * time.Millisecond)
	res, info, err := m.Run(context.Background(), k, step("say", `{"text":"again"}`), &handler{})
	if err != nil || res.Error != "" {
		t.Fatalf("the step after the spoke died at rest: %+v %v", res, err)
	}
	if !info.Cold || info.PID == first.PID {
		t.Fatalf("ran on %+v, want a fresh spoke (the dead one was %d)", info, first.PID)
	}
}
