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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A cgroup per spoke bounds the memory, the tasks and the processor time
// of the spoke and of everything it starts (an external app's server):
// RLIMIT_AS is the wrong tool for runtimes that reserve large virtual
// ranges (V8 reserves about 10 GiB for WebAssembly), RLIMIT_NPROC counts
// every process of the uid, which all spokes share, and RLIMIT_CPU bounds
// a total, not a rate. The hub creates the cgroup, writes the limits and
// moves the spoke in; the spoke, another uid confined by Landlock, can
// change none of it.
//
// Two layouts are used, whichever the machine offers for the hub's own
// cgroup: cgroup v2 where the hub's cgroup delegates the memory and pids
// controllers to its children (cgroup.subtree_control lists both), and
// otherwise cgroup v1's memory and pids hierarchies. The cpu controller is
// used where it is there too (delegated in v2, mounted in v1); without it
// only RLIMIT_CPU bounds a spoke's processor time, and the report says so.

// cgroupParent is the directory, below the hub's own cgroup in each
// hierarchy, that holds the spokes' cgroups.
const cgroupParent = "secgpt"

// The controllers a spoke's cgroup uses: memory and pids are required, cpu
// is used where the machine has it.
const (
	ctlMemory = "memory"
	ctlPids   = "pids"
	ctlCPU    = "cpu"
)

// cgroupControllers are the controllers in the order their directories are
// created (and removed).
var cgroupControllers = []string{ctlMemory, ctlPids, ctlCPU}

// cfsPeriod is the CPU quota's period in microseconds (the kernel's
// default): CPUPercent of it per period.
const cfsPeriod = 100_000

// cgroupLayout is where spokes' cgroups go on this machine.
type cgroupLayout struct {
	// v2 is true for the unified hierarchy: every parent is the same
	// directory.
	v2 bool
	// parents maps each controller in use to the directory, in its
	// hierarchy, that holds the spokes' cgroups. cpu is absent without
	// the cpu controller.
	parents map[string]string
	// memsw says the v1 memory controller accounts swap too.
	memsw bool
	// noCPU says why spokes' processor time has no cgroup bound; "" when
	// it has one.
	noCPU string
}

// cgroups is the layout, found once.
var cgroups = sync.OnceValues(findCgroups)

// cgroupSeq numbers the cgroups of this process.
var cgroupSeq atomic.Uint64

// cgroupRun tells this process's cgroups from those of an earlier process
// that had the same PID: every `secgpt ask` is a new process, PIDs are
// reused, and a process that ended abruptly leaves its cgroups behind. It
// is drawn when first needed, not at package init (a spoke never needs it).
var cgroupRun = sync.OnceValue(func() string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return hex.EncodeToString(b)
})

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
	for _, parent := range layout.dirs() {
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

// dirs are the distinct parent directories, in controller order.
func (l cgroupLayout) dirs() []string {
	var out []string
	for _, c := range cgroupControllers {
		if d, ok := l.parents[c]; ok && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// CgroupSupport reports whether spokes get a cgroup of their own here, and
// how or why not, for the protection report: the version, where, and the
// files that hold each bound, or why a bound is missing.
func CgroupSupport() (bool, string) { return cgroupSupport() }

// cgroupSupport is CgroupSupport, found once: the hub asks at every spoke
// start.
var cgroupSupport = sync.OnceValues(func() (bool, string) {
	l, err := cgroups()
	if err != nil {
		return false, err.Error()
	}
	return true, l.describe()
})

// CgroupBound names the cgroup file that bounds a spoke's resource
// ("memory", "swap", "tasks" or "cpu") here, with the cgroup version, for
// the sandbox check's verdicts: "cgroup v1 memory.limit_in_bytes". It is
// "" where no cgroup bounds it.
func CgroupBound(resource string) string {
	l, err := cgroups()
	if err != nil {
		return ""
	}
	files := map[string][2]string{
		"memory": {"memory.limit_in_bytes", "memory.max"},
		"swap":   {"memory.memsw.limit_in_bytes", "memory.swap.max"},
		"tasks":  {"pids.max", "pids.max"},
		"cpu":    {"cpu.cfs_quota_us", "cpu.max"},
	}
	f, ok := files[resource]
	switch {
	case !ok, resource == "cpu" && l.noCPU != "", resource == "swap" && !l.v2 && !l.memsw:
		return ""
	case l.v2:
		return "cgroup v2 " + f[1]
	default:
		return "cgroup v1 " + f[0]
	}
}

func (l cgroupLayout) describe() string {
	if l.v2 {
		cpu := "cpu.weight, cpu.max"
		if l.noCPU != "" {
			cpu = "no cpu bound: " + l.noCPU
		}
		return fmt.Sprintf("cgroup v2 at %s: memory.max, memory.swap.max, pids.max, %s", l.parents[ctlMemory], cpu)
	}
	swap := "swap not bounded: memory.memsw.limit_in_bytes absent (no swap accounting)"
	if l.memsw {
		swap = "memory.memsw.limit_in_bytes"
	}
	cpu := fmt.Sprintf("cpu.shares, cpu.cfs_quota_us at %s", l.parents[ctlCPU])
	if l.noCPU != "" {
		cpu = "no cpu bound: " + l.noCPU
	}
	return fmt.Sprintf("cgroup v1: memory.limit_in_bytes at %s, %s, pids.max at %s, %s",
		l.parents[ctlMemory], swap, l.parents[ctlPids], cpu)
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
		l, err := findCgroupV2(filepath.Join(root, own["2"]))
		if err == nil {
			return l, nil
		}
		why = append(why, "cgroup v2: "+err.Error())
	}
	mem, memOK := mounts[ctlMemory]
	pids, pidsOK := mounts[ctlPids]
	if !memOK || !pidsOK {
		why = append(why, "cgroup v1: the memory and pids controllers are not both mounted")
		return cgroupLayout{}, errors.New(strings.Join(why, "; "))
	}
	l := cgroupLayout{parents: map[string]string{
		ctlMemory: filepath.Join(mem, own[ctlMemory], cgroupParent),
		ctlPids:   filepath.Join(pids, own[ctlPids], cgroupParent),
	}}
	for _, dir := range l.dirs() {
		if err := makeCgroupDir(dir); err != nil {
			why = append(why, "cgroup v1: "+err.Error())
			return cgroupLayout{}, errors.New(strings.Join(why, "; "))
		}
	}
	_, err = os.Stat(filepath.Join(l.parents[ctlMemory], "memory.memsw.limit_in_bytes"))
	l.memsw = err == nil
	if cpu, ok := mounts[ctlCPU]; !ok {
		l.noCPU = "the cpu controller is not mounted; only RLIMIT_CPU bounds a spoke's processor time"
	} else if dir := filepath.Join(cpu, own[ctlCPU], cgroupParent); makeCgroupDir(dir) != nil {
		l.noCPU = fmt.Sprintf("cannot create %s; only RLIMIT_CPU bounds a spoke's processor time", dir)
	} else {
		l.parents[ctlCPU] = dir
		weighAllSpokes(filepath.Join(dir, "cpu.shares"), 1024, 262144)
	}
	return l, nil
}

// weighAllSpokes gives the parent of the spokes' cgroups, in the cpu
// hierarchy, the weight of one task per processor (file's default weight
// unit times NumCPU, at most most): the parent competes with the hub's
// own threads and the machine's other tasks as one group, and at the
// default weight all spokes together would get one task's share of a busy
// machine, where each of their threads had a share before. Best effort:
// it bounds nothing.
func weighAllSpokes(file string, unit, most int) {
	_ = os.WriteFile(file, []byte(strconv.Itoa(min(unit*runtime.NumCPU(), most))), 0)
}

// findCgroupV2 makes the spokes' parent below dir, the hub's own cgroup,
// where dir delegates memory and pids (and cpu, if it can) to children.
func findCgroupV2(dir string) (cgroupLayout, error) {
	ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return cgroupLayout{}, err
	}
	fields := strings.Fields(string(ctl))
	if !slices.Contains(fields, ctlMemory) || !slices.Contains(fields, ctlPids) {
		return cgroupLayout{}, fmt.Errorf("%s does not delegate memory and pids to its children (subtree_control %q)", dir, strings.TrimSpace(string(ctl)))
	}
	parent := filepath.Join(dir, cgroupParent)
	if err := makeCgroupDir(parent); err != nil {
		return cgroupLayout{}, err
	}
	l := cgroupLayout{v2: true, parents: map[string]string{ctlMemory: parent, ctlPids: parent}}
	enable := "+memory +pids"
	if slices.Contains(fields, ctlCPU) {
		enable += " +cpu"
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte(enable), 0); err != nil {
		return cgroupLayout{}, fmt.Errorf("failed to delegate %s below %s: %w", enable, parent, err)
	}
	if slices.Contains(fields, ctlCPU) {
		l.parents[ctlCPU] = parent
		weighAllSpokes(filepath.Join(parent, "cpu.weight"), 100, MaxCPUWeight)
	} else {
		l.noCPU = fmt.Sprintf("%s does not delegate cpu; only RLIMIT_CPU bounds a spoke's processor time", dir)
	}
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
				if slices.Contains(cgroupControllers, opt) {
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
	// dirs maps each controller in use to the cgroup's directory in its
	// hierarchy (all the same in v2).
	dirs map[string]string
	// Memory and Tasks are the bounds it enforces.
	Memory, Tasks uint64
	// bounds are the limits whose bounds it was last set to (all of
	// them: writes of Update), and set whether there are any.
	bounds Limits
	set    bool
	// oomKills is the most OOMKills has read: the count outlives the
	// cgroup, which the spawner removes once the spoke has ended, maybe
	// before the hub has judged the spoke's last result.
	oomKills atomic.Uint64
}

// NewCgroup creates a cgroup bounded by l (l must have its defaults). The
// caller moves the spoke in with Add before the spoke starts anything, and
// calls Remove when the spoke has ended.
func NewCgroup(l Limits) (*Cgroup, error) {
	layout, err := cgroups()
	if err != nil {
		return nil, fmt.Errorf("%w: cgroup: %v", ErrUnprotected, err)
	}
	sweepCgroups()
	name := fmt.Sprintf("%d-%s-%d", os.Getpid(), cgroupRun(), cgroupSeq.Add(1))
	c := &Cgroup{layout: layout, dirs: map[string]string{}}
	for ctl, parent := range layout.parents {
		c.dirs[ctl] = filepath.Join(parent, name)
	}
	for _, d := range c.unique() {
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

// unique are the cgroup's distinct directories, in controller order.
func (c *Cgroup) unique() []string {
	return cgroupLayout{parents: c.dirs}.dirs()
}

// Dirs are the cgroup's directories, by which another process opens it
// (see OpenCgroup).
func (c *Cgroup) Dirs() []string { return c.unique() }

// OpenCgroup opens the cgroup that NewCgroup made with dirs, in another
// process, bounded by l: the spoke spawner makes a spoke's cgroup, the hub
// reads it and updates a spare's bounds. dirs must be a cgroup of this
// machine's layout.
func OpenCgroup(dirs []string, l Limits) (*Cgroup, error) {
	layout, err := cgroups()
	if err != nil {
		return nil, fmt.Errorf("%w: cgroup: %v", ErrUnprotected, err)
	}
	want := layout.dirs()
	if len(dirs) != len(want) {
		return nil, fmt.Errorf("cgroup %v is not one of this machine's layout", dirs)
	}
	for i, d := range dirs {
		if filepath.Dir(d) != want[i] || filepath.Base(d) != filepath.Base(dirs[0]) {
			return nil, fmt.Errorf("cgroup %v is not one of this machine's layout", dirs)
		}
	}
	// NewCgroup set these bounds.
	c := &Cgroup{layout: layout, dirs: map[string]string{}, Memory: l.Memory, Tasks: l.Tasks, bounds: l, set: true}
	for ctl, parent := range layout.parents {
		c.dirs[ctl] = filepath.Join(parent, filepath.Base(dirs[0]))
	}
	return c, nil
}

// Update sets the cgroup's bounds to l's memory, swap, tasks and CPU. It
// writes nothing when they are already l's (a spare's cgroup, made for the
// spare policy's limits, which a built-in app's spoke shares): the hub's
// work per claim is then none.
func (c *Cgroup) Update(l Limits) error {
	if c.set && c.bounds == l {
		return nil
	}
	c.set = false
	c.Memory, c.Tasks = l.Memory, l.Tasks
	for _, w := range c.layout.writes(l) {
		if err := c.write(w[0], w[1]); err != nil {
			return err
		}
	}
	c.bounds, c.set = l, true
	return nil
}

// writes are the files and values that bound a cgroup to l, in the order
// they must be written.
func (layout cgroupLayout) writes(l Limits) [][2]string {
	mem := strconv.FormatUint(l.Memory, 10)
	tasks := strconv.FormatUint(l.Tasks, 10)
	quota := strconv.FormatUint(l.CPUPercent*cfsPeriod/100, 10)
	var writes [][2]string
	if layout.v2 {
		writes = [][2]string{{"memory.max", mem}, {"memory.swap.max", strconv.FormatUint(l.Swap, 10)}, {"pids.max", tasks}}
		if layout.noCPU == "" {
			writes = append(writes, [2]string{"cpu.weight", strconv.FormatUint(l.CPUWeight, 10)},
				[2]string{"cpu.max", quota + " " + strconv.Itoa(cfsPeriod)})
		}
		return writes
	}
	if layout.memsw {
		// memsw may never be below limit_in_bytes: lift it first.
		writes = append(writes, [2]string{"memory.memsw.limit_in_bytes", "-1"})
	}
	writes = append(writes, [2]string{"memory.limit_in_bytes", mem}, [2]string{"pids.max", tasks})
	if layout.memsw {
		// Memory plus swap may not exceed the memory bound plus the swap.
		writes = append(writes, [2]string{"memory.memsw.limit_in_bytes", strconv.FormatUint(l.Memory+l.Swap, 10)})
	}
	if layout.noCPU == "" {
		// cpu.shares' default, 1024, is cpu.weight's 100; 2 is its least.
		shares := max(l.CPUWeight*1024/100, 2)
		writes = append(writes, [2]string{"cpu.shares", strconv.FormatUint(shares, 10)},
			[2]string{"cpu.cfs_period_us", strconv.Itoa(cfsPeriod)}, [2]string{"cpu.cfs_quota_us", quota})
	}
	return writes
}

// dirOf is the directory that holds file, a controller's file
// ("memory.max", "cpu.shares") or a core one ("cgroup.procs": memory's).
func (c *Cgroup) dirOf(file string) string {
	ctl, _, _ := strings.Cut(file, ".")
	if d, ok := c.dirs[ctl]; ok {
		return d
	}
	return c.dirs[ctlMemory]
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
	for _, d := range c.unique() {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("failed to move spoke %d into cgroup %s: %w", pid, d, err)
		}
	}
	return nil
}

// OOMKills is how many processes the kernel killed in the cgroup for being
// over its memory bound.
// A count read once stays: after the cgroup is removed, the last count
// read is returned.
func (c *Cgroup) OOMKills() uint64 {
	file := "memory.oom_control"
	if c.layout.v2 {
		file = "memory.events"
	}
	n := c.counter(file, "oom_kill")
	for {
		seen := c.oomKills.Load()
		if n <= seen {
			return seen
		}
		if c.oomKills.CompareAndSwap(seen, n) {
			return n
		}
	}
}

// TasksRefused is how many times the cgroup refused a new process or
// thread for being at its pids.max.
func (c *Cgroup) TasksRefused() uint64 { return c.counter("pids.events", "max") }

// MemoryPeak is the most memory the cgroup has held, in bytes (v1
// memory.max_usage_in_bytes, v2 memory.peak where the kernel has it); 0
// when the kernel does not say.
func (c *Cgroup) MemoryPeak() uint64 {
	file := "memory.max_usage_in_bytes"
	if c.layout.v2 {
		file = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(c.dirOf(file), file))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// Throttled is how many CPU periods the cgroup was held at its quota
// (cpu.stat nr_throttled); 0 without the cpu controller.
func (c *Cgroup) Throttled() uint64 {
	if c.layout.noCPU != "" {
		return 0
	}
	return c.counter("cpu.stat", "nr_throttled")
}

// counter reads the value of key in a flat-keyed file of the cgroup
// ("key value" lines); 0 when absent.
func (c *Cgroup) counter(file, key string) uint64 {
	b, err := os.ReadFile(filepath.Join(c.dirOf(file), file))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && k == key {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	return 0
}

// Remove kills whatever is left in the cgroup and removes it. It is safe to
// call more than once.
func (c *Cgroup) Remove() {
	for _, d := range c.unique() {
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
