package scratch_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/scratch"
	"github.com/secgpt/secgpt/store/storetest"
)

// newRoot opens a scratch root in a fresh directory over a fresh store.
func newRoot(t *testing.T, opts scratch.Options) *scratch.Root {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = filepath.Join(t.TempDir(), "scratch")
	}
	opts.IDs = storetest.Open(t)
	opts.Log = zerolog.Nop()
	r, err := scratch.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Forget(context.Background(), "@alice:x"); _ = r.Forget(context.Background(), "@bob:x") })
	return r
}

// fill writes files of chunk bytes in dir until a write fails, as a
// hostile app would, and returns what it wrote and the error that stopped
// it.
func fill(dir string, chunk int) (bytes, files int, err error) {
	b := make([]byte, chunk)
	for i := 0; i < 1<<20; i++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%d", i)))
		if err != nil {
			return bytes, files, err
		}
		files++
		n, err := f.Write(b)
		bytes += n
		f.Close()
		if err != nil {
			return bytes, files, err
		}
	}
	return bytes, files, nil
}

// TestDirNotDerivable: the scratch directory of a (user, app) is named by
// a random id, the same for every spoke of it, and nothing in its path
// comes from the user (on main it was <root>/sha256(user)[:24]/<app>).
func TestDirNotDerivable(t *testing.T) {
	ctx := context.Background()
	r := newRoot(t, scratch.Options{})
	dir, err := r.Dir(ctx, "@alice:x", "notes", false, scratch.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("@alice:x"))
	if strings.Contains(dir, hex.EncodeToString(sum[:12])) || strings.Contains(dir, "alice") || strings.Contains(dir, "notes") {
		t.Errorf("scratch %s is derived from the user or app", dir)
	}
	if again, _ := r.Dir(ctx, "@alice:x", "notes", false, scratch.Quota{}); again != dir {
		t.Errorf("second spoke's scratch %s, want %s", again, dir)
	}
	if other, _ := r.Dir(ctx, "@bob:x", "notes", false, scratch.Quota{}); other == dir || filepath.Dir(other) != filepath.Dir(dir) {
		t.Errorf("bob's scratch %s, want another directory beside %s", other, dir)
	}
}

// TestCheckedQuota: where kept scratch cannot be an image of its own, a
// scratch over its quota (measured without following symlinks) is refused
// at the next spoke, naming the limit.
func TestCheckedQuota(t *testing.T) {
	ctx := context.Background()
	r := newRoot(t, scratch.Options{NoImages: true})
	q := scratch.Quota{Bytes: 1 << 20, Files: 100}
	dir, err := r.Dir(ctx, "@alice:x", "memory", true, q)
	if err != nil {
		t.Fatal(err)
	}
	// A symlink to a large tree is not counted.
	if err := os.Symlink("/usr", filepath.Join(dir, "usr")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Dir(ctx, "@alice:x", "memory", true, q); err != nil {
		t.Fatalf("under quota: %v", err)
	}
	if err := r.Check(ctx, "@alice:x", "memory", q); err != nil {
		t.Fatalf("Check under quota: %v", err)
	}
	// A spoke that runs writes past its quota: its next step is refused,
	// and so is its next spoke.
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	var qe *scratch.QuotaError
	if err := r.Check(ctx, "@alice:x", "memory", q); !errors.As(err, &qe) {
		t.Errorf("Check over quota: %v, want a QuotaError", err)
	}
	_, err = r.Dir(ctx, "@alice:x", "memory", true, q)
	if !errors.As(err, &qe) || !strings.Contains(err.Error(), "limit 1048576 bytes and 100 files") {
		t.Fatalf("over quota: %v, want a QuotaError naming the limit", err)
	}
	t.Log(err)
	if err := r.Check(ctx, "@bob:x", "memory", q); err != nil {
		t.Errorf("Check of a scratch not made yet: %v", err)
	}
}

// TestImageBounded is attack (3), disk fill, against an app that keeps its
// scratch, where the hub is root: its scratch is a filesystem of its own
// whose size is its quota, taken from the disk when made, so a writer is
// stopped there (ENOSPC) in bytes and in files, and the disk holding the
// scratch root keeps the rest. On main a kept scratch was a directory on
// the database's disk, bounded per file only.
func TestImageBounded(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: only root mounts a filesystem image per (user, app)")
	}
	if ok, why := scratch.ImageSupport(); !ok {
		t.Skipf("no filesystem images here: %s", why)
	}
	ctx := context.Background()
	r := newRoot(t, scratch.Options{})
	q := scratch.Quota{Bytes: 8 << 20, Files: 64}
	start := time.Now()
	dir, err := r.Dir(ctx, "@alice:x", "memory", true, q)
	if err != nil {
		t.Fatal(err)
	}
	made := time.Since(start)
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a new scratch holds %d entries, want none", len(entries))
	}
	image := filepath.Join(filepath.Dir(dir), "images", filepath.Base(dir))
	var st syscall.Stat_t
	if err := syscall.Stat(image, &st); err != nil || uint64(st.Blocks)*512 < q.Bytes {
		t.Errorf("image %s takes %d bytes (%v), want all %d allocated when made", image, st.Blocks*512, err, q.Bytes)
	}
	for _, tt := range []struct {
		name  string
		chunk int
	}{{"bytes", 512 << 10}, {"files", 1}} {
		bytes, files, err := fill(dir, tt.chunk)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("%s: fill ended with %v, want ENOSPC", tt.name, err)
		}
		u, uerr := scratch.Usage(dir)
		if uerr != nil {
			t.Fatal(uerr)
		}
		if u.Bytes > q.Bytes || u.Files > q.Files+8 {
			t.Errorf("%s: %d bytes in %d files on disk, want at most %d bytes and about %d files", tt.name, u.Bytes, u.Files, q.Bytes, q.Files)
		}
		t.Logf("%s: refused (%v) after %d bytes in %d files; on disk %d bytes in %d files", tt.name, err, bytes, files, u.Bytes, u.Files)
		for _, e := range must(os.ReadDir(dir)) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	// The next spoke finds the same filesystem, mounted once.
	if err := os.WriteFile(filepath.Join(dir, "kept"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if again, err := r.Dir(ctx, "@alice:x", "memory", true, q); err != nil || again != dir {
		t.Fatalf("second Dir = %s, %v", again, err)
	}
	again := time.Since(start)
	if _, err := os.Stat(filepath.Join(dir, "kept")); err != nil {
		t.Errorf("the file is gone: %v", err)
	}
	t.Logf("a new image took %v to make and mount, a mounted one %v to find", made, again)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestReserve: no image is made that would leave the scratch disk with
// less than the reserve free, and the refusal says so.
func TestReserve(t *testing.T) {
	if ok, _ := scratch.ImageSupport(); !ok || os.Geteuid() != 0 {
		t.Skip("needs root and filesystem images")
	}
	r := newRoot(t, scratch.Options{Reserve: 1 << 62})
	_, err := r.Dir(context.Background(), "@alice:x", "memory", true, scratch.Quota{Bytes: 4 << 20, Files: 64})
	var full *scratch.DiskFullError
	if !errors.As(err, &full) || !strings.Contains(err.Error(), "spokes.disk.reserve_bytes") {
		t.Fatalf("Dir = %v, want a DiskFullError naming the reserve", err)
	}
}

// TestReap: scratch idle longer than MaxIdle is removed, image and all,
// unless a spoke of its (user, app) runs; so are directories the store
// does not know (of the layout before ids); a new spoke then gets a new,
// empty scratch.
func TestReap(t *testing.T) {
	ctx := context.Background()
	running := map[string]bool{}
	r := newRoot(t, scratch.Options{MaxIdle: 50 * time.Millisecond, Running: func(user, app string) bool { return running[user+"/"+app] }})
	keep := os.Geteuid() == 0
	q := scratch.Quota{Bytes: 4 << 20, Files: 64}
	idle, err := r.Dir(ctx, "@alice:x", "memory", keep, q)
	if err != nil {
		t.Fatal(err)
	}
	busy, err := r.Dir(ctx, "@bob:x", "memory", keep, q)
	if err != nil {
		t.Fatal(err)
	}
	running["@bob:x/memory"] = true
	old := filepath.Join(filepath.Dir(idle), "0123456789abcdef01234567", "notes")
	for _, d := range []string{idle, busy, old} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "data"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	n, err := r.Reap(ctx)
	if err != nil || n != 2 {
		t.Errorf("Reap = %d, %v; want 2 (the idle scratch and the old one)", n, err)
	}
	for _, d := range []string{idle, filepath.Dir(old)} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there: %v", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(busy, "data")); err != nil {
		t.Errorf("a running spoke's scratch was reaped: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(idle), "images", filepath.Base(idle))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the idle scratch's image is still there: %v", err)
	}
	fresh, err := r.Dir(ctx, "@alice:x", "memory", keep, q)
	if err != nil || fresh == idle {
		t.Fatalf("after reaping Dir = %s, %v; want a new directory", fresh, err)
	}
}

// TestForget: forgetting a user removes every scratch of theirs, running
// or not, and no other user's.
func TestForget(t *testing.T) {
	ctx := context.Background()
	r := newRoot(t, scratch.Options{Running: func(string, string) bool { return true }})
	keep := os.Geteuid() == 0
	q := scratch.Quota{Bytes: 4 << 20, Files: 64}
	var alice []string
	for _, app := range []string{"memory", "notes"} {
		d, err := r.Dir(ctx, "@alice:x", app, keep, q)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		alice = append(alice, d)
	}
	bob, err := r.Dir(ctx, "@bob:x", "memory", keep, q)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Forget(ctx, "@alice:x"); err != nil {
		t.Fatal(err)
	}
	for _, d := range alice {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("alice's %s still there: %v", d, err)
		}
	}
	if _, err := os.Stat(bob); err != nil {
		t.Errorf("bob's scratch is gone: %v", err)
	}
}

// BenchmarkKeptScratch measures what a kept scratch adds to a spoke's
// start: naming it and finding its image mounted (every start but the
// first after the hub starts), and mounting its image again (the first).
func BenchmarkKeptScratch(b *testing.B) {
	if ok, why := scratch.ImageSupport(); !ok || os.Geteuid() != 0 {
		b.Skipf("needs root and filesystem images: %s", why)
	}
	ctx := context.Background()
	r, err := scratch.New(scratch.Options{Dir: filepath.Join(b.TempDir(), "scratch"), IDs: storetest.Open(b), Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Forget(ctx, "@alice:x") })
	q := scratch.Quota{Bytes: 256 << 20, Files: 8192}
	start := time.Now()
	if _, err := r.Dir(ctx, "@alice:x", "memory", true, q); err != nil {
		b.Fatal(err)
	}
	b.Logf("made and mounted a %d-byte image in %v", q.Bytes, time.Since(start))
	for _, remount := range []bool{false, true} {
		b.Run(fmt.Sprintf("remount=%v", remount), func(b *testing.B) {
			for b.Loop() {
				if remount {
					b.StopTimer()
					if err := r.Close(); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				if _, err := r.Dir(ctx, "@alice:x", "memory", true, q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
