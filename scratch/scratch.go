// Package scratch owns the spokes' scratch directories on the hub's disk:
// their names (a random id per (user, app), kept in the store, so a path
// says nothing of the user), their bound (see Root.Dir), and their end:
// reaped once idle, never while a spoke of theirs runs, and removed when
// the user asks secgpt to forget them.
//
// A spoke that does not keep its scratch gets a tmpfs of its own over its
// directory (see sandbox.Policy.KeepScratch); one that keeps it (an
// external app's server, whose data outlives its spokes) gets a filesystem
// image of its own per (user, app), sized to its quota, where the hub is
// root, and otherwise a quota this package checks before each spoke
// starts. This package never runs app code and never decides what an app
// may do; it refuses a scratch over its quota, naming the limit.
package scratch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/store"
)

// IDs keeps the random ids of the scratch directories; *store.Store
// implements it.
type IDs interface {
	Scratch(ctx context.Context, user, app string) (string, error)
	IdleScratches(ctx context.Context, before time.Time) ([]store.ScratchEntry, error)
	UserScratches(ctx context.Context, user string) ([]store.ScratchEntry, error)
	ScratchIDs(ctx context.Context) (map[string]bool, error)
	DeleteScratch(ctx context.Context, id string) error
}

var _ IDs = (*store.Store)(nil)

// Quota bounds one kept scratch directory.
type Quota struct {
	Bytes, Files uint64
}

// Options configure a Root.
type Options struct {
	// Dir is the scratch root; it is made 0711 (spokes pass through it
	// and list nothing).
	Dir string
	// IDs names the directories.
	IDs IDs
	// MaxIdle is how long a scratch directory may go unused before it is
	// reaped; 0 keeps them forever.
	MaxIdle time.Duration
	// Reserve is the space, in bytes, that must stay free on the disk
	// holding Dir: no new image is made that would leave less.
	Reserve uint64
	// Running reports whether a spoke of (user, app) runs: its scratch is
	// not reaped.
	Running func(user, app string) bool
	// NoImages keeps the checked quota even where the hub could make
	// images (tests of the checked quota).
	NoImages bool
	Log      zerolog.Logger
}

// Root is the scratch root of a hub. It is safe for concurrent use.
type Root struct {
	opts Options
	// images says a kept scratch is a filesystem image of its own (root,
	// loop devices, mkfs.ext4); imagesWhy why not.
	images    bool
	imagesWhy string
	// mu serialises making, mounting and removing one directory at a time.
	mu sync.Mutex
}

// imagesDir is the directory under the root that holds the images, 0700.
const imagesDir = "images"

// idPattern is a scratch id as the store makes it; oldPattern a
// directory of the layout before ids (sha256 of the user, 24 digits).
var (
	idPattern  = regexp.MustCompile(`^[0-9a-f]{32}$`)
	oldPattern = regexp.MustCompile(`^[0-9a-f]{24}$`)
)

// New makes the scratch root and finds how kept scratch is bounded here.
func New(opts Options) (*Root, error) {
	if opts.Dir == "" || !filepath.IsAbs(opts.Dir) {
		return nil, fmt.Errorf("failed to open scratch root: %q is not an absolute path", opts.Dir)
	}
	if opts.Running == nil {
		opts.Running = func(string, string) bool { return false }
	}
	r := &Root{opts: opts}
	if err := os.MkdirAll(opts.Dir, 0o711); err != nil {
		return nil, fmt.Errorf("failed to create scratch root: %w", err)
	}
	if err := os.Chmod(opts.Dir, 0o711); err != nil {
		return nil, fmt.Errorf("failed to set scratch root mode: %w", err)
	}
	if opts.NoImages {
		r.imagesWhy = "images turned off"
	} else {
		r.images, r.imagesWhy = ImageSupport()
	}
	return r, nil
}

// Dir returns the scratch directory of (user, app): root/<id>. For a
// spoke that keeps its scratch it is bounded by q here: a filesystem image
// of q.Bytes and q.Files, mounted on it (made on first use, refused while
// the disk would keep less than the reserve free), or where images are
// unavailable a checked quota, refused when already over q. A spoke that
// does not keep it mounts its own tmpfs there (sandbox.Prepare makes the
// directory).
func (r *Root) Dir(ctx context.Context, user, app string, keep bool, q Quota) (string, error) {
	id, err := r.opts.IDs.Scratch(ctx, user, app)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(r.opts.Dir, id)
	if !keep {
		return dir, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.images {
		if err := r.mountImage(id, dir, q); err != nil {
			return "", err
		}
		return dir, nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("failed to create scratch: %w", err)
	}
	if err := checkQuota(dir, app, q); err != nil {
		return "", err
	}
	return dir, nil
}

// Check refuses, before a step, a kept scratch of (user, app) over q where
// its quota is checked, not enforced: what a running spoke wrote since it
// started counts against its next step. Where an image bounds the
// scratch it does nothing.
func (r *Root) Check(ctx context.Context, user, app string, q Quota) error {
	if r.images {
		return nil
	}
	dir, err := r.Path(ctx, user, app)
	if err != nil {
		return err
	}
	return checkQuota(dir, app, q)
}

// checkQuota returns a QuotaError if dir holds more than q; a directory
// not made yet holds nothing.
func checkQuota(dir, app string, q Quota) error {
	u, err := Usage(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if u.Bytes > q.Bytes || u.Files > q.Files {
		return &QuotaError{App: app, Used: u, Quota: q}
	}
	return nil
}

// Path returns the scratch directory of (user, app) as Dir names it,
// making and mounting nothing: for a check that looks at what a spoke
// wrote.
func (r *Root) Path(ctx context.Context, user, app string) (string, error) {
	id, err := r.opts.IDs.Scratch(ctx, user, app)
	if err != nil {
		return "", err
	}
	return filepath.Join(r.opts.Dir, id), nil
}

// QuotaError refuses a spoke whose kept scratch is over its quota.
type QuotaError struct {
	App   string
	Used  Quota
	Quota Quota
}

// Refusal says why the spoke was refused (spoke.Refusal).
func (e *QuotaError) Refusal() string { return e.Error() }

func (e *QuotaError) Error() string {
	return fmt.Sprintf("the scratch of %s is over its disk quota: %d bytes in %d files used, limit %d bytes and %d files (spokes.disk)",
		e.App, e.Used.Bytes, e.Used.Files, e.Quota.Bytes, e.Quota.Files)
}

// Usage measures the space dir takes, without following symlinks: the
// blocks allocated and the files and directories below it.
func Usage(dir string) (Quota, error) {
	var u Quota
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == dir {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		u.Files++
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			u.Bytes += uint64(st.Blocks) * 512
		}
		return nil
	})
	if err != nil {
		return Quota{}, fmt.Errorf("failed to measure scratch: %w", err)
	}
	return u, nil
}

// Report is the start-up report's line on disk quotas; tmpfs says whether
// a spoke that does not keep its scratch gets a tmpfs of its own (see
// sandbox.Capabilities.OwnScratch), else the hub bounds it like a kept one.
func Report(tmpfs bool) string {
	others := "a tmpfs per spoke bounds the other apps' scratch"
	if !tmpfs {
		others = "no tmpfs per spoke (no mount namespace of its own): the other apps' scratch is bounded like theirs"
	}
	if ok, why := ImageSupport(); !ok {
		return "disk quota: checked, not enforced, for apps that keep data: " + why +
			"; usage is measured (without following symlinks) before each spoke starts, and a spoke over its quota is refused; " + others
	}
	return "disk quota: enforced: a filesystem image per (user, app), of its quota's size, for apps that keep data; " + others
}

// Reap removes every scratch directory idle longer than MaxIdle whose
// (user, app) runs no spoke, and directories under the root that the store
// does not know and that nothing changed for as long (left by a crash, or
// of the layout before random ids). It returns how many it removed.
func (r *Root) Reap(ctx context.Context) (int, error) {
	if r.opts.MaxIdle <= 0 {
		return 0, nil
	}
	before := time.Now().Add(-r.opts.MaxIdle)
	idle, err := r.opts.IDs.IdleScratches(ctx, before)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, e := range idle {
		if r.opts.Running(e.User, e.App) {
			continue
		}
		if err := r.remove(ctx, e.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	known, err := r.opts.IDs.ScratchIDs(ctx)
	if err != nil {
		return n, errors.Join(append(errs, err)...)
	}
	entries, err := os.ReadDir(r.opts.Dir)
	if err != nil {
		return n, errors.Join(append(errs, fmt.Errorf("failed to list scratch root: %w", err))...)
	}
	for _, d := range entries {
		name := d.Name()
		if known[name] || !(idPattern.MatchString(name) || oldPattern.MatchString(name)) {
			continue
		}
		info, err := d.Info()
		if err != nil || info.ModTime().After(before) {
			continue
		}
		if err := r.remove(ctx, name); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// Forget removes every scratch directory of user, running or not: the
// caller has stopped the user's spokes.
func (r *Root) Forget(ctx context.Context, user string) error {
	mine, err := r.opts.IDs.UserScratches(ctx, user)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range mine {
		errs = append(errs, r.remove(ctx, e.ID))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("failed to remove the user's scratch: %w", err)
	}
	return nil
}

// remove removes the directory and image of id, then forgets id. An image
// still mounted is detached: a spoke that still has it open keeps it until
// it exits, and nothing else can reach it.
func (r *Root) remove(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	dir := filepath.Join(r.opts.Dir, id)
	if err := unmount(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("failed to remove scratch %s: %w", id, err)
	}
	if err := os.Remove(filepath.Join(r.opts.Dir, imagesDir, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("failed to remove scratch image %s: %w", id, err)
	}
	if idPattern.MatchString(id) {
		return r.opts.IDs.DeleteScratch(ctx, id)
	}
	return nil
}

// Close unmounts the images mounted under the root; the caller has
// stopped every spoke. The next spoke of their (user, app) mounts its
// image again.
func (r *Root) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	entries, err := os.ReadDir(r.opts.Dir)
	if err != nil {
		return fmt.Errorf("failed to list scratch root: %w", err)
	}
	var errs []error
	for _, d := range entries {
		if idPattern.MatchString(d.Name()) {
			errs = append(errs, unmount(filepath.Join(r.opts.Dir, d.Name())))
		}
	}
	return errors.Join(errs...)
}

// Run reaps at once and then every quarter of MaxIdle (at most hourly)
// until ctx ends, logging what it removed.
func (r *Root) Run(ctx context.Context) {
	if r.opts.MaxIdle <= 0 {
		return
	}
	every := min(r.opts.MaxIdle/4, time.Hour)
	for {
		n, err := r.Reap(ctx)
		if err != nil {
			r.opts.Log.Warn().Err(err).Int("removed", n).Msg("Failed to reap some scratch directories")
		} else if n > 0 {
			r.opts.Log.Info().Int("removed", n).Msg("Reaped idle scratch directories")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}
