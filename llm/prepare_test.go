package llm

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

func TestGrammarPattern(t *testing.T) {
	tests := []struct {
		pattern, want string // want "" means dropped
	}{
		{`^[^@\s]+@[^@\s]+\.[^@\s]+$`, `^[^@ \t\n\r]+@[^@ \t\n\r]+\.[^@ \t\n\r]+$`},
		{`^HC-[0-9A-F]{8}$`, `^HC-[0-9A-F]{8}$`},
		{`^\d{4}-\d{2}$`, `^[0-9]{4}-[0-9]{2}$`},
		{`^[\w-]+$`, `^[a-zA-Z0-9_-]+$`},
		{`^\S+$`, `^[^ \t\n\r]+$`},
		{`^a\/b\-c$`, `^a/b-c$`},
		{`^(a|b)\.c\?$`, `^(a|b)\.c\?$`},
		{`^[a\]b]$`, `^[a\]b]$`},
		{`^[\.\/]$`, `^[./]$`},
		{`[0-9]+`, ``},     // not anchored
		{`^a$|^b$`, ``},    // anchors inside
		{`^(?:ab)+$`, ``},  // group syntax the converter cannot read
		{`^[\S]$`, ``},     // a negated escape in a class
		{`^\bword\b$`, ``}, // word boundary
		{`^(a)\1$`, ``},    // backreference
		{`^[]a]$`, ``},     // an empty-looking class
		{`^[abc$`, ``},     // unclosed class
		{`^abc\$`, ``},     // the last $ is escaped
		{`^\p{L}+$`, ``},   // a Unicode class
		{`^é+\s$`, `^é+[ \t\n\r]$`},
	}
	for _, tt := range tests {
		got, ok := grammarPattern(tt.pattern)
		if tt.want == "" {
			if ok {
				t.Errorf("grammarPattern(%q) = %q, want it dropped", tt.pattern, got)
			}
			continue
		}
		if !ok || got != tt.want {
			t.Errorf("grammarPattern(%q) = %q, %v; want %q", tt.pattern, got, ok, tt.want)
		}
	}
}

// TestGrammarPatternKeepsMeaning checks over a class of strings that a
// rewritten pattern accepts what the original accepts (Go's regexp and
// JSON schema agree on every construct the rewrite keeps).
func TestGrammarPatternKeepsMeaning(t *testing.T) {
	patterns := []string{`^[^@\s]+@[^@\s]+\.[^@\s]+$`, `^\d{2,3}$`, `^[\w-]+$`, `^a\/b$`, `^\w+\s\w+$`}
	inputs := []string{"a@b.c", "a b@c.d", "12", "123", "1234", "ab-c_d", "a/b", "hi there", "hi\tthere", "", "x@y", "@.", "é"}
	for _, p := range patterns {
		rewritten, ok := grammarPattern(p)
		if !ok {
			t.Fatalf("grammarPattern(%q) dropped it", p)
		}
		before, after := regexp.MustCompile(p), regexp.MustCompile(rewritten)
		for _, in := range inputs {
			if before.MatchString(in) != after.MatchString(in) {
				t.Errorf("%q and its rewrite %q disagree on %q", p, rewritten, in)
			}
		}
	}
}

func TestGrammarSafe(t *testing.T) {
	schema := `{"type":"object","properties":{"z":{"type":"string","pattern":"^\\d+$"},"pattern":{"type":"string","enum":["\\d"]},` +
		`"a":{"type":"array","items":{"type":"string","pattern":"contains"}}},"anyOf":[{"pattern":"^\\w$"}],"default":{"pattern":"\\d"}}`
	want := `{"type":"object","properties":{"z":{"type":"string","pattern":"^[0-9]+$"},"pattern":{"type":"string","enum":["\\d"]},` +
		`"a":{"type":"array","items":{"type":"string"}}},"anyOf":[{"pattern":"^[a-zA-Z0-9_]$"}],"default":{"pattern":"\\d"}}`
	if got := string(grammarSafe(json.RawMessage(schema))); got != want {
		t.Errorf("grammarSafe =\n%s\nwant\n%s", got, want)
	}
	same := `{"type":"object", "properties": {"b": {}, "a": {}}}`
	if got := string(grammarSafe(json.RawMessage(same))); got != same {
		t.Errorf("a schema without patterns changed: %s", got)
	}
}

func TestMergeSystem(t *testing.T) {
	in := []Message{
		{Role: RoleSystem, Content: "first\n"}, {Role: RoleSystem, Content: "memory"},
		{Role: RoleUser, Content: "hi"}, {Role: RoleSystem, Content: "late"}, {Role: RoleAssistant, Content: "yo"},
	}
	got := mergeSystem(in)
	want := []Message{{Role: RoleSystem, Content: "first\n\nmemory\n\nlate"}, {Role: RoleUser, Content: "hi"}, {Role: RoleAssistant, Content: "yo"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("mergeSystem = %v, want %v", got, want)
	}
	if got := mergeSystem([]Message{{Role: RoleUser, Content: "x"}}); len(got) != 1 || got[0].Role != RoleUser {
		t.Errorf("mergeSystem without system = %v", got)
	}
}

// TestPrepareNamesAndIDs checks the rules every request keeps, whatever
// names and ids the caller used: the class of names is every length up to
// 80 and characters outside OpenAI's set.
func TestPrepareNamesAndIDs(t *testing.T) {
	var tools []Tool
	var history []Message
	for n := 1; n <= 80; n += 3 {
		name := strings.Repeat("a", n/2) + "__" + strings.Repeat("b", n-n/2)
		tools = append(tools, Tool{Name: name})
		id := fmt.Sprintf("call_step_%d", n)
		history = append(history,
			Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: id, Name: name, Arguments: "not json"}}},
			Message{Role: RoleTool, ToolCallID: id, Content: "ok"})
	}
	tools = append(tools, Tool{Name: "weird name.with/dots"}, Tool{Name: "ünïcode"})
	req := Request{Model: "m", Tools: tools, Messages: append([]Message{{Role: RoleUser, Content: "go"}}, history...)}
	out, err := prepare(req, wireOptions{strictIDs: true})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, tool := range out.body.Tools {
		name := tool.Function.Name
		if !toolNamePattern.MatchString(name) || seen[name] {
			t.Errorf("tool name %q breaks the rule or repeats", name)
		}
		seen[name] = true
		if back := out.callerCall(ToolCall{Name: name}).Name; back != tools[i].Name {
			t.Errorf("tool %q went out as %q and came back as %q", tools[i].Name, name, back)
		}
	}
	for i, m := range out.body.Messages {
		for _, tc := range m.ToolCalls {
			if !toolCallIDPattern.MatchString(tc.ID) || !seen[tc.Function.Name] || string(tc.Function.Arguments) != "{}" {
				t.Errorf("message %d: call %+v breaks a rule", i, tc)
			}
			if next := out.body.Messages[i+1]; next.ToolCallID != tc.ID {
				t.Errorf("message %d: tool answer id %q, call id %q", i, next.ToolCallID, tc.ID)
			}
		}
	}
	loose, err := prepare(req, wireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if id := loose.body.Messages[1].ToolCalls[0].ID; id != "call_step_1" {
		t.Errorf("without strict ids, id sent as %q", id)
	}
}

func TestPrepareFoldsToolsOverTheLimit(t *testing.T) {
	var tools []Tool
	for i := range 200 {
		tools = append(tools, Tool{Name: fmt.Sprintf("app%03d__run", i), Description: "runs"})
	}
	req := Request{Model: "m", Tools: tools, Messages: []Message{
		{Role: RoleUser, Content: "go"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Name: "app150__run", Arguments: `{"x":1}`}}},
		{Role: RoleTool, ToolCallID: "c1", Content: "done"},
	}}
	out, err := prepare(req, wireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.body.Tools) != maxTools || out.body.Tools[maxTools-1].Function.Name != dispatcherName {
		t.Fatalf("offered %d tools, the last %q", len(out.body.Tools), out.body.Tools[len(out.body.Tools)-1].Function.Name)
	}
	call := out.body.Messages[1].ToolCalls[0].Function
	if call.Name != dispatcherName || string(call.Arguments) != `{"arguments":{"x":1},"function":"app150__run"}` {
		t.Errorf("history call of a folded tool sent as %+v", call)
	}
	back := out.callerCall(ToolCall{ID: "z", Name: dispatcherName, Arguments: `{"function":"app199__run","arguments":{"y":2}}`})
	if back.Name != "app199__run" || back.Arguments != `{"y":2}` {
		t.Errorf("dispatcher call mapped back as %+v", back)
	}
	unknown := out.callerCall(ToolCall{ID: "z", Name: dispatcherName, Arguments: `{"function":"app001__run"}`})
	if unknown.Name != dispatcherName {
		t.Errorf("a dispatcher call of a tool offered directly became %+v", unknown)
	}
}

// FuzzGrammarPattern checks what grammarPattern lets through over any
// pattern: anchored, with no escape a grammar compiler copies verbatim,
// and still a regular expression when the original was one.
func FuzzGrammarPattern(f *testing.F) {
	for _, seed := range []string{`^[^@\s]+@[^@\s]+\.[^@\s]+$`, `^\d{2}-\w+$`, `^[\w-]+$`, `^a\/b$`, `x`, `^(?:a)$`, `^[\S]$`, `^\$`, `^[\w-0]$`, `^[\d--]$`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		out, ok := grammarPattern(pattern)
		if !ok {
			return
		}
		if !strings.HasPrefix(out, "^") || !strings.HasSuffix(out, "$") {
			t.Fatalf("grammarPattern(%q) = %q, not anchored", pattern, out)
		}
		for i := 0; i < len(out)-1; i++ {
			if out[i] != '\\' {
				continue
			}
			if !strings.ContainsRune(`^$.[]()|{}*+?tnr\`, rune(out[i+1])) {
				t.Fatalf("grammarPattern(%q) = %q keeps the escape \\%c", pattern, out, out[i+1])
			}
			i++
		}
		if _, err := regexp.Compile(pattern); err == nil {
			if _, err := regexp.Compile(out); err != nil {
				t.Fatalf("grammarPattern(%q) = %q, which does not compile: %v", pattern, out, err)
			}
		}
	})
}

var (
	// toolNamePattern is OpenAI's rule for function names.
	toolNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	// toolCallIDPattern is Mistral's rule for tool-call ids.
	toolCallIDPattern = regexp.MustCompile(`^[a-zA-Z0-9]{9}$`)
)

// TestToolNameChecksAreThePatterns checks the written-out checks against
// the regexps they replaced, on edge cases and on every string of up to
// three characters from a small alphabet.
func TestToolNameChecksAreThePatterns(t *testing.T) {
	toolName, callID := toolNamePattern, toolCallIDPattern
	cases := []string{"", "a", "Z", "0", "_", "-", "weather__get", strings.Repeat("x", 64), strings.Repeat("x", 65),
		"abcdefghi", "ABCDEFGH9", "abcdefgh", "abcdefghij", "abcdefgh_", "abcdefgh\n", "a.b", "a b", "é", "call_1234"}
	alphabet := []string{"a", "Z", "0", "9", "_", "-", ".", "\n", "é", " "}
	var grow func(prefix string, n int)
	grow = func(prefix string, n int) {
		cases = append(cases, prefix, prefix+"bcdefgh", prefix+"bcdefghi")
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			grow(prefix+c, n-1)
		}
	}
	grow("", 3)
	for _, s := range cases {
		if got, want := validToolName(s), toolName.MatchString(s); got != want {
			t.Errorf("validToolName(%q) = %v, the pattern says %v", s, got, want)
		}
		if got, want := validToolCallID(s), callID.MatchString(s); got != want {
			t.Errorf("validToolCallID(%q) = %v, the pattern says %v", s, got, want)
		}
	}
}
