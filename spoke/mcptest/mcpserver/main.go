// Command mcpserver is the Go MCP server fixture of the tests: a static
// binary built with the official SDK's server side, speaking over stdio.
// add declares an output schema (its result is typed); greet does not
// (its text is handed on as untrusted text); fetch GETs a URL through the
// environment's proxy, as any Go program's default client does.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type addIn struct {
	A int `json:"a" jsonschema:"the first number"`
	B int `json:"b" jsonschema:"the second number"`
}

type addOut struct {
	Sum int `json:"sum" jsonschema:"a plus b"`
}

type greetIn struct {
	Name string `json:"name" jsonschema:"who to greet"`
}

type fetchIn struct {
	URL string `json:"url" jsonschema:"the URL to GET"`
}

func main() {
	s := mcp.NewServer(&mcp.Implementation{Name: "gofixture", Version: "2.1.0"}, &mcp.ServerOptions{
		Instructions: "gofixture adds numbers, greets people and fetches pages.",
	})
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Add two integers."},
		func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
			return nil, addOut{Sum: in.A + in.B}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "greet", Description: "Greet someone by name."},
		func(_ context.Context, _ *mcp.CallToolRequest, in greetIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Hello, " + in.Name + "!"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fetch", Description: "GET a URL and return its body."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in fetchIn) (*mcp.CallToolResult, any, error) {
			ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.URL, nil)
			if err != nil {
				return nil, nil, err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return nil, nil, err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if err != nil {
				return nil, nil, err
			}
			text := fmt.Sprintf("status %d: %s", resp.StatusCode, body)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "gofixture:", err)
		os.Exit(1)
	}
}
