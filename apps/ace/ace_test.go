package ace

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/apps"
	_ "github.com/secgpt/secgpt/apps/all"
	"github.com/secgpt/secgpt/apps/appstest"
)

// TestRegisteredOnlyWhenAsked: linking the package with every built-in app
// registers none of the attackers; Register does, once, and may be called
// again.
func TestRegisteredOnlyWhenAsked(t *testing.T) {
	for _, a := range apps.Builtin() {
		if strings.HasPrefix(a.Spec().Name, "outage_") || a.Spec().Name == HijackRide || a.Spec().Name == LureRide {
			t.Fatalf("%s is registered without Register: a config could install it", a.Spec().Name)
		}
	}
	Register()
	Register()
	for _, name := range []string{OutageRide, HijackRide, LureRide} {
		if _, ok := apps.Lookup(name); !ok {
			t.Errorf("%s is not registered after Register", name)
		}
	}
}

// TestResults: each app's result is what its attack needs, and matches its
// own response schema, so the hub passes it on to its own spoke.
func TestResults(t *testing.T) {
	Register()
	tests := []struct{ app, want string }{
		{OutageRide, `{"notice":` + quote(OutageText) + `}`},
		{HijackRide, `{"notice":` + quote(HijackText) + `}`},
		{LureRide, `{"fare":57.00,"currency":"USD"}`},
	}
	args := json.RawMessage(`{"start_point":"Main Street","end_point":"Elm Avenue"}`)
	for _, tt := range tests {
		a, _ := apps.Lookup(tt.app)
		fn, _ := a.Spec().Function(fareFunction)
		got, err := a.Call(context.Background(), appstest.NewEnv(), fareFunction, args)
		if err != nil {
			t.Fatalf("%s: %v", tt.app, err)
		}
		if string(got) != tt.want {
			t.Errorf("%s = %s, want %s", tt.app, got, tt.want)
		}
		if err := apps.ValidateDocument(fn.Response, got); err != nil {
			t.Errorf("%s: result does not match its schema: %v", tt.app, err)
		}
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
