package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/secgpt/secgpt/apps/benchapps"
	"github.com/secgpt/secgpt/hub"
)

// Level is the sweep at one number of users: each sends one single-app
// query at the same moment, first as a new user (cold: every spoke
// starts), then again (warm).
type Level struct {
	Users int   `json:"users"`
	Cold  Burst `json:"cold"`
	Warm  Burst `json:"warm"`
}

// Burst is one wave of queries arriving at once.
type Burst struct {
	P50MS float64 `json:"p50_ms"`
	P95MS float64 `json:"p95_ms"`
	MaxMS float64 `json:"max_ms"`
	// VsSingle is P95MS over the one-user level's p50: the budget is
	// 1.3 cold and 1.1 warm (DESIGN §10).
	VsSingle float64 `json:"p95_vs_single"`
	// Throughput is queries answered per second of the wave.
	Throughput float64 `json:"queries_per_s"`
	// CPUMS is the CPU time of this process (the hub, and the simulated
	// model, which is cheap beside it) during the wave, and per query.
	CPUMS         float64 `json:"cpu_ms"`
	CPUMSPerQuery float64 `json:"cpu_ms_per_query"`
	// SpokeCPUMSPerQuery is the CPU time this process's descendants (the
	// spokes, their servers, spares) spent during the wave, per query: of
	// those still running after it, at the kernel's clock-tick grain.
	SpokeCPUMSPerQuery float64 `json:"spoke_cpu_ms_per_query"`
	// Processes are this process's descendants after the wave (the
	// spoke spawner, spokes and spares), with their resident and
	// proportional memory summed, and this process's own.
	Processes int     `json:"processes"`
	SpokeRSS  float64 `json:"spokes_rss_mib"`
	SpokePSS  float64 `json:"spokes_pss_mib"`
	HubRSS    float64 `json:"hub_rss_mib"`
	Errors    int     `json:"errors"`
	// Error is the first failure, if any.
	Error string `json:"error,omitempty"`
}

// sweepQuery is what a user of the sweep asks: one app, as the first
// query of a bot's new user often does.
func sweepQuery(user int) Query {
	text := fmt.Sprintf("user %d arrives", user)
	return Query{Category: Single, Text: fmt.Sprintf("Use bench_typewriter to type '%s'.", text),
		Steps: []Step{{ID: "s1", App: benchapps.Typewriter, Function: "type_text", Args: map[string]any{"text": text}}}}
}

// sweep runs each level on a fresh system, as after a restart.
func (r *runner) sweep(ctx context.Context, levels []int) ([]Level, error) {
	var out []Level
	for _, n := range levels {
		l, err := r.level(ctx, n)
		if err != nil {
			return nil, err
		}
		if len(out) > 0 && out[0].Users == 1 {
			l.Cold.VsSingle = l.Cold.P95MS / out[0].Cold.P50MS
			l.Warm.VsSingle = l.Warm.P95MS / out[0].Warm.P50MS
		} else if n == 1 {
			l.Cold.VsSingle, l.Warm.VsSingle = 1, 1
		}
		out = append(out, l)
		r.progress("%4d users: cold p50 %5.0f ms p95 %5.0f ms; warm p50 %5.0f ms p95 %5.0f ms; %d processes",
			n, l.Cold.P50MS, l.Cold.P95MS, l.Warm.P50MS, l.Warm.P95MS, l.Cold.Processes)
	}
	return out, nil
}

func (r *runner) level(ctx context.Context, n int) (Level, error) {
	st, err := r.openStore(ctx, fmt.Sprintf("sweep-%d", n))
	if err != nil {
		return Level{}, err
	}
	defer st.Close()
	sys, err := r.opts.Build(ctx, st, r.client, r.specs())
	if err != nil {
		return Level{}, fmt.Errorf("failed to assemble the isolated system: %w", err)
	}
	defer sys.Close()
	// As on a bot that has been up a while: its spares are ready.
	for deadline := time.Now().Add(5 * time.Second); sys.Spares() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	l := Level{Users: n}
	for _, b := range []*Burst{&l.Cold, &l.Warm} {
		if *b, err = burst(ctx, sys.Hub, n); err != nil {
			return Level{}, err
		}
	}
	return l, nil
}

// burst sends n users' queries at once and measures the wave.
func burst(ctx context.Context, h *hub.Hub, n int) (Burst, error) {
	times := make([]float64, n)
	errs := make([]error, n)
	var ready, done sync.WaitGroup
	startGun := make(chan struct{})
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-startGun
			start := time.Now()
			_, errs[i] = h.Handle(ctx, hub.Request{User: fmt.Sprintf("@bench-u%03d:bench.invalid", i), Query: sweepQuery(i).Text, Consenter: hub.AllowPlanned{}})
			times[i] = msSince(start)
		}()
	}
	ready.Wait()
	spokes0 := descendantsCPU()
	cpu0, err := cpuTime()
	if err != nil {
		return Burst{}, err
	}
	start := time.Now()
	close(startGun)
	done.Wait()
	wall := time.Since(start)
	cpu1, err := cpuTime()
	if err != nil {
		return Burst{}, err
	}
	b := Burst{
		P50MS: percentile(times, nil, 0.50), P95MS: percentile(times, nil, 0.95), MaxMS: slices.Max(times),
		Throughput: float64(n) / wall.Seconds(),
		CPUMS:      float64(cpu1-cpu0) / float64(time.Millisecond),
	}
	b.CPUMSPerQuery = b.CPUMS / float64(n)
	for pid, t := range descendantsCPU() {
		b.SpokeCPUMSPerQuery += float64(t-spokes0[pid]) / float64(time.Millisecond) / float64(n)
	}
	for _, err := range errs {
		if err != nil {
			if b.Errors == 0 {
				b.Error = err.Error()
			}
			b.Errors++
		}
	}
	kids := children()
	b.Processes = len(kids)
	for _, pid := range kids {
		rss, pss := Memory(strconv.Itoa(pid))
		b.SpokeRSS += rss
		b.SpokePSS += pss
	}
	b.HubRSS, _ = Memory("self")
	return b, ctx.Err()
}

// cpuTime is this process's user and system CPU time so far.
func cpuTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("failed to read CPU time: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// descendantsCPU is the user and system CPU time of each process below
// this one, by PID.
func descendantsCPU() map[int]time.Duration {
	out := map[int]time.Duration{}
	for todo := childrenOf("self"); len(todo) > 0; {
		pid := todo[0]
		todo = append(todo[1:], childrenOf(strconv.Itoa(pid))...)
		if t, ok := processCPU(pid); ok {
			out[pid] = t
		}
	}
	return out
}

// clockTick is the unit of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// processCPU reads a process's user and system time from /proc/PID/stat.
func processCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid ...: utime and stime are the 12th and 13th
	// fields after the command, which may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * clockTick, true
}

// children are this process's descendants: the spoke spawner, the spokes
// and spares it started, and their servers.
func children() []int {
	var out []int
	for todo := childrenOf("self"); len(todo) > 0; {
		pid := todo[0]
		todo = append(todo[1:], childrenOf(strconv.Itoa(pid))...)
		out = append(out, pid)
	}
	return out
}

// childrenOf are a process's child processes ("self" for this one).
func childrenOf(pid string) []int {
	var out []int
	tasks, _ := filepath.Glob("/proc/" + pid + "/task/*/children")
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(out, pid) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// Memory returns a process's resident and proportional set sizes in MiB,
// from /proc/<pid>/smaps_rollup (0 when it cannot be read: the process
// ended).
func Memory(pid string) (rss, pss float64) {
	b, err := os.ReadFile("/proc/" + pid + "/smaps_rollup")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Rss:":
			rss = kb / 1024
		case "Pss:":
			pss = kb / 1024
		}
	}
	return rss, pss
}
