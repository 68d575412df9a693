//go:build linux

package sandbox

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A cgroup per spoke bounds the memory and the tasks of the spoke and of
// everything it starts (an external app's server): RLIMIT_AS is the wrong
// tool for runtimes that reserve large virtual ranges (V8 reserves about
// 10 GiB for WebAssembly), and RLIMIT_NPROC counts every process of the
// uid, which all spokes share. The hub creates the cgroup, writes the
// limits and moves the spoke in; the spoke, another uid confined by
// Landlock, can change none of it.
//
// Two layouts are used, whichever the machine offers for the hub's own
// cgroup: cgroup v2 where the hub's cgroup delegates the memory and pids
// controllers to its children (cgroup.subtree_control lists both), and
// otherwise cgroup v1's memory and pids hierarchies.

// cgroupParent is the directory, below the hub's own cgroup in each
// hierarchy, that holds the spokes' cgroups.
const cgroupParent = "secgpt"

// cgroupLayout is where spokes' cgroups go on this machine.
type cgroupLayout struct {
	// v2 is true for the unified hierarchy: dirs has one entry.
	v2 bool
	// memory and pids are the parent directories in each v1 hierarchy,
	// or both the one v2 directory.
	memory, pids string
	// memsw says the v1 memory controller accounts swap too.
	memsw bool
}

// cgroups is the layout, found once.
var cgroups = sync.OnceValues(findCgroups)

// cgroupSeq numbers the cgroups of this process.
var cgroupSeq atomic.Uint64

// cgroupRun tells this process's cgroups from those of an earlier process
// that had the same PID: every `secgpt ask` is a new process, PIDs are
// reused, and a process that ended abruptly leaves its cgroups behind.
var cgroupRun = func() string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return hex.EncodeToString(b)
}()

// sweepCgroups runs sweepStaleCgroups once per process.
var sweepCgroups = sync.OnceFunc(func() {
	if layout, err := cgroups(); err == nil {
		sweepStaleCgroups(layout)
	}
})

// sweepStaleCgroups removes the empty cgroups that processes no longer
// running left behind (a `secgpt ask` that ended before its spokes'
// cgroups were removed): rmdir fails on a cgroup that still holds a task,
// so nothing running is touched.
func sweepStaleCgroups(layout cgroupLayout) {
	for _, parent := range []string{layout.memory, layout.pids} {
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			pidText, _, ok := strings.Cut(e.Name(), "-")
			pid, err := strconv.Atoi(pidText)
			if !ok || err != nil || !e.IsDir() || pid <= 0 || pid == os.Getpid() {
				continue
			}
			if syscall.Kill(pid, 0) == syscall.ESRCH {
				_ = syscall.Rmdir(filepath.Join(parent, e.Name()))
			}
		}
	}
}

// CgroupSupport reports whether spokes get a cgroup of their own here, and
// how or why not, for the protection report.
func CgroupSupport() (bool, string) {
	l, err := cgroups()
	if err != nil {
		return false, err.Error()
	}
	if l.v2 {
		return true, "cgroup v2 at " + l.memory + " (memory.max, memory.swap.max, pids.max)"
	}
	swap := "memsw unavailable: swap not bounded"
	if l.memsw {
		swap = "memory.memsw.limit_in_bytes"
	}
	return true, fmt.Sprintf("cgroup v1 at %s and %s (memory.limit_in_bytes, %s, pids.max)", l.memory, l.pids, swap)
}

// findCgroups finds a writable place for spokes' cgroups.
func findCgroups() (cgroupLayout, error) {
	own, err := ownCgroups()
	if err != nil {
		return cgroupLayout{}, err
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return cgroupLayout{}, err
	}
	var why []string
	if root, ok := mounts["2"]; ok {
		dir := filepath.Join(root, own["2"])
		ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		fields := strings.Fields(string(ctl))
		switch {
		case err != nil:
			why = append(why, fmt.Sprintf("cgroup v2: %v", err))
		case !slices.Contains(fields, "memory") || !slices.Contains(fields, "pids"):
			why = append(why, fmt.Sprintf("cgroup v2: %s does not delegate memory and pids to its children (subtree_control %q)", dir, strings.TrimSpace(string(ctl))))
		default:
			parent := filepath.Join(dir, cgroupParent)
			if err := makeCgroupDir(parent); err != nil {
				why = append(why, "cgroup v2: "+err.Error())
			} else if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory +pids"), 0); err != nil {
				why = append(why, fmt.Sprintf("cgroup v2: failed to delegate memory and pids below %s: %v", parent, err))
			} else {
				return cgroupLayout{v2: true, memory: parent, pids: parent}, nil
			}
		}
	}
	mem, memOK := mounts["memory"]
	pids, pidsOK := mounts["pids"]
	if !memOK || !pidsOK {
		why = append(why, "cgroup v1: the memory and pids controllers are not both mounted")
		return cgroupLayout{}, errors.New(strings.Join(why, "; "))
	}
	l := cgroupLayout{memory: filepath.Join(mem, own["memory"], cgroupParent), pids: filepath.Join(pids, own["pids"], cgroupParent)}
	for _, dir := range []string{l.memory, l.pids} {
		if err := makeCgroupDir(dir); err != nil {
			why = append(why, "cgroup v1: "+err.Error())
			return cgroupLayout{}, errors.New(strings.Join(why, "; "))
		}
	}
	_, err = os.Stat(filepath.Join(l.memory, "memory.memsw.limit_in_bytes"))
	l.memsw = err == nil
	return l, nil
}

func makeCgroupDir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("failed to create %s: %w", dir, err)
	}
	return nil
}

// ownCgroups maps each controller of /proc/self/cgroup ("2" for the
// unified hierarchy) to the hub's cgroup path in it.
func ownCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("failed to read /proc/self/cgroup: %w", err)
	}
	own := map[string]string{}
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			own["2"] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	return own, nil
}

// cgroupMounts maps each v1 controller, and "2" for cgroup2, to its mount
// point, from /proc/self/mountinfo.
func cgroupMounts() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("failed to read /proc/self/mountinfo: %w", err)
	}
	mounts := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(tail) < 3 || fields[3] != "/" {
			continue
		}
		switch tail[0] {
		case "cgroup2":
			mounts["2"] = fields[4]
		case "cgroup":
			for _, opt := range strings.Split(tail[2], ",") {
				if opt == "memory" || opt == "pids" {
					mounts[opt] = fields[4]
				}
			}
		}
	}
	return mounts, nil
}

// Cgroup is the control group of one spoke and its descendants.
type Cgroup struct {
	layout cgroupLayout
	// dirs are its directories: one in v2, memory's and pids' in v1.
	dirs []string
	// Memory and Tasks are the bounds it enforces.
	Memory, Tasks uint64
}

// NewCgroup creates a cgroup bounded by l.Memory and l.Tasks (l must have
// its defaults). The caller moves the spoke in with Add before the spoke
// starts anything, and calls Remove when the spoke has ended.
func NewCgroup(l Limits) (*Cgroup, error) {
	layout, err := cgroups()
	if err != nil {
		return nil, fmt.Errorf("%w: cgroup: %v", ErrUnprotected, err)
	}
	sweepCgroups()
	name := fmt.Sprintf("%d-%s-%d", os.Getpid(), cgroupRun, cgroupSeq.Add(1))
	c := &Cgroup{layout: layout}
	if layout.v2 {
		c.dirs = []string{filepath.Join(layout.memory, name)}
	} else {
		c.dirs = []string{filepath.Join(layout.memory, name), filepath.Join(layout.pids, name)}
	}
	for _, d := range c.dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			c.Remove()
			return nil, fmt.Errorf("failed to create cgroup: %w", err)
		}
	}
	if err := c.Update(l); err != nil {
		c.Remove()
		return nil, err
	}
	return c, nil
}

// Dirs are the cgroup's directories, by which another process opens it
// (see OpenCgroup).
func (c *Cgroup) Dirs() []string { return slices.Clone(c.dirs) }

// OpenCgroup opens the cgroup that NewCgroup made with dirs, in another
// process, bounded by l: the spoke spawner makes a spoke's cgroup, the hub
// reads it and updates a spare's bounds. dirs must be a cgroup of this
// machine's layout.
func OpenCgroup(dirs []string, l Limits) (*Cgroup, error) {
	layout, err := cgroups()
	if err != nil {
		return nil, fmt.Errorf("%w: cgroup: %v", ErrUnprotected, err)
	}
	want := []string{layout.memory}
	if !layout.v2 {
		want = append(want, layout.pids)
	}
	if len(dirs) != len(want) {
		return nil, fmt.Errorf("cgroup %v is not one of this machine's layout", dirs)
	}
	for i, d := range dirs {
		if filepath.Dir(d) != want[i] || filepath.Base(d) != filepath.Base(dirs[0]) {
			return nil, fmt.Errorf("cgroup %v is not one of this machine's layout", dirs)
		}
	}
	return &Cgroup{layout: layout, dirs: slices.Clone(dirs), Memory: l.Memory, Tasks: l.Tasks}, nil
}

// Update sets the cgroup's bounds to l.Memory and l.Tasks.
func (c *Cgroup) Update(l Limits) error {
	layout := c.layout
	c.Memory, c.Tasks = l.Memory, l.Tasks
	mem := strconv.FormatUint(l.Memory, 10)
	tasks := strconv.FormatUint(l.Tasks, 10)
	var writes [][2]string
	if layout.v2 {
		writes = [][2]string{{"memory.max", mem}, {"memory.swap.max", "0"}, {"pids.max", tasks}}
	} else {
		writes = [][2]string{{"memory.limit_in_bytes", mem}, {"pids.max", tasks}}
		if layout.memsw {
			// Memory plus swap may not exceed the memory bound: no swap.
			writes = append(writes, [2]string{"memory.memsw.limit_in_bytes", mem})
		}
	}
	if !layout.v2 && layout.memsw {
		// memsw may never be below limit_in_bytes: lift it first.
		if err := c.write("memory.memsw.limit_in_bytes", "-1"); err != nil {
			return err
		}
	}
	for _, w := range writes {
		if err := c.write(w[0], w[1]); err != nil {
			return err
		}
	}
	return nil
}

// dirOf is the directory that holds file.
func (c *Cgroup) dirOf(file string) string {
	if len(c.dirs) == 2 && strings.HasPrefix(file, "pids.") {
		return c.dirs[1]
	}
	return c.dirs[0]
}

func (c *Cgroup) write(file, value string) error {
	path := filepath.Join(c.dirOf(file), file)
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		// memory.swap.max is absent without swap accounting.
		if file == "memory.swap.max" && errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("failed to set %s: %w", path, err)
	}
	return nil
}

// Add moves the process pid (and the threads it has) into the cgroup.
func (c *Cgroup) Add(pid int) error {
	for _, d := range c.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("failed to move spoke %d into cgroup %s: %w", pid, d, err)
		}
	}
	return nil
}

// OOMKills is how many processes the kernel killed in the cgroup for being
// over its memory bound.
func (c *Cgroup) OOMKills() uint64 {
	file := "memory.oom_control"
	if c.layout.v2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(c.dirs[0], file))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && k == "oom_kill" {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	return 0
}

// Remove kills whatever is left in the cgroup and removes it. It is safe to
// call more than once.
func (c *Cgroup) Remove() {
	for _, d := range c.dirs {
		for try := 0; try < 50; try++ {
			if err := syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
