package llm

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestExtractJSON(t *testing.T) {
	tests := []struct {
		answer  string
		want    string // "" means an error
		wantErr string
	}{
		{answer: `{"a":1}`, want: `{"a":1}`},
		{answer: "  \n{\"a\": [1, 2]}\n ", want: `{"a": [1, 2]}`},
		{answer: "```json\n{\"a\":1}\n```", want: `{"a":1}`},
		{answer: "```JSON\n{\"a\":1}```", want: `{"a":1}`},
		{answer: "```\n[1,2]\n```", want: `[1,2]`},
		{answer: "<think>the user wants {x}</think>\n{\"a\":1}", want: `{"a":1}`},
		{answer: "<think>hmm</think>\n```json\n{\"a\":1}\n```\n", want: `{"a":1}`},
		{answer: `"just a string"`, want: `"just a string"`},
		{answer: ``, wantErr: "no JSON document"},
		{answer: "```json\n```", wantErr: "no JSON document"},
		{answer: `Here it is: {"a":1}`, wantErr: "not valid JSON"},
		{answer: `{"a":1} hope this helps`, wantErr: "text after the JSON value"},
		{answer: `{"a":1}{"b":2}`, wantErr: "text after the JSON value"},
		{answer: "```json\n{\"a\":1}\n", wantErr: "not closed"},
		{answer: "```json\n{\"a\":1}\n```\nDone.", want: `{"a":1}`},
		{answer: "Here is the plan:\n\n```json\n{\"steps\":[]}\n```\n", want: `{"steps":[]}`},
		{answer: "Sure.\n```\n[1]\n```\nAnd again:\n```\n[2]\n```", wantErr: "more than one code fence"},
		{answer: "Use ``` fences: ```json {} ```", wantErr: "not valid JSON"},
		{answer: "```json\n```json\n{}\n```\n```", wantErr: "more than one code fence"},
		{answer: "<think>never ends {\"a\":1}", wantErr: "not closed by </think>"},
		{answer: "{\"a\":1}<think>x</think>", wantErr: "text after the JSON value"},
		{answer: "<think>a</think><think>b</think>{}", wantErr: "not valid JSON"},
		{answer: `{"a":1`, wantErr: "not valid JSON"},
		{answer: "```python\n{}\n```", wantErr: "not valid JSON"},
	}
	for _, tt := range tests {
		got, err := extractJSON(tt.answer)
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("extractJSON(%q) = %q, %v; want error containing %q", tt.answer, got, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || string(got) != tt.want):
			t.Errorf("extractJSON(%q) = %q, %v; want %q", tt.answer, got, err, tt.want)
		}
	}
}

func FuzzExtractJSON(f *testing.F) {
	for _, seed := range []string{
		`{"a":1}`, "```json\n{}\n```", "<think>x</think>[1]", "```", "<think>", `{"a":"]]"}`, "```json```", " \n\t",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, answer string) {
		doc, err := extractJSON(answer)
		if err != nil {
			return
		}
		if !json.Valid(doc) {
			t.Fatalf("extractJSON(%q) accepted invalid JSON %q", answer, doc)
		}
		if strings.TrimSpace(string(doc)) != string(doc) {
			t.Fatalf("extractJSON(%q) = %q, not trimmed", answer, doc)
		}
		// What was accepted is accepted again as is.
		again, err := extractJSON(string(doc))
		if err != nil || string(again) != string(doc) {
			t.Fatalf("extractJSON(%q) = %q, %v; not stable", doc, again, err)
		}
	})
}

func TestCompleteJSONStructuredOutputModes(t *testing.T) {
	schema := &JSONSchema{Name: "answer", Schema: json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}}}`)}
	reject := func(w http.ResponseWriter, r *http.Request, bodyHasFormat bool) {
		if bodyHasFormat {
			writeBody(w, 400, `{"error":{"message":"Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.","type":"invalid_request_error","param":"response_format"}}`)
			return
		}
		writeBody(w, 200, `{"choices":[{"message":{"role":"assistant","content":"{\"ok\":true}"},"finish_reason":"stop"}]}`)
	}
	tests := []struct {
		name string
		mode string
		// rejects makes the endpoint refuse response_format.
		rejects bool
		// wantFormat lists, per HTTP call over two CompleteJSON calls,
		// whether response_format was sent.
		wantFormat []bool
		wantErr    ErrorKind
	}{
		{name: "auto, supported", mode: "", wantFormat: []bool{true, true}},
		{name: "auto, rejected then remembered", mode: StructuredAuto, rejects: true, wantFormat: []bool{true, false, false}},
		{name: "on, rejected", mode: StructuredOn, rejects: true, wantFormat: []bool{true, true}, wantErr: ErrBadRequest},
		{name: "off", mode: StructuredOff, wantFormat: []bool{false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e *endpoint
			e = newEndpoint(t, func(w http.ResponseWriter, r *http.Request, call int64) {
				_, hasFormat := e.body(int(call - 1))["response_format"]
				reject(w, r, tt.rejects && hasFormat)
			})
			c := newTestClient(t, Config{BaseURL: e.url, StructuredOutput: tt.mode})
			req := Request{Model: "m", ResponseSchema: schema, Messages: []Message{{Role: RoleSystem, Content: "You plan."}, {Role: RoleUser, Content: "go"}}}
			for i := 0; i < 2; i++ {
				doc, err := c.CompleteJSON(context.Background(), req, nil)
				if tt.wantErr != "" {
					if le, ok := AsError(err); !ok || le.Kind != tt.wantErr {
						t.Fatalf("got %v, want %s", err, tt.wantErr)
					}
					continue
				}
				if err != nil || string(doc) != `{"ok":true}` {
					t.Fatalf("CompleteJSON = %s, %v", doc, err)
				}
			}
			if got := int(e.calls.Load()); got != len(tt.wantFormat) {
				t.Fatalf("endpoint got %d calls, want %d", got, len(tt.wantFormat))
			}
			for i, want := range tt.wantFormat {
				body := e.body(i)
				rf, has := body["response_format"].(map[string]any)
				if has != want {
					t.Errorf("call %d: response_format sent = %v, want %v", i+1, has, want)
				}
				msgs := body["messages"].([]any)
				system := msgs[0].(map[string]any)["content"].(string)
				described := strings.Contains(system, `"ok":{"type":"boolean"}`)
				if has {
					js := rf["json_schema"].(map[string]any)
					if rf["type"] != "json_schema" || js["name"] != "answer" || js["schema"].(map[string]any)["type"] != "object" {
						t.Errorf("call %d: response_format = %v", i+1, rf)
					}
				}
				if described == want || len(msgs) != 2 || !strings.HasPrefix(system, "You plan.") {
					t.Errorf("call %d: schema described in system message = %v with response_format = %v (messages %v)", i+1, described, want, msgs)
				}
			}
		})
	}
}

func TestCompleteJSONOtherBadRequestIsNotAFallback(t *testing.T) {
	e := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, _ int64) {
		writeBody(w, 400, `{"error":{"message":"context length exceeded"}}`)
	})
	c := newTestClient(t, Config{BaseURL: e.url})
	req := userRequest("go")
	req.ResponseSchema = &JSONSchema{Name: "x", Schema: json.RawMessage(`{}`)}
	_, err := c.CompleteJSON(context.Background(), req, nil)
	if le, ok := AsError(err); !ok || le.Kind != ErrBadRequest {
		t.Fatalf("got %v, want %s", err, ErrBadRequest)
	}
	if e.calls.Load() != 1 || c.lacksStructured.Load() {
		t.Errorf("an unrelated 400 caused a fallback (%d calls)", e.calls.Load())
	}
}
