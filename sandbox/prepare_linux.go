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

// nobody is the uid and gid a spoke runs as when the hub runs as root: a
// spoke then cannot read root's 0600 files even before Landlock, and has no
// capability at all.
const nobody = 65534

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
	if c.PIDNS {
		// A spoke in a PID namespace needs a /proc of its own (see
		// SetUpNamespaces).
		if why := procCovered(); why != "" {
			c.PIDNS = false
			c.NSDetail += "; no pid namespace: " + why
		}
	}
	return c
}

// probeNamespaces starts a process in new namespaces, mapped as Prepare
// would map it, that tries to execute a path that cannot exist: ENOENT
// means the namespaces and the mapping were set up; any other error says
// why they were not.
func probeNamespaces() (user, pid, net bool, detail string) {
	try := func(flags uintptr) error {
		attr := &syscall.SysProcAttr{}
		setNamespaces(attr, flags)
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
	uid, gid := childIDs()
	return fmt.Sprintf("uid %d and gid %d inside map to themselves outside", uid, gid)
}

// pidMount are the namespaces of a spoke in a PID namespace: a mount
// namespace comes with it, where the spoke mounts its own /proc.
const pidMount = unix.CLONE_NEWPID | unix.CLONE_NEWNS

// childIDs are the uid and gid a spoke runs as: nobody when the hub is root,
// else the hub's own (an unprivileged process can map only itself).
func childIDs() (uid, gid int) {
	if os.Geteuid() == 0 {
		return nobody, nobody
	}
	return os.Geteuid(), os.Getegid()
}

// setNamespaces asks for the namespaces in flags with a one-id mapping of
// childIDs to itself. Mapping the spoke's id to itself, not to root inside,
// means the spoke holds no capability even inside its namespace once it has
// executed (a non-root uid loses all capabilities on execve).
func setNamespaces(attr *syscall.SysProcAttr, flags uintptr) {
	uid, gid := childIDs()
	attr.Cloneflags = flags
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	if os.Geteuid() == 0 {
		// Root may allow setgroups, so the spoke drops root's groups.
		attr.GidMappingsEnableSetgroups = true
		attr.Credential = &syscall.Credential{Uid: nobody, Gid: nobody}
	}
}

// childEnv is the whole environment of a spoke, which Enter clears again:
// one glibc tunable, read at start, that keeps glibc to one malloc arena, so
// the address space a spoke needs does not grow with the machine's cores
// (each arena reserves 64 MiB, up to 8 per core). No secret, no PATH.
func childEnv() []string {
	return []string{"GLIBC_TUNABLES=glibc.malloc.arena_max=1"}
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
//     runs it as uid/gid 65534 when the hub is root, and when p.Namespaces
//     (always for ProfileProxy and ProfileExecNet) and Probe allow it, in
//     new user, PID, mount, network and IPC namespaces with its id mapped
//     to itself; in a PID namespace it gets CAP_SYS_ADMIN over its own
//     namespaces as an ambient capability, to mount its own /proc
//     (SetUpNamespaces drops it), and a ProfileProxy spoke in its own
//     network namespace CAP_NET_ADMIN, to bring up its loopback (UpLoopback
//     drops it), and CAP_NET_BIND_SERVICE, to listen on ports 80, 443 and
//     53 there (DropCapabilities drops it);
//   - p.Scratch is created (0700) and, when the hub is root, given to
//     65534, unless the spoke mounts its own (Capabilities.OwnScratch).
//
// Prepare fails closed: if Probe finds a protection p needs missing (see
// Check), it returns a *MissingError and cmd must not be started.
//
// Pdeathsig fires when the OS thread that started the child exits, not the
// process: call cmd.Start from a goroutine locked to its thread for the
// child's lifetime, or kill the child explicitly when the hub stops.
func Prepare(cmd *exec.Cmd, p Policy) error {
	caps := capabilities()
	if err := caps.Check(p); err != nil {
		return err
	}
	uid, gid := childIDs()
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if (p.Namespaces || p.Profile.ownNetwork()) && caps.UserNS {
		flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWIPC)
		if caps.PIDNS {
			flags |= pidMount
			// Over its own namespaces only, to mount its own /proc
			// (SetUpNamespaces, which drops it).
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
		setNamespaces(attr, flags)
	} else if os.Geteuid() == 0 {
		attr.Credential = &syscall.Credential{Uid: nobody, Gid: nobody}
	}
	cmd.SysProcAttr = attr
	cmd.Env = childEnv()
	cmd.Dir = "/"
	if err := prepareScratch(caps, p); err != nil {
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

// PrepareScratch is the part of Prepare that p's scratch directory needs: it
// creates it for the spoke's uid and checks that the uid can reach it. A
// spoke started ahead of need, by Prepare under a policy without a scratch
// directory (see Policy.Prestartable), needs it before it is told p. Like
// Prepare it fails closed: it returns Check's error first.
func PrepareScratch(p Policy) error {
	caps := capabilities()
	if err := caps.Check(p); err != nil {
		return err
	}
	return prepareScratch(caps, p)
}

// prepareScratch makes p.Scratch, if any, a directory that only the spoke's
// uid can use, and checks that the uid can reach it; for a spoke that
// mounts its own (mountScratch), it checks that the uid can reach the
// scratch root, over which the spoke mounts it. An existing symlink is
// refused: Landlock would follow it.
func prepareScratch(caps Capabilities, p Policy) error {
	if p.Scratch == "" {
		return nil
	}
	if caps.OwnScratch(p) {
		if uid, gid := childIDs(); uid != os.Geteuid() {
			return checkReachableBy(filepath.Dir(p.Scratch), uid, gid)
		}
		return nil
	}
	uid, gid := childIDs()
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
	if os.Geteuid() == 0 {
		if err := os.Lchown(dir, uid, gid); err != nil {
			return fmt.Errorf("failed to chown scratch: %w", err)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("failed to chmod scratch: %w", err)
	}
	return nil
}

// ReachableBySpokes reports an error when the uid spokes run as could not
// pass through every directory down to dir, as happens to a scratch
// directory under a home only root may enter. It is for checks at start;
// Prepare checks each spoke's own paths again.
func ReachableBySpokes(dir string) error {
	uid, gid := childIDs()
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
