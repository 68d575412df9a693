// Package reveal shows text that apps and models wrote as inert, visible
// text before it reaches a terminal, a log or a chat: control characters
// (C0, DEL, C1), and with them every ESC sequence (CSI, OSC titles, OSC 8
// links, OSC 52 clipboard writes, screen clears), bidirectional overrides
// and isolates, zero-width and other invisible format characters, line and
// paragraph separators and invalid UTF-8 become escapes such as \x1b or
// \u202e that show what was there without acting on it.
//
// It owns only this mapping. It never drops what it escapes (a reader sees
// that something was there) and never decides what a text may say.
package reveal

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Text escapes s for a terminal or a chat, keeping its line breaks and
// tabs.
func Text(s string) string { return escape(s, true) }

// Line escapes s for one line of a log or a terminal: line breaks and tabs
// are escaped too, so one text is one line.
func Line(s string) string { return escape(s, false) }

// Value returns a decoded JSON value (string, map[string]any, []any, or
// anything else, kept) with every string and key escaped by Line.
func Value(v any) any {
	switch v := v.(type) {
	case string:
		return Line(v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[Line(k)] = Value(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = Value(x)
		}
		return out
	default:
		return v
	}
}

// JSON rewrites encoded JSON so that every character Text would escape is
// a \u escape (a surrogate pair above U+FFFF): the same JSON value, inert
// on a terminal. Go's encoder already escapes C0 controls but writes C1
// controls, bidi and invisible characters as they are. Outside strings
// encoded JSON holds only printable ASCII and whitespace, which stay.
func JSON(encoded []byte) []byte {
	var b strings.Builder
	s := string(encoded)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\n' || r == '\t' || r == '\r' || !hidden(r):
			b.WriteString(s[i : i+size])
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return []byte(b.String())
}

// Quoted escapes s for one line in which every character must show as
// itself (a permission prompt's values): Line's escapes, characters that
// draw nothing (fillers, spaces other than the space, variation
// selectors), and a backslash doubled, so that no text reads as an escape.
func Quoted(s string) string {
	return rewrite(s, func(r rune) (string, bool) {
		switch {
		case hidden(r) || blank(r):
			return code(r), true
		case r == '\\':
			return `\\`, true
		}
		return "", false
	})
}

// blank reports characters that are not controls or format characters
// but draw nothing: Hangul fillers, the Mongolian vowel separator, the
// blank Braille pattern, spaces other than the space, variation selectors.
func blank(r rune) bool {
	switch {
	case r == '\u115F', r == '\u1160', r == '\u3164', r == '\uFFA0', r == '\u180E', r == '\u2800':
		return true
	case unicode.Is(unicode.Zs, r) && r != ' ':
		return true
	case r >= 0xFE00 && r <= 0xFE0F, r >= 0xE0100 && r <= 0xE01EF:
		return true
	}
	return false
}

// Safe reports whether s holds nothing Text would escape.
func Safe(s string) bool { return Text(s) == s }

func escape(s string, keepLines bool) string {
	return rewrite(s, func(r rune) (string, bool) {
		if hidden(r) && !(keepLines && (r == '\n' || r == '\t')) {
			return code(r), true
		}
		return "", false
	})
}

// rewrite writes s with each character that with reports true for
// replaced by what it returns, and each byte that is not UTF-8 as \xNN.
func rewrite(s string, with func(r rune) (string, bool)) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			fmt.Fprintf(&b, `\x%02x`, s[i])
		} else if repl, ok := with(r); ok {
			b.WriteString(repl)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// hidden reports whether r acts or hides rather than shows: controls (Cc:
// C0, DEL and C1), format characters (Cf: bidi controls, zero-width
// characters, the byte order mark, tag characters that can smuggle text
// past a reader), and the line and paragraph separators.
func hidden(r rune) bool {
	return unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}

func code(r rune) string {
	switch r {
	case '\n':
		return `\n`
	case '\t':
		return `\t`
	case '\r':
		return `\r`
	case 0x1b:
		return `\x1b`
	}
	switch {
	case r < 0x80:
		return fmt.Sprintf(`\x%02x`, r)
	case r <= 0xffff:
		return fmt.Sprintf(`\u%04x`, r)
	default:
		return fmt.Sprintf(`\U%08x`, r)
	}
}
