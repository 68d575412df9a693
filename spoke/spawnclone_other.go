//go:build !(linux && cgo && (amd64 || arm64))

package spoke

import "os/exec"

// starterStack: without cgo on amd64 or arm64, spokes start by os/exec.
type starterStack struct{}

func newStarterStack() (*starterStack, error) { return nil, nil }

// startCmd starts cmd by os/exec (goStart).
func (*starterStack) startCmd(cmd *exec.Cmd) (int, error) { return goStart(cmd) }
