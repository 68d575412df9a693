package llm

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// endpoint is a fake OpenAI endpoint whose handler sees the call number
// (from 1) and the decoded request body.
type endpoint struct {
	url    string
	calls  atomic.Int64
	mu     sync.Mutex
	bodies []map[string]any
}

func newEndpoint(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, call int64)) *endpoint {
	t.Helper()
	e := &endpoint{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := e.calls.Add(1)
		var body map[string]any
		if b, err := io.ReadAll(r.Body); err == nil && json.Unmarshal(b, &body) == nil {
			e.mu.Lock()
			e.bodies = append(e.bodies, body)
			e.mu.Unlock()
		}
		handle(w, r, n)
	}))
	t.Cleanup(srv.Close)
	e.url = srv.URL + "/v1"
	return e
}

func (e *endpoint) body(i int) map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	if i >= len(e.bodies) {
		return nil
	}
	return e.bodies[i]
}

func newTestClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return c
}

const okBody = `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`

func writeBody(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func userRequest(text string) Request {
	return Request{Model: "m", Messages: []Message{{Role: RoleUser, Content: text}}}
}

func TestNewClientRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{BaseURL: "ftp://example.com"},
		{BaseURL: "http://"},
		{BaseURL: "http://127.0.0.1:1/v1", StructuredOutput: "maybe"},
		{BaseURL: "http://127.0.0.1:1/v1", Timeout: -time.Second},
	} {
		if _, err := NewClient(cfg); err == nil {
			t.Errorf("NewClient(%+v) accepted a bad config", cfg)
		}
	}
}

func TestCompleteMapsEndpointFailures(t *testing.T) {
	tests := []struct {
		name       string
		handle     func(w http.ResponseWriter, r *http.Request, call int64)
		timeout    time.Duration // the caller's context
		cfg        Config
		wantKind   ErrorKind
		wantStatus int
		wantCalls  int64
	}{
		{
			name: "ctx deadline",
			handle: func(w http.ResponseWriter, r *http.Request, _ int64) {
				<-r.Context().Done()
			},
			timeout:  100 * time.Millisecond,
			wantKind: ErrTimeout, wantCalls: 1,
		},
		{
			name: "per-call timeout",
			handle: func(w http.ResponseWriter, r *http.Request, _ int64) {
				<-r.Context().Done()
			},
			cfg:      Config{Timeout: 100 * time.Millisecond},
			wantKind: ErrTimeout, wantCalls: 1,
		},
		{
			name: "rate limited twice",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int64) {
				w.Header().Set("Retry-After", "0")
				writeBody(w, 429, `{"error":{"message":"slow down","type":"rate_limit_error"}}`)
			},
			wantKind: ErrRateLimited, wantStatus: 429, wantCalls: 2,
		},
		{
			name: "server error, retried once",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int64) {
				writeBody(w, 500, `{"error":{"message":"boom","type":"server_error"}}`)
			},
			wantKind: ErrUnavailable, wantStatus: 500, wantCalls: 2,
		},
		{
			name: "server error, retries disabled",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int64) {
				writeBody(w, 503, `not json at all`)
			},
			cfg:      Config{MaxRetries: -1},
			wantKind: ErrUnavailable, wantStatus: 503, wantCalls: 1,
		},
		{
			name: "unauthorized",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int64) {
				writeBody(w, 401, `{"error":{"message":"bad key","type":"invalid_request_error"}}`)
			},
			wantKind: ErrAuth, wantStatus: 401, wantCalls: 1,
		},
		{
			name: "forbidden",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int64) {
				writeBody(w, 403, ``)
			},
			wantKind: ErrAuth, wantStatus: 403, wantCalls: 1,
		},
		{
			name: "bad request",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int64) {
				writeBody(w, 400, `{"error":{"message":"messages: too long","type":"invalid_request_error"}}`)
			},
			wantKind: ErrBadRequest, wantStatus: 400, wantCalls: 1,
		},
		{
			name: "not found",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int64) {
				writeBody(w, 404, `404 page not found`)
			},
			wantKind: ErrBadRequest, wantStatus: 404, wantCalls: 1,
		},
		{
			name: "unprocessable",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int64) {
				writeBody(w, 422, `{"detail":[{"msg":"field required"}]}`)
			},
			wantKind: ErrBadRequest, wantStatus: 422, wantCalls: 1,
		},
		{
			name: "malformed JSON body",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int64) {
				writeBody(w, 200, `{"choices":[{"message":{"content":"hel`)
			},
			wantKind: ErrMalformed, wantStatus: 200, wantCalls: 1,
		},
		{
			name: "empty choices",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int64) {
				writeBody(w, 200, `{"id":"x","object":"chat.completion","choices":[]}`)
			},
			wantKind: ErrMalformed, wantStatus: 200, wantCalls: 1,
		},
		{
			name: "empty message",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int64) {
				writeBody(w, 200, `{"choices":[{"message":{"role":"assistant","content":"  "},"finish_reason":"stop"}]}`)
			},
			wantKind: ErrMalformed, wantStatus: 200, wantCalls: 1,
		},
		{
			name: "garbage tool calls",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int64) {
				writeBody(w, 200, `{"choices":[{"message":{"role":"assistant","tool_calls":[{"id":7,"function":"x"}]}}]}`)
			},
			wantKind: ErrMalformed, wantStatus: 200, wantCalls: 1,
		},
		{
			name: "body cut short",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int64) {
				w.Header().Set("Content-Length", "1000")
				w.WriteHeader(200)
				_, _ = io.WriteString(w, `{"choices":[`)
			},
			wantKind: ErrUnavailable, wantStatus: 0, wantCalls: 2,
		},
		{
			name: "body too large",
			handle: func(w http.ResponseWriter, _ *http.Request, _ int64) {
				w.WriteHeader(200)
				_, _ = io.WriteString(w, `{"id":"`+strings.Repeat("a", maxResponseBytes)+`"}`)
			},
			wantKind: ErrMalformed, wantStatus: 200, wantCalls: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEndpoint(t, tt.handle)
			cfg := tt.cfg
			cfg.BaseURL = e.url
			c := newTestClient(t, cfg)
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			_, err := c.Complete(ctx, userRequest("hi"))
			le, ok := AsError(err)
			if !ok {
				t.Fatalf("error %v (%T) is not an *llm.Error", err, err)
			}
			if le.Kind != tt.wantKind || le.Status != tt.wantStatus {
				t.Errorf("got kind %s status %d (%v), want %s %d", le.Kind, le.Status, err, tt.wantKind, tt.wantStatus)
			}
			if got := e.calls.Load(); got != tt.wantCalls {
				t.Errorf("endpoint got %d calls, want %d", got, tt.wantCalls)
			}
			if le.UserMessage() == "" {
				t.Error("empty user message")
			}
		})
	}
}

func TestCompleteTimeoutWrapsDeadline(t *testing.T) {
	e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request, _ int64) { <-r.Context().Done() })
	c := newTestClient(t, Config{BaseURL: e.url})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Complete(ctx, userRequest("hi"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
	}
}

func TestCompleteConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	c := newTestClient(t, Config{BaseURL: "http://" + addr + "/v1", MaxRetries: -1})
	_, err = c.Complete(context.Background(), userRequest("hi"))
	if le, ok := AsError(err); !ok || le.Kind != ErrUnavailable || !le.Retryable() {
		t.Errorf("got %v, want a retryable %s error", err, ErrUnavailable)
	}
}

func TestCompleteHonorsRetryAfter(t *testing.T) {
	e := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, call int64) {
		if call == 1 {
			w.Header().Set("Retry-After", "1")
			writeBody(w, 429, `{"error":{"message":"slow down"}}`)
			return
		}
		writeBody(w, 200, okBody)
	})
	c := newTestClient(t, Config{BaseURL: e.url})
	start := time.Now()
	resp, err := c.Complete(context.Background(), userRequest("hi"))
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Errorf("retried after %v, want about 1s (Retry-After)", waited)
	}
	if resp.Message.Content != "hello" || e.calls.Load() != 2 {
		t.Errorf("got %q after %d calls", resp.Message.Content, e.calls.Load())
	}
}

func TestCompleteDoesNotWaitPastDeadline(t *testing.T) {
	e := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, _ int64) {
		w.Header().Set("Retry-After", "5")
		writeBody(w, 429, `{"error":{"message":"slow down"}}`)
	})
	c := newTestClient(t, Config{BaseURL: e.url})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Complete(ctx, userRequest("hi"))
	if le, ok := AsError(err); !ok || le.Kind != ErrRateLimited {
		t.Fatalf("got %v, want %s", err, ErrRateLimited)
	}
	if waited := time.Since(start); waited > 500*time.Millisecond {
		t.Errorf("waited %v although the Retry-After outlives the deadline", waited)
	}
	if e.calls.Load() != 1 {
		t.Errorf("got %d calls, want 1", e.calls.Load())
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		header, value string
		want          time.Duration
	}{
		{"Retry-After", "", 0},
		{"Retry-After", "2", 2 * time.Second},
		{"Retry-After", "0.5", 500 * time.Millisecond},
		{"Retry-After", "30", 30 * time.Second},
		{"Retry-After", "1e12", maxHonoredWait},
		{"Retry-After", "-1", 0},
		{"Retry-After", "NaN", 0},
		{"Retry-After", "soon", 0},
		{"Retry-After", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), 0},
		{"Retry-After", time.Now().Add(3 * time.Hour).UTC().Format(http.TimeFormat), maxHonoredWait},
		{"Retry-After-Ms", "1500", 1500 * time.Millisecond},
		{"Retry-After-Ms", "-3", 0},
		{"Retry-After-Ms", "1e20", maxHonoredWait},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.value != "" {
			h.Set(tt.header, tt.value)
		}
		if got := retryAfter(h); got != tt.want {
			t.Errorf("retryAfter(%s: %q) = %v, want %v", tt.header, tt.value, got, tt.want)
		}
	}
	h := http.Header{"Retry-After": {time.Now().Add(time.Minute).UTC().Format(http.TimeFormat)}}
	if got := retryAfter(h); got < 58*time.Second || got > time.Minute {
		t.Errorf("retryAfter(a date a minute away) = %v", got)
	}
}

func TestCompleteMapsMessagesBothWays(t *testing.T) {
	e := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, _ int64) {
		writeBody(w, 200, `{"choices":[{"message":{"role":"system","content":null,"tool_calls":[`+
			`{"id":"c1","type":"function","function":{"name":"mail__send","arguments":"{\"to\": bad json"}},`+
			`{"id":"c2","type":"function","function":{"name":"drive__list","arguments":"{}"}}]},"finish_reason":"tool_calls"}],`+
			`"usage":{"prompt_tokens":11,"completion_tokens":7}}`)
	})
	c := newTestClient(t, Config{BaseURL: e.url})
	req := Request{
		Model: "m",
		Messages: []Message{
			{Role: RoleSystem, Content: "sys"},
			{Role: RoleUser, Content: "do it"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "a1", Name: "app__fn", Arguments: `{"x":1}`}}},
			{Role: RoleTool, ToolCallID: "a1", Content: `{"ok":true}`},
		},
		Tools:     []Tool{{Name: "app__fn", Description: "does fn", Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"type":"integer"}}}`)}, {Name: "app__bare"}},
		MaxTokens: 64,
	}
	resp, err := c.Complete(context.Background(), req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	want := Message{Role: RoleAssistant, ToolCalls: []ToolCall{
		{ID: "c1", Name: "mail__send", Arguments: `{"to": bad json`},
		{ID: "c2", Name: "drive__list", Arguments: `{}`},
	}}
	if got, _ := json.Marshal(resp.Message); string(got) != mustJSON(t, want) {
		t.Errorf("message = %s, want %s", got, mustJSON(t, want))
	}
	if resp.Usage != (Usage{PromptTokens: 11, CompletionTokens: 7}) {
		t.Errorf("usage = %+v", resp.Usage)
	}

	body := e.body(0)
	msgs := body["messages"].([]any)
	assistant := msgs[2].(map[string]any)
	call := assistant["tool_calls"].([]any)[0].(map[string]any)
	fn := call["function"].(map[string]any)
	if assistant["role"] != "assistant" || call["id"] != "a1" || call["type"] != "function" || fn["name"] != "app__fn" || fn["arguments"] != `{"x":1}` {
		t.Errorf("assistant message sent as %v", assistant)
	}
	tool := msgs[3].(map[string]any)
	if tool["role"] != "tool" || tool["tool_call_id"] != "a1" || tool["content"] != `{"ok":true}` {
		t.Errorf("tool message sent as %v", tool)
	}
	if body["max_tokens"] != float64(64) {
		t.Errorf("max_tokens sent as %v", body["max_tokens"])
	}
	tools := body["tools"].([]any)
	params := tools[0].(map[string]any)["function"].(map[string]any)["parameters"].(map[string]any)
	if params["type"] != "object" || tools[0].(map[string]any)["type"] != "function" {
		t.Errorf("tool sent as %v", tools[0])
	}
	if p := tools[1].(map[string]any)["function"].(map[string]any)["parameters"]; p == nil {
		t.Error("a tool without parameters was sent without an object schema")
	}
	if _, ok := body["response_format"]; ok {
		t.Error("response_format sent without a schema")
	}
}

func TestCompleteOmitsZeroMaxTokens(t *testing.T) {
	e := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, _ int64) { writeBody(w, 200, okBody) })
	c := newTestClient(t, Config{BaseURL: e.url, APIKey: "sk-test"})
	if _, err := c.Complete(context.Background(), userRequest("hi")); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.body(0)["max_tokens"]; ok {
		t.Error("max_tokens sent although zero")
	}
}

func TestCompleteRejectsInvalidToolSchema(t *testing.T) {
	e := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, _ int64) { writeBody(w, 200, okBody) })
	c := newTestClient(t, Config{BaseURL: e.url})
	req := userRequest("hi")
	req.Tools = []Tool{{Name: "a__b", Parameters: json.RawMessage(`{not json`)}}
	_, err := c.Complete(context.Background(), req)
	if le, ok := AsError(err); !ok || le.Kind != ErrBadRequest {
		t.Errorf("got %v, want %s", err, ErrBadRequest)
	}
	if e.calls.Load() != 0 {
		t.Error("an invalid request reached the endpoint")
	}
}

// TestCompleteNeverPanicsOnGarbage feeds the client bodies no endpoint
// should send; each must become an *Error or a usable response.
func TestCompleteNeverPanicsOnGarbage(t *testing.T) {
	bodies := []string{
		``, `null`, `[]`, `"text"`, `42`, `{}`, `{"choices":null}`, `{"choices":{}}`,
		`{"choices":[null]}`, `{"choices":[{}]}`, `{"choices":[{"message":null}]}`,
		`{"choices":[{"message":{"content":["a",{"b":1}]}}]}`,
		`{"choices":[{"message":{"content":{"x":1}}}]}`,
		`{"choices":[{"message":{"tool_calls":{}}}]}`,
		`{"choices":[{"message":{"tool_calls":[null]}}]}`,
		`{"choices":[{"message":{"tool_calls":[{"function":null}]}}]}`,
		`{"choices":[{"message":{"tool_calls":[{"function":{"arguments":{"a":1}}}]}}]}`,
		`{"choices":[{"message":{"role":7,"content":"x"}}]}`,
		`{"choices":[{"message":{"content":"ok"}}],"usage":"lots"}`,
		`{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":1e400}}`,
		`{"error":null}`, `{"error":"x"}`, `{"error":{"message":["a","b"]}}`, `{"error":{"message":5}}`,
		"\x00\xff\xfe", `{"choices":[{"message":{"content":"\ud800"}}]}`,
		strings.Repeat("[", 100000),
	}
	for _, status := range []int{200, 400, 429, 500} {
		for _, b := range bodies {
			e := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, _ int64) { writeBody(w, status, b) })
			c := newTestClient(t, Config{BaseURL: e.url, MaxRetries: -1})
			resp, err := c.Complete(context.Background(), userRequest("hi"))
			if err != nil {
				if _, ok := AsError(err); !ok {
					t.Errorf("status %d body %.40q: error %v is not an *llm.Error", status, b, err)
				}
				continue
			}
			if status != 200 || (resp.Message.Content == "" && len(resp.Message.ToolCalls) == 0) {
				t.Errorf("status %d body %.40q: accepted as %+v", status, b, resp)
			}
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestConnectionsAreReusedUnderConcurrency checks that a burst of
// concurrent calls, as 100 users arriving at once make (issue 13), leaves
// its connections open for the next burst instead of opening new ones.
func TestConnectionsAreReusedUnderConcurrency(t *testing.T) {
	const burst = 100
	var opened atomic.Int64
	var arrived sync.WaitGroup
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		arrived.Wait() // every call of the burst holds a connection at once
		writeBody(w, 200, okBody)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := newTestClient(t, Config{BaseURL: srv.URL + "/v1", MaxRetries: -1})
	for round := range 3 {
		arrived.Add(burst)
		var done sync.WaitGroup
		for range burst {
			done.Add(1)
			go func() {
				defer done.Done()
				if _, err := c.Complete(context.Background(), userRequest("hi")); err != nil {
					t.Errorf("round %d: %v", round, err)
				}
			}()
		}
		done.Wait()
	}
	if n := opened.Load(); n > burst {
		t.Errorf("three bursts of %d concurrent calls opened %d connections, want %d", burst, n, burst)
	}
}
