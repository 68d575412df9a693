package ollamatest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Model is the name the tiny model is created under.
const Model = "tiny"

// BinaryEnv names the variable that holds the Ollama binary
// (scripts/build-ollama.sh prints it).
const BinaryEnv = "SECGPT_OLLAMA_BIN"

// template is the tiny model's chat template: it renders every message
// and the tools' names (which gives the model the tools capability), and
// no more, so that prompts stay short for a model that reads a byte a
// token.
const template = `{{- range .Messages }}<|{{ .Role }}|>{{ .Content }}
{{- range .ToolCalls }}<tool_call>{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}</tool_call>{{ end }}
{{ end }}{{ if .Tools }}<|tools|>{{ range .Tools }}{{ .Function.Name }} {{ end }}
{{ end }}<|assistant|>`

// Server is a running Ollama with the tiny model, behind a proxy that
// records every exchange.
type Server struct {
	// URL is the proxy's API root, …/v1, for llm.Config.BaseURL.
	URL string

	logMu sync.Mutex
	log   bytes.Buffer

	mu        sync.Mutex
	exchanges []Exchange
}

// Exchange is one request through the proxy and the answer's status and
// body.
type Exchange struct {
	Method, Path string
	Request      []byte
	Status       int
	Response     []byte
}

// Start runs Ollama (the binary in $SECGPT_OLLAMA_BIN) on a loopback port
// with its models in a temporary directory, creates the tiny model there,
// and stops it when the test ends. contextLength is Ollama's default
// context (OLLAMA_CONTEXT_LENGTH). A test without the binary is skipped,
// saying so.
func Start(t testing.TB, contextLength int) *Server {
	t.Helper()
	bin := os.Getenv(BinaryEnv)
	if bin == "" {
		t.Skipf("no real Ollama: $%s is not set (scripts/build-ollama.sh builds it and prints its path)", BinaryEnv)
	}
	dir := t.TempDir()
	s := &Server{}
	cmd := exec.Command(bin, "serve")
	cmd.Env = []string{
		"HOME=" + dir, "PATH=" + os.Getenv("PATH"),
		// Port 0: Ollama listens where the kernel says, and logs where.
		"OLLAMA_HOST=127.0.0.1:0", "OLLAMA_MODELS=" + filepath.Join(dir, "models"),
		fmt.Sprintf("OLLAMA_CONTEXT_LENGTH=%d", contextLength),
		"OLLAMA_NOPRUNE=1", "OLLAMA_KEEP_ALIVE=-1",
	}
	cmd.Stdout = &lockedWriter{mu: &s.logMu, w: &s.log}
	cmd.Stderr = cmd.Stdout
	// Ollama runs each model in a runner process of its own: the server
	// and its runners form a process group, stopped together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("failed to start Ollama: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("Ollama's log:\n%s", s.logTail())
		}
	})
	host, err := s.waitListening(30 * time.Second)
	if err != nil {
		t.Fatalf("Ollama did not start: %v\n%s", err, s.logTail())
	}
	if err := createModel(dir, bin, host); err != nil {
		t.Fatalf("failed to create the tiny model: %v\n%s", err, s.logTail())
	}
	target, _ := url.Parse("http://" + host) // a fixed, valid URL
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body) // a short read is what the proxy forwards, and Ollama judges
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r)
		s.mu.Lock()
		s.exchanges = append(s.exchanges, Exchange{Method: r.Method, Path: r.URL.Path, Request: body, Status: rec.Code, Response: rec.Body.Bytes()})
		s.mu.Unlock()
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(front.Close)
	s.URL = front.URL + "/v1"
	return s
}

// Exchanges returns the exchanges so far.
func (s *Server) Exchanges() []Exchange {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Exchange(nil), s.exchanges...)
}

// Completions returns how many chat completions went through the proxy,
// and those not answered 200 with a chat completion (a choice with a
// message).
func (s *Server) Completions() (int, []Exchange) {
	n := 0
	var refused []Exchange
	for _, e := range s.Exchanges() {
		if !strings.HasSuffix(e.Path, "/chat/completions") {
			continue
		}
		n++
		var c struct {
			Choices []struct {
				Message *json.RawMessage `json:"message"`
			} `json:"choices"`
		}
		if e.Status != http.StatusOK || json.Unmarshal(e.Response, &c) != nil || len(c.Choices) != 1 || c.Choices[0].Message == nil {
			refused = append(refused, e)
		}
	}
	return n, refused
}

func (s *Server) logTail() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	l := s.log.String()
	if len(l) > 8000 {
		l = "…" + l[len(l)-8000:]
	}
	return l
}

// createModel writes the tiny model and a Modelfile and has Ollama create
// the model from them: answers of at most 128 tokens, sampled with a fixed
// seed.
func createModel(dir, bin, host string) error {
	gguf := filepath.Join(dir, "tiny.gguf")
	if err := WriteTinyModel(gguf); err != nil {
		return err
	}
	modelfile := fmt.Sprintf("FROM %s\nTEMPLATE \"\"\"%s\"\"\"\nPARAMETER num_predict 128\nPARAMETER seed 14\n", gguf, template)
	path := filepath.Join(dir, "Modelfile")
	if err := os.WriteFile(path, []byte(modelfile), 0o600); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	create := exec.CommandContext(ctx, bin, "create", Model, "-f", path)
	create.Env = []string{"HOME=" + dir, "OLLAMA_HOST=" + host}
	if out, err := create.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

var listening = regexp.MustCompile(`Listening on (127\.0\.0\.1:[0-9]+) `)

// waitListening waits for Ollama to log the address it listens on, and
// for it to answer there.
func (s *Server) waitListening(limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		s.logMu.Lock()
		m := listening.FindStringSubmatch(s.log.String())
		s.logMu.Unlock()
		if m != nil {
			resp, err := http.Get("http://" + m[1] + "/api/version")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return m[1], nil
				}
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("Ollama did not listen within %v", limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
