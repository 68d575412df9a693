// Command spokechild is the spoke binary of the tests: every built-in app,
// spoketest's misbehaving apps and vendors, ACE's attackers and the
// hostile app, behind spoke.ChildMain.
// Tests build it without the race detector, whose memory reservations no
// sandboxed address space limit could hold.
package main

import (
	"fmt"
	"os"

	_ "github.com/secgpt/secgpt/apps/all"
	"github.com/secgpt/secgpt/apps/hostile"
	"github.com/secgpt/secgpt/apps/ride"
	"github.com/secgpt/secgpt/spoke"
	_ "github.com/secgpt/secgpt/spoke/spoketest"
)

func main() {
	if !spoke.IsChild() {
		fmt.Fprintln(os.Stderr, "spokechild only runs as a spoke")
		os.Exit(2)
	}
	hostile.Register()
	ride.RegisterACE()
	os.Exit(spoke.ChildMain())
}
