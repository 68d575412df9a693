package spoke_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/spoke"
)

// TestFailuresCarryNoInternals: what a spoke failure says (and so what the
// hub tells the user) names the app and what happened, never the path or
// the detail of the error behind it, which stays in Err for the log.
func TestFailuresCarryNoInternals(t *testing.T) {
	const internal = "/var/lib/secgpt/private/launch.json: permission denied"
	m := newManager(t, spoke.Options{Extra: func(spoke.Key) ([]string, []byte, error) { return nil, nil, errors.New(internal) }})
	_, _, err := m.Run(context.Background(), key("@a:x", "echo"), step("say", `{"text":"x"}`), &handler{})
	var f *spoke.Failure
	if !errors.As(err, &f) {
		t.Fatalf("err = %v, want a Failure", err)
	}
	if strings.Contains(f.Message, "/var/lib") || strings.Contains(f.Message, "permission denied") {
		t.Errorf("the message shows internals: %q", f.Message)
	}
	if !errors.Is(err, f.Err) || !strings.Contains(err.Error(), internal) {
		t.Errorf("the detail is lost for the log: %v", err)
	}
}
