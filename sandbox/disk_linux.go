//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// mountScratch bounds the scratch of a spoke that does not keep it (see
// Policy.KeepScratch): in the spoke's own mount namespace it mounts over
// the directory that holds p.Scratch (the scratch root) a tmpfs of
// p.Limits.DiskBytes bytes and DiskFiles inodes, nosuid, nodev, noexec,
// makes p.Scratch in it, 0700 and the spoke's own, and moves there. Writes
// beyond it fail with ENOSPC; its pages are memory of the spoke's cgroup;
// it ends with the namespace, that is with the spoke. The hub's disk holds
// nothing of it (Prepare makes no directory for it), so a full scratch
// disk does not stop the spoke, and the other scratch directories under
// the root do not exist in its view.
//
// It needs CAP_SYS_ADMIN over the spoke's own namespaces, which Prepare
// gives PID 1 of a new PID and mount namespace and Enter drops after this;
// elsewhere, and for a scratch the hub keeps, it mounts nothing and says
// what bounds the scratch instead. Enter calls it; a mount view of the
// spoke's own calls it with the scratch's path in that view.
func mountScratch(p Policy) (on bool, detail string, err error) {
	l := p.Limits.WithDefaults(p.Profile)
	switch {
	case p.Scratch == "":
		return true, "no scratch", nil
	case !p.ownScratch():
		return true, fmt.Sprintf("scratch kept and bounded by the hub, at most %d bytes and %d files", l.DiskBytes, l.DiskFiles), nil
	case os.Getpid() != 1:
		return false, "no mount namespace of its own: scratch bounded by the hub", nil
	}
	start := time.Now()
	// The tmpfs's root and the scratch directory take an inode each.
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0711", l.DiskBytes, l.DiskFiles+2)
	if err := unix.Mount("secgpt-scratch", filepath.Dir(p.Scratch), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return false, "", fmt.Errorf("failed to mount the spoke's scratch (%s): %w", opts, err)
	}
	if err := os.Mkdir(p.Scratch, 0o700); err != nil {
		return false, "", fmt.Errorf("failed to make the spoke's scratch: %w", err)
	}
	if err := os.Chdir(p.Scratch); err != nil {
		return false, "", fmt.Errorf("failed to enter the spoke's scratch: %w", err)
	}
	return true, fmt.Sprintf("scratch: a tmpfs of its own, at most %d bytes and %d files; mounted in %dµs", l.DiskBytes, l.DiskFiles, time.Since(start).Microseconds()), nil
}

// OwnScratch reports whether a spoke under p gets a tmpfs of its own as its
// scratch here (see Capabilities.OwnScratch).
func OwnScratch(p Policy) bool { return capabilities().OwnScratch(p) }

// MountsScratch reports whether Enter, called by this process, mounts p's
// scratch as a tmpfs of its own (mountScratch): until then p.Scratch may
// not exist.
func (p Policy) MountsScratch() bool { return p.Scratch != "" && p.ownScratch() && os.Getpid() == 1 }
