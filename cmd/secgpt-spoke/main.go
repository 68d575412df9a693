// Command secgpt-spoke is the spoke binary: the process every sandboxed app
// runs in, the launcher of an external app's server, and the spawner that
// starts them for the hub (see package spoke). secgpt starts it; it does
// nothing on its own.
//
// It carries the spoke, sandbox, apps and llm packages and never the bot's
// (Matrix, Markdown) or the store's: a spoke's process maps only what a
// spoke runs, which keeps its start short and its memory small. It holds
// every app a hub may name, the case studies' attackers, the sandbox
// check's hostile app and the benchmark's apps included: a spoke hosts only
// the app its hub names, and only those hubs name them.
package main

import (
	"fmt"
	"os"

	_ "github.com/secgpt/secgpt/apps/all"
	"github.com/secgpt/secgpt/apps/benchapps"
	"github.com/secgpt/secgpt/apps/hostile"
	"github.com/secgpt/secgpt/apps/ride"
	"github.com/secgpt/secgpt/spoke"
)

func main() {
	if !spoke.IsChild() {
		fmt.Fprintln(os.Stderr, "secgpt-spoke runs only as a spoke of secgpt, which starts it")
		os.Exit(2)
	}
	hostile.Register()
	ride.RegisterACE()
	benchapps.Register()
	os.Exit(spoke.ChildMain())
}
