package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSpokeBinary: the spoke binary is spokes.binary or secgpt-spoke beside
// secgpt; one that is missing or not executable is an error at start that
// names it, never a fallback to this binary.
func TestSpokeBinary(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "spoke")
	if err := os.WriteFile(exe, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path, want string
	}{
		{"configured", exe, ""},
		{"missing", filepath.Join(dir, "none"), "no such file"},
		{"a directory", dir, "not an executable file"},
		{"not executable", plain, "not an executable file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := defaultConfig()
			cfg.Spokes.Binary = c.path
			got, err := spokeBinary(cfg)
			if c.want == "" {
				if err != nil || got != c.path {
					t.Fatalf("spokeBinary = %q, %v; want %q", got, err, c.path)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
				t.Fatalf("error %v, want one naming %s: %s", err, c.path, c.want)
			}
		})
	}
	// Unconfigured: beside this executable (the test binary, which has no
	// secgpt-spoke beside it).
	exePath, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(filepath.Dir(exePath), spokeBinaryName)
	if _, err := spokeBinary(defaultConfig()); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one naming %s", err, want)
	}
}
