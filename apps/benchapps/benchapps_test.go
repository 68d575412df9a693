package benchapps_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/apps/appstest"
	"github.com/secgpt/secgpt/apps/benchapps"
)

// names are every benchmark app.
func names() []string {
	out := append([]string{benchapps.Typewriter}, benchapps.Chain...)
	for i := range len(benchapps.Keys) {
		out = append(out, benchapps.KeyApp(benchapps.Keys[i]))
	}
	return out
}

func TestRegisterOnce(t *testing.T) {
	if _, ok := apps.Lookup(benchapps.Typewriter); ok {
		t.Fatal("a benchmark app is installed before Register")
	}
	benchapps.Register()
	benchapps.Register()
	for _, name := range names() {
		a, ok := apps.Lookup(name)
		if !ok {
			t.Fatalf("%s is not registered", name)
		}
		if err := a.Spec().Validate(); err != nil || !strings.HasPrefix(name, "bench_") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// call runs app's one function.
func call(t *testing.T, app, args string) map[string]any {
	t.Helper()
	a, _ := apps.Lookup(app)
	fn := a.Spec().Functions[0]
	out, err := a.Call(context.Background(), appstest.NewEnv(), fn.Name, json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s(%s): %v", app, args, err)
	}
	if err := apps.ValidateDocument(fn.Response, out); err != nil {
		t.Fatalf("%s(%s) = %s, which its schema refuses: %v", app, args, out, err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTyping(t *testing.T) {
	benchapps.Register()
	if got := call(t, benchapps.Typewriter, `{"text":"hello world"}`); got["characters"] != 11.0 || got["words"] != 2.0 {
		t.Errorf("typewriter = %v", got)
	}
	if got := call(t, benchapps.KeyApp('l'), `{"text":"Hello world"}`); got["pressed"] != 3.0 {
		t.Errorf("bench_key_l = %v", got)
	}
	a, _ := apps.Lookup(benchapps.Typewriter)
	if _, err := a.Call(context.Background(), appstest.NewEnv(), "type_text", json.RawMessage(`{"text":""}`)); err == nil {
		t.Error("the typewriter typed an empty text, which its schema refuses")
	}
}

// TestChainLinks: each link of the relational chain returns the key the
// next one takes, of a type its schema accepts, and the same in every run.
func TestChainLinks(t *testing.T) {
	benchapps.Register()
	args := `{"name":"Alice"}`
	var first []map[string]any
	for run := range 2 {
		args = `{"name":"Alice"}`
		for i, app := range benchapps.Chain {
			out := call(t, app, args)
			if run == 0 {
				first = append(first, out)
			} else if b, _ := json.Marshal(out); string(b) != mustJSON(t, first[i]) {
				t.Errorf("%s gave %s, then %s", app, mustJSON(t, first[i]), b)
			}
			if i+1 == len(benchapps.Chain) {
				break
			}
			next, _ := apps.Lookup(benchapps.Chain[i+1])
			var req struct {
				Required []string `json:"required"`
			}
			if err := json.Unmarshal(next.Spec().Functions[0].Request, &req); err != nil || len(req.Required) != 1 {
				t.Fatalf("%s takes %v, want one key", benchapps.Chain[i+1], req.Required)
			}
			key := req.Required[0]
			v, ok := out[key]
			if !ok {
				t.Fatalf("%s returns no %s for %s", app, key, benchapps.Chain[i+1])
			}
			args = mustJSON(t, map[string]any{key: v})
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
