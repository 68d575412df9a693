package spoke_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/spoke/spoketest"
)

// BenchmarkWarmStepCPU measures the CPU time one warm step costs the spoke
// and this process (the hub's side of the channel), and the spoke's
// context switches (each a wakeup, dear on a nested VM), for a step shaped like
// a warm single-app query's (complete arguments, then the answer written by
// the spoke's model through the hub), each after an idle pause as between
// one user's queries. The times include what either process spends after
// the step and during the pause: a runtime that keeps polling once the
// work is done costs as much as the work. CPU time, unlike the wall time,
// holds on a machine shared with other load.
func BenchmarkWarmStepCPU(b *testing.B) {
	m := newManager(b, spoke.Options{})
	ctx := context.Background()
	k := key("@bench:x", "echo")
	h := &handler{complete: func(spoke.LLMRequest) (spoke.LLMReply, error) {
		return spoke.LLMReply{Message: llm.Message{Role: llm.RoleAssistant, Content: "You said x."}}, nil
	}}
	s := step("say", `{"text":"x"}`)
	s.Answer, s.Query = true, "please say x"
	_, info, err := m.Run(ctx, k, s, h)
	if err != nil {
		b.Fatal(err)
	}
	spoke0, hub0, switches0 := threadsCPU(b, info.PID), hubCPU(b), switches(b, info.PID)
	for b.Loop() {
		time.Sleep(20 * time.Millisecond)
		if _, _, err := m.Run(ctx, k, s, h); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(per(threadsCPU(b, info.PID)-spoke0), "spoke-cpu-µs/step")
	b.ReportMetric(per(hubCPU(b)-hub0), "hub-cpu-µs/step")
	b.ReportMetric(float64(switches(b, info.PID)-switches0)/float64(b.N), "spoke-switches/step")
}

// threadsCPU is a process's CPU time so far, summed over its threads'
// schedstat (nanoseconds on the CPU).
func threadsCPU(b *testing.B, pid int) time.Duration {
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/schedstat")
	if err != nil || len(tasks) == 0 {
		b.Fatalf("no threads of %d: %v", pid, err)
	}
	var total time.Duration
	for _, t := range tasks {
		raw, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		f := strings.Fields(string(raw))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		total += time.Duration(ns)
	}
	return total
}

// BenchmarkClaimedSpareCPU measures what a claimed spare's start and first
// step cost the spoke and this process (the hub's side), against the same
// spoke's second, warm step: the spare at rest is measured after it has
// finished its own start, so the first figures are the claim (its
// Spare.Enter, its ready frame) and the first step's first-touch costs. The
// step is shaped like BenchmarkWarmStepCPU's. The spare is one expected
// (Expect) for the step's key, so that no spare is started in its place
// while the hub's CPU is measured, as in a burst met by spares started
// before it.
func BenchmarkClaimedSpareCPU(b *testing.B) {
	// As the product's: in namespaces of its own, with a scratch of its own.
	inner := spoketest.Policy(b)
	m := newManager(b, spoke.Options{
		SparePolicy: sandbox.Policy{Profile: sandbox.ProfileStrict, Namespaces: true},
		Policy: func(k spoke.Key) (sandbox.Policy, error) {
			p, err := inner(k)
			p.Namespaces = true
			return p, err
		},
	})
	ctx := context.Background()
	h := &handler{complete: func(spoke.LLMRequest) (spoke.LLMReply, error) {
		return spoke.LLMReply{Message: llm.Message{Role: llm.RoleAssistant, Content: "You said x."}}, nil
	}}
	s := step("say", `{"text":"x"}`)
	s.Answer, s.Query = true, "please say x"
	var firstCPU, firstHub, warmCPU, warmHub time.Duration
	var firstFaults, warmFaults int64
	var startups []time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		k := spoke.Key{User: "@bench:x", App: "echo", Session: strconv.Itoa(i)}
		m.Expect(time.Now(), k)
		pid := waitOneSpare(b, m)
		// The spare's own start is done; a user's request comes later.
		time.Sleep(50 * time.Millisecond)
		cpu0, faults0, hub0 := threadsCPU(b, pid), processFaults(b, pid), hubCPU(b)
		b.StartTimer()
		_, info, err := m.Run(ctx, k, s, h)
		if err != nil {
			b.Fatal(err)
		}
		if !info.Prestarted || info.PID != pid {
			b.Fatalf("info = %+v, want a start from spare %d", info, pid)
		}
		b.StopTimer()
		startups = append(startups, info.Startup)
		time.Sleep(20 * time.Millisecond)
		cpu1, faults1, hub1 := threadsCPU(b, pid), processFaults(b, pid), hubCPU(b)
		if _, _, err := m.Run(ctx, k, s, h); err != nil {
			b.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		cpu2, faults2, hub2 := threadsCPU(b, pid), processFaults(b, pid), hubCPU(b)
		firstCPU, firstFaults, firstHub = firstCPU+cpu1-cpu0, firstFaults+faults1-faults0, firstHub+hub1-hub0
		warmCPU, warmFaults, warmHub = warmCPU+cpu2-cpu1, warmFaults+faults2-faults1, warmHub+hub2-hub1
		m.StopUser(k.User)
		b.StartTimer()
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(i) }
	b.ReportMetric(per(firstCPU), "first-spoke-cpu-µs")
	b.ReportMetric(float64(firstFaults)/float64(i), "first-spoke-faults")
	b.ReportMetric(per(firstHub), "first-hub-cpu-µs")
	b.ReportMetric(per(warmCPU), "warm-spoke-cpu-µs")
	b.ReportMetric(float64(warmFaults)/float64(i), "warm-spoke-faults")
	b.ReportMetric(per(warmHub), "warm-hub-cpu-µs")
	slices.Sort(startups)
	b.ReportMetric(float64(startups[len(startups)/2].Microseconds()), "startup-p50-µs")
	b.ReportMetric(0, "ns/op")
}

// waitOneSpare waits until m holds one spare that has finished its own
// start (it waits in read on fd 4 for its launch arguments), and returns
// its pid.
func waitOneSpare(b testing.TB, m *spoke.Manager) int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pids := runningSpares(b); len(pids) == 1 && m.Spares() == 1 && readsLaunch(pids[0]) {
			return pids[0]
		}
		if time.Now().After(deadline) {
			b.Fatal("no spare started")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// processFaults is a process's page faults so far, minor and major.
func processFaults(b *testing.B, pid int) int64 {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// After the command: minflt is field 10, majflt field 12.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	minflt, _ := strconv.ParseInt(f[7], 10, 64)
	majflt, _ := strconv.ParseInt(f[9], 10, 64)
	return minflt + majflt
}

// readsLaunch reports whether a thread of process pid waits in read(2) on
// fd 4, a spare's launch pipe.
func readsLaunch(pid int) bool {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/syscall")
	for _, t := range tasks {
		if raw, err := os.ReadFile(t); err == nil && strings.HasPrefix(string(raw), "0 0x4 ") {
			return true
		}
	}
	return false
}
