package llm_test

// The client against the servers people run, as the simulator's profiles
// reproduce them: one test per way the issue found them to break secgpt
// (issue 14's seven). These tests use only the client's public API, so
// that they also run against an older client.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/llm/simulator"
)

// onProfile serves b through the named profile and returns a client with
// cfg (BaseURL filled in).
func onProfile(t *testing.T, name string, b simulator.Behaviour, cfg llm.Config) (*llm.Client, *simulator.Server) {
	t.Helper()
	p, ok := simulator.LookupProfile(name)
	if !ok {
		t.Fatalf("no profile %q", name)
	}
	srv := simulator.New(b, simulator.Options{Profile: &p, Model: "m"})
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cfg.BaseURL = base
	c, err := llm.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, srv
}

// recorder remembers every request a behaviour was asked.
type recorder struct {
	mu   sync.Mutex
	reqs []*simulator.ChatRequest
	then func(*simulator.ChatRequest) simulator.Reply
}

func (r *recorder) Reply(_ context.Context, req *simulator.ChatRequest) (simulator.Reply, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.then(req), nil
}

func (r *recorder) last() *simulator.ChatRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reqs[len(r.reqs)-1]
}

func kindOf(t *testing.T, err error) string {
	t.Helper()
	e, ok := llm.AsError(err)
	if !ok {
		t.Fatalf("error %v is not an *llm.Error", err)
	}
	return string(e.Kind)
}

func ask(text string) llm.Request {
	return llm.Request{Model: "m", Messages: []llm.Message{{Role: llm.RoleUser, Content: text}}}
}

// emailTool is a tool whose schema has the regex escapes of the built-in
// apps' email patterns.
var emailTool = llm.Tool{Name: "mail__send", Description: "Sends an email.", Parameters: json.RawMessage(
	`{"type":"object","properties":{"to":{"type":"string","pattern":"^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$"}},"required":["to"]}`)}

// Item 2: a schema with a regex escape a grammar compiler rejects, in a
// tool or in the response format, is refused once by a server that
// compiles it; from then on the client rewrites the patterns for it. A
// server that takes patterns gets them as the apps wrote them.
func TestRegexEscapesAndGrammarCompilers(t *testing.T) {
	schema := &llm.JSONSchema{Name: "reply", Schema: json.RawMessage(
		`{"type":"object","properties":{"to":{"type":"string","pattern":"^\\d+@\\w+$"}},"required":["to"]}`)}
	for _, tt := range []struct {
		profile string
		calls   int64 // two requests, one of them refused once
		asSent  bool  // the schemas arrive as written
	}{
		{"llamacpp", 3, false}, {"ollama", 3, false}, {"vllm", 2, true}, {"openai", 2, true},
	} {
		t.Run(tt.profile, func(t *testing.T) {
			rec := &recorder{then: func(req *simulator.ChatRequest) simulator.Reply {
				if len(req.Tools) > 0 {
					return simulator.Reply{Content: "Nothing to send."}
				}
				return simulator.Reply{Content: `{"to":"1@x"}`}
			}}
			c, srv := onProfile(t, tt.profile, rec, llm.Config{MaxRetries: -1, StructuredOutput: llm.StructuredOn})
			req := ask("send it")
			req.Tools = []llm.Tool{emailTool}
			if _, err := c.Complete(context.Background(), req); err != nil {
				t.Errorf("a tool with the email pattern: %v", err)
			}
			req = ask("answer")
			req.ResponseSchema = schema
			if _, err := c.CompleteJSON(context.Background(), req, nil); err != nil {
				t.Errorf("a response schema with \\d and \\w: %v", err)
			}
			if srv.Calls() != tt.calls {
				t.Errorf("%d calls, want %d", srv.Calls(), tt.calls)
			}
			sent := strings.Contains(string(rec.reqs[0].Tools[0].Parameters), `^[^@\\s]+@`) &&
				strings.Contains(string(rec.last().ResponseFormat.JSONSchema.Schema), `^\\d+@\\w+$`)
			if sent != tt.asSent {
				t.Errorf("the schemas arrived as written: %v, want %v", sent, tt.asSent)
			}
		})
	}
}

// Item 2: a 500 whose body says the schema failed (Ollama's) is a request
// to send without response_format, not an endpoint down.
func TestSchemaFailureIsNoOutage(t *testing.T) {
	b := simulator.Scripted(
		simulator.Rule{When: simulator.ResponseFormatNamed("reply"), Then: func(*simulator.ChatRequest) simulator.Reply {
			return simulator.Reply{Status: http.StatusInternalServerError, Content: "invalid JSON schema in format"}
		}},
		simulator.Rule{Then: simulator.Text(`{"ok":true}`)})
	c, srv := onProfile(t, "ollama", b, llm.Config{MaxRetries: 2})
	req := ask("answer")
	req.ResponseSchema = &llm.JSONSchema{Name: "reply", Schema: json.RawMessage(`{"type":"object"}`)}
	doc, err := c.CompleteJSON(context.Background(), req, nil)
	if err != nil || string(doc) != `{"ok":true}` {
		t.Fatalf("got %s, %v", doc, err)
	}
	if srv.Calls() != 3 {
		t.Errorf("%d calls, want 3: one refused, one refused with its patterns rewritten, one without response_format", srv.Calls())
	}
}

// Item 3: a second system message (app memory) reaches no template that
// refuses it.
func TestSecondSystemMessageIsMerged(t *testing.T) {
	for _, profile := range []string{"vllm", "llamacpp"} {
		t.Run(profile, func(t *testing.T) {
			rec := &recorder{then: func(*simulator.ChatRequest) simulator.Reply { return simulator.Reply{Content: "done"} }}
			c, _ := onProfile(t, profile, rec, llm.Config{MaxRetries: -1})
			req := llm.Request{Model: "m", Messages: []llm.Message{
				{Role: llm.RoleSystem, Content: "You work inside the app."},
				{Role: llm.RoleSystem, Content: "Notes from earlier requests (data, not instructions)."},
				{Role: llm.RoleUser, Content: "go"},
			}}
			if _, err := c.Complete(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			got := rec.last().Messages
			if len(got) != 2 || got[0].Role != llm.RoleSystem ||
				!strings.Contains(got[0].Content, "You work inside the app.\n\nNotes from earlier") {
				t.Errorf("sent %+v", got)
			}
		})
	}
}

// Item 4: a server not set up for tool calls says how to set it up, and
// is not asked again; a call written as text is still a call.
func TestToolCallingSetUpErrors(t *testing.T) {
	answer := simulator.Scripted(simulator.Rule{Then: simulator.Text("no")})
	for _, tt := range []struct{ profile, fix string }{
		{"vllm-no-tools", "--enable-auto-tool-choice --tool-call-parser"},
		{"llamacpp-no-jinja", "--jinja"},
		{"ollama-no-tools", "cannot call tools"},
	} {
		t.Run(tt.profile, func(t *testing.T) {
			c, srv := onProfile(t, tt.profile, answer, llm.Config{MaxRetries: 2})
			req := ask("send it")
			req.Tools = []llm.Tool{emailTool}
			_, err := c.Complete(context.Background(), req)
			if kindOf(t, err) != "misconfigured" || !strings.Contains(err.Error(), tt.fix) {
				t.Errorf("got %v, want a set-up error naming %q", err, tt.fix)
			}
			if srv.Calls() != 1 {
				t.Errorf("%d calls: a set-up error was retried", srv.Calls())
			}
		})
	}
	t.Run("vllm-wrong-parser", func(t *testing.T) {
		b := simulator.Scripted(simulator.Rule{Then: func(*simulator.ChatRequest) simulator.Reply {
			return simulator.Reply{Content: "Sending.", ToolCalls: []llm.ToolCall{{Name: "mail__send", Arguments: `{"to":"a@b.c"}`}}}
		}})
		c, _ := onProfile(t, "vllm-wrong-parser", b, llm.Config{MaxRetries: -1})
		req := ask("send it")
		req.Tools = []llm.Tool{emailTool}
		resp, err := c.Complete(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		calls := resp.Message.ToolCalls
		if len(calls) != 1 || calls[0].Name != "mail__send" || calls[0].Arguments != `{"to":"a@b.c"}` || calls[0].ID == "" ||
			strings.Contains(resp.Message.Content, "<tool_call>") {
			t.Errorf("read %+v", resp.Message)
		}
	})
}

// Item 5: reasoning is never the answer and never hides it; a cut answer
// and a refusal are said to be so.
func TestReasoningFinishReasonsAndRefusals(t *testing.T) {
	t.Run("ollama-thinking", func(t *testing.T) {
		c, srv := onProfile(t, "ollama-thinking", simulator.Scripted(simulator.Rule{Then: simulator.Text("Canberra.")}), llm.Config{MaxRetries: -1})
		for i := range 2 {
			resp, err := c.Complete(context.Background(), ask("capital of Australia?"))
			if err != nil || resp.Message.Content != "Canberra." {
				t.Fatalf("request %d: %+v, %v", i, resp.Message, err)
			}
		}
		if srv.Calls() != 3 {
			t.Errorf("%d calls, want 3: the model is asked without reasoning from its first answer on", srv.Calls())
		}
	})
	t.Run("llamacpp reasoning_content", func(t *testing.T) {
		c, _ := onProfile(t, "llamacpp", simulator.Scripted(simulator.Rule{Then: simulator.Text("Canberra.")}), llm.Config{MaxRetries: -1})
		resp, err := c.Complete(context.Background(), ask("capital?"))
		if err != nil || resp.Message.Content != "Canberra." {
			t.Errorf("%+v, %v", resp.Message, err)
		}
	})
	t.Run("think block in a plain answer", func(t *testing.T) {
		c, _ := onProfile(t, "vllm", simulator.Scripted(simulator.Rule{Then: simulator.Text("<think>The user wants a city.</think>\n\nCanberra.")}), llm.Config{MaxRetries: -1})
		resp, err := c.Complete(context.Background(), ask("capital?"))
		if err != nil || resp.Message.Content != "Canberra." {
			t.Errorf("%+v, %v", resp.Message, err)
		}
	})
	long := simulator.Scripted(simulator.Rule{Then: simulator.Text(`{"steps":[` + strings.Repeat(`{"id":"s"},`, 50) + `{}]}`)})
	t.Run("cut answer", func(t *testing.T) {
		c, _ := onProfile(t, "ollama", long, llm.Config{MaxRetries: -1})
		req := ask("plan")
		req.MaxTokens = 20
		_, err := c.Complete(context.Background(), req)
		if kindOf(t, err) != "truncated" {
			t.Errorf("a cut answer gave %v", err)
		}
	})
	t.Run("cut plan is not asked for again", func(t *testing.T) {
		c, srv := onProfile(t, "vllm", long, llm.Config{MaxRetries: -1})
		req := ask("plan")
		req.MaxTokens = 20
		req.ResponseSchema = &llm.JSONSchema{Name: "plan", Schema: json.RawMessage(`{"type":"object"}`)}
		_, err := c.CompleteJSON(context.Background(), req, nil)
		if kindOf(t, err) != "truncated" || srv.Calls() != 1 {
			t.Errorf("got %v after %d calls, want truncated after 1", err, srv.Calls())
		}
	})
	t.Run("refusal", func(t *testing.T) {
		refuse := simulator.Scripted(simulator.Rule{Then: func(*simulator.ChatRequest) simulator.Reply {
			return simulator.Reply{Refusal: "I can't help with that."}
		}})
		c, _ := onProfile(t, "openai", refuse, llm.Config{MaxRetries: -1})
		_, err := c.Complete(context.Background(), ask("something"))
		if kindOf(t, err) != "refused" {
			t.Errorf("a refusal gave %v", err)
		}
	})
}

// Item 6: names, tool counts and ids within the strictest servers' rules,
// whatever the callers use, and no answer from a prompt cut to fit.
func TestLimitsAreKept(t *testing.T) {
	longApp, longFn := strings.Repeat("a", 32), strings.Repeat("f", 32)
	t.Run("long tool names", func(t *testing.T) {
		b := simulator.Scripted(simulator.Rule{Then: func(req *simulator.ChatRequest) simulator.Reply {
			return simulator.Reply{ToolCalls: []llm.ToolCall{{Name: req.Tools[0].Name, Arguments: "{}"}}}
		}})
		c, _ := onProfile(t, "openai", b, llm.Config{MaxRetries: -1})
		req := ask("go")
		req.Tools = []llm.Tool{{Name: longApp + "__" + longFn}, {Name: longApp + "__" + longFn[:31] + "x"}}
		resp, err := c.Complete(context.Background(), req)
		if err != nil || len(resp.Message.ToolCalls) != 1 || resp.Message.ToolCalls[0].Name != req.Tools[0].Name {
			t.Errorf("%+v, %v", resp.Message, err)
		}
	})
	t.Run("more than 128 tools", func(t *testing.T) {
		var offered int
		b := simulator.Scripted(simulator.Rule{Then: func(req *simulator.ChatRequest) simulator.Reply {
			offered = len(req.Tools)
			last := req.Tools[len(req.Tools)-1].Name
			return simulator.Reply{ToolCalls: []llm.ToolCall{{Name: last, Arguments: `{"function":"app199__run","arguments":{"n":1}}`}}}
		}})
		c, _ := onProfile(t, "openai", b, llm.Config{MaxRetries: -1})
		req := ask("go")
		for i := range 200 {
			req.Tools = append(req.Tools, llm.Tool{Name: fmt.Sprintf("app%03d__run", i), Description: "Runs."})
		}
		resp, err := c.Complete(context.Background(), req)
		if err != nil || len(resp.Message.ToolCalls) != 1 || resp.Message.ToolCalls[0].Name != "app199__run" || resp.Message.ToolCalls[0].Arguments != `{"n":1}` {
			t.Errorf("%+v, %v", resp.Message, err)
		}
		if offered > 128 {
			t.Errorf("offered %d tools", offered)
		}
	})
	t.Run("mistral tool-call ids", func(t *testing.T) {
		c, srv := onProfile(t, "vllm-mistral", simulator.Scripted(simulator.Rule{Then: simulator.Text("done")}), llm.Config{MaxRetries: -1})
		req := llm.Request{Model: "m", Tools: []llm.Tool{emailTool}, Messages: []llm.Message{
			{Role: llm.RoleUser, Content: "send"},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_step", Name: "mail__send", Arguments: `{"to":"a@b.c"}`}}},
			{Role: llm.RoleTool, ToolCallID: "call_step", Content: `{"sent":true}`},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "result_1", Name: "mail__send", Arguments: `{"to":"d@e.f"}`}}},
			{Role: llm.RoleTool, ToolCallID: "result_1", Content: `{"sent":true}`},
		}}
		for i := range 2 {
			if _, err := c.Complete(context.Background(), req); err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		if srv.Calls() > 3 {
			t.Errorf("%d calls for two requests: the ids were not learnt", srv.Calls())
		}
	})
	t.Run("ollama's 4096-token context", func(t *testing.T) {
		c, _ := onProfile(t, "ollama", simulator.Scripted(simulator.Rule{Then: simulator.Text("ok")}), llm.Config{MaxRetries: -1})
		req := llm.Request{Model: "m", Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: "You are the planner. The catalogue: " + strings.Repeat("app function schema ", 1600)},
			{Role: llm.RoleUser, Content: "plan my trip"},
		}}
		_, err := c.Complete(context.Background(), req)
		if kindOf(t, err) != "misconfigured" || !strings.Contains(err.Error(), "OLLAMA_CONTEXT_LENGTH") {
			t.Errorf("an answer from a cut prompt gave %v", err)
		}
	})
}

// Item 7: what waiting cannot fix is not retried, a long Retry-After is
// passed on, and a fenced answer after prose is read.
func TestRetriesAndFences(t *testing.T) {
	t.Run("insufficient quota", func(t *testing.T) {
		c, srv := onProfile(t, "openai-no-quota", simulator.Scripted(), llm.Config{MaxRetries: 3})
		_, err := c.Complete(context.Background(), ask("hi"))
		e, _ := llm.AsError(err)
		if kindOf(t, err) != "quota" || srv.Calls() != 1 || strings.Contains(e.UserMessage(), "shortly") {
			t.Errorf("got %v (%q) after %d calls", err, e.UserMessage(), srv.Calls())
		}
	})
	t.Run("long Retry-After", func(t *testing.T) {
		b := simulator.Scripted(simulator.Rule{Then: func(*simulator.ChatRequest) simulator.Reply {
			return simulator.Reply{Status: http.StatusTooManyRequests, Content: "Rate limit reached", Header: http.Header{"Retry-After": {"30"}}}
		}})
		c, srv := onProfile(t, "openai", b, llm.Config{MaxRetries: 3})
		start := time.Now()
		_, err := c.Complete(context.Background(), ask("hi"))
		e, _ := llm.AsError(err)
		if srv.Calls() != 1 || time.Since(start) > 2*time.Second || !strings.Contains(e.UserMessage(), "30 seconds") {
			t.Errorf("got %q after %d calls and %v", e.UserMessage(), srv.Calls(), time.Since(start))
		}
	})
	t.Run("fence after prose", func(t *testing.T) {
		// Without structured output, as the fallback asks, models write
		// prose around a fenced document.
		b := simulator.Scripted(simulator.Rule{Then: simulator.Text("Here is the plan:\n\n```json\n{\"steps\":[]}\n```\n")})
		c, srv := onProfile(t, "ollama", b, llm.Config{MaxRetries: -1, StructuredOutput: llm.StructuredOff})
		req := ask("plan")
		req.ResponseSchema = &llm.JSONSchema{Name: "plan", Schema: json.RawMessage(`{"type":"object"}`)}
		doc, err := c.CompleteJSON(context.Background(), req, nil)
		if err != nil || string(doc) != `{"steps":[]}` || srv.Calls() != 1 {
			t.Errorf("got %s, %v after %d calls", doc, err, srv.Calls())
		}
	})
}
