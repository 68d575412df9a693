//go:build !linux || !cgo

package sandbox_test

import (
	"errors"
	"os/exec"
	"testing"

	"github.com/secgpt/secgpt/sandbox"
)

// TestStubFailsClosed runs where seccomp cannot be built in (another OS, or
// Linux without cgo): Check, Prepare and Enter must refuse a policy that
// does not allow a weaker sandbox, before they change anything.
func TestStubFailsClosed(t *testing.T) {
	p := sandbox.Policy{Profile: sandbox.ProfileStrict}
	if err := sandbox.Probe().Check(p); !errors.Is(err, sandbox.ErrUnprotected) {
		t.Errorf("Check: got %v, want ErrUnprotected", err)
	}
	if err := sandbox.Prepare(exec.Command("/bin/true"), p); !errors.Is(err, sandbox.ErrUnprotected) {
		t.Errorf("Prepare: got %v, want ErrUnprotected", err)
	}
	if _, err := sandbox.Enter(p); !errors.Is(err, sandbox.ErrUnprotected) {
		t.Errorf("Enter: got %v, want ErrUnprotected", err)
	}
}
