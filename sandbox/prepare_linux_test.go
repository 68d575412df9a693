//go:build linux

package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCheckExecutableBy: through a path every directory must be
// searchable by the spoke's uid; through /proc/self/exe only the file's
// mode counts, as the kernel follows the magic link without a lookup.
func TestCheckExecutableBy(t *testing.T) {
	private := t.TempDir() // 0700
	bin := filepath.Join(private, "spoke")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkReachableBy(bin, nobody, nobody); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("binary in a 0700 directory: got %v, want ErrInvalidPolicy", err)
	}
	for _, dir := range []string{filepath.Dir(private), private} { // t.TempDir makes both 0700
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkReachableBy(bin, nobody, nobody); err != nil {
		t.Errorf("binary in a 0755 directory: %v", err)
	}
	if err := os.Chmod(bin, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := checkReachableBy(bin, nobody, nobody); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("binary without x for others: got %v, want ErrInvalidPolicy", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkReachableBy("/proc/self/exe", nobody, nobody); (err == nil) != mayExecute(st, nobody, nobody) {
		t.Errorf("/proc/self/exe (mode %v): got %v", st.Mode(), err)
	}
}
