//go:build linux

package sandbox

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// maxTasks bounds the threads and processes of a spoke's PID namespace,
// through the namespace's own pid_max (Linux 6.14 and later): a spoke's Go
// runtime and app use a few dozen, an interpreter a few more; a thread bomb
// stops here instead of at the machine's limit. The kernel's least pid_max
// is 301.
const maxTasks = 1024

// setUpOnce makes SetUpNamespaces run once per process.
var (
	setUpOnce sync.Once
	setUpErr  error
)

// SetUpNamespaces finishes what Prepare started for a spoke that is PID 1 of
// a new PID namespace (and of a new mount namespace with it):
//
//   - it mounts a /proc of its own namespace, so that the spoke sees only
//     its own processes and libpsx, which applies Landlock and capability
//     changes to every thread by listing /proc/<getpid()>/task, finds its
//     threads;
//   - it bounds the tasks of the namespace to maxTasks where the kernel
//     keeps a pid_max per namespace (best effort: older kernels have one).
//
// It keeps CAP_SYS_ADMIN (over its own namespaces only), which Enter needs
// to mount the spoke's scratch (mountScratch) and build its view once the
// spoke knows its policy, and drops: until then the spoke reads nothing
// untrusted (a spare reads only its launch arguments, from the hub).
//
// When PID 1 of a PID namespace exits, the kernel kills every process left
// in it: nothing a spoke started (an external app's server) outlives it.
//
// A process that is not PID 1 is left as it is. The child calls it first
// thing, before anything reads /proc or starts a process; Enter calls it if
// the child did not. Only the first call does anything.
func SetUpNamespaces() error {
	setUpOnce.Do(func() { setUpErr = setUpPIDNamespace() })
	return setUpErr
}

func setUpPIDNamespace() error {
	if os.Getpid() != 1 {
		return nil
	}
	// Private first, so that the mount below stays in this namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("failed to make the spoke's mounts private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("failed to mount the spoke's own /proc: %w", err)
	}
	// Refused (EINVAL or EPERM) where pid_max is not per namespace; Enter
	// reports the bound it finds.
	_ = os.WriteFile("/proc/sys/kernel/pid_max", []byte(strconv.Itoa(maxTasks)), 0)
	return nil
}

// pidNamespaceDetail describes the PID namespace of a spoke that is its
// PID 1, for Enter's report.
func pidNamespaceDetail() string {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(maxTasks) {
		return fmt.Sprintf("pid (own /proc, at most %d tasks)", maxTasks)
	}
	return "pid (own /proc; tasks bounded by the machine's pid_max only: the kernel keeps none per namespace)"
}

// procCovered returns why a spoke could not mount a /proc of its own, or ""
// if it can: in a new user namespace the kernel allows a new procfs only
// where the existing one is fully visible, that is with nothing mounted
// below it but on the permanently empty directories the kernel makes for
// that (binfmt_misc's). Containers typically mount over /proc/kcore and the
// like.
func procCovered() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Sprintf("failed to read the mount table: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		point := fields[4]
		if strings.HasPrefix(point, "/proc/") && point != "/proc/sys/fs/binfmt_misc" {
			return fmt.Sprintf("%s is mounted over part of /proc (as in a container), so a spoke could not mount its own", point)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Sprintf("failed to read the mount table: %v", err)
	}
	return ""
}
