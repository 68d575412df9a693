//go:build linux

package scratch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ext4Reserved are the inodes ext4 keeps for itself below the first one it
// gives to files.
const ext4Reserved = 11

// ImageSupport reports whether kept scratch can be a filesystem image of
// its own here: root, loop devices and mkfs.ext4; if not, why.
func ImageSupport() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "the hub is not root, so it cannot mount a filesystem per (user, app)"
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return false, fmt.Sprintf("no loop devices: %v", err)
	}
	ctl.Close()
	if _, err := mkfs(); err != nil {
		return false, err.Error()
	}
	fss, err := os.ReadFile("/proc/filesystems")
	if err != nil || !strings.Contains(string(fss), "\text4\n") {
		return false, "the kernel offers no ext4"
	}
	return true, ""
}

// mkfs finds mkfs.ext4, also where root's PATH may not reach.
func mkfs() (string, error) {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no mkfs.ext4 (e2fsprogs is not installed)")
}

// mountImage mounts the image of id on dir, making it first if there is
// none: q.Bytes allocated at once (so the disk's space is taken now, not
// when the app writes), an ext4 filesystem with room for q.Files files, no
// journal and no blocks reserved for root. A new image is refused while
// the disk would keep less than the reserve free.
func (r *Root) mountImage(id, dir string, q Quota) error {
	if mountedOn(dir) {
		return nil
	}
	image := filepath.Join(r.opts.Dir, imagesDir, id)
	fresh := false
	if _, err := os.Stat(image); errors.Is(err, fs.ErrNotExist) {
		if err := r.makeImage(image, q); err != nil {
			return err
		}
		fresh = true
	} else if err != nil {
		return fmt.Errorf("failed to find scratch image: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("failed to create scratch: %w", err)
	}
	loop, err := boundLoop(image)
	if err == nil && loop == nil {
		loop, err = attachLoop(image)
	}
	if err != nil {
		return err
	}
	// Held open until mounted: the device frees itself when the last
	// reference goes.
	defer loop.Close()
	if err := unix.Mount(loop.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("failed to mount scratch image: %w", err)
	}
	if fresh {
		// The app's files start in an empty directory.
		if err := os.Remove(filepath.Join(dir, "lost+found")); err != nil {
			return fmt.Errorf("failed to empty scratch image: %w", err)
		}
	}
	return nil
}

func (r *Root) makeImage(image string, q Quota) error {
	var st unix.Statfs_t
	if err := unix.Statfs(r.opts.Dir, &st); err != nil {
		return fmt.Errorf("failed to measure scratch disk: %w", err)
	}
	free := st.Bavail * uint64(st.Bsize)
	if free < q.Bytes+r.opts.Reserve {
		return &DiskFullError{Free: free, Want: q.Bytes, Reserve: r.opts.Reserve}
	}
	if err := os.MkdirAll(filepath.Dir(image), 0o700); err != nil {
		return fmt.Errorf("failed to create scratch images directory: %w", err)
	}
	f, err := os.OpenFile(image, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("failed to create scratch image: %w", err)
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, int64(q.Bytes))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		var bin string
		if bin, err = mkfs(); err == nil {
			var out []byte
			out, err = exec.Command(bin, "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", "nodiscard",
				"-N", fmt.Sprint(q.Files+ext4Reserved), image).CombinedOutput()
			if err != nil {
				err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
			}
		}
	}
	if err != nil {
		_ = os.Remove(image)
		return fmt.Errorf("failed to make scratch image: %w", err)
	}
	return nil
}

// DiskFullError refuses a new kept scratch on a disk that would keep less
// than the reserve free.
type DiskFullError struct {
	Free, Want, Reserve uint64
}

// Refusal says why the spoke was refused (spoke.Refusal).
func (e *DiskFullError) Refusal() string { return e.Error() }

func (e *DiskFullError) Error() string {
	return fmt.Sprintf("the scratch disk has %d bytes free: a new %d-byte scratch would leave less than its reserve of %d bytes (spokes.disk.reserve_bytes)",
		e.Free, e.Want, e.Reserve)
}

// attachLoop attaches image to a free loop device, which frees itself once
// unmounted and closed (LO_FLAGS_AUTOCLEAR), and returns the device open.
func attachLoop(image string) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("failed to open loop control: %w", err)
	}
	defer ctl.Close()
	img, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("failed to open scratch image: %w", err)
	}
	defer img.Close()
	var last error
	// Another process may take the free device first.
	for range 8 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("failed to find a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		if _, err := os.Stat(dev); errors.Is(err, fs.ErrNotExist) {
			// No udev here (a container): make the node.
			if err := unix.Mknod(dev, unix.S_IFBLK|0o600, int(unix.Mkdev(7, uint32(n)))); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("failed to make %s: %w", dev, err)
			}
		}
		loop, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("failed to open %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd()), Info: unix.LoopInfo64{Flags: unix.LO_FLAGS_AUTOCLEAR}}
		if last = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg); last == nil {
			return loop, nil
		}
		loop.Close()
		if !errors.Is(last, unix.EBUSY) {
			break
		}
	}
	return nil, fmt.Errorf("failed to attach scratch image to a loop device: %w", last)
}

// mountedOn reports whether something is mounted on dir: it is on another
// device than its parent.
func mountedOn(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(dir, &st) != nil || unix.Lstat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// busyWait bounds how long unmounting waits for the processes of a spoke
// just killed to let go of its scratch.
const busyWait = 5 * time.Second

// unmount unmounts what is mounted on dir, if anything, once the processes
// that use it (a spoke just killed) have let go, so that its writes are in
// the image before another mount of it may read it. A filesystem still
// busy after busyWait is detached: it goes with its last user, and a later
// mount of its image uses its loop device (boundLoop).
func unmount(dir string) error {
	if !mountedOn(dir) {
		return nil
	}
	deadline := time.Now().Add(busyWait)
	for {
		err := unix.Unmount(dir, 0)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				return fmt.Errorf("failed to unmount scratch %s: %w", dir, err)
			}
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// boundLoop opens the loop device that still holds image, if one does: a
// filesystem of the image unmounted here may live on a little longer in
// the mount namespace of a spoke just killed. Mounting that device again
// gives the same filesystem, where a second device would give a second
// one over the same blocks, which neither would see.
func boundLoop(image string) (*os.File, error) {
	held, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, fmt.Errorf("failed to list loop devices: %w", err)
	}
	for _, f := range held {
		if backing(f) != image {
			continue
		}
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		loop, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		// Held open now, it cannot be cleared; it may have been
		// cleared (and taken again) in between.
		if backing(f) == image {
			return loop, nil
		}
		loop.Close()
	}
	return nil, nil
}

// backing is the backing file a loop device's sysfs attribute f names.
func backing(f string) string {
	b, err := os.ReadFile(f)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
