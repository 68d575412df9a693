package apps

import (
	"encoding/json"
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
