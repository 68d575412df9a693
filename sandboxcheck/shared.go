package sandboxcheck

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/secgpt/secgpt/apps/hostile"
	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/spoke"
)

// The attacks of issue 11 on what the spokes of all users share: the file
// tree's metadata, memory, tasks, disk, the hub's processor time, the
// store and the model bill. Each verdict names the bound that stopped it; the harm an
// attack does when nothing stops it is measured and shown either way.

// Sizes of the attempts: each larger than any bound a spoke has by
// default, and small enough that a machine without the bound survives the
// check.
const (
	hogBytes     = 3 << 29 // 1.5 GiB of memory
	threadsMost  = 100_000
	manyFiles    = 20_000
	dataDocs     = 10_000
	dataDocBytes = 64 << 10 // under the store's largest document
	burnCalls    = 64
	burnPrompt   = 500_000 // bytes per completion, under the hub's 512 KiB
	grindFrames  = 100_000
	grindPrompt  = 700 << 10 // over the hub's prompt limit, under its frame limit
)

// Directories the disk attacks fill in the attacker's scratch.
const (
	filesDir = "swarm"
)

// sharedAttacks are the attacks on shared resources.
func sharedAttacks() []Attack {
	return []Attack{
		{
			Name: "cross_user_stat", Title: "stat another user's file (size and times, a covert channel)", Function: hostile.Stat,
			args: func(l *Lab) []arg { return path(l.victimSecret) }, stop: reported,
			leak:    func(l *Lab) string { return fmt.Sprintf("size %d bytes", len(l.secret)+1) },
			outside: func(e *evidence) error { return present(e.lab.victimSecret) },
		},
		{
			Name: "memory_hog", Title: "hold 1.5 GiB of memory", Function: hostile.Hog,
			args:    func(*Lab) []arg { return []arg{{"bytes", strconv.Itoa(hogBytes)}} },
			stop:    killed(spoke.ErrOutOfMemory),
			watch:   true,
			outside: func(e *evidence) error { return errors.Join(e.peakAtMost(e.limits.Memory), e.namedOverMemory()) },
			bound: func(e *evidence) string {
				return fmt.Sprintf("killed at %d MiB (%s)", e.limits.Memory>>20, orNone(sandbox.CgroupBound("memory")))
			},
		},
		{
			Name: "thread_pressure", Title: "start 100,000 threads", Function: hostile.Threads,
			args: func(*Lab) []arg { return []arg{{"count", strconv.Itoa(threadsMost)}} },
			// Refused, and reported: a spoke that died instead proves no
			// bound.
			stop:    reported,
			outside: func(e *evidence) error { return e.threadsAtMost(e.limits.Tasks) },
			bound: func(e *evidence) string {
				return fmt.Sprintf("%d tasks (%s)", e.limits.Tasks, orNone(sandbox.CgroupBound("tasks")))
			},
		},
		{
			Name: "disk_fill_files", Title: "create 20,000 files", Function: hostile.DiskFill,
			args: func(*Lab) []arg {
				return []arg{{"path", filesDir}, {"bytes", "0"}, {"count", strconv.Itoa(manyFiles)}}
			},
			stop:    reported,
			outside: func(e *evidence) error { return diskUsed(filepath.Join(e.scratch, filesDir), e.limits) },
			bound:   diskBound,
		},
		{
			Name: "hub_time", Title: "keep the hub parsing refused 700 KiB model requests", Function: hostile.Grind,
			args: func(*Lab) []arg {
				return []arg{{"frames", strconv.Itoa(grindFrames)}, {"bytes", strconv.Itoa(grindPrompt)}}
			},
			stop:    killed(spoke.ErrHubTime),
			outside: func(e *evidence) error { return e.hubTimeBounded() },
			bound: func(e *evidence) string {
				return "the hub's time per step (budgets.hub_time_per_step): " + hubTimeSpent(e)
			},
			measure: func(e *evidence) string {
				return fmt.Sprintf("the hub spent %v of processor time on the attempt", e.hubCPU)
			},
		},
		{
			Name: "data_fill", Title: "store 640 MiB in its data through the hub", Function: hostile.Fill,
			args: func(*Lab) []arg {
				return []arg{{"count", strconv.Itoa(dataDocs)}, {"bytes", strconv.Itoa(dataDocBytes)}}
			},
			// Refused at its data quota, or stopped first by the bound on
			// the hub's time that storing costs; either way what it stored
			// stays within the quota.
			stop:    stop{by: byReportOrKill, causes: []error{spoke.ErrHubTime}},
			outside: func(e *evidence) error { return e.dataQuota() },
		},
		{
			Name: "token_burn", Title: "ask for 64 completions of 500 KB", Function: hostile.Burn,
			args: func(*Lab) []arg {
				return []arg{{"count", strconv.Itoa(burnCalls)}, {"bytes", strconv.Itoa(burnPrompt)}}
			},
			stop: stop{by: byBudget},
			bound: func(e *evidence) string {
				var be *hub.BudgetError
				if !errors.As(e.err, &be) {
					return "none"
				}
				return fmt.Sprintf("%d tokens %s (budgets.tokens_per_query, tokens_per_user_day, tokens_per_app_day); %d billed before it", be.Limit, be.Budget, be.Used)
			},
		},
	}
}

func orNone(bound string) string {
	if bound == "" {
		return "no cgroup bounds it here"
	}
	return bound
}

// present: the target exists, so that ENOENT from the spoke is its view's
// refusal, not a missing file.
func present(path string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("the target is not there to stat: %w", err)
	}
	return nil
}

// peakAtMost: the spoke's anonymous memory, sampled during the attempt,
// never exceeded limit.
func (e *evidence) peakAtMost(limit uint64) error {
	peak, ok := e.peaks[e.pid]
	if !ok {
		return fmt.Errorf("spoke %d was never seen running", e.pid)
	}
	e.measured = fmt.Sprintf("peak memory %d MiB anonymous, %d MiB resident with the executable's pages", peak.anon>>20, peak.resident>>20)
	if peak.anon > limit {
		return fmt.Errorf("spoke %d held %d MiB, over its %d MiB bound", e.pid, peak.anon>>20, limit>>20)
	}
	return nil
}

// namedOverMemory: what the attacker's user is told names the app and
// its memory bound.
func (e *evidence) namedOverMemory() error {
	if e.err == nil {
		return errors.New("the user was told of no failure")
	}
	if msg := e.err.Error(); !strings.Contains(msg, e.app) || !strings.Contains(msg, fmt.Sprintf("%s of %d MiB", spoke.ErrOutOfMemory, e.limits.Memory>>20)) {
		return fmt.Errorf("the user was not told that %s went over its memory bound: %q", e.app, msg)
	}
	return nil
}

// threadsReached finds the count of threads in the app's report.
var threadsReached = regexp.MustCompile(`after (\d+) threads`)

// threadsAtMost: the app was refused before it had limit threads (its
// own count), or died trying.
func (e *evidence) threadsAtMost(limit uint64) error {
	if e.report == nil {
		return errors.New("the app made no report")
	}
	m := threadsReached.FindStringSubmatch(e.report.Detail)
	if m == nil {
		return fmt.Errorf("the app did not say how many threads it started: %s", e.report.Detail)
	}
	n, _ := strconv.ParseUint(m[1], 10, 64)
	e.measured = fmt.Sprintf("%d threads started", n)
	if n >= limit {
		return fmt.Errorf("the app started %d threads, not fewer than its %d tasks", n, limit)
	}
	return nil
}

// diskUsed measures what the attempt left under dir as the host sees it
// (nothing, where the spoke's scratch was a tmpfs of its own), removes it
// (it is only filler), and fails when it is over the spoke's disk bounds.
func diskUsed(dir string, l sandbox.Limits) error {
	var bytes, files uint64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files++
		bytes += uint64(info.Size())
		return nil
	})
	defer os.RemoveAll(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to measure %s: %w", dir, err)
	}
	if bytes > l.DiskBytes || files > l.DiskFiles {
		return fmt.Errorf("the spoke left %d MiB in %d files in its scratch, over its %d MiB and %d files", bytes>>20, files, l.DiskBytes>>20, l.DiskFiles)
	}
	return nil
}

// diskBound names the disk bounds of the attacker's scratch.
func diskBound(e *evidence) string {
	return fmt.Sprintf("%d MiB and %d files of scratch (sandbox.disk_bytes, disk_files: a tmpfs of the spoke's own, or the hub's quota on a scratch it keeps)",
		e.limits.DiskBytes>>20, e.limits.DiskFiles)
}

// dataQuota: the hub refused the put at the app's data quota for the
// user, which its refusal names (store.QuotaError).
func (e *evidence) dataQuota() error {
	if e.report == nil {
		return nil
	}
	stored, refusal, _ := strings.Cut(e.report.Detail, ", then: ")
	e.measured = stored
	if !strings.Contains(refusal, "over its limit of") {
		return fmt.Errorf("refused by no data quota: %q", refusal)
	}
	return nil
}

// hubTimeSpent is the hub's account of its time on the step, from the
// spoke's failure: "N of the hub's time in one step, over the bound of M".
func hubTimeSpent(e *evidence) string {
	if e.failure == nil {
		return "no failure"
	}
	_, spent, _ := strings.Cut(e.failure.Err.Error(), spoke.ErrHubTime.Error()+": ")
	return spent
}

// hubTimeBound finds the bound in the hub's account of its time.
var hubTimeBound = regexp.MustCompile(`over (?:the bound of )?(\S+)$`)

// hubTimeBounded: the hub's processor time during the attempt, measured
// by getrusage, is within a stated factor of the bound it charged: the
// charge misses nothing large. The factor allows the hub's other work in
// the same seconds (the victim's requests, the simulated model, logging).
func (e *evidence) hubTimeBounded() error {
	const factor, slack = 3, time.Second
	var bound time.Duration
	if m := hubTimeBound.FindStringSubmatch(hubTimeSpent(e)); m != nil {
		bound, _ = time.ParseDuration(m[1])
	}
	if bound == 0 {
		return fmt.Errorf("no bound on the hub's time was named (the hub spent %v)", e.hubCPU)
	}
	if e.hubCPU > factor*bound+slack {
		return fmt.Errorf("the hub spent %v of processor time, over %d × its bound of %v + %v", e.hubCPU, factor, bound, slack)
	}
	return nil
}
