package sandboxcheck

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// peakWatch samples the memory of every process below this one, the hub,
// until stopped: the memory a spoke held, seen from outside, though the
// kernel kills it and its cgroup is gone when the attempt is judged.
type peakWatch struct {
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	peaks map[int]memPeak
}

// memPeak is what a process held at most, in bytes.
type memPeak struct {
	// resident is the kernel's high-water mark of its resident memory
	// (VmHWM), which counts the pages of its executable that the hub,
	// running the same binary, has in memory and pays for.
	resident uint64
	// anon is the most anonymous memory (RssAnon) a sample saw: what its
	// cgroup is charged for holding.
	anon uint64
}

// watchInterval is how often peakWatch samples.
const watchInterval = 10 * time.Millisecond

func watchPeaks() *peakWatch {
	w := &peakWatch{stop: make(chan struct{}), done: make(chan struct{}), peaks: map[int]memPeak{}}
	go func() {
		defer close(w.done)
		t := time.NewTicker(watchInterval)
		defer t.Stop()
		for {
			w.sample()
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// Stop ends the sampling and returns each process's peaks.
func (w *peakWatch) Stop() map[int]memPeak {
	close(w.stop)
	<-w.done
	return w.peaks
}

func (w *peakWatch) sample() {
	for _, pid := range descendants(os.Getpid()) {
		hwm, err1 := statusBytes(pid, "VmHWM")
		anon, err2 := statusBytes(pid, "RssAnon")
		if err1 != nil || err2 != nil {
			continue
		}
		w.mu.Lock()
		p := w.peaks[pid]
		w.peaks[pid] = memPeak{resident: max(p.resident, hwm), anon: max(p.anon, anon)}
		w.mu.Unlock()
	}
}

// statusBytes reads a "N kB" field of /proc/<pid>/status in bytes.
func statusBytes(pid int, name string) (uint64, error) {
	v, err := statusField(pid, name)
	if err != nil {
		return 0, err
	}
	kb, err := strconv.ParseUint(strings.TrimSuffix(v, " kB"), 10, 64)
	return kb << 10, err
}

// descendants are the processes below pid, from each thread's children.
func descendants(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
				out = append(out, descendants(c)...)
			}
		}
	}
	return out
}

// hubCPU is the processor time this process, the hub, has used.
func hubCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
