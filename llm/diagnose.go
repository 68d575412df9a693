package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Finding is one line of a diagnosis: what was checked, whether it works,
// and what it found, with the fix when it does not work.
type Finding struct {
	Check string
	OK    bool
	Say   string
}

// minContext is the context window secgpt needs: the planner's prompt
// alone is 3–5k tokens, and a conversation's history comes on top.
const minContext = 16384

// Diagnose asks c's endpoint, for model, what secgpt needs of it: which
// server it is, one structured output and one tool call, and its context
// window where the server tells it. It returns one finding each.
func Diagnose(ctx context.Context, c *Client, model string) []Finding {
	server := identify(ctx, c, model)
	findings := []Finding{{Check: "server", OK: true, Say: server.describe()}}
	findings = append(findings, checkStructured(ctx, c, model), checkToolCall(ctx, c, model))
	if f, ok := server.checkContext(ctx, c, model); ok {
		findings = append(findings, f)
	}
	return findings
}

// checkStructured asks for a small JSON document with response_format,
// as the planner does, without the fallback that would hide a refusal.
func checkStructured(ctx context.Context, c *Client, model string) Finding {
	f := Finding{Check: "structured output"}
	strict := &Client{base: c.base, url: c.url, apiKey: c.apiKey, http: c.http, timeout: c.timeout, mode: StructuredOn}
	req := Request{Model: model, ResponseSchema: &JSONSchema{Name: "secgpt_check", Schema: json.RawMessage(
		`{"type":"object","properties":{"ready":{"type":"boolean"}},"required":["ready"],"additionalProperties":false}`)},
		Messages: []Message{{Role: RoleUser, Content: `Reply with the JSON object {"ready": true} and nothing else.`}}}
	_, err := strict.CompleteJSON(ctx, req, func(doc []byte) error {
		var v struct {
			Ready *bool `json:"ready"`
		}
		if json.Unmarshal(doc, &v) != nil || v.Ready == nil {
			return fmt.Errorf("%.80s is not the object asked for", doc)
		}
		return nil
	})
	switch e, _ := AsError(err); {
	case err == nil:
		f.OK, f.Say = true, "works (response_format json_schema)"
	case rejectsResponseFormat(err):
		f.OK, f.Say = true, fmt.Sprintf("the endpoint refuses response_format (%s): secgpt describes each schema in the prompt instead and checks every answer", e.Err)
	case e != nil && e.Kind == ErrMalformed:
		f.Say = "the model did not answer with the JSON asked for, even told what was wrong: give the planner a model that follows instructions"
	default:
		f.Say = failure(err)
	}
	return f
}

// checkToolCall offers one tool and asks the model to call it.
func checkToolCall(ctx context.Context, c *Client, model string) Finding {
	f := Finding{Check: "tool calls"}
	req := Request{Model: model, Tools: []Tool{{Name: "report_status", Description: "Reports a status word.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"status":{"type":"string"}},"required":["status"]}`)}},
		Messages: []Message{{Role: RoleUser, Content: `Call the function report_status with the arguments {"status": "ready"}. Do not answer in text.`}}}
	resp, err := c.Complete(ctx, req)
	called := false
	for _, tc := range resp.Message.ToolCalls {
		called = called || tc.Name == "report_status"
	}
	switch {
	case err != nil:
		f.Say = failure(err)
	case called && resp.TextToolCalls:
		f.OK, f.Say = true, "work, but the server left the call as text in the answer, where secgpt reads it: its tool-call parser does not match the model (vLLM: --tool-call-parser hermes for Qwen, llama3_json for Llama, mistral for Mistral)"
	case called:
		f.OK, f.Say = true, "work"
	default:
		f.Say = "the model answered in text instead of calling the offered function: it may not be able to use tools; give the spoke role one that can (Ollama: a model tagged tools)"
	}
	return f
}

// failure is one line for a failed check: what went wrong and the fix.
func failure(err error) string {
	e, ok := AsError(err)
	switch {
	case !ok:
		return "fail: " + err.Error()
	case e.Kind == ErrMisconfigured && e.Fix != "":
		return "fail: " + e.Fix
	}
	say := "fail: " + e.UserMessage()
	if e.Status != 0 {
		say += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Fix != "" {
		say += "; fix: " + e.Fix
	}
	return say
}

// server is what an endpoint says about itself.
type server struct {
	name    string // "" when unknown
	version string
	owner   string // /v1/models owned_by
	// maxModelLen is vLLM's context window, in its /v1/models.
	maxModelLen int
}

func (s server) describe() string {
	switch {
	case s.name == "" && s.owner != "":
		return "an OpenAI-compatible server (its /v1/models names the owner " + s.owner + ")"
	case s.name == "":
		return "an OpenAI-compatible server"
	case s.version != "":
		return s.name + " " + s.version
	}
	return s.name
}

// identify tells the common servers apart by what only each serves:
// Ollama's /api/version, and the owner /v1/models names (vllm, llamacpp,
// openai or system).
func identify(ctx context.Context, c *Client, model string) server {
	var s server
	var version struct {
		Version string `json:"version"`
	}
	if c.getJSON(ctx, c.root()+"/api/version", &version) && version.Version != "" {
		s.name, s.version = "Ollama", version.Version
	}
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			OwnedBy     string `json:"owned_by"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if c.getJSON(ctx, c.base+"/models", &models) {
		for i, m := range models.Data {
			if m.ID == model || (i == 0 && s.owner == "") {
				s.owner, s.maxModelLen = m.OwnedBy, m.MaxModelLen
			}
		}
	}
	if s.name == "" {
		switch s.owner {
		case "vllm":
			s.name = "vLLM"
		case "llamacpp":
			s.name = "llama.cpp"
		case "openai", "system", "openai-internal":
			s.name = "OpenAI"
		}
	}
	return s
}

// checkContext reads the context window where the server tells it:
// Ollama's /api/ps for the loaded model (the checks above loaded it),
// vLLM's max_model_len, llama.cpp's /props.
func (s server) checkContext(ctx context.Context, c *Client, model string) (Finding, bool) {
	n, fix := 0, ""
	switch s.name {
	case "Ollama":
		var ps struct {
			Models []struct {
				Name          string `json:"name"`
				Model         string `json:"model"`
				ContextLength int    `json:"context_length"`
			} `json:"models"`
		}
		if c.getJSON(ctx, c.root()+"/api/ps", &ps) {
			for _, m := range ps.Models {
				if m.Name == model || m.Model == model || strings.TrimSuffix(m.Name, ":latest") == model {
					n = m.ContextLength
				}
			}
		}
		fix = "start Ollama with OLLAMA_CONTEXT_LENGTH=32768 (or set PARAMETER num_ctx in a Modelfile): its default is 4096 tokens, and it cuts longer prompts silently"
	case "vLLM":
		n, fix = s.maxModelLen, "start vLLM with --max-model-len 32768 or more"
	case "llama.cpp":
		var props struct {
			NCtx     int `json:"n_ctx"`
			Settings struct {
				NCtx int `json:"n_ctx"`
			} `json:"default_generation_settings"`
		}
		if c.getJSON(ctx, c.root()+"/props", &props) {
			n = max(props.NCtx, props.Settings.NCtx)
		}
		fix = "start llama-server with --ctx-size 32768 or more"
	}
	if n <= 0 {
		return Finding{}, false
	}
	if n < minContext {
		return Finding{Check: "context", Say: fmt.Sprintf("%d tokens, too small: the planner's prompt alone is 3–5k tokens; %s", n, fix)}, true
	}
	return Finding{Check: "context", OK: true, Say: fmt.Sprintf("%d tokens", n)}, true
}

// root is the server's root, the API root without its /v1.
func (c *Client) root() string { return strings.TrimSuffix(c.base, "/v1") }

// getJSON GETs url into v; it reports whether that worked.
func (c *Client) getJSON(ctx context.Context, url string, v any) bool {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return err == nil && resp.StatusCode == http.StatusOK && json.Unmarshal(body, v) == nil
}
