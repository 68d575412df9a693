// Package scripts holds the hostile app as MCP servers in interpreters:
// hostile.py (CPython) and hostile.js (Node), which attack their sandbox
// from each runtime's own APIs. They ship inside the secgpt binary for
// `secgpt sandbox-check`, and the spoke tests read the same files.
//
// It only carries the scripts: it must never be imported by the hub, the
// spoke runtime or an app, and nothing installs them but the check.
package scripts

import (
	"embed"
	"fmt"
)

//go:embed hostile.py hostile.js
var files embed.FS

// Python and Node are the scripts' names.
const (
	Python = "hostile.py"
	Node   = "hostile.js"
)

// Source returns the text of the script name (Python or Node).
func Source(name string) ([]byte, error) {
	b, err := files.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("failed to read hostile script %s: %w", name, err)
	}
	return b, nil
}
