package spoke

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/secgpt/secgpt/apps"
)

// The vanilla baseline (package vanilla) runs external apps' MCP servers
// without a spoke, to measure what isolation changes. These give it the
// app a spoke makes of a server: the same functions and the same results.

// MCPFunction is the app function an external app's spoke makes of an MCP
// tool.
func MCPFunction(t *mcp.Tool) (apps.Function, error) { return toolFunction(t) }

// MCPResult is the app result an external app's spoke makes of a tool's
// result: its structured content when the tool declares an output schema
// (typed), else its text as untrusted text. A tool error is an error.
func MCPResult(res *mcp.CallToolResult, typed bool) (json.RawMessage, error) {
	if res.IsError {
		return nil, fmt.Errorf("the tool reported an error: %s", bounded(textOf(res.Content), 500))
	}
	if typed {
		if res.StructuredContent == nil {
			return nil, errors.New("the tool declares an output schema but returned no structured result")
		}
		out, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil, fmt.Errorf("failed to encode the tool's structured result: %w", err)
		}
		if len(out) > apps.MaxDocument {
			return nil, fmt.Errorf("the tool's result of %d bytes is over the %d-byte limit", len(out), apps.MaxDocument)
		}
		return out, nil
	}
	text := textOf(res.Content)
	if len(text) > MaxUntrustedText {
		return nil, fmt.Errorf("the tool's result of %d bytes is over the %d-byte limit", len(text), MaxUntrustedText)
	}
	return json.Marshal(map[string]string{UntrustedTextField: text})
}
