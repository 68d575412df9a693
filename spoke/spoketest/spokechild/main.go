// Command spokechild is the spoke binary of the tests: every built-in app and
// spoketest's misbehaving apps, behind spoke.ChildMain. Tests build it
// without the race detector, whose memory reservations no sandboxed address
// space limit could hold.
package main

import (
	"fmt"
	"os"

	_ "github.com/secgpt/secgpt/apps/all"
	"github.com/secgpt/secgpt/spoke"
	_ "github.com/secgpt/secgpt/spoke/spoketest"
)

func main() {
	if !spoke.IsChild() {
		fmt.Fprintln(os.Stderr, "spokechild only runs as a spoke")
		os.Exit(2)
	}
	os.Exit(spoke.ChildMain())
}
