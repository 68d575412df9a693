//go:build !linux

package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
)

// unsupported explains why nothing can be enforced on this system.
var unsupported = fmt.Sprintf("not supported on %s: seccomp, Landlock and namespaces are Linux only", runtime.GOOS)

// Probe reports that nothing is available.
func Probe() Capabilities {
	return Capabilities{SeccompDetail: unsupported, LandlockDetail: unsupported, NSDetail: unsupported, CgroupDetail: unsupported}
}

// Prepare fails closed unless p.AllowWeaker; then it only empties the
// child's environment and sets its working directory.
func Prepare(cmd *exec.Cmd, p Policy) error {
	if err := Probe().Check(p); err != nil {
		return err
	}
	cmd.Env = []string{}
	cmd.Dir = "/"
	if err := makeScratchDir(p); err != nil {
		return err
	}
	if p.Scratch != "" {
		cmd.Dir = p.Scratch
	}
	return nil
}

// makeScratchDir fails closed unless p.AllowWeaker; then it creates
// p.Scratch.
func makeScratchDir(p Policy) error {
	if err := Probe().Check(p); err != nil {
		return err
	}
	if p.Scratch == "" {
		return nil
	}
	if err := os.MkdirAll(p.Scratch, 0o700); err != nil {
		return fmt.Errorf("failed to create scratch: %w", err)
	}
	return nil
}

// Release does nothing: spokes here run as the hub's own uid.
func Release(*exec.Cmd) {}

// PrepareScratchFor creates p.Scratch: every spoke runs as the hub's ids.
func PrepareScratchFor(p Policy, _, _ int) error { return makeScratchDir(p) }

// CheckPolicy fails closed unless p.AllowWeaker.
func CheckPolicy(p Policy) error { return Probe().Check(p) }

// CurrentIDRange is the default range, unusable here.
func CurrentIDRange() (IDRange, bool) { return DefaultIDRange, false }

// SpokeIDs returns the hub's own ids, which every spoke runs as here.
func SpokeIDs(*exec.Cmd) (uid, gid int) { return os.Geteuid(), os.Getegid() }

// SetIDRange checks r; spokes here run as the hub's own uid whatever it is.
func SetIDRange(r IDRange) error { return r.Check() }

// PrepareLaunch does nothing: there are no mount namespaces here.
func PrepareLaunch(*exec.Cmd) {}

// SetUpNamespaces does nothing: there are no namespaces here.
func SetUpNamespaces() error { return nil }

// Enter fails closed unless p.AllowWeaker; then it clears the environment,
// the one thing it can do here, and reports every other protection off.
func Enter(p Policy) (Report, error) {
	var rep Report
	if err := Probe().Check(p); err != nil {
		return rep, err
	}
	n := len(os.Environ())
	os.Clearenv()
	rep.add("environment", true, fmt.Sprintf("cleared %d variables", n))
	for _, name := range []string{"file descriptors", "rlimits", "no_new_privs", "landlock", "seccomp"} {
		rep.add(name, false, "weaker sandbox allowed: "+unsupported)
	}
	return rep, nil
}

// Exec is not supported: without Landlock nothing would restrict what runs.
func Exec(p Policy, argv, env []string) error {
	return fmt.Errorf("%w: %s", ErrWrongProfile, unsupported)
}

// UpLoopback is not supported: there are no network namespaces here.
func UpLoopback(...netip.Addr) error {
	return fmt.Errorf("%w: %s", ErrUnprotected, unsupported)
}

// CgroupSupport reports that there are no cgroups here.
func CgroupSupport() (bool, string) { return false, unsupported }

// CgroupBound is "": no cgroup bounds anything here.
func CgroupBound(string) string { return "" }

// Cgroup is a spoke's control group; there are none here.
type Cgroup struct {
	// Memory and Tasks are the bounds it would enforce.
	Memory, Tasks uint64
}

// NewCgroup fails: there are no cgroups here.
func NewCgroup(Limits) (*Cgroup, error) {
	return nil, fmt.Errorf("%w: cgroup: %s", ErrUnprotected, unsupported)
}

// OpenCgroup fails: there are no cgroups here.
func OpenCgroup([]string, Limits) (*Cgroup, error) {
	return nil, fmt.Errorf("%w: cgroup: %s", ErrUnprotected, unsupported)
}

// Dirs is empty.
func (c *Cgroup) Dirs() []string { return nil }

// Add does nothing.
func (c *Cgroup) Add(int) error { return nil }

// OOMKills is always 0.
func (c *Cgroup) OOMKills() uint64 { return 0 }

// Remove does nothing.
func (c *Cgroup) Remove() {}

// Update does nothing.
func (c *Cgroup) Update(Limits) error { return nil }

// DropCapabilities is not supported: there are no network namespaces here.
func DropCapabilities() error {
	return fmt.Errorf("%w: %s", ErrUnprotected, unsupported)
}

// OwnNetworkNamespace is false: there are no network namespaces here.
func OwnNetworkNamespace() (bool, string) { return false, unsupported }

// OwnScratch is false: no spoke mounts a tmpfs of its own here.
func OwnScratch(Policy) bool { return false }

// Spare is a spare's sandbox; nothing of it applies ahead here.
type Spare struct{ used bool }

// EnterSpare does nothing here: Spare.Enter applies it all.
func EnterSpare(spare Policy) (*Spare, error) { return &Spare{}, nil }

// Enter applies p as Enter does, once.
func (s *Spare) Enter(p Policy) (Report, error) {
	if s.used {
		return Report{}, errors.New("the spare's sandbox is already applied")
	}
	s.used = true
	return Enter(p)
}

// SpareCanBecome reports whether p is Prestartable under spare.
func SpareCanBecome(p, spare Policy) bool { return p.Prestartable(spare) }
