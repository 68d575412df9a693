package simulator

import (
	"fmt"
	"sort"
)

// Profile makes the server deviate from OpenAI's API the way a server that
// people run does: which requests it refuses and with what status and body,
// how it enforces a response schema, where it puts reasoning and tool
// calls, its tool-call ids, its context window. Each deviation names the
// documentation or issue it comes from. Profiles answer through the same
// Behaviour: they change the wire, not the model.
type Profile struct {
	// Name is the profile's name (llm.simulator.profile).
	Name string
	// Server names the server it reproduces, as secgpt doctor should name it.
	Server string
	// OwnedBy is what /v1/models says owns the model; Fingerprint is the
	// completions' system_fingerprint. They are how the servers can be
	// told apart from outside.
	OwnedBy, Fingerprint string

	// NamesAndToolCount refuses, as OpenAI does (400), a tool name outside
	// ^[a-zA-Z0-9_-]{1,64}$ and more than 128 tools.
	// platform.openai.com/docs/guides/function-calling
	NamesAndToolCount bool
	// SystemFirst refuses a system message that is not the first message,
	// as Qwen-family chat templates do (Qwen3.5/3.6 on vLLM, llama.cpp
	// with --jinja, LM Studio): 400 "System message must be at the
	// beginning." vllm-project/vllm#41114; Qwen/Qwen3.5-27B
	// chat_template.jinja.
	SystemFirst bool
	// MistralIDs refuses a tool-call id that is not nine letters or digits
	// (400), and makes ids of that form, as vLLM does for Mistral models.
	// vllm-project/vllm#9019, PR #12332; mistral_common.
	MistralIDs bool
	// ArgumentsJSON refuses a history tool call whose arguments are not a
	// JSON object, as Ollama does (400 "invalid tool call arguments"):
	// it decodes them (openai/openai.go fromChatRequest).
	ArgumentsJSON bool
	// Tools is how tool requests are met (see ToolSupport); notSetUp is
	// the server's refusal when it is not set up for them.
	Tools    ToolSupport
	notSetUp func(model string) refusal
	// SingleToolCall: only the first tool call of an answer is returned,
	// as llama.cpp's server does unless the request sets
	// parallel_tool_calls (docs/function-calling.md).
	SingleToolCall bool
	// JSONMode: an answer to a response_format json_schema is always a
	// JSON document, as OpenAI guarantees even without strict mode
	// (platform.openai.com/docs/guides/structured-outputs) and every
	// grammar engine enforces.
	JSONMode bool
	// Grammar is how a response_format json_schema (and, for llama.cpp, a
	// tool schema) is enforced (see GrammarEngine).
	Grammar GrammarEngine
	// Reasoning is where a thinking model's reasoning goes (see
	// ReasoningStyle).
	Reasoning ReasoningStyle
	// Context is the context window in tokens (four characters a token
	// here); 0 is unbounded. See ContextPolicy.
	Context       int
	ContextPolicy ContextPolicy
	// CallID makes the id of the n-th tool call of the answer numbered
	// seq, for a call the behaviour gave none.
	CallID func(seq int64, n int) string
	// RefusalField puts a refusal in the answer's refusal field, with no
	// content, as OpenAI does (platform.openai.com/docs/guides/
	// structured-outputs, "Refusals"); other servers write it as content.
	RefusalField bool
	// Quota answers every completion 429 insufficient_quota, as OpenAI
	// does for an account without credit; waiting never clears it.
	// platform.openai.com/docs/guides/error-codes/api-errors.
	Quota bool
}

// ToolSupport is how a server meets a request that offers tools.
type ToolSupport int

const (
	// ToolsNative answers tool calls in tool_calls.
	ToolsNative ToolSupport = iota
	// ToolsNotSetUp refuses every request with tools: vLLM without
	// --enable-auto-tool-choice (400, vllm-project/vllm#9986), llama.cpp
	// without --jinja (500, "tools param requires --jinja flag",
	// LLMKube#126), an Ollama model whose template has no tools (400
	// "does not support tools", ollama/ollama#6027).
	ToolsNotSetUp
	// ToolsAsText leaves the model's tool calls in content, in Hermes'
	// <tool_call> format, as vLLM does with a --tool-call-parser that does
	// not match the model (docs.vllm.ai features/tool_calling).
	ToolsAsText
)

// GrammarEngine is how a server enforces a JSON schema.
type GrammarEngine int

const (
	// GrammarNone: the schema guides the model but nothing enforces it
	// (OpenAI with strict false, which secgpt sends).
	GrammarNone GrammarEngine = iota
	// GrammarEnforced compiles the schema into a grammar the model cannot
	// leave: every required property is filled, whatever the prompt says
	// (vLLM's xgrammar and guidance backends, docs.vllm.ai
	// features/structured_outputs).
	GrammarEnforced
	// GrammarLlamaCpp is GrammarEnforced through llama.cpp's
	// json-schema-to-grammar, for response formats and tool schemas
	// alike, which fails on a pattern not anchored with ^ and $ or with an
	// escape its grammar does not know (\d, \w, \s, \/ …,
	// ggml-org/llama.cpp#27580, #27397): 400 "Failed to initialize
	// samplers: failed to parse grammar".
	GrammarLlamaCpp
	// GrammarOllama is llama.cpp's converter behind Ollama, which reports
	// the same failures as a 500 "invalid JSON schema in format"
	// (ollama/ollama#8185; llm/server.go). It compiles no tool schema.
	GrammarOllama
)

// ReasoningStyle is where a server puts a thinking model's reasoning.
type ReasoningStyle int

const (
	// ReasoningNone: the model does not think aloud.
	ReasoningNone ReasoningStyle = iota
	// ReasoningContentField: the reasoning in reasoning_content, the answer
	// in content (llama.cpp's --reasoning-format auto, the default; vLLM
	// with a reasoning parser).
	ReasoningContentField
	// ReasoningOnly: all the text in reasoning and content empty, unless
	// the request sets reasoning_effort "none" (Ollama's /v1 with Gemma 4
	// and other thinking models, ollama/ollama#15288).
	ReasoningOnly
)

// ContextPolicy is what a server does with a prompt over its context.
type ContextPolicy int

const (
	// ContextRefuse answers 400, as vLLM ("This model's maximum context
	// length is N tokens", entrypoints/openai/serving_engine.py) and
	// llama.cpp ("the request exceeds the available context size") do.
	ContextRefuse ContextPolicy = iota
	// ContextTruncate drops messages silently, keeping the system messages
	// and the last one, then cuts the start of what is left, and reports
	// the tokens it read, as Ollama does; its /v1 default context is 4096
	// tokens (server/prompt.go chatPrompt; envconfig OLLAMA_CONTEXT_LENGTH;
	// docs.ollama.com context-length).
	ContextTruncate
)

func openAIProfile() Profile {
	return Profile{
		Name: "openai", Server: "OpenAI", OwnedBy: "openai", Fingerprint: "fp_simulated",
		NamesAndToolCount: true,
		RefusalField:      true,
		JSONMode:          true,
		// OpenAI's ids: "call_" and 24 letters or digits.
		CallID: func(seq int64, n int) string { return fmt.Sprintf("call_%024d", seq*100+int64(n)) },
	}
}

func ollamaProfile() Profile {
	return Profile{
		Name: "ollama", Server: "Ollama",
		// /v1/models gives the model name's namespace ("library");
		// completions say fp_ollama (openai/openai.go).
		OwnedBy: "library", Fingerprint: "fp_ollama",
		ArgumentsJSON: true,
		JSONMode:      true,
		notSetUp: func(model string) refusal {
			return refusal{400, "api_error", fmt.Sprintf("registry.ollama.ai/library/%s does not support tools", model)}
		},
		Grammar: GrammarOllama,
		Context: 4096, ContextPolicy: ContextTruncate,
		// "call_" and eight lower-case letters or digits (openai.toolCallId).
		CallID: func(seq int64, n int) string { return fmt.Sprintf("call_%08d", seq*10+int64(n)) },
	}
}

func vllmProfile() Profile {
	return Profile{
		Name: "vllm", Server: "vLLM", OwnedBy: "vllm", Fingerprint: "",
		// A Qwen model, the most common choice for tool calling on vLLM.
		SystemFirst: true,
		JSONMode:    true,
		notSetUp: func(string) refusal {
			return refusal{400, "BadRequestError", `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`}
		},
		Grammar: GrammarEnforced,
		Context: 32768, ContextPolicy: ContextRefuse,
		CallID: func(seq int64, n int) string { return fmt.Sprintf("chatcmpl-tool-%032x", seq*100+int64(n)) },
	}
}

func llamaCppProfile() Profile {
	return Profile{
		Name: "llamacpp", Server: "llama.cpp", OwnedBy: "llamacpp", Fingerprint: "b6500-simulated",
		// A Qwen3 model under --jinja: its template wants the system
		// message first, and it thinks.
		SystemFirst:    true,
		SingleToolCall: true,
		JSONMode:       true,
		notSetUp:       func(string) refusal { return refusal{500, "server_error", "tools param requires --jinja flag"} },
		Grammar:        GrammarLlamaCpp,
		Reasoning:      ReasoningContentField,
		Context:        32768, ContextPolicy: ContextRefuse,
		CallID: func(seq int64, n int) string { return fmt.Sprintf("%032d", seq*100+int64(n)) },
	}
}

// profiles are the named profiles: each server set up as its documentation
// says, and the set-up mistakes and model traits users meet.
var profiles = map[string]func() Profile{
	"openai":            openAIProfile,
	"openai-no-quota":   variant(openAIProfile, "openai-no-quota", func(p *Profile) { p.Quota = true }),
	"ollama":            ollamaProfile,
	"ollama-no-tools":   variant(ollamaProfile, "ollama-no-tools", func(p *Profile) { p.Tools = ToolsNotSetUp }),
	"ollama-thinking":   variant(ollamaProfile, "ollama-thinking", func(p *Profile) { p.Reasoning = ReasoningOnly }),
	"vllm":              vllmProfile,
	"vllm-no-tools":     variant(vllmProfile, "vllm-no-tools", func(p *Profile) { p.Tools = ToolsNotSetUp }),
	"vllm-wrong-parser": variant(vllmProfile, "vllm-wrong-parser", func(p *Profile) { p.Tools = ToolsAsText }),
	// A Mistral model: its template takes a system message anywhere.
	"vllm-mistral":      variant(vllmProfile, "vllm-mistral", func(p *Profile) { p.SystemFirst, p.MistralIDs = false, true }),
	"llamacpp":          llamaCppProfile,
	"llamacpp-no-jinja": variant(llamaCppProfile, "llamacpp-no-jinja", func(p *Profile) { p.Tools = ToolsNotSetUp }),
}

// variant is a server's profile, named, with one thing changed.
func variant(base func() Profile, name string, change func(*Profile)) func() Profile {
	return func() Profile {
		p := base()
		p.Name = name
		change(&p)
		return p
	}
}

// LookupProfile returns the named profile.
func LookupProfile(name string) (Profile, bool) {
	mk, ok := profiles[name]
	if !ok {
		return Profile{}, false
	}
	return mk(), true
}

// ProfileNames lists the profiles' names, sorted.
func ProfileNames() []string {
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ServerProfiles are the four servers, each set up as documented.
func ServerProfiles() []string { return []string{"openai", "ollama", "vllm", "llamacpp"} }

// refusal is a request a profile refuses, in the server's own words.
type refusal struct {
	status  int
	typ     string
	message string
}

// refuse returns the first of the profile's rules the request breaks.
func (p *Profile) refuse(req *ChatRequest) *refusal {
	bad := func(format string, args ...any) *refusal {
		return &refusal{status: 400, typ: "invalid_request_error", message: fmt.Sprintf(format, args...)}
	}
	if p.Quota {
		return &refusal{status: 429, typ: "insufficient_quota", message: "You exceeded your current quota, please check your plan and billing details. " +
			"For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."}
	}
	if len(req.Tools) > 0 && p.Tools == ToolsNotSetUp && p.notSetUp != nil {
		r := p.notSetUp(req.Model)
		return &r
	}
	if p.NamesAndToolCount {
		if len(req.Tools) > 128 {
			return bad("Invalid 'tools': array too long. Expected an array with maximum length 128, but got an array with length %d instead.", len(req.Tools))
		}
		for i, t := range req.Tools {
			if !openAIToolName.MatchString(t.Name) {
				return bad("Invalid 'tools[%d].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", i)
			}
		}
	}
	for i, m := range req.Messages {
		if p.SystemFirst && m.Role == "system" && i > 0 {
			return &refusal{400, "BadRequestError", "System message must be at the beginning."}
		}
		for _, tc := range m.ToolCalls {
			if p.MistralIDs && !mistralID.MatchString(tc.ID) {
				return &refusal{400, "BadRequestError", fmt.Sprintf("Tool call id was %s but must be a-z, A-Z, 0-9, with a length of 9.", tc.ID)}
			}
			if p.ArgumentsJSON && !isObject(tc.Arguments) {
				return &refusal{400, "invalid_request_error", "invalid tool call arguments"}
			}
		}
		if p.MistralIDs && m.Role == "tool" && !mistralID.MatchString(m.ToolCallID) {
			return &refusal{400, "BadRequestError", fmt.Sprintf("Tool call id was %s but must be a-z, A-Z, 0-9, with a length of 9.", m.ToolCallID)}
		}
	}
	if r := p.refuseSchemas(req); r != nil {
		return r
	}
	if p.Context > 0 && p.ContextPolicy == ContextRefuse {
		if n := promptTokens(req); n > p.Context {
			if p.Grammar == GrammarLlamaCpp {
				return &refusal{400, "exceed_context_size_error", "the request exceeds the available context size, try increasing it"}
			}
			return bad("This model's maximum context length is %d tokens. However, you requested %d tokens in the messages. Please reduce the length of the messages.", p.Context, n)
		}
	}
	return nil
}
