package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/secgpt/secgpt/scratch"
	"github.com/secgpt/secgpt/spoke/mcptest"
)

// TestFullScratchDiskStillServes: with the disk holding the scratch root
// full (bytes and inodes), a new user's query still gets an answer: a
// built-in app's spoke runs in a tmpfs of its own, and an app that keeps
// data, which would need a new filesystem image there, fails its step with
// an error that names the reserve. On main every spoke failed to make its
// directory and the query failed with "could not be sandboxed".
func TestFullScratchDiskStillServes(t *testing.T) {
	requireSpokeSandbox(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small filesystem to fill")
	}
	if ok, why := scratch.ImageSupport(); !ok {
		t.Skipf("no filesystem images here: %s", why)
	}
	dir, err := os.MkdirTemp("", "secgpt-full-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeScratch(t, dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "scratch")
	if err := os.Mkdir(root, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("secgpt-test", root, "tmpfs", 0, "size=24m,nr_inodes=64"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill: %v", err)
	}
	// The images below it go with it (removeScratch).

	script := mcptest.Script(t, mcptest.Dir(t), "words.py")
	cfg := filepath.Join(dir, "config.yaml")
	body := fmt.Sprintf(`llm: {provider: simulator}
database: %s
spokes:
  scratch_dir: %s
  disk: {reserve_bytes: 1048576}
apps:
  installed: [metro_hail]
  external:
    - name: words
      command: %s
      args: [%s]
      limits: {disk_bytes: 4194304, disk_files: 64}
`, filepath.Join(dir, "db", "secgpt.db"), root, mcptest.Python(t), script)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	// Discovery and a first user make their images while there is room.
	if r := runBinary(t, "", "ask", "--config", cfg, "--user", "@alice:x", "Use words to count the words: word_count text = 'one two'."); r.code != exitOK || !strings.Contains(r.stdout, "words = 2") {
		t.Fatalf("before the disk is full: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	fillDisk(t, root)

	r := runBinary(t, "", "ask", "--config", cfg, "--user", "@bob:x", "Use metro_hail from 'Main Street' to 'Elm Avenue'.")
	if r.code != exitOK || !strings.Contains(r.stdout, "fare = 51.80") {
		t.Errorf("a built-in app on a full scratch disk: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	r = runBinary(t, "", "ask", "--config", cfg, "--user", "@bob:x", "Use words to count the words: word_count text = 'one two'.")
	if !strings.Contains(r.stdout+r.stderr, "would leave less than its reserve of 1048576 bytes (spokes.disk.reserve_bytes)") {
		t.Errorf("an app that keeps data on a full scratch disk: exit %d, want its step refused naming the reserve: %s%s", r.code, r.stdout, r.stderr)
	}
	// Alice's image is there already: her app still runs.
	if r := runBinary(t, "", "ask", "--config", cfg, "--user", "@alice:x", "Use words to count the words: word_count text = 'a b c'."); r.code != exitOK || !strings.Contains(r.stdout, "words = 3") {
		t.Errorf("an existing image on a full disk: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

// fillDisk writes into dir until its filesystem has no byte and no inode
// left.
func fillDisk(t *testing.T, dir string) {
	t.Helper()
	chunk := make([]byte, 64<<10)
	for i := 0; ; i++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("fill%d", i)))
		if err != nil {
			break
		}
		for {
			if _, err := f.Write(chunk); err != nil {
				break
			}
		}
		f.Close()
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("scratch disk filled: %d bytes and %d inodes free", st.Bavail*uint64(st.Bsize), st.Ffree)
}

// removeScratch removes a test's scratch root, detaching first what a
// secgpt process stopped before it closed its scratch left mounted there
// (its images), which would otherwise keep their loop devices.
func removeScratch(t *testing.T, dir string) {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err == nil {
		var points []string
		for line := range strings.Lines(string(info)) {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
				points = append(points, f[4])
			}
		}
		// The deepest first.
		for i := len(points) - 1; i >= 0; i-- {
			if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil {
				t.Logf("failed to detach %s: %v", points[i], err)
			}
		}
	}
	os.RemoveAll(dir)
}
