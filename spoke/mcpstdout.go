package spoke

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdoutFilter reads an MCP server's stdout for the SDK, one line (one
// JSON-RPC message) at a time:
//   - a line that cannot be a JSON-RPC message (a start-up banner, a log
//     line printed to the wrong stream) is skipped, and skip is told, so
//     that it costs a warning, not the session;
//   - a line over max bytes fails the read, and over() remembers it;
//   - the tools a tools/list result says require task augmentation
//     ("execution": {"taskSupport": "required"}, which the SDK's Tool does
//     not carry) are noted, for taskOnly.
type stdoutFilter struct {
	r    *bufio.Reader
	c    io.Closer
	max  int
	skip func(line string)

	pending []byte // a message not yet read whole
	err     error  // the error after pending

	mu       sync.Mutex
	tripped  bool
	taskOnly map[string]bool
	skipped  int    // lines skipped
	lastSkip string // the last of them, bounded
}

var _ io.ReadCloser = (*stdoutFilter)(nil)

func newStdoutFilter(r io.ReadCloser, max int, skip func(line string)) *stdoutFilter {
	return &stdoutFilter{r: bufio.NewReaderSize(r, 64<<10), c: r, max: max, skip: skip, taskOnly: map[string]bool{}}
}

func (f *stdoutFilter) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		line, err := f.readLine()
		if err != nil {
			f.err = err
		}
		trimmed := bytes.TrimSpace(line)
		switch {
		case len(trimmed) == 0:
		case trimmed[0] != '{' && trimmed[0] != '[':
			text := string(bytes.ToValidUTF8(trimmed, []byte("?")))
			f.mu.Lock()
			f.skipped, f.lastSkip = f.skipped+1, bounded(text, 200)
			f.mu.Unlock()
			f.skip(text)
		default:
			f.note(trimmed)
			f.pending = line
		}
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

// readLine reads one line with its newline, failing once it grows over
// f.max bytes.
func (f *stdoutFilter) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := f.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(bytes.TrimRight(line, "\r\n")) > f.max {
			f.mu.Lock()
			f.tripped = true
			f.mu.Unlock()
			return nil, fmt.Errorf("a message from the MCP server is over the %d-byte limit", f.max)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// note records the tools of a tools/list result that require tasks.
func (f *stdoutFilter) note(msg []byte) {
	if !bytes.Contains(msg, []byte(`"taskSupport"`)) {
		return
	}
	var res struct {
		Result struct {
			Tools []struct {
				Name      string `json:"name"`
				Execution struct {
					TaskSupport string `json:"taskSupport"`
				} `json:"execution"`
			} `json:"tools"`
		} `json:"result"`
	}
	if json.Unmarshal(msg, &res) != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range res.Result.Tools {
		if t.Execution.TaskSupport == "required" {
			f.taskOnly[t.Name] = true
		}
	}
}

// requiresTask reports whether the server listed tool as callable only as
// a task, which secgpt does not offer: such a tool cannot be called.
func (f *stdoutFilter) requiresTask(tool string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.taskOnly[tool]
}

// skippedLines says, for an error message, what was skipped: "" if
// nothing.
func (f *stdoutFilter) skippedLines() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch f.skipped {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf(" (it wrote 1 line that is not JSON-RPC to its stdout, the last: %q)", f.lastSkip)
	default:
		return fmt.Sprintf(" (it wrote %d lines that are not JSON-RPC to its stdout, the last: %q)", f.skipped, f.lastSkip)
	}
}

func (f *stdoutFilter) Close() error { return f.c.Close() }

func (f *stdoutFilter) over() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tripped
}

// textOf joins a result's content as text: text as it is, an embedded text
// resource's text, and other content described in words (its kind, media
// type and size), not kept.
func textOf(content []mcp.Content) string {
	var parts []string
	for _, c := range content {
		parts = append(parts, contentText(c))
	}
	return strings.Join(parts, "\n")
}

func contentText(c mcp.Content) string {
	switch c := c.(type) {
	case *mcp.TextContent:
		return c.Text
	case *mcp.ImageContent:
		return fmt.Sprintf("[an image (%s, %d bytes), not shown]", orUnknown(c.MIMEType), len(c.Data))
	case *mcp.AudioContent:
		return fmt.Sprintf("[an audio clip (%s, %d bytes), not played]", orUnknown(c.MIMEType), len(c.Data))
	case *mcp.ResourceLink:
		return fmt.Sprintf("[a link to the resource %q (%s), not followed]", bounded(c.Name, 100), bounded(c.URI, 200))
	case *mcp.EmbeddedResource:
		if r := c.Resource; r != nil {
			if r.Text != "" {
				return fmt.Sprintf("[the resource %s:]\n%s", bounded(r.URI, 200), r.Text)
			}
			return fmt.Sprintf("[the resource %s (%s, %d bytes), not shown]", bounded(r.URI, 200), orUnknown(r.MIMEType), len(r.Blob))
		}
		return "[an empty embedded resource]"
	default:
		return "[content of a kind secgpt does not show]"
	}
}

func orUnknown(mime string) string {
	if mime == "" {
		return "of unknown type"
	}
	return bounded(mime, 60)
}
