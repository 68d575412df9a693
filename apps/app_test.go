package apps

import (
	"encoding/json"
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
