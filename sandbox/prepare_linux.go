//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// capabilities is Probe, run once: what the kernel offers does not change
// while the hub runs. Tests replace it to simulate a missing protection.
var capabilities = sync.OnceValue(Probe)

// Probe reports what this kernel and build offer. It spawns short-lived
// processes to try the namespaces, so it costs a few milliseconds.
func Probe() Capabilities {
	var c Capabilities
	c.Seccomp, c.SeccompDetail = seccompSupport()
	c.LandlockABI, c.LandlockDetail = landlockSupport()
	_, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	c.NoNewPrivs = err == nil
	c.UserNS, c.PIDNS, c.NetNS, c.NSDetail = probeNamespaces()
	c.Cgroup, c.CgroupDetail = CgroupSupport()
	c.UIDs, c.UIDsDetail = spokeIDs.detail()
	if c.PIDNS {
		// A spoke in a PID namespace needs a /proc of its own (see
		// SetUpNamespaces).
		if why := procCovered(); why != "" {
			c.PIDNS = false
			c.NSDetail += "; no pid namespace: " + why
		}
	}
	c.MountView, c.MountViewDetail = true, "each spoke in namespaces sees its own root: only the paths its policy names, a minimal /dev and its own /proc; stat of anything else is ENOENT"
	if !c.PIDNS {
		c.MountView, c.MountViewDetail = false, "no PID and mount namespace for spokes ("+c.NSDetail+"): a spoke can stat, not read, the host's files"
	}
	return c
}

// probeNamespaces starts a process in new namespaces, mapped as Prepare
// would map it, that tries to execute a path that cannot exist: ENOENT
// means the namespaces and the mapping were set up; any other error says
// why they were not.
func probeNamespaces() (user, pid, net bool, detail string) {
	uid, gid := probeIDs()
	try := func(flags uintptr) error {
		attr := &syscall.SysProcAttr{}
		setNamespaces(attr, flags, uid, gid)
		_, err := syscall.ForkExec("/proc/self/secgpt-namespace-probe", nil, &syscall.ProcAttr{Sys: attr})
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if err := try(unix.CLONE_NEWUSER | pidMount | unix.CLONE_NEWNET | unix.CLONE_NEWIPC); err == nil {
		return true, true, true, mappingDetail()
	}
	// Prepare always adds an IPC namespace to a user namespace.
	const userIPC = unix.CLONE_NEWUSER | unix.CLONE_NEWIPC
	if err := try(userIPC); err != nil {
		return false, false, false, fmt.Sprintf("user namespaces unavailable: %v", err)
	}
	pidErr := try(userIPC | pidMount)
	netErr := try(userIPC | unix.CLONE_NEWNET)
	return true, pidErr == nil, netErr == nil, fmt.Sprintf("%s; pid: %v; net: %v", mappingDetail(), pidErr, netErr)
}

func mappingDetail() string {
	if os.Geteuid() == 0 {
		return fmt.Sprintf("uid and gid %d inside map to the spoke's own host id (see uid separation)", nobody)
	}
	return fmt.Sprintf("uid %d and gid %d inside map to themselves outside", os.Geteuid(), os.Getegid())
}

// pidMount are the namespaces of a spoke in a PID namespace: a mount
// namespace comes with it, where the spoke mounts its own /proc and builds
// its view (see SetUpNamespaces and Enter).
const pidMount = unix.CLONE_NEWPID | unix.CLONE_NEWNS

// probeIDs are the host ids Probe maps: the first of the spokes' range
// when the hub is root, else the hub's own (an unprivileged process can
// map only itself).
func probeIDs() (uid, gid int) {
	if os.Geteuid() == 0 {
		spokeIDs.mu.Lock()
		defer spokeIDs.mu.Unlock()
		return int(spokeIDs.r.First), int(spokeIDs.r.First)
	}
	return os.Geteuid(), os.Getegid()
}

// setNamespaces asks for the namespaces in flags with a one-id mapping:
// under a root hub, nobody inside to the spoke's own host uid and gid
// (hostUID, hostGID) outside; else the hub's ids to themselves. Mapping a
// non-root id, not root inside, means the spoke holds no capability even
// inside its namespace once it has executed (a non-root uid loses all
// capabilities on execve) but those Prepare gives it as ambient ones.
func setNamespaces(attr *syscall.SysProcAttr, flags uintptr, hostUID, hostGID int) {
	inUID, inGID := hostUID, hostGID
	if os.Geteuid() == 0 {
		inUID, inGID = nobody, nobody
	}
	attr.Cloneflags = flags
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: inUID, HostID: hostUID, Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: inGID, HostID: hostGID, Size: 1}}
	if os.Geteuid() == 0 {
		// Root may allow setgroups, so the spoke drops root's groups.
		attr.GidMappingsEnableSetgroups = true
		attr.Credential = &syscall.Credential{Uid: nobody, Gid: nobody}
	}
}

// childEnv is the whole environment of a spoke, which Enter clears again;
// each entry is read once, at the process's start. No secret, no PATH.
func childEnv() []string {
	return []string{
		// glibc keeps to one malloc arena, so the address space a spoke
		// needs does not grow with the machine's cores (each arena
		// reserves 64 MiB, up to 8 per core).
		"GLIBC_TUNABLES=glibc.malloc.arena_max=1",
		// Go runs a spoke's goroutines on one processor: a spoke's work
		// is one step at a time, and with more, idle threads spin
		// looking for work and every psx round of Enter signals more of
		// them (a burst of 100 cold spokes: 10 % less CPU). Its cgroup,
		// not this, bounds what an app may take: an app can raise it.
		"GOMAXPROCS=1",
	}
}

// Prepare sets up cmd to start a spoke under policy p. It owns
// cmd.SysProcAttr, cmd.Env and cmd.Dir:
//
//   - Env is childEnv (never nil, which would inherit the hub's environment,
//     which may hold secrets);
//   - Dir is p.Scratch, or "/" without one or for a spoke that mounts its
//     own (see mountScratch);
//   - SysProcAttr puts the spoke in its own process group (the hub kills
//     the group), sends it SIGKILL when the thread that started it dies,
//     runs it, when the hub is root, as a host uid and gid of its own
//     leased from the spokes' range (see IDRange; Release returns it), and
//     when p.Namespaces (always for ProfileProxy and ProfileExecNet) and
//     Probe allow it, in new user, PID, mount, network and IPC namespaces,
//     as nobody inside mapped to that id outside; in a PID namespace it
//     gets CAP_SYS_ADMIN over its own namespaces as an ambient capability,
//     to mount its own /proc and build its view (Enter drops it), and a
//     ProfileProxy spoke in its own network namespace CAP_NET_ADMIN, to
//     bring up its loopback (UpLoopback drops it), and
//     CAP_NET_BIND_SERVICE, to listen on ports 80, 443 and 53 there
//     (DropCapabilities drops it);
//   - p.Scratch is created (0700) and, when the hub is root, given to the
//     spoke's id, unless the spoke mounts its own (Capabilities.OwnScratch).
//
// Prepare fails closed: if Probe finds a protection p needs missing (see
// Check), or no id is free, it returns an error and cmd must not be
// started. Once Prepare has returned nil, the caller calls Release(cmd)
// when cmd's process is gone (or did not start).
//
// Pdeathsig fires when the OS thread that started the child exits, not the
// process: call cmd.Start from a goroutine locked to its thread for the
// child's lifetime, or kill the child explicitly when the hub stops.
func Prepare(cmd *exec.Cmd, p Policy) (err error) {
	caps := capabilities()
	if err := caps.Check(p); err != nil {
		return err
	}
	uid, gid, err := leaseIDs(cmd, p)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			Release(cmd)
		}
	}()
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if (p.Namespaces || p.Profile.ownNetwork()) && caps.UserNS {
		flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWIPC)
		if caps.PIDNS {
			flags |= pidMount
			// Over its own namespaces only, to mount its own /proc
			// (SetUpNamespaces) and build its view (Enter, which
			// drops it).
			attr.AmbientCaps = append(attr.AmbientCaps, unix.CAP_SYS_ADMIN)
		}
		if caps.NetNS {
			flags |= unix.CLONE_NEWNET
			if p.Profile == ProfileProxy {
				// Over its own namespace only: to bring up loopback
				// (UpLoopback, which drops it), and to listen on ports
				// 80, 443 and 53 there (DropCapabilities); Enter drops
				// both too.
				attr.AmbientCaps = append(attr.AmbientCaps, unix.CAP_NET_ADMIN, unix.CAP_NET_BIND_SERVICE)
			}
		}
		setNamespaces(attr, flags, uid, gid)
	} else if os.Geteuid() == 0 {
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	cmd.SysProcAttr = attr
	cmd.Env = childEnv()
	cmd.Dir = "/"
	if err := prepareScratch(caps, p, uid, gid); err != nil {
		return err
	}
	if p.Scratch != "" && !caps.OwnScratch(p) {
		cmd.Dir = p.Scratch
	}
	if attr.Credential != nil {
		// The spoke runs as another uid than the hub: say now, not in
		// the child, if it could not reach its binary.
		for _, path := range []string{cmd.Path, p.ExecPath} {
			if path == "" {
				continue
			}
			if err := checkReachableBy(path, uid, gid); err != nil {
				return err
			}
		}
	}
	return nil
}

// leaseIDs returns the host uid and gid cmd's spoke runs as: under a root
// hub one leased for it alone (nobody under p.AllowWeaker when the range
// is unusable), else the hub's own, the only ids it can map.
func leaseIDs(cmd *exec.Cmd, p Policy) (uid, gid int, err error) {
	if os.Geteuid() != 0 {
		return os.Geteuid(), os.Getegid(), nil
	}
	var prefer uint32
	if st, err := os.Lstat(p.Scratch); err == nil && p.Scratch != "" {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			prefer = sys.Uid
		}
	}
	id, err := spokeIDs.lease(cmd, prefer)
	switch {
	case err == nil:
		return int(id), int(id), nil
	case p.AllowWeaker && !errors.Is(err, ErrUnprotected):
		return nobody, nobody, nil
	default:
		return 0, 0, err
	}
}

// PrepareScratchFor is the part of Prepare that p's scratch directory
// needs, for a spoke that another process (the spoke spawner) started and
// gave uid and gid: it creates the directory for them and checks that they
// can reach it. A spoke started ahead of need, by Prepare under a policy
// without a scratch directory (see Policy.Prestartable), needs it before it
// is told p. Like Prepare it fails closed: it returns Check's error first.
func PrepareScratchFor(p Policy, uid, gid int) error {
	caps := capabilities()
	if err := caps.Check(p); err != nil {
		return err
	}
	return prepareScratch(caps, p, uid, gid)
}

// CheckPolicy returns Check's error for p on this machine: what Prepare
// refuses first, without preparing anything.
func CheckPolicy(p Policy) error { return capabilities().Check(p) }

// prepareScratch makes p.Scratch, if any, a directory that only uid can
// use, and checks that uid can reach it; for a spoke that mounts its own
// (mountScratch), it checks that uid can reach the scratch root, over
// which the spoke mounts it. An existing symlink is refused: Landlock
// would follow it.
func prepareScratch(caps Capabilities, p Policy, uid, gid int) error {
	if p.Scratch == "" {
		return nil
	}
	if caps.OwnScratch(p) {
		if uid != os.Geteuid() {
			return checkReachableBy(filepath.Dir(p.Scratch), uid, gid)
		}
		return nil
	}
	if err := makeScratch(p.Scratch, uid, gid); err != nil {
		return err
	}
	if uid != os.Geteuid() {
		return checkReachableBy(p.Scratch, uid, gid)
	}
	return nil
}

// makeScratch makes dir a directory that only uid can use.
func makeScratch(dir string, uid, gid int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("failed to create scratch: %w", err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("failed to stat scratch: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: scratch %s is not a directory", ErrInvalidPolicy, dir)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && (int(sys.Uid) != uid || int(sys.Gid) != gid) {
		if err := handOver(dir, uid, gid); err != nil {
			return err
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("failed to chmod scratch: %w", err)
	}
	return nil
}

// handOver gives dir, and everything in it that an earlier spoke owned (an
// id of the spokes' range, or nobody as every spoke was before), to uid and
// gid: a (user, app)'s scratch outlives its spoke, and the next spoke of
// that (user, app) may run under another id. What root or a user owns is
// never given to a spoke. It follows no symlink; no spoke of dir's (user,
// app) runs meanwhile.
func handOver(dir string, uid, gid int) error {
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		sys, ok := info.Sys().(*syscall.Stat_t)
		if !ok || (int(sys.Uid) == uid && int(sys.Gid) == gid) {
			return nil
		}
		if path != dir && !spokeIDs.spokes(sys.Uid) {
			return nil
		}
		return os.Lchown(path, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("failed to give the scratch to the spoke's id: %w", err)
	}
	return nil
}

// ReachableBySpokes reports an error when the uid spokes run as could not
// pass through every directory down to dir, as happens to a scratch
// directory under a home only root may enter. It is for checks at start;
// Prepare checks each spoke's own paths again.
func ReachableBySpokes(dir string) error {
	uid, gid := probeIDs()
	if uid == os.Geteuid() {
		return nil
	}
	return checkReachableBy(dir, uid, gid)
}

// checkReachableBy reports a clear error when uid could not execute the
// file (or enter the directory) at path, as happens when the hub runs as
// root from a directory only root may enter. Through /proc/self/exe (a magic
// link) only the file's own mode matters; through a path every directory
// above it must be searchable too.
func checkReachableBy(path string, uid, gid int) error {
	viaLink := path == "/proc/self/exe"
	if viaLink {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("failed to resolve own executable: %w", err)
		}
		path = exe
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("failed to resolve %s: %w", path, err)
	}
	for p := resolved; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("failed to stat %s: %w", p, err)
		}
		if !mayExecute(st, uid, gid) {
			return fmt.Errorf("%w: uid %d cannot reach %s: %s is not searchable/executable by it",
				ErrInvalidPolicy, uid, resolved, p)
		}
		if viaLink || p == "/" {
			return nil
		}
	}
}

func mayExecute(st fs.FileInfo, uid, gid int) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	mode := st.Mode().Perm()
	switch {
	case int(sys.Uid) == uid:
		return mode&0o100 != 0
	case int(sys.Gid) == gid:
		return mode&0o010 != 0
	default:
		return mode&0o001 != 0
	}
}
