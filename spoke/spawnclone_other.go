//go:build !(linux && cgo && (amd64 || arm64))

package spoke

import "os/exec"

// starterStack: without cgo on amd64 or arm64, spokes start by os/exec.
type starterStack struct{}

func newStarterStack() (*starterStack, error) { return nil, nil }

// startCmd starts cmd by os/exec (a fork of the whole spawner) and returns
// its pid; the caller reaps it.
func (*starterStack) startCmd(cmd *exec.Cmd) (int, error) {
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	return pid, nil
}
