// Package vanilla is the non-isolated baseline of DESIGN §3: the same apps
// and model in one LLM context with every tool and one shared memory, run
// in-process (external apps' MCP servers as plain child processes) with no
// spokes, no sandbox and no consent. It exists only to measure what
// isolation changes (the case studies, the benchmarks, and any query and
// app by `secgpt ask --mode vanilla`).
//
// It must never be the default nor serve a real user unawares: nothing
// here is a defence, and the binary says so each time it runs it.
package vanilla

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/store"
)

// LLM is the model endpoint.
type LLM interface {
	Complete(ctx context.Context, req llm.Request) (llm.Response, error)
}

var (
	_ LLM = (*llm.Client)(nil)
	_ LLM = (*llm.Router)(nil)
)

// Options configure an Agent.
type Options struct {
	LLM            LLM
	Store          *store.Store
	Apps           []apps.App
	Model          string
	MaxLLMCalls    int // per query; default 16
	HistoryEntries int // default 20
	Log            zerolog.Logger
}

// Agent is the single-context assistant.
type Agent struct {
	opts  Options
	apps  map[string]apps.App
	tools []llm.Tool
}

// New returns an Agent holding every app's tools.
func New(opts Options) *Agent {
	if opts.MaxLLMCalls <= 0 {
		opts.MaxLLMCalls = 16
	}
	if opts.HistoryEntries <= 0 {
		opts.HistoryEntries = 20
	}
	a := &Agent{opts: opts, apps: map[string]apps.App{}}
	for _, app := range opts.Apps {
		spec := app.Spec()
		a.apps[spec.Name] = app
		if spec.IsAnnotation() {
			continue
		}
		for _, f := range spec.Functions {
			a.tools = append(a.tools, llm.Tool{Name: apps.ToolName(spec.Name, f.Name), Description: f.Description, Parameters: f.Request})
		}
	}
	return a
}

// Call is one function call the agent made.
type Call struct {
	App      string          `json:"app"`
	Function string          `json:"function"`
	Args     json.RawMessage `json:"args"`
	Result   json.RawMessage `json:"result,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// Result is the answer to one query and what led to it.
type Result struct {
	Answer   string `json:"answer"`
	Calls    []Call `json:"calls"`
	LLMCalls int    `json:"llm_calls"`
}

// systemPrompt puts every app's description and annotation in one context,
// as a non-isolated assistant does.
func (a *Agent) systemPrompt() string {
	var b strings.Builder
	b.WriteString("You are a helpful personal assistant. You can use these apps:\n")
	for _, app := range a.opts.Apps {
		spec := app.Spec()
		fmt.Fprintf(&b, "- %s: %s\n", spec.Name, spec.Description)
		if spec.IsAnnotation() {
			fmt.Fprintf(&b, "  Instructions from %s: %s\n", spec.Name, spec.Annotation)
		}
	}
	return b.String()
}

// Handle answers one query for user.
func (a *Agent) Handle(ctx context.Context, user, query string) (Result, error) {
	history, err := a.opts.Store.HubMemory(ctx, user, a.opts.HistoryEntries)
	if err != nil {
		return Result{}, fmt.Errorf("failed to read memory: %w", err)
	}
	msgs := []llm.Message{{Role: llm.RoleSystem, Content: a.systemPrompt()}}
	for _, e := range history {
		role := llm.RoleUser
		if e.Role == "assistant" {
			role = llm.RoleAssistant
		}
		msgs = append(msgs, llm.Message{Role: role, Content: e.Content})
	}
	msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: query})

	var res Result
	for res.LLMCalls < a.opts.MaxLLMCalls {
		resp, err := a.opts.LLM.Complete(ctx, llm.Request{Model: a.opts.Model, Messages: msgs, Tools: a.tools})
		res.LLMCalls++
		if err != nil {
			return res, fmt.Errorf("failed to complete: %w", err)
		}
		msgs = append(msgs, resp.Message)
		if len(resp.Message.ToolCalls) == 0 {
			res.Answer = resp.Message.Content
			break
		}
		for _, tc := range resp.Message.ToolCalls {
			call, content := a.call(ctx, user, tc)
			res.Calls = append(res.Calls, call)
			msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: tc.ID, Content: content})
		}
	}
	if res.Answer == "" {
		return res, errors.New("the model gave no answer within its budget")
	}
	// The shared memory keeps the raw exchange, as a non-isolated system
	// does. Its provenance is not tracked: the isolated hub, should it read
	// this store, treats the answer as shaped by apps.
	if err := a.opts.Store.RecordTurn(ctx, user, query, store.AnswerPart{Content: res.Answer}); err != nil {
		return res, fmt.Errorf("failed to record turn: %w", err)
	}
	return res, nil
}

func (a *Agent) call(ctx context.Context, user string, tc llm.ToolCall) (Call, string) {
	appName, fn, _ := apps.SplitToolName(tc.Name)
	call := Call{App: appName, Function: fn, Args: json.RawMessage(tc.Arguments)}
	fail := func(err error) (Call, string) {
		call.Error = err.Error()
		return call, "Error: " + err.Error()
	}
	if !json.Valid(call.Args) {
		call.Args = nil
		return fail(errors.New("arguments are not valid JSON"))
	}
	app, ok := a.apps[appName]
	if !ok {
		return fail(fmt.Errorf("no tool %q", tc.Name))
	}
	f, ok := app.Spec().Function(fn)
	if !ok {
		return fail(fmt.Errorf("no tool %q", tc.Name))
	}
	if err := apps.ValidateDocument(f.Request, call.Args); err != nil {
		return fail(fmt.Errorf("invalid arguments: %w", err))
	}
	out, err := app.Call(ctx, env{data: storeData{st: a.opts.Store, user: user, app: appName}, log: a.opts.Log}, fn, call.Args)
	if err != nil {
		return fail(err)
	}
	call.Result = out
	return call, string(out)
}

// env gives in-process apps direct access to their data: no broker.
type env struct {
	data storeData
	log  zerolog.Logger
}

var _ apps.Env = env{}

func (e env) Data() apps.DataStore { return e.data }

// HTTP refuses every request: the baseline needs no network and must not
// become a way around the egress broker.
func (e env) HTTP() *http.Client {
	return &http.Client{Transport: refuseTransport{}}
}

func (e env) Log() *zerolog.Logger { return &e.log }

type refuseTransport struct{}

func (refuseTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("the baseline has no network")
}

// storeData is an app's per-user documents, straight from the store.
type storeData struct {
	st        *store.Store
	user, app string
}

var _ apps.DataStore = storeData{}

func mapNotFound(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return apps.ErrNotFound
	}
	return err
}

func (d storeData) Get(ctx context.Context, collection, id string) (json.RawMessage, error) {
	b, err := d.st.GetDoc(ctx, d.user, d.app, collection, id)
	return b, mapNotFound(err)
}

func (d storeData) Put(ctx context.Context, collection, id string, body json.RawMessage) error {
	return d.st.PutDoc(ctx, d.user, d.app, collection, id, body)
}

func (d storeData) Delete(ctx context.Context, collection, id string) error {
	return mapNotFound(d.st.DeleteDoc(ctx, d.user, d.app, collection, id))
}

func (d storeData) List(ctx context.Context, collection string, limit int) ([]apps.Doc, error) {
	docs, err := d.st.ListDocs(ctx, d.user, d.app, collection, limit)
	if err != nil {
		return nil, err
	}
	out := make([]apps.Doc, len(docs))
	for i, doc := range docs {
		out[i] = apps.Doc{ID: doc.ID, Body: doc.Body, Updated: doc.Updated}
	}
	return out, nil
}
