//go:build linux

package sandbox

import (
	"errors"
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
// makes p.Scratch in it, 0700 and the spoke's own (Enter moves there). Writes
// beyond it fail with ENOSPC; its pages are memory of the spoke's cgroup;
// it ends with the namespace, that is with the spoke. The hub's disk holds
// nothing of it (Prepare makes no directory for it), so a full scratch
// disk does not stop the spoke, and the other scratch directories under
// the root do not exist in its view.
//
// It needs CAP_SYS_ADMIN over the spoke's own namespaces, which Prepare
// gives PID 1 of a new PID and mount namespace and Enter drops after this;
// elsewhere, and for a scratch the hub keeps, it mounts nothing and says
// what bounds the scratch instead. Enter calls it, with host where the
// host's root is ("" without a view, hostMount in the view's skeleton);
// inView, in a view whose host root is detached, it mounts the scratch in
// place (mountScratchInView).
func mountScratch(p Policy, host string, inView bool) (on bool, detail string, err error) {
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
	if inView {
		return mountScratchInView(p, l, start)
	}
	// The tmpfs's root and the scratch directory take an inode each.
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0711", l.DiskBytes, l.DiskFiles+2)
	if err := unix.Mount("secgpt-scratch", host+filepath.Dir(p.Scratch), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return false, "", fmt.Errorf("failed to mount the spoke's scratch (%s): %w", opts, err)
	}
	if err := os.Mkdir(host+p.Scratch, 0o700); err != nil {
		return false, "", fmt.Errorf("failed to make the spoke's scratch: %w", err)
	}
	return true, scratchDetail(l, start), nil
}

// mountScratchInView mounts p's scratch in a view whose host root is
// detached (a claimed spare's, see SpareCanBecome): the tmpfs is the
// scratch directory itself, 0700 and the spoke's own, at its path in the
// view, with the same bounds.
func mountScratchInView(p Policy, l Limits, start time.Time) (bool, string, error) {
	// The view holds none of its directories but those of the spare's
	// skeleton: one mkdir each, no walk of stats first (os.MkdirAll).
	for i := 1; i <= len(p.Scratch); i++ {
		if i < len(p.Scratch) && p.Scratch[i] != '/' {
			continue
		}
		if err := unix.Mkdir(p.Scratch[:i], 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return false, "", fmt.Errorf("failed to make the spoke's scratch: %w", err)
		}
	}
	// Its root is the scratch directory: one inode fewer than above.
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700", l.DiskBytes, l.DiskFiles+1)
	if err := unix.Mount("secgpt-scratch", p.Scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return false, "", fmt.Errorf("failed to mount the spoke's scratch (%s): %w", opts, err)
	}
	return true, scratchDetail(l, start), nil
}

// OwnScratch reports whether a spoke under p gets a tmpfs of its own as its
// scratch here (see Capabilities.OwnScratch).
func OwnScratch(p Policy) bool { return capabilities().OwnScratch(p) }

// scratchDetail describes a scratch tmpfs of l's bounds, mounted since
// start, for the report: the same from a spare as from a direct start.
func scratchDetail(l Limits, start time.Time) string {
	return fmt.Sprintf("scratch: a tmpfs of its own, at most %d bytes and %d files; mounted in %dµs", l.DiskBytes, l.DiskFiles, time.Since(start).Microseconds())
}
