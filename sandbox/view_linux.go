//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A spoke's view is its own root: a small read-only tmpfs holding only the
// paths its Landlock rules name, each bound at its own path (read-only but
// for its scratch and declared read-write paths), a minimal /dev and its own
// /proc. Everything else on the host — other users' and apps' scratch, the
// hub's database, /home, /dev/pts — does not exist for it: stat, statx and
// readlink, which Landlock does not govern, say ENOENT. Landlock and seccomp
// apply on top, as before.

// hostMount is where the host's root stays while the view is built; it is
// detached before Enter returns. No policy path may start with it.
const hostMount = "/.secgpt-host"

// viewRootOptions bound the view's own tmpfs: it holds directories, empty
// files under bind mounts and a few symlinks, nothing the spoke may write.
const viewRootOptions = "mode=0755,size=1m,nr_inodes=16384"

// devices are the character devices of the view's /dev, each with why.
var devices = []struct{ name, reason string }{
	{"null", "discarded output; runtimes open it for a missing stdio"},
	{"zero", "zeroed reads (mmap of /dev/zero by older allocators)"},
	{"urandom", "randomness for runtimes that read it rather than call getrandom"},
	{"random", "the same, by its older name"},
}

// devLinks are the view's /dev symlinks into its own /proc.
var devLinks = []struct{ name, target string }{
	{"fd", "/proc/self/fd"},
	{"stdin", "/proc/self/fd/0"},
	{"stdout", "/proc/self/fd/1"},
	{"stderr", "/proc/self/fd/2"},
}

// canBuildView reports whether this process can build a view: it holds
// CAP_SYS_ADMIN in a user namespace of its own (Prepare gives it with a
// mount namespace; never to a process in the host's user namespace), or
// why not.
func canBuildView() (bool, string) {
	m, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false, fmt.Sprintf("failed to read the uid map: %v", err)
	}
	if strings.Contains(string(m), "4294967295") {
		return false, "the spoke runs in the host's user namespace, without a mount namespace of its own"
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false, fmt.Sprintf("failed to read capabilities: %v", err)
	}
	if data[0].Effective&(1<<unix.CAP_SYS_ADMIN) == 0 {
		return false, "no mount namespace of its own (the kernel offers no PID and mount namespace to spokes)"
	}
	return true, ""
}

// PrepareLaunch sets up cmd, a process that a spoke starts before its own
// Enter (an external app's server's launcher), to start in a mount
// namespace of its own, copied from the spoke's, when the spoke can build
// views: the launcher builds its own view in its Enter, from its own
// policy, and neither view changes the other's root. Elsewhere it leaves
// cmd as it is.
func PrepareLaunch(cmd *exec.Cmd) {
	if ok, _ := canBuildView(); !ok {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWNS
}

// aloneInMountNamespace returns an error if another process it can see
// shares the caller's mount namespace: pivot_root would change that
// process's root too. A process it may not inspect is not its own child
// (those run as its uid, and have not yet confined themselves).
func aloneInMountNamespace() error {
	own, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("failed to read the spoke's mount namespace: %w", err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("failed to list processes: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		ns, err := os.Readlink("/proc/" + e.Name() + "/ns/mnt")
		if err != nil {
			continue // gone, or not ours to inspect
		}
		if ns == own {
			return fmt.Errorf("%w: process %d shares the spoke's mount namespace (started without PrepareLaunch?); refusing to build the view", ErrUnprotected, pid)
		}
	}
	return nil
}

// viewPath is one path bound into the view.
type viewPath struct {
	path     string
	writable bool
}

// viewPaths are the paths of lp, read-only ones first, then the writable
// ones, each group by depth, so that a path inside one already bound with
// the same access needs no bind of its own.
func viewPaths(lp landlockPaths) ([]viewPath, error) {
	var out []viewPath
	add := func(writable bool, paths ...string) {
		for _, p := range paths {
			if p != "" && !slices.ContainsFunc(out, func(v viewPath) bool { return v.path == p && v.writable == writable }) {
				out = append(out, viewPath{p, writable})
			}
		}
	}
	add(false, lp.ReadDirs...)
	add(false, lp.ReadFiles...)
	add(false, lp.Exec...)
	add(true, lp.Scratch)
	add(true, lp.WriteDirs...)
	add(true, lp.WriteFiles...)
	for _, v := range out {
		if v.path == hostMount || strings.HasPrefix(v.path, hostMount+"/") || v.path == "/" {
			return nil, fmt.Errorf("%w: %s cannot be bound into a spoke's view", ErrInvalidPolicy, v.path)
		}
	}
	slices.SortStableFunc(out, func(a, b viewPath) int {
		if a.writable != b.writable {
			if a.writable {
				return 1
			}
			return -1
		}
		return strings.Count(a.path, "/") - strings.Count(b.path, "/")
	})
	return out, nil
}

// viewSkeleton begins the calling process's view, as described above: the
// part every policy's view holds, so that a spare builds it before it is
// claimed. It makes the mounts private, mounts the view's root and pivots
// to it (the host's root is then at hostMount), binds mapped (the files the
// process maps: its executable and libraries) read-only, and makes /dev and
// /proc. The process must be alone in its mount namespace (Prepare and
// PrepareLaunch start it in one of its own) and hold CAP_SYS_ADMIN over it
// until view.finish.
func viewSkeleton(mapped []string) (*view, error) {
	paths, err := viewPaths(landlockPaths{ReadFiles: mapped})
	if err != nil {
		return nil, err
	}
	if err := aloneInMountNamespace(); err != nil {
		return nil, err
	}
	// Private, so that nothing below propagates to the namespace this
	// one was copied from.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("failed to make the spoke's mounts private: %w", err)
	}
	// The view's root is a tmpfs mounted on the host's /tmp and pivoted
	// to, which leaves the host's root, with its own /tmp, at hostMount.
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, viewRootOptions); err != nil {
		return nil, fmt.Errorf("failed to mount the view's root: %w", err)
	}
	if err := os.Mkdir("/tmp"+hostMount, 0o700); err != nil {
		return nil, fmt.Errorf("failed to make the view's host mount point: %w", err)
	}
	if err := unix.PivotRoot("/tmp", "/tmp"+hostMount); err != nil {
		return nil, fmt.Errorf("failed to pivot to the view's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return nil, fmt.Errorf("failed to enter the view's root: %w", err)
	}
	v := &view{}
	for _, p := range paths {
		if err := v.bind(p); err != nil {
			return nil, err
		}
	}
	v.skeleton = len(v.bound)
	if err := v.dev(); err != nil {
		return nil, err
	}
	if err := v.bindAt(hostMount+"/proc", "/proc", true, true, false); err != nil {
		return nil, fmt.Errorf("failed to bind the spoke's /proc: %w", err)
	}
	return v, nil
}

// finish completes the view begun by viewSkeleton for lp: it binds lp's
// paths (those of the skeleton are bound already; once the host's root is
// detached, only lp's scratch may be left, which mountScratch mounted in
// place), detaches the host's root, makes the view's root read-only and
// enters cwd, or / if cwd is not in the view. Enter drops CAP_SYS_ADMIN
// next.
func (v *view) finish(lp landlockPaths, cwd string) error {
	paths, err := viewPaths(lp)
	if err != nil {
		return err
	}
	for _, p := range paths {
		if !p.writable && slices.ContainsFunc(v.bound[:v.skeleton], func(b viewPath) bool { return b.path == p.path }) {
			continue
		}
		if v.hostGone {
			if !p.writable || p.path != lp.Scratch {
				return fmt.Errorf("%w: %s cannot be bound into a view whose host root is detached", ErrInvalidPolicy, p.path)
			}
			// mountScratch mounted it in place.
			v.bound = append(v.bound, p)
			v.rw++
			continue
		}
		if err := v.bind(p); err != nil {
			return err
		}
	}
	if err := v.detachHost(); err != nil {
		return err
	}
	// The root itself is read-only: the spoke writes only where it is
	// given a writable bind.
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("failed to make the view's root read-only: %w", err)
	}
	v.cwd = cwd
	if err := unix.Chdir(cwd); err != nil {
		if err := unix.Chdir("/"); err != nil {
			return fmt.Errorf("failed to enter the view's root: %w", err)
		}
		v.cwd = "/"
	}
	return nil
}

// detachHost detaches the host's root from the view, unless it is gone
// already. The kernel waits for an RCU grace period (a few hundred µs):
// a spare does it before it is claimed.
func (v *view) detachHost() error {
	if v.hostGone {
		return nil
	}
	if err := unix.Unmount(hostMount, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("failed to detach the host's root: %w", err)
	}
	if err := os.Remove(hostMount); err != nil {
		return fmt.Errorf("failed to remove the host's mount point: %w", err)
	}
	v.hostGone = true
	return nil
}

// detail describes the finished view for the report: finished is the time
// finish took, skeleton viewSkeleton's.
func (v *view) detail(finished, skeleton time.Duration, spare bool) string {
	built := fmt.Sprintf("built in %dµs", (finished + skeleton).Microseconds())
	if spare {
		built = fmt.Sprintf("built in %dµs once claimed, its skeleton in %dµs before", finished.Microseconds(), skeleton.Microseconds())
	}
	return fmt.Sprintf("a root of its own with %d read-only and %d read-write paths bound, /dev (%d devices) and its own /proc; anything else ENOENT; working directory %s; %s",
		v.ro, v.rw, len(devices), v.cwd, built)
}

// view is a view being built, after the pivot: the host is at hostMount.
type view struct {
	bound  []viewPath
	ro, rw int
	// skeleton is how many of bound viewSkeleton bound.
	skeleton int
	// cwd is the working directory finish entered.
	cwd string
	// hostGone says the host's root is no longer at hostMount.
	hostGone bool
}

// covered returns the bound path that path lies in, if any.
func (v *view) covered(path string) (viewPath, bool) {
	for i := len(v.bound) - 1; i >= 0; i-- {
		b := v.bound[i]
		if path == b.path || strings.HasPrefix(path, b.path+"/") {
			return b, true
		}
	}
	return viewPath{}, false
}

// bind binds the host's p.path at the same path in the view. Symlinks on
// the way are made again in the view, pointing where they point on the
// host, so that both the path and where it leads work. A path inside one
// already bound with the same access needs nothing more.
func (v *view) bind(p viewPath) error {
	real, err := v.mirror(p.path)
	if err != nil {
		return err
	}
	if b, ok := v.covered(real); ok && (b.writable == p.writable || real == b.path) {
		return nil
	}
	if err := v.bindAt(hostMount+real, real, false, !p.writable, true); err != nil {
		return fmt.Errorf("failed to bind %s into the spoke's view: %w", p.path, err)
	}
	v.bound = append(v.bound, viewPath{real, p.writable})
	if p.writable {
		v.rw++
	} else {
		v.ro++
	}
	return nil
}

// mirror walks path on the host, making in the view each directory on the
// way and each symlink as it is on the host, and returns the path with
// every symlink resolved. It stops making things at a path already bound
// (its contents are the host's).
func (v *view) mirror(path string) (string, error) {
	const maxLinks = 40
	rest := strings.Split(strings.TrimPrefix(path, "/"), "/")
	cur := ""
	for links := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			cur = filepath.Dir("/" + cur)
			if cur == "/" {
				cur = ""
			}
			continue
		}
		next := cur + "/" + name
		st, err := os.Lstat(hostMount + next)
		if err != nil {
			return "", fmt.Errorf("failed to find %s for the spoke's view: %w", path, err)
		}
		if st.Mode()&os.ModeSymlink != 0 {
			if links++; links > maxLinks {
				return "", fmt.Errorf("failed to resolve %s for the spoke's view: too many symlinks", path)
			}
			target, err := os.Readlink(hostMount + next)
			if err != nil {
				return "", fmt.Errorf("failed to read the symlink %s: %w", next, err)
			}
			if _, in := v.covered(next); !in {
				if err := os.Symlink(target, next); err != nil && !errors.Is(err, os.ErrExist) {
					return "", fmt.Errorf("failed to make the symlink %s in the spoke's view: %w", next, err)
				}
			}
			if strings.HasPrefix(target, "/") {
				cur = ""
			}
			rest = append(strings.Split(target, "/"), rest...)
			continue
		}
		if _, in := v.covered(next); !in && st.IsDir() && len(rest) > 0 {
			if err := os.Mkdir(next, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return "", fmt.Errorf("failed to make %s in the spoke's view: %w", next, err)
			}
		}
		cur = next
	}
	if cur == "" {
		cur = "/"
	}
	return cur, nil
}

// bindAt bind-mounts the host path from at to (a path in the view),
// making the mount point (a directory or an empty file, as from is) unless
// it exists. It is read-only when readOnly; nodev unless devices; every
// bind is nosuid.
func (v *view) bindAt(from, to string, recursive, readOnly, nodev bool) error {
	st, err := os.Stat(from)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(to); errors.Is(err, os.ErrNotExist) {
		if st.IsDir() {
			err = os.MkdirAll(to, 0o755)
		} else {
			var f *os.File
			if f, err = os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o444); err == nil {
				err = f.Close()
			}
		}
		if err != nil {
			return err
		}
	}
	flags := uintptr(unix.MS_BIND)
	if recursive {
		flags |= unix.MS_REC
	}
	if err := unix.Mount(from, to, "", flags, ""); err != nil {
		return err
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID}
	if readOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if nodev {
		attr.Attr_set |= unix.MOUNT_ATTR_NODEV
	}
	at := uint(0)
	if recursive {
		at = unix.AT_RECURSIVE
	}
	return unix.MountSetattr(unix.AT_FDCWD, to, at, &attr)
}

// dev makes the view's /dev: the devices, bound from the host's, and the
// links into /proc. No pts, no shm, no disks.
func (v *view) dev() error {
	if err := os.Mkdir("/dev", 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("failed to make the view's /dev: %w", err)
	}
	for _, d := range devices {
		if err := v.bindAt(hostMount+"/dev/"+d.name, "/dev/"+d.name, false, false, false); err != nil {
			return fmt.Errorf("failed to bind /dev/%s into the spoke's view: %w", d.name, err)
		}
	}
	for _, l := range devLinks {
		if err := os.Symlink(l.target, "/dev/"+l.name); err != nil {
			return fmt.Errorf("failed to link /dev/%s in the spoke's view: %w", l.name, err)
		}
	}
	return nil
}
