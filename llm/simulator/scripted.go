package simulator

import (
	"context"
	"fmt"
	"strings"

	"github.com/secgpt/secgpt/llm"
)

// Rule is one scripted answer: the first rule whose When holds answers with
// Then.
type Rule struct {
	// Name identifies the rule in failures.
	Name string
	// When selects the requests the rule answers; nil matches every request.
	When func(*ChatRequest) bool
	Then func(*ChatRequest) Reply
}

// Scripted answers with the first matching rule. A request no rule matches
// is answered with HTTP 500 naming "no scripted rule matched", so a test
// that reaches it fails loudly.
func Scripted(rules ...Rule) Behaviour { return scripted(rules) }

type scripted []Rule

var _ Behaviour = scripted(nil)

func (s scripted) Reply(_ context.Context, req *ChatRequest) (Reply, error) {
	for _, r := range s {
		if r.When == nil || r.When(req) {
			return r.Then(req), nil
		}
	}
	return Reply{}, fmt.Errorf("no scripted rule matched the request (last user message %q)", LastUser(req))
}

// LastUserContains matches requests whose last user message contains sub.
func LastUserContains(sub string) func(*ChatRequest) bool {
	return func(req *ChatRequest) bool { return strings.Contains(LastUser(req), sub) }
}

// HasTools matches requests that offer at least one tool.
func HasTools(req *ChatRequest) bool { return len(req.Tools) > 0 }

// ResponseFormatNamed matches requests asking for the json_schema named name.
func ResponseFormatNamed(name string) func(*ChatRequest) bool {
	return func(req *ChatRequest) bool {
		rf := req.ResponseFormat
		return rf != nil && rf.JSONSchema != nil && rf.JSONSchema.Name == name
	}
}

// HasToolResult matches requests that contain a tool message, that is, a
// follow-up after the model's tool calls.
func HasToolResult(req *ChatRequest) bool {
	for _, m := range req.Messages {
		if m.Role == llm.RoleTool {
			return true
		}
	}
	return false
}

// Text answers with content.
func Text(content string) func(*ChatRequest) Reply {
	return func(*ChatRequest) Reply { return Reply{Content: content} }
}

// LastUser returns the content of the request's last user message, or "".
func LastUser(req *ChatRequest) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == llm.RoleUser {
			return req.Messages[i].Content
		}
	}
	return ""
}
