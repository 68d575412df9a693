package bench

import (
	"fmt"
	"os/exec"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Machine is what the machine itself charges for the kernel entries a
// spoke's start and a query are made of, measured before the run: the
// figures of one run are read against it (a nested virtual machine may
// charge ten times a bare one's for each).
type Machine struct {
	// SyscallUS is one trivial system call (getppid), in µs.
	SyscallUS float64 `json:"syscall_us"`
	// PageFaultUS is the first touch of a page of fresh anonymous
	// memory, in µs.
	PageFaultUS float64 `json:"page_fault_us"`
	// ProcessStartMS is the p50 of starting /bin/true and waiting for it
	// (vfork, exec, exit), in ms: no Go program can start faster.
	ProcessStartMS float64 `json:"process_start_ms"`
}

func (m Machine) String() string {
	return fmt.Sprintf("a system call %.2f µs, a page fault %.1f µs, starting /bin/true %.2f ms (p50)", m.SyscallUS, m.PageFaultUS, m.ProcessStartMS)
}

// measureMachine measures the machine's costs (Machine). A part it
// cannot measure is left at 0.
func measureMachine() Machine {
	var m Machine
	const calls = 100_000
	start := time.Now()
	for range calls {
		unix.Getppid()
	}
	m.SyscallUS = float64(time.Since(start).Nanoseconds()) / calls / 1e3

	const size = 64 << 20
	page := unix.Getpagesize()
	if mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err == nil {
		start = time.Now()
		for i := 0; i < size; i += page {
			mem[i] = 1
		}
		m.PageFaultUS = float64(time.Since(start).Nanoseconds()) / float64(size/page) / 1e3
		_ = unix.Munmap(mem)
	}

	if path, err := exec.LookPath("true"); err == nil {
		var starts []time.Duration
		for range 50 {
			start = time.Now()
			if exec.Command(path).Run() != nil {
				starts = nil
				break
			}
			starts = append(starts, time.Since(start))
		}
		if len(starts) > 0 {
			slices.Sort(starts)
			m.ProcessStartMS = float64(starts[len(starts)/2]) / float64(time.Millisecond)
		}
	}
	return m
}
