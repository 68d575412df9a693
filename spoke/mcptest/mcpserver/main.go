// Command mcpserver is the Go MCP server fixture of the tests: a static
// binary built with the official SDK's server side, speaking over stdio.
// add declares an output schema (its result is typed); greet does not
// (its text is handed on as untrusted text); fetch GETs a URL through the
// environment's proxy, as any Go program's default client does, or, with
// FETCH_DIRECT=1 in its environment, with a client that ignores proxy
// variables and trusts the CA in the file LAB_CA, as a program that never
// heard of secgpt's proxy would.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
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
			client := http.DefaultClient
			if os.Getenv("FETCH_DIRECT") == "1" {
				if client, err = directClient(); err != nil {
					return nil, nil, err
				}
			}
			resp, err := client.Do(req)
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

// directClient ignores proxy variables and trusts the CA in LAB_CA.
func directClient() (*http.Client, error) {
	pem, err := os.ReadFile(os.Getenv("LAB_CA"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("no certificate in LAB_CA")
	}
	return &http.Client{Transport: &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{RootCAs: pool}}}, nil
}
