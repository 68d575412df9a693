package apps

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCanonical(t *testing.T) {
	tests := []struct {
		name, doc, want, wantErr string
	}{
		{"compact, order kept", `{ "fare" : 51.80 , "currency" : "USD" }`, `{"fare":51.80,"currency":"USD"}`, ""},
		{"escapes re-encoded", `{"a":"\u0041\/<b>"}`, `{"a":"A/<b>"}`, ""},
		{"nested", `[1, {"x": [true, null, false]}, "s"]`, `[1,{"x":[true,null,false]},"s"]`, ""},
		{"short number literal kept", `{"n":1.50e2}`, `{"n":1.50e2}`, ""},
		{"long number literal shortened", `{"n":51.8000000000000000000001}`, `{"n":51.8}`, ""},
		{"duplicate key", `{"a":1,"a":2}`, "", `duplicate object key "a"`},
		{"duplicate key spelled with an escape", `{"a":1,"\u0061":2}`, "", `duplicate object key "a"`},
		{"keys differing only in case", `{"to":"x","To":"y"}`, "", `duplicate object key "To"`},
		{"duplicate key deep inside", `{"a":[{"b":{"c":1,"c":1}}]}`, "", `duplicate object key "c"`},
		{"same key in sibling objects", `[{"a":1},{"a":2}]`, `[{"a":1},{"a":2}]`, ""},
		{"trailing value", `{} {}`, "", "not a single JSON value"},
		{"trailing garbage", `{}x`, "", "not a single JSON value"},
		{"empty", ``, "", "not valid JSON"},
		{"truncated", `{"a":`, "", "not valid JSON"},
		{"number out of range", `{"n":1e400}`, "", "out of range"},
		{"too deep", strings.Repeat("[", MaxDocumentDepth+1) + strings.Repeat("]", MaxDocumentDepth+1), "", "nested deeper"},
		{"too large", `"` + strings.Repeat("x", MaxDocument) + `"`, "", "over the"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Canonical(json.RawMessage(tt.doc))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Canonical() = %s, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("Canonical() = %s, %v; want %s", got, err, tt.want)
			}
			again, err := Canonical(got)
			if err != nil || string(again) != string(got) {
				t.Fatalf("Canonical is not idempotent: %s then %s, %v", got, again, err)
			}
		})
	}
}

// TestValidateDocumentRefusesDuplicateKeys: a schema check says nothing
// about a document that readers may take two ways.
func TestValidateDocumentRefusesDuplicateKeys(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"currency":{"type":"string","enum":["USD"]}},"additionalProperties":false}`)
	for _, doc := range []string{`{"currency":"free text","currency":"USD"}`, `{"currency":"USD","currency":"free text"}`} {
		if err := ValidateDocument(schema, json.RawMessage(doc)); !errors.Is(err, ErrDuplicateKey) {
			t.Errorf("ValidateDocument(%s) = %v, want ErrDuplicateKey", doc, err)
		}
	}
	got, err := CanonicalDocument(schema, json.RawMessage(` {"currency" : "USD"} `))
	if err != nil || string(got) != `{"currency":"USD"}` {
		t.Fatalf("CanonicalDocument() = %s, %v", got, err)
	}
}
