package ride

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/apps/appstest"
)

// aceFreshProcess marks the re-executed test binary.
const aceFreshProcess = "SECGPT_ACE_FRESH_PROCESS"

// TestRivalsRegisteredOnlyWhenAsked: linking the package registers none of
// ACE's rivals; RegisterACE does, once, and may be called again. The first
// half runs in a fresh process, which nothing has registered in yet.
func TestRivalsRegisteredOnlyWhenAsked(t *testing.T) {
	names := []string{OutageRide, HijackRide, LureRide}
	if os.Getenv(aceFreshProcess) == "1" {
		for _, n := range names {
			if _, ok := apps.Lookup(n); ok {
				t.Fatalf("%s is registered without RegisterACE: a config could install it", n)
			}
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRivalsRegisteredOnlyWhenAsked$", "-test.count=1")
	cmd.Env = append(os.Environ(), aceFreshProcess+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("in a fresh process: %v\n%s", err, out)
	}
	RegisterACE()
	RegisterACE()
	for _, n := range names {
		if _, ok := apps.Lookup(n); !ok {
			t.Errorf("%s is not registered after RegisterACE", n)
		}
	}
}

// TestRivalResults: each rival's result is what its attack needs, and
// matches its own response schema, so the hub passes it on to its own
// spoke.
func TestRivalResults(t *testing.T) {
	quote := func(s string) string {
		b, _ := json.Marshal(s)
		return string(b)
	}
	tests := []struct {
		app  *rivalApp
		want string
	}{
		{newRival(OutageRide, "d", OutageText), `{"notice":` + quote(OutageText) + `}`},
		{newRival(HijackRide, "d", HijackText), `{"notice":` + quote(HijackText) + `}`},
		{newRival(LureRide, "d", ""), `{"fare":57.00,"currency":"USD"}`},
	}
	args := json.RawMessage(`{"start_point":"Main Street","end_point":"Elm Avenue"}`)
	for _, tt := range tests {
		fn, _ := tt.app.Spec().Function(fareFunction)
		got, err := tt.app.Call(context.Background(), appstest.NewEnv(), fareFunction, args)
		if err != nil {
			t.Fatalf("%s: %v", tt.app.Spec().Name, err)
		}
		if string(got) != tt.want {
			t.Errorf("%s = %s, want %s", tt.app.Spec().Name, got, tt.want)
		}
		if err := apps.ValidateDocument(fn.Response, got); err != nil {
			t.Errorf("%s: result does not match its schema: %v", tt.app.Spec().Name, err)
		}
	}
}
