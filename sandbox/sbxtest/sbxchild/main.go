//go:build linux

// Command sbxchild is the sandboxed child of the sandbox tests: it calls
// sandbox.Enter first, makes one attempt and reports it (see sbxtest.Main).
package main

import (
	"os"

	"github.com/secgpt/secgpt/sandbox/sbxtest"
)

func main() {
	os.Exit(sbxtest.Main())
}
