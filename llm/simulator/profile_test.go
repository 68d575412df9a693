package simulator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/llm"
)

func startProfile(t *testing.T, name string, b Behaviour) string {
	t.Helper()
	p, ok := LookupProfile(name)
	if !ok {
		t.Fatalf("no profile %q", name)
	}
	_, base := startServer(t, b, Options{Profile: &p, Model: "m"})
	return base
}

const (
	toolsBody     = `,"tools":[{"type":"function","function":{"name":"a__b","parameters":{"type":"object"}}}]`
	escapeSchema  = `{"type":"object","properties":{"to":{"type":"string","pattern":"^[^@\\s]+@[^@\\s]+$"}}}`
	looseSchema   = `{"type":"object","properties":{"to":{"type":"string","pattern":"@"}}}`
	userMessage   = `"messages":[{"role":"user","content":"hi"}]`
	twoSystemMsgs = `"messages":[{"role":"system","content":"a"},{"role":"system","content":"b"},{"role":"user","content":"hi"}]`
)

// TestProfilesRefuseAsDocumented sends each profile the requests its
// server refuses and checks the status and the server's words.
func TestProfilesRefuseAsDocumented(t *testing.T) {
	format := func(schema string) string {
		return `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + schema + `}}`
	}
	longName := strings.Repeat("n", 65)
	var manyTools []string
	for i := range 129 {
		manyTools = append(manyTools, fmt.Sprintf(`{"type":"function","function":{"name":"t%d"}}`, i))
	}
	tests := []struct {
		profile, body string
		status        int
		says          string
	}{
		{"openai", `{"model":"m",` + userMessage + `,"tools":[{"type":"function","function":{"name":"` + longName + `"}}]}`, 400, "does not match pattern"},
		{"openai", `{"model":"m",` + userMessage + `,"tools":[` + strings.Join(manyTools, ",") + `]}`, 400, "maximum length 128"},
		{"openai-no-quota", `{"model":"m",` + userMessage + `}`, 429, "exceeded your current quota"},
		{"vllm", `{"model":"m",` + twoSystemMsgs + `}`, 400, "System message must be at the beginning."},
		{"vllm-no-tools", `{"model":"m",` + userMessage + toolsBody + `}`, 400, "--enable-auto-tool-choice"},
		{"vllm-mistral", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"call_step","type":"function","function":{"name":"a__b","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_step","content":"ok"}]}`, 400, "with a length of 9"},
		{"vllm", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("w", 4*33000) + `"}]}`, 400, "maximum context length is 32768"},
		{"llamacpp-no-jinja", `{"model":"m",` + userMessage + toolsBody + `}`, 500, "tools param requires --jinja flag"},
		{"llamacpp", `{"model":"m",` + userMessage + format(escapeSchema) + `}`, 400, "failed to parse grammar"},
		{"llamacpp", `{"model":"m",` + userMessage + `,"tools":[{"type":"function","function":{"name":"a__b","parameters":` + escapeSchema + `}}]}`, 400, "failed to parse grammar"},
		{"llamacpp", `{"model":"m",` + userMessage + format(looseSchema) + `}`, 400, "Pattern must start with '^' and end with '$'"},
		{"ollama", `{"model":"m",` + userMessage + format(looseSchema) + `}`, 500, "invalid JSON schema in format"},
		{"ollama", `{"model":"m",` + userMessage + format(escapeSchema) + `}`, 500, "unable to create sampling context"},
		{"ollama-no-tools", `{"model":"gemma:2b",` + userMessage + toolsBody + `}`, 400, "gemma:2b does not support tools"},
		{"ollama", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"a__b","arguments":"{oops"}}]},{"role":"tool","tool_call_id":"c","content":"x"}]}`, 400, "invalid tool call arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.profile+" "+tt.says, func(t *testing.T) {
			base := startProfile(t, tt.profile, Scripted(Rule{Then: Text("fine")}))
			status, _, v := post(t, base+"/chat/completions", tt.body)
			if status != tt.status {
				t.Fatalf("status %d, want %d (%v)", status, tt.status, v)
			}
			if msg := errorMessage(t, v); !strings.Contains(msg, tt.says) {
				t.Errorf("message %q does not say %q", msg, tt.says)
			}
		})
	}
	// The same servers take what they are documented to take.
	for _, tt := range []struct{ profile, body string }{
		{"openai", `{"model":"m",` + twoSystemMsgs + format(escapeSchema) + toolsBody + `}`},
		{"vllm", `{"model":"m",` + userMessage + format(escapeSchema) + toolsBody + `}`},
		{"llamacpp", `{"model":"m",` + userMessage + format(`{"type":"object","properties":{"to":{"type":"string","pattern":"^[^@ \\t]+\\.[a-z]$"}}}`) + `}`},
		{"ollama", `{"model":"m",` + twoSystemMsgs + toolsBody + `}`},
	} {
		base := startProfile(t, tt.profile, Scripted(Rule{Then: Text(`{}`)}))
		if status, _, v := post(t, base+"/chat/completions", tt.body); status != 200 {
			t.Errorf("%s refused %s: %d %v", tt.profile, tt.body, status, v)
		}
	}
}

// answerOf posts body to a profile and returns the first choice.
func answerOf(t *testing.T, profile string, b Behaviour, body string) (map[string]any, string) {
	t.Helper()
	base := startProfile(t, profile, b)
	status, _, v := post(t, base+"/chat/completions", body)
	if status != 200 {
		t.Fatalf("%s: status %d: %v", profile, status, v)
	}
	choice := v["choices"].([]any)[0].(map[string]any)
	return choice["message"].(map[string]any), choice["finish_reason"].(string)
}

func TestProfilesShapeAnswers(t *testing.T) {
	calls := Scripted(Rule{Then: func(*ChatRequest) Reply {
		return Reply{Content: "On it.", ToolCalls: []llm.ToolCall{{Name: "a__b", Arguments: `{"x":1}`}, {Name: "a__c", Arguments: `{}`}}}
	}})
	text := Scripted(Rule{Then: Text("The answer.")})

	msg, finish := answerOf(t, "vllm-wrong-parser", calls, `{"model":"m",`+userMessage+toolsBody+`}`)
	if msg["tool_calls"] != nil || finish != "stop" || !strings.Contains(msg["content"].(string), "<tool_call>\n{\"arguments\":{\"x\":1},\"name\":\"a__b\"}\n</tool_call>") {
		t.Errorf("vllm-wrong-parser answered %v (%s)", msg, finish)
	}
	msg, _ = answerOf(t, "llamacpp", calls, `{"model":"m",`+userMessage+toolsBody+`}`)
	if n := len(msg["tool_calls"].([]any)); n != 1 {
		t.Errorf("llamacpp returned %d tool calls without parallel_tool_calls", n)
	}
	msg, _ = answerOf(t, "llamacpp", text, `{"model":"m",`+userMessage+`}`)
	if msg["content"] != "The answer." || msg["reasoning_content"] == nil {
		t.Errorf("llamacpp answered %v", msg)
	}
	msg, _ = answerOf(t, "ollama-thinking", text, `{"model":"m",`+userMessage+`}`)
	if msg["content"] != "" || !strings.Contains(msg["reasoning"].(string), "The answer.") {
		t.Errorf("ollama-thinking answered %v", msg)
	}
	msg, _ = answerOf(t, "ollama-thinking", text, `{"model":"m","reasoning_effort":"none",`+userMessage+`}`)
	if msg["content"] != "The answer." || msg["reasoning"] != nil {
		t.Errorf("ollama-thinking with reasoning off answered %v", msg)
	}
	refuse := Scripted(Rule{Then: func(*ChatRequest) Reply { return Reply{Refusal: "I can't help with that."} }})
	msg, _ = answerOf(t, "openai", refuse, `{"model":"m",`+userMessage+`}`)
	if msg["content"] != nil || msg["refusal"] != "I can't help with that." {
		t.Errorf("openai refused as %v", msg)
	}
	msg, finish = answerOf(t, "ollama", Scripted(Rule{Then: Text(strings.Repeat("word ", 100))}), `{"model":"m","max_tokens":10,`+userMessage+`}`)
	if finish != "length" || len(msg["content"].(string)) != 40 {
		t.Errorf("an answer over max_tokens came back %q (%s)", msg["content"], finish)
	}
}

// TestMistralProfileIDs checks that the vllm-mistral profile writes its
// own nine-character ids and shows the behaviour its own ids again.
func TestMistralProfileIDs(t *testing.T) {
	var seen []string
	b := Scripted(Rule{Then: func(req *ChatRequest) Reply {
		for _, m := range req.Messages {
			for _, tc := range m.ToolCalls {
				seen = append(seen, tc.ID)
			}
		}
		return Reply{ToolCalls: []llm.ToolCall{{ID: "obey_123", Name: "a__b", Arguments: "{}"}}}
	}})
	base := startProfile(t, "vllm-mistral", b)
	_, _, v := post(t, base+"/chat/completions", `{"model":"m",`+userMessage+toolsBody+`}`)
	id := v["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)["id"].(string)
	if !mistralID.MatchString(id) {
		t.Fatalf("vllm-mistral wrote the id %q", id)
	}
	body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":%q,"type":"function","function":{"name":"a__b","arguments":"{}"}}]},{"role":"tool","tool_call_id":%q,"content":"ok"}]%s}`, id, id, toolsBody)
	if status, _, v := post(t, base+"/chat/completions", body); status != 200 {
		t.Fatalf("its own id refused: %v", v)
	}
	if len(seen) != 1 || seen[0] != "obey_123" {
		t.Errorf("the behaviour saw the ids %v, want its own", seen)
	}
}

// TestOllamaProfileTruncates checks that a prompt over Ollama's 4096-token
// context is cut as Ollama cuts it, and the tokens read are reported.
func TestOllamaProfileTruncates(t *testing.T) {
	var got *ChatRequest
	b := Scripted(Rule{Then: func(req *ChatRequest) Reply { got = req; return Reply{Content: "ok"} }})
	msgs := []string{`{"role":"system","content":"rules"}`}
	for i := range 40 {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"%d %s"}`, i, strings.Repeat("x", 1000)))
	}
	base := startProfile(t, "ollama", b)
	status, _, v := post(t, base+"/chat/completions", `{"model":"m","messages":[`+strings.Join(msgs, ",")+`]}`)
	if status != 200 {
		t.Fatalf("status %d: %v", status, v)
	}
	if got.Messages[0].Content != "rules" || !strings.HasPrefix(got.Messages[len(got.Messages)-1].Content, "39 ") || len(got.Messages) > 20 {
		t.Errorf("kept %d messages, first %.20q", len(got.Messages), got.Messages[0].Content)
	}
	if n := v["usage"].(map[string]any)["prompt_tokens"].(float64); n > 4096 {
		t.Errorf("reported %v prompt tokens over a 4096-token context", n)
	}
}

// TestGrammarProfilesFillRequired checks that the grammar-enforcing
// profiles fill every required property, at any depth, whatever the model
// left out, and that OpenAI's non-strict mode does not.
func TestGrammarProfilesFillRequired(t *testing.T) {
	schema := `{"type":"object","properties":{"steps":{"type":"array","items":{"anyOf":[` +
		`{"type":"object","properties":{"app":{"const":"mail"},"args":{"type":"object","properties":{"to":{"type":"string","pattern":"^[^@]+@[^@]+$"},"n":{"type":"integer"}},"required":["to","n"]}},"required":["app","args"]},` +
		`{"type":"object","properties":{"app":{"const":"drive"},"args":{"type":"object","properties":{"path":{"type":"string","minLength":12}},"required":["path"]}},"required":["app","args"]}]}}},"required":["steps"]}`
	b := Scripted(Rule{Then: Text(`{"steps":[{"app":"drive","args":{}},{"app":"mail","args":{"n":3}}]}`)})
	body := `{"model":"m",` + userMessage + `,"response_format":{"type":"json_schema","json_schema":{"name":"plan","schema":` + schema + `}}}`
	for profile, want := range map[string]string{
		"vllm":   `{"steps":[{"app":"drive","args":{"path":"inventedxxxx"}},{"app":"mail","args":{"n":3,"to":"invented@example.com"}}]}`,
		"ollama": `{"steps":[{"app":"drive","args":{"path":"inventedxxxx"}},{"app":"mail","args":{"n":3,"to":"invented@example.com"}}]}`,
		"openai": `{"steps":[{"app":"drive","args":{}},{"app":"mail","args":{"n":3}}]}`,
	} {
		msg, _ := answerOf(t, profile, b, body)
		var gotV, wantV any
		if json.Unmarshal([]byte(msg["content"].(string)), &gotV) != nil || json.Unmarshal([]byte(want), &wantV) != nil || fmt.Sprint(gotV) != fmt.Sprint(wantV) {
			t.Errorf("%s answered %s, want %s", profile, msg["content"], want)
		}
	}
}

func TestProfilesIdentifyTheirServer(t *testing.T) {
	for _, name := range ServerProfiles() {
		p, _ := LookupProfile(name)
		base := startProfile(t, name, Scripted(Rule{Then: Text("x")}))
		resp, err := http.Get(base + "/models")
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Data []struct {
				OwnedBy string `json:"owned_by"`
			} `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if err != nil || len(v.Data) != 1 || v.Data[0].OwnedBy != p.OwnedBy {
			t.Errorf("%s: /models said %+v (%v)", name, v, err)
		}
	}
	if len(ProfileNames()) != len(profiles) {
		t.Error("ProfileNames misses a profile")
	}
}
