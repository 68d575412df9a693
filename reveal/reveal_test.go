package reveal

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/secgpt/secgpt/reveal/revealtest"
)

// TestNothingHiddenSurvives: every C0 and C1 control, DEL and every
// hostile sample comes out printable, with nothing below 0x20 but line
// breaks and tabs (Text) or nothing at all (Line).
func TestNothingHiddenSurvives(t *testing.T) {
	for name, s := range revealtest.Samples() {
		for _, f := range []struct {
			name      string
			fn        func(string) string
			keepLines bool
		}{{"Text", Text, true}, {"Line", Line, false}} {
			got := f.fn(s)
			if !utf8.ValidString(got) {
				t.Errorf("%s(%s) is not valid UTF-8: %q", f.name, name, got)
			}
			if r, ok := revealtest.Active(got, f.keepLines); ok {
				t.Errorf("%s(%s) = %q keeps %U", f.name, name, got, r)
			}
			if strings.ContainsRune(s, 0x1b) && !strings.Contains(got, `\x1b`) {
				t.Errorf("%s(%s) = %q does not show the ESC", f.name, name, got)
			}
		}
	}
}

func TestEscapes(t *testing.T) {
	for _, c := range []struct{ in, text, line string }{
		{"plain text, ünïcode, emoji 🚕", "plain text, ünïcode, emoji 🚕", "plain text, ünïcode, emoji 🚕"},
		{"two\nlines\tand a tab", "two\nlines\tand a tab", `two\nlines\tand a tab`},
		{"\x1b]0;t\x07", `\x1b]0;t\x07`, `\x1b]0;t\x07`},
		{"a\rb", `a\rb`, `a\rb`},
		{"\u009b2J", `\u009b2J`, `\u009b2J`},
		{"\u202eevil", `\u202eevil`, `\u202eevil`},
		{"x\U000e0041", `x\U000e0041`, `x\U000e0041`},
		{"a\xffb", `a\xffb`, `a\xffb`},
	} {
		if got := Text(c.in); got != c.text {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.text)
		}
		if got := Line(c.in); got != c.line {
			t.Errorf("Line(%q) = %q, want %q", c.in, got, c.line)
		}
	}
	if !Safe("a normal answer\nwith two lines") || Safe("\x1b[2J") {
		t.Error("Safe")
	}
}

// TestJSONKeepsTheValue: JSON escapes what a terminal would act on and
// decodes to the same value.
func TestJSONKeepsTheValue(t *testing.T) {
	for name, s := range revealtest.Samples() {
		in := map[string]any{"answer": s, "n": 1}
		raw, err := json.MarshalIndent(in, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got := JSON(raw)
		if r, ok := revealtest.Active(string(got), true); ok {
			t.Errorf("%s: JSON keeps %U: %s", name, r, got)
		}
		var back map[string]any
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%s: %v: %s", name, err, got)
		}
		var want map[string]any
		_ = json.Unmarshal(raw, &want)
		if back["answer"] != want["answer"] {
			t.Errorf("%s: %q decodes to %q", name, want["answer"], back["answer"])
		}
	}
}

// TestQuotedShowsEveryCharacter: in a prompt's value nothing hides,
// reorders or reads as an escape it is not.
func TestQuotedShowsEveryCharacter(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"Main\u202eteertS", `Main\u202eteertS`},
		{"a\u3164b\u2800c", `a\u3164b\u2800c`},
		{"a\u00a0b", `a\u00a0b`},
		{"e\ufe0f", `e\ufe0f`},
		{`C:\u202e`, `C:\\u202e`},
		{"line\nbreak", `line\nbreak`},
		{"\xff", `\xff`},
		{"plain words, café", "plain words, café"},
	} {
		if got := Quoted(tt.in); got != tt.want {
			t.Errorf("Quoted(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
