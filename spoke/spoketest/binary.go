package spoketest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/spoke"
)

// Binary is the spoke binary Main built for this test process.
var Binary string

// BuildArgs are the `go build` flags of every spoke binary, as in the
// Makefile: pure-Go Olm and resolvers, no SQLite extension loading, and a
// static link, which starts a spoke about 0.6 ms sooner than a dynamic one.
var BuildArgs = []string{
	"-tags", "goolm,netgo,osusergo,sqlite_omit_load_extension",
	"-ldflags", "-linkmode external -extldflags -static",
}

// Main builds the spoke binary, runs the tests and removes the binary. Call
// it from TestMain: os.Exit(spoketest.Main(m)).
//
// The binary is built without the race detector and placed where the
// spokes' unprivileged uid can execute it.
func Main(m *testing.M) int {
	dir, err := os.MkdirTemp("", "secgpt-spokechild-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "spoketest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "spoketest:", err)
		return 1
	}
	bin := filepath.Join(dir, "spokechild")
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := append([]string{"build"}, BuildArgs...)
	build := exec.Command(goTool, append(args, "-o", bin, "github.com/secgpt/secgpt/spoke/spoketest/spokechild")...)
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "spoketest: failed to build the spoke binary: %v\n%s", err, out)
		return 1
	}
	Binary = bin
	return m.Run()
}

// Policy returns the strict sandbox policy tests give every spoke, with
// scratch directories from a fresh Scratch.
func Policy(tb testing.TB) spoke.PolicyFunc {
	tb.Helper()
	scratch := NewScratch(tb)
	return func(k spoke.Key) (sandbox.Policy, error) {
		dir, err := scratch.Dir(k)
		if err != nil {
			return sandbox.Policy{}, err
		}
		return sandbox.Policy{Profile: sandbox.ProfileStrict, Limits: sandbox.DefaultLimits(), Scratch: dir}, nil
	}
}
