package simulator

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/secgpt/secgpt/llm"
)

var (
	openAIToolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	mistralID      = regexp.MustCompile(`^[a-zA-Z0-9]{9}$`)
)

func isObject(s string) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &m) == nil && m != nil
}

// promptTokens estimates a request's prompt as the server's tokenizer
// would: four characters a token.
func promptTokens(req *ChatRequest) int {
	chars := 0
	for _, m := range req.Messages {
		chars += len(m.Content) + 4
		for _, tc := range m.ToolCalls {
			chars += len(tc.Name) + len(tc.Arguments)
		}
	}
	for _, t := range req.Tools {
		chars += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	return tokens(chars)
}

// truncate cuts a prompt over the context as Ollama does: it keeps the
// system messages and the latest messages that fit, the last one always,
// then cuts the start of the first message kept until the whole fits.
func (p *Profile) truncate(req *ChatRequest) {
	if p.Context <= 0 || p.ContextPolicy != ContextTruncate || promptTokens(req) <= p.Context {
		return
	}
	msgs := req.Messages
	start := len(msgs) - 1
	for start > 0 {
		var trial []llm.Message
		for _, m := range msgs[:start-1] {
			if m.Role == llm.RoleSystem {
				trial = append(trial, m)
			}
		}
		trial = append(trial, msgs[start-1:]...)
		if promptTokens(&ChatRequest{Messages: trial, Tools: req.Tools}) > p.Context {
			break
		}
		start--
	}
	var kept []llm.Message
	for _, m := range msgs[:start] {
		if m.Role == llm.RoleSystem {
			kept = append(kept, m)
		}
	}
	req.Messages = append(kept, msgs[start:]...)
	// Then the runner keeps the last tokens that fit.
	for over := (promptTokens(req) - p.Context) * 4; over > 0 && len(req.Messages) > 0; {
		first := &req.Messages[0]
		cut := min(over, len(first.Content))
		first.Content = first.Content[cut:]
		over -= cut
		if over > 0 {
			req.Messages = req.Messages[1:]
		}
	}
}

// callIDs remembers, for a profile that writes its own tool-call ids, the
// behaviour's id behind each one, so that the behaviour reads its own ids
// in the history, as a model reads the ones it wrote.
type callIDs struct {
	mu      sync.Mutex
	byWire  map[string]string
	counter int64
}

func (c *callIDs) remember(wire, own string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byWire == nil {
		c.byWire = map[string]string{}
	}
	c.byWire[wire] = own
}

func (c *callIDs) own(wire string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if own, ok := c.byWire[wire]; ok {
		return own
	}
	return wire
}

// restore gives the behaviour back its own ids in the history.
func (c *callIDs) restore(req *ChatRequest) {
	for i := range req.Messages {
		m := &req.Messages[i]
		for j := range m.ToolCalls {
			m.ToolCalls[j].ID = c.own(m.ToolCalls[j].ID)
		}
		if m.ToolCallID != "" {
			m.ToolCallID = c.own(m.ToolCallID)
		}
	}
}

// shape writes the behaviour's reply as the profile's server does.
func (p *Profile) shape(req *ChatRequest, reply Reply, seq int64, ids *callIDs) (wireAnswer, string) {
	answer := wireAnswer{Role: "assistant"}
	content := p.enforce(req, reply.Content)
	calls := reply.ToolCalls
	if p.SingleToolCall && len(calls) > 1 && !req.ParallelToolCalls {
		calls = calls[:1]
	}
	finish := "stop"
	if p.Tools == ToolsAsText && len(calls) > 0 {
		var b strings.Builder
		b.WriteString(content)
		for _, tc := range calls {
			args := json.RawMessage(tc.Arguments)
			if !json.Valid(args) {
				args = json.RawMessage("{}")
			}
			call, _ := json.Marshal(map[string]any{"name": tc.Name, "arguments": args}) // a string and valid JSON encode
			fmt.Fprintf(&b, "\n<tool_call>\n%s\n</tool_call>", call)
		}
		content, calls = strings.TrimSpace(b.String()), nil
	}
	for i, tc := range calls {
		id := tc.ID
		switch {
		case p.MistralIDs:
			ids.mu.Lock()
			ids.counter++
			id = fmt.Sprintf("%09d", ids.counter)
			ids.mu.Unlock()
			if tc.ID != "" {
				ids.remember(id, tc.ID)
			}
		case id == "" && p.CallID != nil:
			id = p.CallID(seq, i+1)
		case id == "":
			id = fmt.Sprintf("call_%d_%d", seq, i+1)
		}
		answer.ToolCalls = append(answer.ToolCalls, wireToolCall{ID: id, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: tc.Arguments}})
		finish = "tool_calls"
	}
	if reply.Refusal != "" && p.RefusalField {
		refusal := reply.Refusal
		answer.Refusal = &refusal
	} else if reply.Refusal != "" {
		content = reply.Refusal // the other servers have no refusal field
	}
	switch {
	case p.Reasoning == ReasoningOnly && req.ReasoningEffort != "none":
		thought := strings.TrimSpace("Thinking about the request. " + content)
		answer.Reasoning, content = &thought, ""
	case p.Reasoning == ReasoningContentField:
		thought := "The user asks: " + truncate(LastUser(req), 80)
		answer.ReasoningContent = &thought
	}
	if content != "" || (len(answer.ToolCalls) == 0 && answer.Refusal == nil) {
		answer.Content = &content
	}
	return answer, finish
}
