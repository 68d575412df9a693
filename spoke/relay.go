package spoke

import (
	"bytes"
	"encoding/json"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/reveal"
)

// relay logs one line of the child's stderr. Everything in it is data the
// child (and so the app in it) wrote: it is logged under a message of the
// hub's own, at info level (debug when it claims debug or trace), with
// its text escaped, so that no app line can pass for an operator's line,
// raise an alarm by naming a level, or act on the operator's terminal.
func (p *process) relay(line []byte) {
	var entry map[string]any
	if json.Unmarshal(line, &entry) != nil {
		p.log.Info().Str("spoke_stderr", reveal.Line(string(line))).Msg("Spoke output")
		return
	}
	claimed, _ := entry["level"].(string)
	lvl := zerolog.InfoLevel
	if l, err := zerolog.ParseLevel(claimed); err == nil && l < zerolog.InfoLevel {
		lvl = zerolog.DebugLevel
	}
	var escaped bytes.Buffer
	enc := json.NewEncoder(&escaped)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(reveal.Value(entry)); err != nil {
		p.log.Info().Str("spoke_stderr", reveal.Line(string(line))).Msg("Spoke output")
		return
	}
	p.log.WithLevel(lvl).RawJSON("spoke_log", reveal.JSON(bytes.TrimSpace(escaped.Bytes()))).Msg("Spoke log line")
}
