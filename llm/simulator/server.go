package simulator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/secgpt/secgpt/llm"
)

// DefaultModel is the model name the server reports when Options.Model is
// empty.
const DefaultModel = "secgpt-simulator"

// maxRequestBytes bounds a request body.
const maxRequestBytes = 8 << 20

// Behaviour decides a simulated model's reply. Reply is called concurrently
// and must honour ctx. An error becomes an HTTP 500 naming it.
type Behaviour interface {
	Reply(ctx context.Context, req *ChatRequest) (Reply, error)
}

// ChatRequest is a decoded OpenAI chat completion request, flattened into
// the llm wire types.
type ChatRequest struct {
	Model    string
	Messages []llm.Message
	Tools    []llm.Tool
	// ResponseFormat is nil when the request has none.
	ResponseFormat *ResponseFormat
	MaxTokens      int
	// ReasoningEffort is "none" when the request turns reasoning off.
	ReasoningEffort   string
	ParallelToolCalls bool
}

// ResponseFormat is a request's response_format.
type ResponseFormat struct {
	// Type is "text", "json_object" or "json_schema".
	Type string
	// JSONSchema is set for Type "json_schema".
	JSONSchema *llm.JSONSchema
}

// Reply is what the simulated model answers.
type Reply struct {
	Content string
	// Refusal is the model declining, in its own words.
	Refusal string
	// ToolCalls are emitted with finish_reason "tool_calls"; a call without
	// an ID gets one.
	ToolCalls []llm.ToolCall

	// Fault injection, for tests.

	// Status, when neither 0 nor 200, answers with that status and an
	// error body in OpenAI's shape whose message is Content.
	Status int
	// RawBody, when set, is sent verbatim (with Status, or 200).
	RawBody []byte
	// Header is added to the response (e.g. Retry-After).
	Header http.Header
	// Delay holds the answer back, on top of Options.Latency.
	Delay time.Duration
}

// Options configures a Server.
type Options struct {
	// Latency is added to every completion, to model a real endpoint.
	Latency time.Duration
	// Model is the model name reported in answers and by /v1/models;
	// DefaultModel when empty.
	Model string
	// Profile, when set, makes the server answer as the server it
	// reproduces does (see Profile); nil is OpenAI's API as documented.
	Profile *Profile
	// Observe, when set, is told of each completion answered, with the
	// usage reported for it; it is called concurrently.
	Observe func(req *ChatRequest, usage llm.Usage)
}

// Server is an OpenAI-compatible HTTP endpoint backed by a Behaviour. It is
// safe for concurrent use.
type Server struct {
	behaviour Behaviour
	opts      Options
	calls     atomic.Int64
	ids       atomic.Int64
	callIDs   callIDs
	handler   http.Handler
	// loaded are the models requests have named, as Ollama's /api/ps
	// lists the models it loaded for them.
	loaded sync.Map

	mu   sync.Mutex
	srv  *http.Server
	done chan struct{}
}

// New returns a server answering with b. It does not listen until Start;
// Handler can also be mounted elsewhere.
func New(b Behaviour, opts Options) *Server {
	if opts.Model == "" {
		opts.Model = DefaultModel
	}
	s := &Server{behaviour: b, opts: opts}
	mux := http.NewServeMux()
	for _, prefix := range []string{"/v1", ""} {
		mux.HandleFunc(prefix+"/chat/completions", s.serveCompletion)
		mux.HandleFunc(prefix+"/models", s.serveModels)
	}
	// What the servers say about themselves outside the OpenAI API.
	for _, path := range []string{"/api/version", "/api/ps", "/props"} {
		mux.HandleFunc(path, s.serveInfo)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	s.handler = mux
	return s
}

// Handler serves POST /v1/chat/completions and /chat/completions, and GET
// /v1/models and /models.
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens on addr (e.g. "127.0.0.1:0") and serves in the background.
// It returns the base URL for llm.Config.BaseURL, ending in /v1.
func (s *Server) Start(addr string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return "", errors.New("simulator already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("failed to listen on %s: %w", addr, err)
	}
	s.srv = &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	s.done = make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		// Serve returns http.ErrServerClosed after Close: nothing to report.
		_ = srv.Serve(ln)
	}(s.srv, s.done)
	return "http://" + ln.Addr().String() + "/v1", nil
}

// Close stops listening and drops open connections. It is a no-op on a
// server that was never started.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return nil
	}
	err := s.srv.Close()
	<-s.done
	s.srv = nil
	if err != nil {
		return fmt.Errorf("failed to close simulator: %w", err)
	}
	return nil
}

// Calls returns the number of completion requests served.
func (s *Server) Calls() int64 { return s.calls.Load() }

func (s *Server) serveModels(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "use GET")
		return
	}
	model := map[string]any{"id": s.opts.Model, "object": "model", "created": 0, "owned_by": "secgpt"}
	if p := s.opts.Profile; p != nil {
		model["owned_by"] = p.OwnedBy
		if p.Server == "vLLM" {
			model["max_model_len"] = p.Context // vLLM's model card (entrypoints/openai/protocol.py ModelCard)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{model}})
}

// serveInfo answers what Ollama (/api/version, /api/ps) and llama.cpp's
// server (/props) say about themselves, for the profiles of those servers.
func (s *Server) serveInfo(w http.ResponseWriter, r *http.Request) {
	p := s.opts.Profile
	switch {
	case p != nil && p.Server == "Ollama" && r.URL.Path == "/api/version":
		writeJSON(w, http.StatusOK, map[string]any{"version": "0.12.3"})
	case p != nil && p.Server == "Ollama" && r.URL.Path == "/api/ps":
		// Each model is loaded with the default context (api.ProcessModelResponse).
		models := []any{}
		s.loaded.Range(func(name, _ any) bool {
			models = append(models, map[string]any{"name": name, "model": name, "context_length": p.Context})
			return true
		})
		writeJSON(w, http.StatusOK, map[string]any{"models": models})
	case p != nil && p.Server == "llama.cpp" && r.URL.Path == "/props":
		writeJSON(w, http.StatusOK, map[string]any{"default_generation_settings": map[string]any{"n_ctx": p.Context}})
	default:
		writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	}
}

func (s *Server) serveCompletion(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "use POST")
		return
	}
	req, err := decodeRequest(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	s.calls.Add(1)
	s.loaded.Store(req.Model, true)
	if p := s.opts.Profile; p != nil {
		if r := p.refuse(req); r != nil {
			writeError(w, r.status, r.typ, r.message)
			return
		}
		s.callIDs.restore(req)
		p.truncate(req)
	}
	ctx := r.Context()
	if !sleep(ctx, s.opts.Latency) {
		return
	}
	reply, err := s.behaviour.Reply(ctx, req)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	if !sleep(ctx, reply.Delay) {
		return
	}
	for k, vs := range reply.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	status := reply.Status
	if status == 0 {
		status = http.StatusOK
	}
	switch {
	case reply.RawBody != nil:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(reply.RawBody) // the client may be gone; nothing to do
	case status != http.StatusOK:
		writeError(w, status, errorType(status), reply.Content)
	default:
		c := s.completion(req, reply)
		if s.opts.Observe != nil {
			s.opts.Observe(req, llm.Usage{PromptTokens: c.Usage.PromptTokens, CompletionTokens: c.Usage.CompletionTokens})
		}
		writeJSON(w, http.StatusOK, c)
	}
}

// PromptBytes is every byte of the request that a model reads: message
// contents, tool calls' names and arguments, offered tools' names,
// descriptions and parameter schemas, and the response format's schema.
func (r *ChatRequest) PromptBytes() int {
	n := llm.PromptBytes(r.Messages, r.Tools)
	if r.ResponseFormat != nil && r.ResponseFormat.JSONSchema != nil {
		n += len(r.ResponseFormat.JSONSchema.Schema)
	}
	return n
}

// sleep waits d unless ctx ends first; it reports whether it waited.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return "authentication_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// OpenAI wire shapes.

type wireRequest struct {
	Model             string              `json:"model"`
	Messages          []wireMessage       `json:"messages"`
	Tools             []wireTool          `json:"tools"`
	ResponseFormat    *wireResponseFormat `json:"response_format"`
	MaxTokens         int                 `json:"max_tokens"`
	Stream            bool                `json:"stream"`
	ReasoningEffort   string              `json:"reasoning_effort"`
	ParallelToolCalls bool                `json:"parallel_tool_calls"`
}

type wireMessage struct {
	Role       string         `json:"role"`
	Content    *wireContent   `json:"content,omitempty"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

// wireContent is a message's content: a string, null, or an array of
// parts whose text parts are joined.
type wireContent string

func (c *wireContent) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = wireContent(s)
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return errors.New("content is neither a string nor an array of parts")
	}
	var sb strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			sb.WriteString(p.Text)
		}
	}
	*c = wireContent(sb.String())
	return nil
}

type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type wireTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type wireResponseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
	} `json:"json_schema"`
}

func decodeRequest(r io.Reader) (*ChatRequest, error) {
	var w wireRequest
	dec := json.NewDecoder(r)
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("failed to parse the request body as JSON: %v", err)
	}
	if dec.More() {
		return nil, errors.New("the request body has data after the JSON object")
	}
	if w.Stream {
		return nil, errors.New("stream is not supported by the simulator")
	}
	if len(w.Messages) == 0 {
		return nil, errors.New("messages must not be empty")
	}
	req := &ChatRequest{Model: w.Model, MaxTokens: w.MaxTokens, ReasoningEffort: w.ReasoningEffort, ParallelToolCalls: w.ParallelToolCalls}
	for i, m := range w.Messages {
		switch llm.Role(m.Role) {
		case llm.RoleSystem, llm.RoleUser, llm.RoleAssistant, llm.RoleTool, "developer":
		default:
			return nil, fmt.Errorf("messages[%d].role %q is not a valid role", i, m.Role)
		}
		msg := llm.Message{Role: llm.Role(m.Role), ToolCallID: m.ToolCallID}
		if m.Content != nil {
			msg.Content = string(*m.Content)
		}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		req.Messages = append(req.Messages, msg)
	}
	for i, t := range w.Tools {
		if t.Function.Name == "" {
			return nil, fmt.Errorf("tools[%d].function.name is missing", i)
		}
		req.Tools = append(req.Tools, llm.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	if rf := w.ResponseFormat; rf != nil {
		req.ResponseFormat = &ResponseFormat{Type: rf.Type}
		if rf.Type == "json_schema" {
			if rf.JSONSchema == nil {
				return nil, errors.New("response_format.json_schema is missing")
			}
			req.ResponseFormat.JSONSchema = &llm.JSONSchema{Name: rf.JSONSchema.Name, Schema: rf.JSONSchema.Schema}
		}
	}
	return req, nil
}

type wireCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint,omitempty"`
	Choices           []wireChoice `json:"choices"`
	Usage             wireUsage    `json:"usage"`
}

type wireChoice struct {
	Index        int             `json:"index"`
	Message      wireAnswer      `json:"message"`
	FinishReason string          `json:"finish_reason"`
	Logprobs     json.RawMessage `json:"logprobs"`
}

type wireAnswer struct {
	Role             string         `json:"role"`
	Content          *string        `json:"content"`
	Refusal          *string        `json:"refusal,omitempty"`
	Reasoning        *string        `json:"reasoning,omitempty"`
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []wireToolCall `json:"tool_calls,omitempty"`
}

type wireUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (s *Server) completion(req *ChatRequest, reply Reply) wireCompletion {
	n := s.ids.Add(1)
	p := s.opts.Profile
	if p == nil {
		p = &Profile{} // OpenAI's API as documented
	}
	answer, finish := p.shape(req, reply, n, &s.callIDs)
	completionChars := len(reply.Content)
	for _, tc := range reply.ToolCalls {
		completionChars += len(tc.Name) + len(tc.Arguments)
	}
	usage := wireUsage{PromptTokens: promptTokens(req), CompletionTokens: tokens(completionChars)}
	if limit := req.MaxTokens * 4; req.MaxTokens > 0 && answer.Content != nil && len(*answer.Content) > limit {
		// The model stopped at the limit, mid-answer.
		cut := (*answer.Content)[:limit]
		answer.Content, finish = &cut, "length"
		usage.CompletionTokens = req.MaxTokens
	}
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
	model := req.Model
	if model == "" {
		model = s.opts.Model
	}
	return wireCompletion{
		ID:                fmt.Sprintf("chatcmpl-sim-%d", n),
		Object:            "chat.completion",
		Created:           time.Now().Unix(),
		Model:             model,
		SystemFingerprint: p.Fingerprint,
		Choices:           []wireChoice{{Index: 0, Message: answer, FinishReason: finish, Logprobs: json.RawMessage("null")}},
		Usage:             usage,
	}
}

// tokens estimates a token count the way rough tokenizers do: four
// characters per token.
func tokens(chars int) int { return chars/4 + 1 }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "server_error", "failed to encode the answer")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b) // the client may be gone; nothing to do
}

// writeError answers in OpenAI's error shape.
func writeError(w http.ResponseWriter, status int, typ, message string) {
	if message == "" {
		message = http.StatusText(status)
	}
	b, _ := json.Marshal(map[string]any{ // a map of strings and nil always encodes
		"error": map[string]any{"message": message, "type": typ, "param": nil, "code": nil},
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
