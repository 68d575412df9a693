//go:build linux && cgo

package sandbox_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/sandbox/sbxtest"
)

// TestScratchBounded is attack (3), disk fill, against a spoke that does not
// keep its scratch: a hostile app writing files in its scratch until
// refused is stopped at Limits.DiskBytes or DiskFiles (ENOSPC), and leaves
// nothing on the hub's disk. On main, before the tmpfs, it wrote until the
// disk holding the scratch was full.
func TestScratchBounded(t *testing.T) {
	if caps := sbxtest.RequireFull(t); !caps.PIDNS {
		t.Skipf("no mount namespace of its own for a spoke on this machine: %s", caps.NSDetail)
	}
	tests := []struct {
		name      string
		chunk     int
		limit     string
		atMostB   int
		atMostF   int
		bytesGate bool
	}{
		{"bytes", 256 << 10, "bytes", 4 << 20, 64, true},
		{"files", 1, "files", 64, 64, false},
	}
	// A claimed spare mounts its scratch in place in its view (its host
	// root is detached): the same bounds, the same count of files.
	filesBy := map[bool]int{}
	for _, tt := range tests {
		for _, spare := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/spare=%v", tt.name, spare), func(t *testing.T) {
				files := fill(t, tt.chunk, tt.atMostB, tt.atMostF, spare)
				if !tt.bytesGate {
					filesBy[spare] = files
				}
			})
		}
	}
	if filesBy[false] != filesBy[true] {
		t.Errorf("a spoke started directly made %d files, a claimed spare %d", filesBy[false], filesBy[true])
	}
}

// fill fills a strict spoke's own scratch of 4 MiB and 64 files in chunks
// until it is refused, checks the refusal and the bound, and returns how
// many files it made.
func fill(t *testing.T, chunk, atMostB, atMostF int, spare bool) int {
	t.Helper()
	p := strictPolicy(t)
	p.Namespaces = true
	p.Limits.DiskBytes, p.Limits.DiskFiles = 4<<20, 64
	out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "fill", Args: []string{p.Scratch, fmt.Sprint(chunk)}, Spare: spare})
	if out.EnterError != "" {
		t.Fatalf("Enter failed: %s", out.EnterError)
	}
	if !strings.Contains(out.Error, "no space left on device") {
		t.Fatalf("fill ended with %q (exit %d), want ENOSPC\nstderr: %s", out.Error, out.ExitCode, out.Stderr)
	}
	var bytes, files int
	if _, err := fmt.Sscan(out.Detail, &bytes, &files); err != nil {
		t.Fatalf("detail %q: %v", out.Detail, err)
	}
	if bytes > atMostB || files > atMostF {
		t.Errorf("wrote %d bytes in %d files, want at most %d bytes and %d files", bytes, files, atMostB, atMostF)
	}
	if _, err := os.Stat(p.Scratch); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the hub's disk has the spoke's scratch (%v), want nothing: the spoke's writes stay in its own tmpfs", err)
	}
	var disk string
	for _, pr := range out.Report.Protections {
		if pr.Name == "disk" && pr.On {
			disk = pr.Detail
		}
	}
	if !strings.Contains(disk, "at most 4194304 bytes and 64 files") {
		t.Errorf("report's disk entry %q, want the bound named", disk)
	}
	t.Logf("refused after %d bytes in %d files: %s (%s)", bytes, files, out.Error, disk)
	return files
}

// TestScratchLimitsValidated: a policy may not ask for less scratch than
// the minimum, and zero means the profile's default.
func TestScratchLimitsValidated(t *testing.T) {
	p := sandbox.Policy{Profile: sandbox.ProfileStrict, Limits: sandbox.Limits{DiskBytes: 1}}
	if err := p.Validate(); err == nil {
		t.Error("a 1-byte scratch was accepted")
	}
	d := sandbox.Limits{}.WithDefaults(sandbox.ProfileExec)
	if d.DiskBytes != 256<<20 || d.DiskFiles != 8192 {
		t.Errorf("exec defaults %d bytes %d files", d.DiskBytes, d.DiskFiles)
	}
}

// TestOtherScratchesHidden: under the tmpfs a spoke mounts over the scratch
// root, the other (user, app)s' scratch directories do not exist for it
// (ENOENT, not EACCES).
func TestOtherScratchesHidden(t *testing.T) {
	if caps := sbxtest.RequireFull(t); !caps.PIDNS {
		t.Skipf("no mount namespace of its own for a spoke on this machine: %s", caps.NSDetail)
	}
	p := strictPolicy(t)
	p.Namespaces = true
	other := filepath.Join(filepath.Dir(p.Scratch), "other")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "secret"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "read", Args: []string{filepath.Join(other, "secret")}})
	expect{errno: "ENOENT"}.check(t, out)
}
