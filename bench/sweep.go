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

// Level is the sweep at one number of users, on a fresh system: each
// sends one single-app query at the same moment as a new user (cold:
// every spoke starts) on a bot that has seen no demand yet (Cold, its
// spares at rest are the configured few); once the system is at rest,
// as many other new users do the same on the bot that has now seen such
// a burst (Learned: its pool of spares sized to it); at rest again, these
// users send their query again (warm).
type Level struct {
	Users   int   `json:"users"`
	Cold    Burst `json:"cold"`
	Learned Burst `json:"cold_learned"`
	Warm    Burst `json:"warm"`
}

// Burst is one wave of queries arriving at once.
type Burst struct {
	// Spares is how many spares waited as the wave started.
	Spares int     `json:"spares_waiting"`
	P50MS  float64 `json:"p50_ms"`
	P95MS  float64 `json:"p95_ms"`
	MaxMS  float64 `json:"max_ms"`
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
	// those still running after it, summed over their threads to the
	// nanosecond (a spoke spends about a millisecond per warm step, which
	// the kernel's 10 ms clock ticks only count by chance).
	SpokeCPUMSPerQuery float64 `json:"spoke_cpu_ms_per_query"`
	// Kernel entries, where a machine whose faults and switches are dear
	// (a nested VM) spends its time: this process's and its descendants'
	// page faults and context switches during the wave, per query (the
	// descendants' as for SpokeCPUMSPerQuery).
	FaultsPerQuery        float64 `json:"faults_per_query"`
	SwitchesPerQuery      float64 `json:"switches_per_query"`
	SpokeFaultsPerQuery   float64 `json:"spoke_faults_per_query"`
	SpokeSwitchesPerQuery float64 `json:"spoke_switches_per_query"`
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
		// Each against the single user's p50 on the same kind of bot.
		if len(out) > 0 && out[0].Users == 1 {
			l.Cold.VsSingle = l.Cold.P95MS / out[0].Cold.P50MS
			l.Learned.VsSingle = l.Learned.P95MS / out[0].Learned.P50MS
			l.Warm.VsSingle = l.Warm.P95MS / out[0].Warm.P50MS
		} else if n == 1 {
			l.Cold.VsSingle, l.Learned.VsSingle, l.Warm.VsSingle = 1, 1, 1
		}
		out = append(out, l)
		r.progress("%4d users: cold p50 %5.0f ms p95 %5.0f ms (%d spares); learned p50 %5.0f ms p95 %5.0f ms (%d spares); warm p50 %5.0f ms p95 %5.0f ms; %d processes",
			n, l.Cold.P50MS, l.Cold.P95MS, l.Cold.Spares, l.Learned.P50MS, l.Learned.P95MS, l.Learned.Spares, l.Warm.P50MS, l.Warm.P95MS, l.Warm.Processes)
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
	r.rest(ctx, sys, "start")
	l := Level{Users: n}
	if l.Cold, err = burst(ctx, sys, 0, n, nil); err != nil {
		return Level{}, err
	}
	// Other new users come once the system is at rest again: the pool
	// has been refilled to what the first wave asked for.
	r.rest(ctx, sys, "the cold wave on a new bot")
	if l.Learned, err = burst(ctx, sys, n, n, nil); err != nil {
		return Level{}, err
	}
	// They come back once the system is at rest again, so that the warm
	// wave measures warm queries, not the cold one's aftermath.
	r.rest(ctx, sys, "the cold wave on a learned bot")
	if l.Warm, err = burst(ctx, sys, n, n, r.opts.AroundWarm); err != nil {
		return Level{}, err
	}
	return l, nil
}

// rest waits until sys is at rest after what: its pool of spares filled
// to its size at rest (up to 20 s), then its processes idle (see
// quiesce).
func (r *runner) rest(ctx context.Context, sys System, after string) {
	start := time.Now()
	for deadline := start.Add(20 * time.Second); sys.Spares() < sys.RestSpares() && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(20 * time.Millisecond)
	}
	filled := time.Since(start)
	quiesce(ctx)
	r.progress("      at rest after %s: %d of %d spares in %.1f s, idle after %.1f s", after, sys.Spares(), sys.RestSpares(), filled.Seconds(), time.Since(start).Seconds())
}

// burst sends n users' queries at once, of the users numbered from
// first, and measures the wave; around, if set, is called as it starts
// and what it returns as it ends.
func burst(ctx context.Context, sys System, first, n int, around func() func()) (Burst, error) {
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
			_, errs[i] = sys.Hub.Handle(ctx, hub.Request{User: fmt.Sprintf("@bench-u%03d:bench.invalid", first+i), Query: sweepQuery(first + i).Text, Consenter: hub.AllowPlanned{}})
			times[i] = msSince(start)
		}()
	}
	ready.Wait()
	spokes0 := descendantsUsage()
	self0, err := selfUsage()
	if err != nil {
		return Burst{}, err
	}
	end := func() {}
	if around != nil {
		end = around()
	}
	spares := sys.Spares()
	start := time.Now()
	close(startGun)
	done.Wait()
	wall := time.Since(start)
	end()
	self1, err := selfUsage()
	if err != nil {
		return Burst{}, err
	}
	perQuery := func(v int64) float64 { return float64(v) / float64(n) }
	b := Burst{
		Spares: spares,
		P50MS:  percentile(times, nil, 0.50), P95MS: percentile(times, nil, 0.95), MaxMS: slices.Max(times),
		Throughput:       float64(n) / wall.Seconds(),
		CPUMS:            float64(self1.cpu-self0.cpu) / float64(time.Millisecond),
		FaultsPerQuery:   perQuery(self1.faults - self0.faults),
		SwitchesPerQuery: perQuery(self1.switches - self0.switches),
	}
	b.CPUMSPerQuery = b.CPUMS / float64(n)
	for pid, u := range descendantsUsage() {
		u0 := spokes0[pid]
		b.SpokeCPUMSPerQuery += float64(u.cpu-u0.cpu) / float64(time.Millisecond) / float64(n)
		b.SpokeFaultsPerQuery += perQuery(u.faults - u0.faults)
		b.SpokeSwitchesPerQuery += perQuery(u.switches - u0.switches)
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

// quiesce waits, up to 5 s, until this process's descendants (the spoke
// spawner, spokes, spares) spend no CPU time for a while: at most one
// clock tick in 200 ms.
func quiesce(ctx context.Context) {
	total := func() time.Duration {
		var t time.Duration
		for _, u := range descendantsUsage() {
			t += u.cpu
		}
		return t
	}
	last := total()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(200 * time.Millisecond)
		now := total()
		if now-last <= clockTick {
			return
		}
		last = now
	}
}

// usage is what a process has cost so far: CPU time (user and system),
// page faults (minor and major) and context switches (voluntary and not).
type usage struct {
	cpu              time.Duration
	faults, switches int64
}

// selfUsage is this process's usage.
func selfUsage() (usage, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return usage{}, fmt.Errorf("failed to read CPU time: %w", err)
	}
	return usage{
		cpu:      time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		faults:   ru.Minflt + ru.Majflt,
		switches: ru.Nvcsw + ru.Nivcsw,
	}, nil
}

// descendantsUsage is the usage of each process below this one, by PID.
func descendantsUsage() map[int]usage {
	out := map[int]usage{}
	for _, pid := range children() {
		if u, ok := processUsage(pid); ok {
			out[pid] = u
		}
	}
	return out
}

// clockTick is the unit of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// processUsage reads a process's usage: faults from /proc/PID/stat, CPU
// time and context switches summed over its threads'
// /proc/PID/task/TID/schedstat and status (CPU time from stat's ticks on a
// kernel without schedstat).
func processUsage(pid int) (usage, bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return usage{}, false
	}
	// pid (comm) state ppid ...: minflt, majflt, utime and stime are the
	// 8th, 10th, 12th and 13th fields after the command, which may hold
	// spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return usage{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return usage{}, false
	}
	var v [4]int64
	for k, field := range []int{7, 9, 11, 12} {
		if v[k], err = strconv.ParseInt(f[field], 10, 64); err != nil {
			return usage{}, false
		}
	}
	u := usage{cpu: time.Duration(v[2]+v[3]) * clockTick, faults: v[0] + v[1]}
	tasks, _ := filepath.Glob(dir + "/task/*")
	var runtime time.Duration
	precise := false
	for _, t := range tasks {
		// A thread that ended since the glob is left out.
		if ns, ok := threadRuntime(t); ok {
			runtime, precise = runtime+ns, true
		}
		st, err := os.ReadFile(t + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if name, n, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(name, "ctxt_switches") {
				c, _ := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
				u.switches += c
			}
		}
	}
	if precise {
		u.cpu = runtime
	}
	return u, true
}

// threadRuntime is a thread's CPU time so far, from the first field of
// /proc/PID/task/TID/schedstat (nanoseconds on the CPU).
func threadRuntime(task string) (time.Duration, bool) {
	b, err := os.ReadFile(task + "/schedstat")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns), err == nil
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
