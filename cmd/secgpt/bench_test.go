package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/bench"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/store/storetest"
)

// reportPercentiles reports the p50 and p99 of samples in milliseconds.
func reportPercentiles(b *testing.B, samples []time.Duration) {
	b.Helper()
	slices.Sort(samples)
	at := func(q float64) float64 {
		return float64(samples[int(q*float64(len(samples)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// refuseAll serves a spoke that needs nothing from the hub.
type refuseAll struct{}

var errRefused = errors.New("refused in the benchmark")

func (refuseAll) Complete(context.Context, spoke.LLMRequest) (spoke.LLMReply, error) {
	return spoke.LLMReply{}, errRefused
}
func (refuseAll) Probe(context.Context, spoke.Probe) (spoke.ProbeReply, error) {
	return spoke.ProbeReply{}, errRefused
}
func (refuseAll) CallApp(context.Context, spoke.AppCall) (spoke.AppCallReply, error) {
	return spoke.AppCallReply{}, errRefused
}
func (refuseAll) HTTP(context.Context, spoke.HTTPRequest) (spoke.HTTPResponse, error) {
	return spoke.HTTPResponse{}, errRefused
}
func (refuseAll) AppendMemory(context.Context, spoke.MemoryAppend) error { return errRefused }
func (refuseAll) Data(context.Context, spoke.DataOp) (spoke.DataReply, error) {
	return spoke.DataReply{}, errRefused
}

// BenchmarkSpokeStart measures a built-in app's spoke start with the
// product's binary and wiring (DESIGN §10: spawn to ready with the sandbox
// applied, p50 ≤ 5 ms, p99 ≤ 25 ms). Run with -benchtime=300x.
//
//   - binary: the binary's own start, with no sandbox (exec to exit of a
//     spoke refused for want of arguments): what every spoke pays before
//     its sandbox, and what a spare has paid ahead of need;
//   - exec: spawn to ready by exec, full sandbox, no spares;
//   - prestarted: the same from a spare that has finished its own start
//     (50 ms after the last start, the timer stopped): the usual case, a
//     user's first request for an app;
//   - prestarted-back-to-back: starts in a row with no pause, so that the
//     next spares still start while one is taken, or none is there yet and
//     the spoke starts by exec: a burst.
func BenchmarkSpokeStart(b *testing.B) {
	b.Run("binary", func(b *testing.B) {
		samples := make([]time.Duration, 0, b.N)
		var cpu, faults []float64
		for b.Loop() {
			cmd := exec.Command(spokeBin, spoke.ChildArg)
			cmd.Env = []string{}
			start := time.Now()
			if err := cmd.Run(); err == nil {
				b.Fatal("a spoke without arguments ran")
			}
			samples = append(samples, time.Since(start))
			ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			cpu = append(cpu, float64(ru.Utime.Nano()+ru.Stime.Nano())/1e6)
			faults = append(faults, float64(ru.Minflt+ru.Majflt))
		}
		reportPercentiles(b, samples)
		reportMedian(b, cpu, "cpu-ms")
		reportMedian(b, faults, "faults")
	})
	for _, c := range []struct {
		name   string
		spares int
		wait   bool
	}{
		{"exec", 0, false},
		{"prestarted", 2, true},
		{"prestarted-back-to-back", 2, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg := defaultConfig()
			scratch, err := os.MkdirTemp("", "secgpt-bench-")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(scratch)
			if err := os.Chmod(scratch, 0o711); err != nil {
				b.Fatal(err)
			}
			cfg.Spokes.ScratchDir = filepath.Join(scratch, "s")
			cfg.Spokes.Spares = c.spares
			root, err := newScratch(cfg, storetest.Open(b), nil, zerolog.Nop())
			if err != nil {
				b.Fatal(err)
			}
			opts := spokeOptions(cfg, root, zerolog.Nop())
			opts.Binary = spokeBin
			m, err := spoke.NewManager(opts)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			ctx := context.Background()
			step := spoke.Step{ID: "s1", Function: "estimate_fare",
				Args: json.RawMessage(`{"start_point":"Main Street","end_point":"Elm Avenue"}`)}
			samples := make([]time.Duration, 0, b.N)
			var rssSamples, pssSamples, cpuSamples, faultSamples, threadSamples []float64
			var hubTime time.Duration
			var spawnerCPU0, spawnerFaults0 float64
			spawnerPID := 0
			i := 0
			for b.Loop() {
				if c.wait {
					b.StopTimer()
					for m.Spares() < c.spares {
						time.Sleep(time.Millisecond)
					}
					// A spare just started still runs the binary's
					// start-up; a user's next first request comes later.
					time.Sleep(50 * time.Millisecond)
					b.StartTimer()
				}
				i++
				k := spoke.Key{User: "@bench:x", App: "metro_hail", Session: fmt.Sprint(i)}
				cpu0 := hubCPU(b)
				res, info, err := m.Run(ctx, k, step, refuseAll{})
				if i > 1 {
					// The first start also starts what serves them
					// all (the sandbox's probe, a spawner).
					hubTime += hubCPU(b) - cpu0
				}
				if err != nil || res.Error != "" {
					b.Fatalf("step: %v %s", err, res.Error)
				}
				if !info.Cold || info.Prestarted != (c.spares > 0) && c.wait {
					b.Fatalf("info = %+v", info)
				}
				samples = append(samples, info.Startup)
				b.StopTimer()
				rss, pss := restingMemory(b, info.PID)
				rssSamples, pssSamples = append(rssSamples, rss), append(pssSamples, pss)
				cpu, faults := processCost(b, info.PID)
				cpuSamples, faultSamples = append(cpuSamples, cpu), append(faultSamples, faults)
				threadSamples = append(threadSamples, float64(threads(b, info.PID)))
				if i == 1 {
					// The spawner's CPU from here on is its starts
					// of the spokes after the first.
					spawnerPID = parentPID(b, info.PID)
					spawnerCPU0, spawnerFaults0 = processCost(b, spawnerPID)
				}
				m.StopUser(k.User)
				b.StartTimer()
			}
			reportPercentiles(b, samples)
			b.ReportMetric(float64(hubTime)/float64(max(len(samples)-1, 1))/1e6, "hub-cpu-ms/start")
			reportMedian(b, rssSamples, "rss-MiB")
			reportMedian(b, pssSamples, "pss-MiB")
			if spawnerPID != 0 && len(samples) > 1 {
				cpu, faults := processCost(b, spawnerPID)
				b.ReportMetric((cpu-spawnerCPU0)/float64(len(samples)-1), "spawner-cpu-ms/start")
				b.ReportMetric((faults-spawnerFaults0)/float64(len(samples)-1), "spawner-faults/start")
			}
			reportMedian(b, cpuSamples, "spoke-cpu-ms")
			reportMedian(b, faultSamples, "spoke-faults")
			reportMedian(b, threadSamples, "spoke-threads")
		})
	}
}

// reportMedian reports the median of samples as unit.
func reportMedian(b *testing.B, samples []float64, unit string) {
	b.Helper()
	slices.Sort(samples)
	b.ReportMetric(samples[len(samples)/2], unit)
}

// processCost is the CPU time, in ms, and the page faults of process pid so
// far, all its threads: for a spoke at rest, what its start and its first
// step cost it (the spawner's fork of it aside). The CPU time is the sum of
// its threads' schedstat (nanoseconds; /proc/PID/stat counts 10 ms ticks).
func processCost(b *testing.B, pid int) (cpuMS, faults float64) {
	b.Helper()
	dir := "/proc/" + strconv.Itoa(pid)
	tasks, err := os.ReadDir(dir + "/task")
	if err != nil {
		b.Fatalf("failed to list the threads of spoke %d: %v", pid, err)
	}
	for _, t := range tasks {
		s, err := os.ReadFile(dir + "/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue // a thread that ended
		}
		var ns, wait, runs int64
		if _, err := fmt.Sscan(string(s), &ns, &wait, &runs); err != nil {
			b.Fatalf("failed to read the schedstat of spoke %d: %v", pid, err)
		}
		cpuMS += float64(ns) / 1e6
	}
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		b.Fatalf("failed to read the stat of spoke %d: %v", pid, err)
	}
	// Fields after the command's closing parenthesis: state is field 3,
	// minflt field 10 and majflt field 12.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	minflt, _ := strconv.ParseFloat(f[7], 64)
	majflt, _ := strconv.ParseFloat(f[9], 64)
	return cpuMS, minflt + majflt
}

// threads is how many threads process pid has.
func threads(b *testing.B, pid int) int {
	b.Helper()
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		b.Fatalf("failed to list the threads of %d: %v", pid, err)
	}
	return len(tasks)
}

// parentPID is the parent of process pid.
func parentPID(b *testing.B, pid int) int {
	b.Helper()
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatalf("failed to read the stat of %d: %v", pid, err)
	}
	// After the command: state (field 3), then ppid (field 4).
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		b.Fatalf("failed to read the parent of %d: %v", pid, err)
	}
	return ppid
}

// restingMemory is the resident and proportional set size, in MiB, of the
// spoke pid (bench.Memory), which must be readable.
func restingMemory(b *testing.B, pid int) (rss, pss float64) {
	b.Helper()
	rss, pss = bench.Memory(strconv.Itoa(pid))
	if rss == 0 {
		b.Fatalf("failed to read the memory of spoke %d", pid)
	}
	return rss, pss
}

// hubCPU is this process's own CPU time (every thread, user and system):
// the hub's, not its children's.
func hubCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
