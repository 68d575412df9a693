package sandboxcheck

import (
	"bytes"
	"encoding/json"
	"sync"
)

// Logs collects the JSON log lines of a hub and its spoke manager (a
// zerolog.Logger writing to it), so that each attempt's lines can be
// found. It is safe for concurrent use.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends log output; zerolog writes one line per call.
func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything logged so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// mark is a position in the log.
func (l *Logs) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Len()
}

// logLine is the fields of a log line the verdicts look at.
type logLine struct {
	Message  string `json:"message"`
	App      string `json:"app"`
	SpokePID int    `json:"spoke_pid"`
	Decision string `json:"decision"`
	// SpokeLog is a spoke's own line, as the manager forwards it.
	SpokeLog struct {
		Message string `json:"message"`
		Attack  string `json:"attack"`
		Outcome string `json:"outcome"`
		// AppStderr is a line an MCP server wrote to its stderr.
		AppStderr string `json:"app_stderr"`
	} `json:"spoke_log"`
	raw string
}

// since returns the lines logged after mark; lines that are not JSON are
// skipped.
func (l *Logs) since(mark int) []logLine {
	l.mu.Lock()
	data := bytes.Clone(l.buf.Bytes()[mark:])
	l.mu.Unlock()
	var out []logLine
	for _, raw := range bytes.Split(data, []byte("\n")) {
		var line logLine
		if len(raw) == 0 || json.Unmarshal(raw, &line) != nil {
			continue
		}
		line.raw = string(raw)
		out = append(out, line)
	}
	return out
}
