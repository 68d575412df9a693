package simulator

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/secgpt/secgpt/llm"
)

func post(t *testing.T, url, body string) (int, http.Header, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", b, err)
	}
	return resp.StatusCode, resp.Header, v
}

func startServer(t *testing.T, b Behaviour, opts Options) (*Server, string) {
	t.Helper()
	s := New(b, opts)
	base, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s, base
}

func errorMessage(t *testing.T, v map[string]any) string {
	t.Helper()
	e, ok := v["error"].(map[string]any)
	if !ok {
		t.Fatalf("no OpenAI error object in %v", v)
	}
	if _, ok := e["type"].(string); !ok {
		t.Errorf("error without type: %v", e)
	}
	msg, _ := e["message"].(string)
	return msg
}

func TestServerRejectsBadRequests(t *testing.T) {
	s, base := startServer(t, Scripted(Rule{Name: "any", Then: Text("x")}), Options{})
	for _, body := range []string{
		`{not json`,
		`{"model":"m","messages":[]}`,
		`{"model":"m","messages":[{"role":"wizard","content":"x"}]}`,
		`{"model":"m","messages":[{"role":"user","content":5}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema"}}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{}}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}]} {}`,
	} {
		status, _, v := post(t, base+"/chat/completions", body)
		if status != http.StatusBadRequest || errorMessage(t, v) == "" {
			t.Errorf("%s: status %d, body %v", body, status, v)
		}
	}
	if s.Calls() != 0 {
		t.Errorf("bad requests counted as completions: %d", s.Calls())
	}
}

func TestServerRoutes(t *testing.T) {
	s := New(Scripted(Rule{Name: "any", Then: Text("hello")}), Options{Model: "sim-1"})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, path := range []string{"/v1/models", "/models"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Data []struct{ ID string } `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(v.Data) != 1 || v.Data[0].ID != "sim-1" {
			t.Errorf("GET %s: %d %+v %v", path, resp.StatusCode, v, err)
		}
	}
	for _, path := range []string{"/v1/chat/completions", "/chat/completions"} {
		status, _, v := post(t, srv.URL+path, `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`)
		choice := v["choices"].([]any)[0].(map[string]any)
		msg := choice["message"].(map[string]any)
		if status != 200 || v["object"] != "chat.completion" || v["model"] != "sim-1" || msg["content"] != "hello" || choice["finish_reason"] != "stop" {
			t.Errorf("POST %s: %d %v", path, status, v)
		}
		usage := v["usage"].(map[string]any)
		if usage["prompt_tokens"].(float64) < 1 || usage["total_tokens"].(float64) != usage["prompt_tokens"].(float64)+usage["completion_tokens"].(float64) {
			t.Errorf("usage %v", usage)
		}
	}
	resp, err := http.Get(srv.URL + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET completions: %d", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL + "/v1/embeddings")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown path: %d", resp.StatusCode)
	}
	if s.Calls() != 2 {
		t.Errorf("Calls() = %d, want 2", s.Calls())
	}
}

func TestServerToolCallAnswer(t *testing.T) {
	_, base := startServer(t, Scripted(Rule{Name: "tools", When: HasTools, Then: func(*ChatRequest) Reply {
		return Reply{ToolCalls: []llm.ToolCall{{Name: "a__b", Arguments: `{"x":1}`}, {ID: "mine", Name: "a__c", Arguments: `not json`}}}
	}}), Options{})
	status, _, v := post(t, base+"/chat/completions", `{"messages":[{"role":"user","content":"go"}],"tools":[{"type":"function","function":{"name":"a__b","parameters":{}}}]}`)
	choice := v["choices"].([]any)[0].(map[string]any)
	msg := choice["message"].(map[string]any)
	tcs := msg["tool_calls"].([]any)
	first, second := tcs[0].(map[string]any), tcs[1].(map[string]any)
	if status != 200 || choice["finish_reason"] != "tool_calls" || msg["content"] != nil || first["id"] == "" || second["id"] != "mine" ||
		first["type"] != "function" || second["function"].(map[string]any)["arguments"] != "not json" {
		t.Errorf("answer %v", v)
	}
}

func TestServerFaultInjection(t *testing.T) {
	_, base := startServer(t, Scripted(
		Rule{Name: "429", When: LastUserContains("limit"), Then: func(*ChatRequest) Reply {
			return Reply{Status: 429, Content: "slow down", Header: http.Header{"Retry-After": {"3"}}}
		}},
		Rule{Name: "raw", When: LastUserContains("raw"), Then: func(*ChatRequest) Reply {
			return Reply{RawBody: []byte(`{"broken": `)}
		}},
		Rule{Name: "slow", When: LastUserContains("slow"), Then: func(*ChatRequest) Reply {
			return Reply{Content: "late", Delay: 100 * time.Millisecond}
		}},
	), Options{})

	status, h, v := post(t, base+"/chat/completions", `{"messages":[{"role":"user","content":"limit"}]}`)
	if status != 429 || h.Get("Retry-After") != "3" || errorMessage(t, v) != "slow down" {
		t.Errorf("429: %d %v %v", status, h, v)
	}

	resp, err := http.Post(base+"/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"raw"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != `{"broken": ` {
		t.Errorf("raw: %d %q", resp.StatusCode, b)
	}

	start := time.Now()
	post(t, base+"/chat/completions", `{"messages":[{"role":"user","content":"slow"}]}`)
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("Delay not applied: %v", d)
	}

	status, _, v = post(t, base+"/chat/completions", `{"messages":[{"role":"user","content":"other"}]}`)
	if status != 500 || !strings.Contains(errorMessage(t, v), "no scripted rule matched") {
		t.Errorf("unmatched: %d %v", status, v)
	}
}

func TestServerLatencyAndConcurrency(t *testing.T) {
	const n = 16
	s, base := startServer(t, Obedient(), Options{Latency: 50 * time.Millisecond})
	client, err := llm.NewClient(llm.Config{BaseURL: base})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hello"}}})
			if err == nil && resp.Message.Content != "Factual answer: hello" {
				err = io.ErrUnexpectedEOF
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > 2*time.Second {
		t.Errorf("%d parallel calls with 50ms latency took %v", n, d)
	}
	if s.Calls() != n {
		t.Errorf("Calls() = %d, want %d", s.Calls(), n)
	}
}

func TestServerStartClose(t *testing.T) {
	s := New(Obedient(), Options{})
	if err := s.Close(); err != nil {
		t.Errorf("Close before Start: %v", err)
	}
	base, err := s.Start("127.0.0.1:0")
	if err != nil || !strings.HasSuffix(base, "/v1") {
		t.Fatalf("Start = %q, %v", base, err)
	}
	if _, err := s.Start("127.0.0.1:0"); err == nil {
		t.Error("second Start succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/models"); err == nil {
		t.Error("server still answers after Close")
	}
}

// TestObserveSeesEachCompletion: Observe is told of every completion, with
// the request as decoded and the usage the answer reports.
func TestObserveSeesEachCompletion(t *testing.T) {
	var mu sync.Mutex
	var seen []int
	var usage []llm.Usage
	_, base := startServer(t, Obedient(), Options{Observe: func(req *ChatRequest, u llm.Usage) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, req.PromptBytes())
		usage = append(usage, u)
	}})
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}],` +
		`"tools":[{"type":"function","function":{"name":"t","description":"d","parameters":{"type":"object"}}}],` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}}}`
	status, _, v := post(t, base+"/chat/completions", body)
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, v)
	}
	reported := v["usage"].(map[string]any)
	mu.Lock()
	defer mu.Unlock()
	// "hello", "t", "d", {"type":"object"} twice.
	if len(seen) != 1 || seen[0] != len("hello")+len("t")+len("d")+2*len(`{"type":"object"}`) {
		t.Errorf("observed prompt bytes %v", seen)
	}
	if float64(usage[0].PromptTokens) != reported["prompt_tokens"] || float64(usage[0].CompletionTokens) != reported["completion_tokens"] {
		t.Errorf("observed usage %+v, the answer reports %v", usage[0], reported)
	}
}
