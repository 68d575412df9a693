package spoke

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/reveal/revealtest"
)

// TestAppLogLinesCannotPoseAsTheOperators: what a child writes on stderr
// is data. Whatever level and message it claims, its line is logged at
// info (debug for a claimed debug), under the hub's own message, with its
// text escaped: it can neither pass for an operator's line nor act on a
// terminal.
func TestAppLogLinesCannotPoseAsTheOperators(t *testing.T) {
	hostile := revealtest.Controls() + revealtest.Hostile["OSC 52 clipboard"] + revealtest.Hostile["bidi override"]
	forged, _ := json.Marshal(hostile)
	for _, c := range []struct {
		name, line, level, message string
	}{
		{"claims fatal", `{"level":"fatal","message":"Bot started` + string(forged[1:]) + "}", "info", "Spoke log line"},
		{"claims panic with an error", `{"level":"panic","message":"Sandbox disabled","error":` + string(forged) + `}`, "info", "Spoke log line"},
		{"claims error with odd keys", `{"level":"error","message":"x",` + string(forged) + `:1}`, "info", "Spoke log line"},
		{"claims debug", `{"level":"debug","message":"fine"}`, "debug", "Spoke log line"},
		{"not JSON", "plain " + hostile, "info", "Spoke output"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := &process{log: zerolog.New(&buf).Level(zerolog.DebugLevel)}
			p.relay([]byte(c.line))
			out := buf.String()
			if r, ok := revealtest.Active(out, true); ok {
				t.Errorf("the log carries %U as it is: %q", r, out)
			}
			var got struct {
				Level    string         `json:"level"`
				Message  string         `json:"message"`
				SpokeLog map[string]any `json:"spoke_log"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("not one JSON line: %v: %q", err, out)
			}
			if got.Level != c.level || got.Message != c.message {
				t.Errorf("logged at %s as %q, want %s as %q", got.Level, got.Message, c.level, c.message)
			}
			if strings.ContainsRune(c.line, 0x1b) || strings.Contains(c.line, `\u001b`) {
				if !strings.Contains(out, `\\x1b`) {
					t.Errorf("the escape is not shown: %q", out)
				}
			}
		})
	}
}
