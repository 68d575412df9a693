package llm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// The strictest rules the servers people run put on a request, which
// prepare satisfies for every request, whatever the caller built.
const (
	// maxTools is how many tools one request may offer: OpenAI refuses
	// more than 128 (platform.openai.com/docs/guides/function-calling).
	maxTools = 128
	// maxFoldedDescription bounds each folded tool's line in the
	// dispatcher's description.
	maxFoldedDescription = 160
	// dispatcherName is the tool that stands for the tools over maxTools.
	dispatcherName = "more_functions"
)

// validToolName reports whether name follows OpenAI's rule for function
// names, ^[a-zA-Z0-9_-]{1,64}$. The checks below are written out rather
// than regexps: compiling them at package init cost every process that
// links this package, each spoke included, about 900 allocations.
func validToolName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := range len(name) {
		if !toolNameByte(name[i]) {
			return false
		}
	}
	return true
}

// toolNameByte reports whether c may be in an OpenAI function name.
func toolNameByte(c byte) bool { return isAlnumByte(c) || c == '_' || c == '-' }

// validToolCallID reports whether id follows Mistral's rule for tool-call
// ids, which vLLM enforces for Mistral models (vllm-project/vllm#9019, PR
// #12332): exactly nine letters or digits, ^[a-zA-Z0-9]{9}$.
func validToolCallID(id string) bool {
	if len(id) != 9 {
		return false
	}
	for i := range len(id) {
		if !isAlnumByte(id[i]) {
			return false
		}
	}
	return true
}

// outgoing is a request in its wire form, with what reading its answer
// needs.
type outgoing struct {
	body wireRequest
	// names maps each wire tool name back to the caller's name, and wire
	// each caller's name to its wire name.
	names, wire map[string]string
	// offered are the wire names of the tools offered, the dispatcher
	// included; folded those offered through the dispatcher.
	offered, folded map[string]bool
	// promptBytes is the size of what the model reads, to notice a prompt
	// the endpoint cut to fit its context window.
	promptBytes int
	// grammarSafe writes schemas' patterns for grammar compilers.
	grammarSafe bool
}

// schema is a schema as it goes out: as the caller wrote it, or rewritten
// for a grammar compiler once the endpoint showed it has one that fails on
// it.
func (o *outgoing) schema(s json.RawMessage) json.RawMessage {
	if o.grammarSafe {
		return grammarSafe(s)
	}
	return s
}

// prepare writes req in the form every common server accepts:
//
//   - one system message, first, holding every system message's text in
//     order (mergeSystem);
//   - tool names within OpenAI's rule, and at most 128 tools: the rest are
//     offered through one dispatcher tool; both are mapped back in the
//     answer;
//   - with opts.strictIDs, tool-call ids of nine letters or digits, as
//     Mistral models require;
//   - tool-call arguments that are JSON objects: Ollama decodes them and
//     refuses the request otherwise (openai.fromChatRequest);
//   - with opts.grammarSafe, schemas without the patterns grammar compilers
//     reject (grammarSafe).
//
// With a response schema and opts.structured false, the schema is
// described in the system message instead of response_format; opts.quiet
// asks for no reasoning.
func prepare(req Request, opts wireOptions) (*outgoing, error) {
	out := &outgoing{names: map[string]string{}, wire: map[string]string{}, offered: map[string]bool{}, folded: map[string]bool{}, grammarSafe: opts.grammarSafe}
	out.body = wireRequest{Model: req.Model, MaxTokens: req.MaxTokens}
	if opts.quiet {
		out.body.ReasoningEffort = "none"
	}
	messages := mergeSystem(req.Messages)
	if s := req.ResponseSchema; s != nil {
		if !json.Valid(s.Schema) {
			return nil, &Error{Kind: ErrBadRequest, Err: fmt.Errorf("response schema %q is not valid JSON", s.Name)}
		}
		safe := JSONSchema{Name: s.Name, Schema: out.schema(s.Schema)}
		if opts.structured {
			out.body.ResponseFormat = &wireResponseFormat{Type: "json_schema", JSONSchema: wireJSONSchema{Name: safe.Name, Schema: safe.Schema}}
		} else {
			messages = withSchemaInstruction(messages, safe)
		}
	}
	if err := out.nameTools(req); err != nil {
		return nil, err
	}
	ids, err := wireCallIDs(messages, opts.strictIDs)
	if err != nil {
		return nil, err
	}
	if err := out.writeTools(req.Tools); err != nil {
		return nil, err
	}
	for _, m := range messages {
		wm := wireMessage{Role: string(m.Role)}
		if m.ToolCallID != "" || m.Role == RoleTool {
			wm.ToolCallID = ids[m.ToolCallID]
		}
		for _, tc := range m.ToolCalls {
			wm.ToolCalls = append(wm.ToolCalls, out.wireCall(tc, ids[tc.ID]))
			out.promptBytes += len(tc.Name) + len(tc.Arguments)
		}
		if m.Content != "" || len(m.ToolCalls) == 0 {
			content := m.Content
			wm.Content = &content
		}
		out.promptBytes += len(m.Content)
		out.body.Messages = append(out.body.Messages, wm)
	}
	return out, nil
}

// mergeSystem puts the text of every system message, in order, into one
// system message, first. Qwen-family chat templates (Qwen2.5, Qwen3,
// Qwen3.5 and 3.6 on vLLM, llama.cpp with --jinja and LM Studio) raise
// "System message must be at the beginning." for any other order
// (vllm-project/vllm#41114), and Gemma's and Mistral's templates accept
// one system message at most.
func mergeSystem(messages []Message) []Message {
	var system []string
	rest := make([]Message, 0, len(messages))
	for _, m := range messages {
		if m.Role == RoleSystem {
			system = append(system, strings.TrimRight(m.Content, "\n"))
			continue
		}
		rest = append(rest, m)
	}
	if len(system) == 0 {
		return rest
	}
	return append([]Message{{Role: RoleSystem, Content: strings.Join(system, "\n\n")}}, rest...)
}

// withSchemaInstruction describes schema in the system message, for
// endpoints without structured output.
func withSchemaInstruction(messages []Message, schema JSONSchema) []Message {
	text := fmt.Sprintf("Answer with exactly one JSON document and nothing else: no prose, no code fence. "+
		"It must conform to this JSON schema (named %q):\n%s", schema.Name, schema.Schema)
	if len(messages) > 0 && messages[0].Role == RoleSystem {
		first := messages[0]
		first.Content = strings.TrimRight(first.Content, "\n") + "\n\n" + text
		return append([]Message{first}, messages[1:]...)
	}
	return append([]Message{{Role: RoleSystem, Content: text}}, messages...)
}

// nameTools gives every tool name of the request, offered or in the
// history, its wire name.
func (o *outgoing) nameTools(req Request) error {
	add := func(name string) error {
		if _, ok := o.wire[name]; ok {
			return nil
		}
		w := wireToolName(name)
		if prev, taken := o.names[w]; taken {
			return &Error{Kind: ErrBadRequest, Err: fmt.Errorf("tool names %q and %q would go out under one name, %q", prev, name, w)}
		}
		o.wire[name], o.names[w] = w, name
		return nil
	}
	for _, t := range req.Tools {
		if err := add(t.Name); err != nil {
			return err
		}
	}
	for _, m := range req.Messages {
		for _, tc := range m.ToolCalls {
			if err := add(tc.Name); err != nil {
				return err
			}
		}
	}
	if _, taken := o.names[dispatcherName]; taken && len(req.Tools) > maxTools {
		return &Error{Kind: ErrBadRequest, Err: fmt.Errorf("a tool is named %q, the name that stands for the tools over %d", dispatcherName, maxTools)}
	}
	return nil
}

// wireName is the name a caller's tool goes out under; nameTools named
// every tool of the request.
func (o *outgoing) wireName(name string) string { return o.wire[name] }

// wireToolName is name itself when OpenAI accepts it, else a name it
// accepts: the name's allowed characters, cut to fit, and eight hex digits
// of its hash, so that two names stay two.
func wireToolName(name string) string {
	if validToolName(name) {
		return name
	}
	clean := strings.Map(func(r rune) rune {
		if r < 0x80 && toolNameByte(byte(r)) {
			return r
		}
		return '_'
	}, name)
	sum := sha256.Sum256([]byte(name))
	return fmt.Sprintf("%.55s_%s", clean, hex.EncodeToString(sum[:4]))
}

// writeTools offers the tools, the first maxTools-1 by themselves and the
// rest, when there are more than maxTools, through the dispatcher.
func (o *outgoing) writeTools(tools []Tool) error {
	direct := tools
	if len(tools) > maxTools {
		direct = tools[:maxTools-1]
	}
	for _, t := range direct {
		params, err := toolParameters(t)
		if err != nil {
			return err
		}
		o.offered[o.wireName(t.Name)] = true
		o.body.Tools = append(o.body.Tools, wireTool{Type: "function", Function: wireToolFunction{
			Name: o.wireName(t.Name), Description: t.Description, Parameters: o.schema(params),
		}})
		o.promptBytes += len(t.Name) + len(t.Description) + len(params)
	}
	if len(direct) == len(tools) {
		return nil
	}
	var names []string
	var lines strings.Builder
	lines.WriteString("Calls one of the functions below, which did not fit in the list of tools: give its name and its arguments.\n")
	for _, t := range tools[len(direct):] {
		if _, err := toolParameters(t); err != nil {
			return err
		}
		w := o.wireName(t.Name)
		o.folded[w] = true
		names = append(names, w)
		desc := strings.Join(strings.Fields(t.Description), " ")
		if len(desc) > maxFoldedDescription {
			desc = desc[:maxFoldedDescription] + "…"
		}
		fmt.Fprintf(&lines, "- %s: %s\n", w, desc)
	}
	params, err := json.Marshal(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"function":  map[string]any{"type": "string", "enum": names},
			"arguments": map[string]any{"type": "object"},
		},
		"required": []string{"function", "arguments"},
	})
	if err != nil {
		return &Error{Kind: ErrBadRequest, Err: fmt.Errorf("failed to describe the folded tools: %w", err)}
	}
	o.offered[dispatcherName] = true
	o.body.Tools = append(o.body.Tools, wireTool{Type: "function", Function: wireToolFunction{
		Name: dispatcherName, Description: lines.String(), Parameters: params,
	}})
	o.promptBytes += lines.Len() + len(params)
	return nil
}

func toolParameters(t Tool) (json.RawMessage, error) {
	if len(t.Parameters) == 0 {
		return json.RawMessage(`{"type":"object","properties":{}}`), nil
	}
	if !json.Valid(t.Parameters) {
		return nil, &Error{Kind: ErrBadRequest, Err: fmt.Errorf("parameters of tool %q are not valid JSON", t.Name)}
	}
	return t.Parameters, nil
}

// wireCall writes a tool call of the history: under its wire name, or as
// a call of the dispatcher for a folded tool, with arguments that are a
// JSON object.
func (o *outgoing) wireCall(tc ToolCall, id string) wireToolCall {
	args := json.RawMessage(tc.Arguments)
	if !isJSONObject(args) {
		args = json.RawMessage("{}")
	}
	name := o.wireName(tc.Name)
	if o.folded[name] {
		b, err := json.Marshal(map[string]any{"function": name, "arguments": args})
		if err == nil {
			name, args = dispatcherName, b
		}
	}
	return wireToolCall{ID: id, Type: "function", Function: wireFunction{Name: name, Arguments: wireArguments(args)}}
}

func isJSONObject(b json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(b, &m) == nil && m != nil
}

// wireCallIDs gives every tool-call id of the history its wire id: itself,
// or when strict and it is not nine letters or digits, nine base-62 digits
// of its hash.
func wireCallIDs(messages []Message, strict bool) (map[string]string, error) {
	ids := map[string]string{}
	taken := map[string]string{} // wire id → id
	add := func(id string) error {
		if _, ok := ids[id]; ok {
			return nil
		}
		w := id
		if strict && !validToolCallID(id) {
			w = base62ID(id)
		}
		if prev, ok := taken[w]; ok {
			return &Error{Kind: ErrBadRequest, Err: fmt.Errorf("tool-call ids %q and %q would go out as one id", prev, id)}
		}
		ids[id], taken[w] = w, id
		return nil
	}
	for _, m := range messages {
		for _, tc := range m.ToolCalls {
			if err := add(tc.ID); err != nil {
				return nil, err
			}
		}
		if m.Role == RoleTool {
			if err := add(m.ToolCallID); err != nil {
				return nil, err
			}
		}
	}
	return ids, nil
}

// base62ID is nine base-62 digits of id's hash.
func base62ID(id string) string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	sum := sha256.Sum256([]byte(id))
	n := binary.BigEndian.Uint64(sum[:8])
	b := make([]byte, 9)
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = digits[n%62]
		n /= 62
	}
	return string(b)
}
