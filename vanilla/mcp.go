package vanilla

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/spoke"
)

// MCPServer declares an external app's MCP server for the baseline.
type MCPServer struct {
	Name    string
	Command string
	Args    []string
	Dir     string
	// Env is the server's whole environment.
	Env []string
	// Description, when set, replaces the server's instructions.
	Description string
	// CallTimeout bounds each request to the server; default 60 s.
	CallTimeout time.Duration
}

// MCPApp is an external app as the baseline runs it: its MCP server as a
// plain child process of this one, with no sandbox, no egress broker and
// nothing between it and the model but this code. It makes the same
// functions and results of the server as an external app's spoke does.
type MCPApp struct {
	decl    MCPServer
	session *mcp.ClientSession
	spec    apps.Spec
	tools   map[string]string // function name → MCP tool name
	typed   map[string]bool
}

var _ apps.App = (*MCPApp)(nil)

// StartMCP starts the server and lists its tools. Close stops it.
func StartMCP(ctx context.Context, decl MCPServer) (*MCPApp, error) {
	if decl.CallTimeout <= 0 {
		decl.CallTimeout = 60 * time.Second
	}
	cmd := exec.Command(decl.Command, decl.Args...)
	cmd.Dir, cmd.Env, cmd.Stderr = decl.Dir, decl.Env, io.Discard
	client := mcp.NewClient(&mcp.Implementation{Name: "secgpt-vanilla", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{}, Logger: slog.New(slog.DiscardHandler),
	})
	cctx, cancel := context.WithTimeout(ctx, decl.CallTimeout)
	defer cancel()
	session, err := client.Connect(cctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return nil, fmt.Errorf("failed to start the MCP server of %s: %w", decl.Name, err)
	}
	a := &MCPApp{decl: decl, session: session, tools: map[string]string{}, typed: map[string]bool{}}
	a.spec = apps.Spec{Name: decl.Name, Version: "unversioned", Profile: apps.ProfileExec, Description: decl.Description}
	if init := session.InitializeResult(); a.spec.Description == "" && init != nil {
		a.spec.Description = init.Instructions
	}
	for tool, err := range session.Tools(cctx, nil) {
		if err != nil {
			_ = session.Close()
			return nil, fmt.Errorf("failed to list the tools of %s: %w", decl.Name, err)
		}
		fn, err := spoke.MCPFunction(tool)
		if err != nil || a.tools[fn.Name] != "" {
			continue
		}
		a.tools[fn.Name], a.typed[fn.Name] = tool.Name, tool.OutputSchema != nil
		a.spec.Functions = append(a.spec.Functions, fn)
	}
	if len(a.spec.Functions) == 0 {
		_ = session.Close()
		return nil, errors.New("the MCP server of " + decl.Name + " lists no usable tools")
	}
	return a, nil
}

// Spec returns the app's declaration, as the server described it.
func (a *MCPApp) Spec() apps.Spec { return a.spec }

// Call runs one tool.
func (a *MCPApp) Call(ctx context.Context, _ apps.Env, function string, args json.RawMessage) (json.RawMessage, error) {
	tool, ok := a.tools[function]
	if !ok {
		return nil, fmt.Errorf("no function %q", function)
	}
	cctx, cancel := context.WithTimeout(ctx, a.decl.CallTimeout)
	defer cancel()
	res, err := a.session.CallTool(cctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return nil, fmt.Errorf("the MCP server failed: %w", err)
	}
	return spoke.MCPResult(res, a.typed[function])
}

// Close stops the server.
func (a *MCPApp) Close() error { return a.session.Close() }
