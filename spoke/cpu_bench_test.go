package spoke_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/spoke"
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
	spoke0, hub0, switches0 := threadsCPU(b, info.PID), hubCPU(b), threadsSwitches(b, info.PID)
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
	b.ReportMetric(float64(threadsSwitches(b, info.PID)-switches0)/float64(b.N), "spoke-switches/step")
}

// threadsSwitches is a process's context switches so far, voluntary and
// not, summed over its threads.
func threadsSwitches(b *testing.B, pid int) int64 {
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/status")
	if err != nil || len(tasks) == 0 {
		b.Fatalf("no threads of %d: %v", pid, err)
	}
	var total int64
	for _, t := range tasks {
		raw, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if name, n, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(name, "ctxt_switches") {
				v, _ := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
				total += v
			}
		}
	}
	return total
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
