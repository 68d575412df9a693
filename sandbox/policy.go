package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Profile names a sandbox profile. The values are those of apps.Profile.
type Profile string

const (
	// ProfileStrict is for built-in Go apps: the spoke may not execute
	// anything, has no network and no file access beyond its scratch
	// directory and what its own binary needs.
	ProfileStrict Profile = "strict"
	// ProfileExec is for external apps: the spoke may execute Policy.ExecPath
	// (and nothing else), and the program it executes runs under the same
	// seccomp filter, Landlock domain and limits.
	ProfileExec Profile = "exec"
	// ProfileProxy is for the spoke that hosts an external app which
	// declares egress: ProfileStrict plus accepting TCP connections on the
	// loopback listener of its egress proxy, which it opens before Enter
	// (see UpLoopback). It runs only in a network namespace of its own, so
	// that loopback is the spoke's alone: Check, Prepare and Enter refuse
	// it elsewhere unless AllowWeaker.
	ProfileProxy Profile = "proxy"
	// ProfileExecNet is ProfileExec plus TCP over IPv4 to Policy.ProxyPort
	// and TransparentTCPPorts, and UDP over IPv4 to ResolverPort: for an
	// external app's server, which reaches the network only through its
	// spoke (its egress proxy, its listeners on ports 80 and 443, its
	// resolver). Like ProfileProxy it runs only in a network namespace of
	// its own, where loopback is the only interface and only its spoke
	// listens, and it may not create unix sockets (which could reach
	// sockets by path).
	ProfileExecNet Profile = "exec_net"
)

// TransparentTCPPorts are the ports on which a ProfileProxy spoke accepts
// its app's connections to any name (HTTP on 80, TLS on 443), which its
// resolver on ResolverPort maps to loopback.
var TransparentTCPPorts = []uint16{80, 443}

// ResolverPort is the DNS port of a ProfileProxy spoke's resolver.
const ResolverPort = 53

// executes reports whether the profile starts Policy.ExecPath.
func (p Profile) executes() bool { return p == ProfileExec || p == ProfileExecNet }

// ownNetwork reports whether the profile may run only in a network
// namespace of its own.
func (p Profile) ownNetwork() bool { return p == ProfileProxy || p == ProfileExecNet }

// MinAddressSpace is the smallest Limits.AddressSpace a policy may ask for.
// Address space is not memory: a Go 1.26 cgo spoke on x86-64 reserves about
// 1.1 GiB at start (the page allocator's summaries), plus 8 MiB per thread
// stack and 64 MiB per glibc malloc arena (Prepare limits those to one).
// Under this package's filter it was measured to need 1.25 GiB to start and
// serve, and 1.63 GiB with 60 threads (TestAddressSpaceNeeded).
const MinAddressSpace = 1536 << 20

// Limits are the resource limits of a spoke. Each is set as both the soft and
// the hard limit (except CPUSeconds, see below), so the spoke cannot raise
// them. A zero field means its DefaultLimits value: there is no "unlimited".
type Limits struct {
	// CPUSeconds is RLIMIT_CPU's soft limit; the hard limit is one second
	// more, so SIGKILL follows SIGXCPU (which the Go runtime ignores). The hub
	// must still enforce a wall-clock deadline: a sleeping spoke uses no CPU.
	CPUSeconds uint64 `json:"cpu_seconds,omitempty"`
	// AddressSpace is RLIMIT_AS in bytes, at least MinAddressSpace. It is a
	// guard against runaway allocation, not a memory budget.
	AddressSpace uint64 `json:"address_space,omitempty"`
	// FileSize is RLIMIT_FSIZE in bytes: the largest file the spoke may write.
	FileSize uint64 `json:"file_size,omitempty"`
	// OpenFiles is RLIMIT_NOFILE: one more than the highest file descriptor
	// number the spoke may open.
	OpenFiles uint64 `json:"open_files,omitempty"`
	// Memory bounds, in bytes, the memory (and swap) of the spoke and of
	// every process it starts, through its cgroup (see NewCgroup); over it
	// the kernel kills a process of the spoke. Without cgroups it is not
	// enforced and AddressSpace is the only bound.
	Memory uint64 `json:"memory,omitempty"`
	// Tasks bounds the processes and threads of the spoke and everything
	// it starts (the cgroup's pids.max).
	Tasks uint64 `json:"tasks,omitempty"`
	// CPUWeight is the spoke's share of the processors against other
	// spokes when they contend, 1 to 10000 (cgroup v2 cpu.weight; v1
	// cpu.shares = weight × 1024 / 100); 100 is an equal share.
	CPUWeight uint64 `json:"cpu_weight,omitempty"`
	// CPUPercent caps the processor time of the spoke and everything it
	// starts, in percent of one processor per 100 ms period (v2 cpu.max,
	// v1 cpu.cfs_quota_us): a spinning app takes no more, however many
	// threads it runs. CPUSeconds still bounds its total.
	CPUPercent uint64 `json:"cpu_percent,omitempty"`
	// Swap is the swap, in bytes, the spoke may use beyond Memory (v2
	// memory.swap.max; v1 memory.memsw.limit_in_bytes = Memory + Swap,
	// where the kernel accounts swap). Unlike the other fields, 0 is the
	// default: no swap.
	Swap uint64 `json:"swap,omitempty"`
	// DiskBytes bounds the bytes the spoke may keep in its scratch: the
	// size of its own tmpfs (see Policy.KeepScratch), which is memory of
	// its cgroup, or the hub's quota on a scratch it keeps.
	DiskBytes uint64 `json:"disk_bytes,omitempty"`
	// DiskFiles bounds the files and directories in its scratch: the
	// tmpfs's nr_inodes, or the hub's quota.
	DiskFiles uint64 `json:"disk_files,omitempty"`
}

// DefaultLimits returns the limits of a built-in app's spoke unless the
// operator says otherwise: 30 CPU seconds, 2 GiB of address space (room for
// about 90 threads), 64 MiB files, 64 open files, 256 MiB of memory, 128
// tasks, an equal CPU weight, at most one processor, no swap, and 64 MiB
// and 1024 files of scratch.
func DefaultLimits() Limits { return DefaultLimitsFor(ProfileStrict) }

// DefaultLimitsFor returns the default limits of profile p. An external
// app's server (ProfileExec, ProfileExecNet) gets what real runtimes need:
// Node's module loader opens more than 64 files and V8 more than 128
// threads' worth of tasks in a busy process, so 1024 open files, 1 GiB of
// memory, 256 tasks, two processors (V8 compiles and collects on threads
// of its own), and 256 MiB and 8192 files of scratch (a package cache, a
// database); its address space is bounded only where no cgroup
// bounds its memory (see Policy.Cgroup).
func DefaultLimitsFor(p Profile) Limits {
	l := Limits{
		CPUSeconds:   30,
		AddressSpace: 2 << 30,
		FileSize:     64 << 20,
		OpenFiles:    64,
		Memory:       256 << 20,
		Tasks:        128,
		CPUWeight:    100,
		CPUPercent:   100,
		DiskBytes:    64 << 20,
		DiskFiles:    1024,
	}
	if p.executes() {
		l.OpenFiles, l.Memory, l.Tasks, l.CPUPercent = 1024, 1<<30, 256, 200
		l.DiskBytes, l.DiskFiles = 256<<20, 8192
	}
	return l
}

// WithDefaults fills every zero field from DefaultLimitsFor(p).
func (l Limits) WithDefaults(p Profile) Limits {
	d := DefaultLimitsFor(p)
	if l.CPUSeconds == 0 {
		l.CPUSeconds = d.CPUSeconds
	}
	if l.AddressSpace == 0 {
		l.AddressSpace = d.AddressSpace
	}
	if l.FileSize == 0 {
		l.FileSize = d.FileSize
	}
	if l.OpenFiles == 0 {
		l.OpenFiles = d.OpenFiles
	}
	if l.Memory == 0 {
		l.Memory = d.Memory
	}
	if l.Tasks == 0 {
		l.Tasks = d.Tasks
	}
	if l.CPUWeight == 0 {
		l.CPUWeight = d.CPUWeight
	}
	if l.CPUPercent == 0 {
		l.CPUPercent = d.CPUPercent
	}
	if l.DiskBytes == 0 {
		l.DiskBytes = d.DiskBytes
	}
	if l.DiskFiles == 0 {
		l.DiskFiles = d.DiskFiles
	}
	return l
}

// MinMemory is the smallest Limits.Memory a policy may ask for: a Go spoke
// needs about 10 MiB resident, an interpreter more.
const MinMemory = 32 << 20

// MinTasks is the smallest Limits.Tasks: a Go spoke runs about 10 threads.
const MinTasks = 16

// MaxCPUWeight is the largest Limits.CPUWeight, cgroup v2's.
const MaxCPUWeight = 10000

// MinCPUPercent is the smallest Limits.CPUPercent: below a tenth of a
// processor a spoke misses its start deadline.
const MinCPUPercent = 10

// MinDiskBytes and MinDiskFiles are the smallest Limits.DiskBytes and
// DiskFiles: room for a few small files.
const (
	MinDiskBytes = 1 << 20
	MinDiskFiles = 16
)

// Policy is everything the child needs to confine itself. The parent encodes
// it on the child's command line (Encode) and the child decodes it
// (DecodePolicy) before calling Enter. It holds no secret.
type Policy struct {
	// Profile is ProfileStrict, ProfileExec, ProfileProxy or ProfileExecNet.
	Profile Profile `json:"profile"`
	// Limits are the resource limits; zero fields take their defaults.
	Limits Limits `json:"limits"`
	// Scratch is the private read-write directory of this (user, app), an
	// absolute path; "" means none. Prepare creates it.
	Scratch string `json:"scratch,omitempty"`
	// KeepScratch says Scratch outlives the spoke (an external app's data
	// across its spokes): the hub bounds it (see Limits.DiskBytes).
	// Otherwise a ProfileStrict spoke in a mount namespace of its own
	// mounts a tmpfs of its own over Scratch in Enter, bounded by
	// Limits.DiskBytes and DiskFiles and gone with it (see mountScratch,
	// Capabilities.OwnScratch). The other profiles keep theirs: an exec
	// profile's program starts before Enter, and a ProfileProxy spoke has
	// dropped its capabilities by then.
	KeepScratch bool `json:"keep_scratch,omitempty"`
	// ReadOnly are extra absolute paths (files or directories) the spoke may
	// read. The executable and the libraries it maps are added by Enter.
	ReadOnly []string `json:"read_only,omitempty"`
	// ReadWrite are extra absolute paths (files or directories) the spoke
	// may read and write, as it may its scratch: an external app's declared
	// read_write paths.
	ReadWrite []string `json:"read_write,omitempty"`
	// ExecPath is, for ProfileExec and ProfileExecNet only, the absolute
	// path of the one ELF executable the spoke may execute (see Exec).
	ExecPath string `json:"exec_path,omitempty"`
	// ProxyPort is, for ProfileExecNet only, the one TCP port the program
	// may connect to: its spoke's egress proxy on loopback. Landlock
	// enforces it where the kernel has network rules (ABI 4).
	ProxyPort uint16 `json:"proxy_port,omitempty"`
	// Namespaces asks for new user, PID, network and IPC namespaces. It is
	// best effort: Prepare uses what Probe found and Enter reports it.
	Namespaces bool `json:"namespaces,omitempty"`
	// Notify, for ProfileExec and ProfileExecNet, sends a syscall the
	// filter refuses to a listener (Report.Listener) instead of failing it
	// at once: the parent that takes the listener (TakeListener) names the
	// syscall and fails it with EPERM (ServeListener). Syscalls the table
	// kills or fails with ENOSYS are not sent.
	Notify bool `json:"notify,omitempty"`
	// Cgroup says the parent bounds the spoke's memory and tasks with a
	// cgroup of its own (NewCgroup): ProfileExec and ProfileExecNet then
	// leave RLIMIT_AS unlimited, which runtimes that reserve large virtual
	// ranges (V8) need. The parent sets it; it passes to an external app's
	// server with the rest of the spoke's limits.
	Cgroup bool `json:"cgroup,omitempty"`
	// AllowWeaker is the operator's explicit opt-out: run even if seccomp or
	// Landlock is unavailable. Enter then applies what it can and reports
	// what it could not; the caller must log that loudly.
	AllowWeaker bool `json:"allow_weaker,omitempty"`
}

// Validate checks that p is well formed. It does not look at the kernel.
func (p Policy) Validate() error {
	switch p.Profile {
	case ProfileStrict, ProfileProxy, ProfileExec, ProfileExecNet:
	default:
		return policyError("unknown profile %q", p.Profile)
	}
	if !p.Profile.executes() && p.ExecPath != "" {
		return policyError("exec_path is only allowed in profiles %q and %q", ProfileExec, ProfileExecNet)
	}
	if p.Profile.executes() {
		if p.ExecPath == "" {
			return policyError("profile %q needs exec_path", p.Profile)
		}
		if err := checkPath("exec_path", p.ExecPath); err != nil {
			return err
		}
	}
	if (p.Profile == ProfileExecNet) != (p.ProxyPort != 0) {
		return policyError("proxy_port is required in profile %q and allowed in no other", ProfileExecNet)
	}
	if p.Scratch != "" {
		if err := checkPath("scratch", p.Scratch); err != nil {
			return err
		}
	}
	for _, path := range p.ReadOnly {
		if err := checkPath("read_only", path); err != nil {
			return err
		}
	}
	for _, path := range p.ReadWrite {
		if err := checkPath("read_write", path); err != nil {
			return err
		}
		if path == "/" {
			return policyError("read_write may not be the root directory")
		}
	}
	l := p.Limits.WithDefaults(p.Profile)
	if l.AddressSpace < MinAddressSpace {
		return policyError("address_space %d is below the Go runtime's minimum %d", l.AddressSpace, MinAddressSpace)
	}
	if l.Memory < MinMemory {
		return policyError("memory %d is below the minimum %d", l.Memory, uint64(MinMemory))
	}
	if l.Tasks < MinTasks {
		return policyError("tasks %d is below the minimum %d", l.Tasks, MinTasks)
	}
	if l.CPUWeight > MaxCPUWeight {
		return policyError("cpu_weight %d is above the maximum %d", l.CPUWeight, MaxCPUWeight)
	}
	if l.CPUPercent < MinCPUPercent {
		return policyError("cpu_percent %d is below the minimum %d", l.CPUPercent, MinCPUPercent)
	}
	if l.DiskBytes < MinDiskBytes || l.DiskFiles < MinDiskFiles {
		return policyError("disk_bytes %d or disk_files %d is below the minimum %d or %d", l.DiskBytes, l.DiskFiles, MinDiskBytes, MinDiskFiles)
	}
	return nil
}

// Prestartable reports whether a spoke for p can be started ahead of need,
// before p is known, by Prepare under spare: Prepare then gives the process
// every attribute it would give it under p (uid, namespaces, no capability),
// and what p adds comes after the spoke is told p, through PrepareScratchFor in
// the parent and Enter in the child. Only ProfileStrict qualifies: the other
// profiles start with capabilities, listeners or an app's environment that
// depend on the app. spare must name no scratch directory, which belongs to
// one (user, app).
func (p Policy) Prestartable(spare Policy) bool {
	return p.Profile == ProfileStrict && spare.Profile == ProfileStrict && spare.Scratch == "" &&
		p.Namespaces == spare.Namespaces && p.AllowWeaker == spare.AllowWeaker
}

// checkPath requires a clean absolute path, so that the paths Landlock
// allows are the paths the operator wrote.
func checkPath(field, path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return policyError("%s %q is not a clean absolute path", field, path)
	}
	return nil
}

func policyError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidPolicy, fmt.Sprintf(format, args...))
}

// Encode returns p as compact JSON for the child's command line.
func (p Policy) Encode() (string, error) {
	if err := p.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("failed to encode policy: %w", err)
	}
	return string(b), nil
}

// DecodePolicy parses what Encode produced. Unknown fields are refused, so a
// parent and child built from different versions fail instead of silently
// dropping a protection.
func DecodePolicy(s string) (Policy, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var p Policy
	if err := dec.Decode(&p); err != nil {
		return Policy{}, fmt.Errorf("failed to decode policy: %w: %w", ErrInvalidPolicy, err)
	}
	if dec.More() {
		return Policy{}, policyError("trailing data after policy")
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// Errors of this package.
var (
	// ErrInvalidPolicy is returned (wrapped) by Validate, Encode,
	// DecodePolicy, Prepare and Enter for a malformed policy.
	ErrInvalidPolicy = errors.New("invalid sandbox policy")
	// ErrUnprotected is returned (wrapped in a *MissingError) by Check,
	// Prepare and Enter when a protection the policy needs is unavailable
	// and the policy does not allow a weaker sandbox.
	ErrUnprotected = errors.New("sandbox protection unavailable")
	// ErrWrongProfile is returned by Exec outside ProfileExec and
	// ProfileExecNet, and on systems where Exec cannot be confined.
	ErrWrongProfile = errors.New("exec not allowed by the sandbox policy")
)

// MissingError names the protections that are unavailable. It unwraps to
// ErrUnprotected.
type MissingError struct {
	// Missing has one entry per protection: "name: why".
	Missing []string
}

func (e *MissingError) Error() string {
	return "sandbox protection unavailable: " + strings.Join(e.Missing, "; ")
}

func (e *MissingError) Unwrap() error { return ErrUnprotected }

// Protection is one protection as applied (or not) by Enter.
type Protection struct {
	Name   string `json:"name"`
	On     bool   `json:"on"`
	Detail string `json:"detail"`
}

// Report says what Enter applied, one Protection per mechanism, in the order
// applied.
type Report struct {
	Protections []Protection `json:"protections"`
	// Listener is, under Policy.Notify, the close-on-exec descriptor of
	// the seccomp listener that receives every syscall the filter
	// refuses; -1 otherwise. The caller hands it to its parent (see
	// TakeListener) and closes it before it executes anything: a program
	// holding its own listener could answer for the filter.
	Listener int `json:"-"`
}

// namespacesProtection, viewProtection and diskProtection name the
// best-effort entries of a Report: all are off where the kernel offers
// spokes no namespaces (the hub then bounds a spoke's scratch itself: see
// Capabilities.OwnScratch).
const (
	namespacesProtection = "namespaces"
	viewProtection       = "mount view"
	diskProtection       = "disk"
)

// Weaker reports whether a protection other than the best-effort
// namespaces, mount view and disk is off, as only happens with
// Policy.AllowWeaker.
func (r Report) Weaker() bool {
	for _, pr := range r.Protections {
		if !pr.On && pr.Name != namespacesProtection && pr.Name != viewProtection && pr.Name != diskProtection {
			return true
		}
	}
	return false
}

func (r *Report) add(name string, on bool, detail string) {
	r.Protections = append(r.Protections, Protection{Name: name, On: on, Detail: detail})
}

// Capabilities is what the kernel and this build offer, as found by Probe.
type Capabilities struct {
	Seccomp        bool   `json:"seccomp"`
	SeccompDetail  string `json:"seccomp_detail"`
	LandlockABI    int    `json:"landlock_abi"`
	LandlockDetail string `json:"landlock_detail"`
	UserNS         bool   `json:"user_ns"`
	NetNS          bool   `json:"net_ns"`
	PIDNS          bool   `json:"pid_ns"`
	NSDetail       string `json:"ns_detail"`
	NoNewPrivs     bool   `json:"no_new_privs"`
	// Cgroup says spokes get a cgroup of their own (memory and tasks);
	// without one only the rlimits bound them.
	Cgroup       bool   `json:"cgroup"`
	CgroupDetail string `json:"cgroup_detail"`
	// UIDs says each live spoke runs under a host uid and gid of its own
	// (a root hub, see IDRange); without, every spoke runs as one uid.
	UIDs       bool   `json:"uids"`
	UIDsDetail string `json:"uids_detail"`
	// MountView says each spoke in namespaces sees a root of its own that
	// holds only what its policy names (see Enter); without, it sees the
	// host's file tree, which Landlock keeps it from reading but not from
	// stat.
	MountView       bool   `json:"mount_view"`
	MountViewDetail string `json:"mount_view_detail"`
}

// Lines returns one human-readable line per protection, for the binary's
// start-up message.
func (c Capabilities) Lines() []string {
	return []string{
		"seccomp: " + onOff(c.Seccomp) + " (" + c.SeccompDetail + ")",
		fmt.Sprintf("landlock: %s (ABI %d; %s)", onOff(c.LandlockABI > 0), c.LandlockABI, c.LandlockDetail),
		"no_new_privs: " + onOff(c.NoNewPrivs),
		fmt.Sprintf("namespaces: user %s, pid %s, net %s (%s)", onOff(c.UserNS), onOff(c.PIDNS), onOff(c.NetNS), c.NSDetail),
		"cgroup per spoke: " + onOff(c.Cgroup) + " (" + c.CgroupDetail + cgroupFallback(c.Cgroup) + ")",
		"uid separation: " + onOff(c.UIDs) + " (" + c.UIDsDetail + ")",
		"mount view: " + onOff(c.MountView) + " (" + c.MountViewDetail + ")",
	}
}

// cgroupFallback says what bounds a spoke without a cgroup.
func cgroupFallback(on bool) string {
	if on {
		return ""
	}
	return "; memory and tasks are not bounded per spoke, only the rlimits (address space, open files, CPU, file size) apply"
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// Check returns nil if p can run here with every protection it needs, or if
// p.AllowWeaker; otherwise a *MissingError naming what is missing.
// Namespaces are best effort and never make Check fail, except the network
// namespace that ProfileProxy and ProfileExecNet need.
func (c Capabilities) Check(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.AllowWeaker {
		return nil
	}
	var missing []string
	if !c.Seccomp {
		missing = append(missing, "seccomp: "+c.SeccompDetail)
	}
	if c.LandlockABI < 1 {
		missing = append(missing, "landlock: "+c.LandlockDetail)
	}
	if !c.NoNewPrivs {
		missing = append(missing, "no_new_privs: not supported by the kernel")
	}
	if p.Profile.ownNetwork() && (!c.UserNS || !c.NetNS) {
		missing = append(missing, fmt.Sprintf("network namespace (profile %s needs one of its own): %s", p.Profile, c.NSDetail))
	}
	if len(missing) > 0 {
		return &MissingError{Missing: missing}
	}
	return nil
}

// OwnScratch reports whether a spoke under p gets a tmpfs of its own as
// its scratch (see Policy.KeepScratch): a ProfileStrict spoke that does
// not keep its scratch and runs as PID 1 of its own PID and mount
// namespaces. Where it does not, the hub must bound the scratch itself.
func (c Capabilities) OwnScratch(p Policy) bool {
	return p.ownScratch() && (p.Namespaces || p.Profile.ownNetwork()) && c.UserNS && c.PIDNS
}

// ownScratch says a scratch of p would be a tmpfs of the spoke's own.
func (p Policy) ownScratch() bool {
	return !p.KeepScratch && p.Profile == ProfileStrict
}

// String renders the report on one line for a log field.
func (r Report) String() string {
	var b bytes.Buffer
	for i, pr := range r.Protections {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %s (%s)", pr.Name, onOff(pr.On), pr.Detail)
	}
	return b.String()
}
