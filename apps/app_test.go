package apps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestReservedNamesAreRefused: no app may take a name the product speaks
// or keeps state under.
func TestReservedNamesAreRefused(t *testing.T) {
	if len(ReservedNames) == 0 {
		t.Fatal("no reserved names")
	}
	spec := Spec{Version: "1", Description: "d", Profile: ProfileStrict, Functions: []Function{{
		Name: "f", Description: "d", Request: json.RawMessage(`{"type":"object"}`), Response: json.RawMessage(`{"type":"object"}`),
	}}}
	for name, reason := range ReservedNames {
		spec.Name = name
		if err := spec.Validate(); err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("an app named %q (%s) was accepted: %v", name, reason, err)
		}
	}
	spec.Name = "secgpt_notes"
	if err := spec.Validate(); err != nil {
		t.Errorf("an app named secgpt_notes was refused: %v", err)
	}
}

// TestValidIdentIsThePattern checks the written-out name check against the
// regexp it replaced, ^[a-z][a-z0-9_]{0,31}$, on edge cases and on every
// string of up to three characters from a small alphabet.
func TestValidIdentIsThePattern(t *testing.T) {
	pattern := regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
	cases := []string{"", "a", "z", "A", "0", "_", "a_b", "weather", "a" + strings.Repeat("b", 31), "a" + strings.Repeat("b", 32),
		"a\n", "ab\n", "é", "aé", "a-b", "a b", "a\x00", "get_forecast", "a9", "9a"}
	alphabet := []string{"a", "z", "A", "0", "9", "_", "-", "\n", "é", "{"}
	var grow func(prefix string, n int)
	grow = func(prefix string, n int) {
		cases = append(cases, prefix)
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			grow(prefix+c, n-1)
		}
	}
	grow("", 3)
	for _, s := range cases {
		if got, want := validIdent(s), pattern.MatchString(s); got != want {
			t.Errorf("validIdent(%q) = %v, the pattern says %v", s, got, want)
		}
	}
}

// specApp is an app that is only its spec.
type specApp struct{ spec Spec }

func (a specApp) Spec() Spec { return a.spec }
func (specApp) Call(context.Context, Env, string, json.RawMessage) (json.RawMessage, error) {
	return nil, errors.New("not callable")
}

func lazySpec(name string) Spec {
	return Spec{Name: name, Version: "1", Description: "d", Profile: ProfileStrict, Functions: []Function{{
		Name: "f", Description: "d", Request: json.RawMessage(`{"type":"object"}`), Response: json.RawMessage(`{"type":"object"}`),
	}}}
}

// mustPanic runs f and fails unless it panics with a message containing want.
func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), want) {
			t.Errorf("panic %v, want one saying %q", r, want)
		}
	}()
	f()
}

// TestRegisterLazy: a lazily registered app is made on its first lookup
// (or listing) and only then, once; its spec is checked as Register's; a
// duplicate name panics at once.
func TestRegisterLazy(t *testing.T) {
	made := 0
	RegisterLazy("lazy_ok", func() App { made++; return specApp{lazySpec("lazy_ok")} })
	if made != 0 {
		t.Fatal("a lazy app was made when registered")
	}
	for range 2 {
		if a, ok := Lookup("lazy_ok"); !ok || a.Spec().Name != "lazy_ok" {
			t.Fatalf("Lookup = %v, %v", a, ok)
		}
	}
	found := false
	for _, a := range Builtin() {
		found = found || a.Spec().Name == "lazy_ok"
	}
	if made != 1 || !found {
		t.Errorf("made %d times, listed %v; want once, listed", made, found)
	}
	mustPanic(t, "registered twice", func() { RegisterLazy("lazy_ok", func() App { return nil }) })
	mustPanic(t, "registered twice", func() { Register(specApp{lazySpec("lazy_ok")}) })

	bad := lazySpec("lazy_bad")
	bad.Version = ""
	RegisterLazy("lazy_bad", func() App { return specApp{bad} })
	mustPanic(t, "version", func() { Lookup("lazy_bad") })
	RegisterLazy("lazy_misnamed", func() App { return specApp{lazySpec("lazy_other")} })
	mustPanic(t, "is named", func() { Lookup("lazy_misnamed") })
	RegisterLazy("lazy_none", func() App { return nil })
	mustPanic(t, "not made", func() { Lookup("lazy_none") })

	registryMu.Lock()
	for _, name := range []string{"lazy_ok", "lazy_bad", "lazy_misnamed", "lazy_none"} {
		delete(registry, name)
	}
	registryMu.Unlock()
}
