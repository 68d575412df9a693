package spoke

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/reveal"
	"github.com/secgpt/secgpt/sandbox"
)

// Bounds on what an external app's server may send.
const (
	// maxMCPMessage bounds one JSON-RPC message from the server, so a result
	// over it, or a flood without newlines, ends the session.
	maxMCPMessage = 1 << 20
	// MaxUntrustedText bounds the text result of a tool without an output
	// schema.
	MaxUntrustedText = 32 << 10
	// maxToolPages bounds the pages of tools/list.
	maxToolPages = 8
	// defaultCallTimeout bounds each MCP request unless the declaration
	// says otherwise.
	defaultCallTimeout = 60 * time.Second
	// stderrLine bounds one line of the server's stderr in the log, and
	// stderrLinesPerSecond their rate; stderrTail lines are kept for error
	// messages.
	stderrLine           = 1000
	stderrLinesPerSecond = 20
	stderrTail           = 3
)

// UntrustedTextField is the one field of the result of a tool without an
// output schema: the tool's text, bounded, as third-party data.
const UntrustedTextField = "untrusted_text"

// untrustedTextSchema is the response schema of such a tool, made on first
// use: only an external app's spoke needs it, and not at package init.
var untrustedTextSchema = sync.OnceValue(func() json.RawMessage {
	return json.RawMessage(fmt.Sprintf(
		`{"type":"object","properties":{%q:{"type":"string","maxLength":%d}},"required":[%q],"additionalProperties":false}`,
		UntrustedTextField, MaxUntrustedText, UntrustedTextField))
})

// externalApp is an external app inside its spoke: an MCP server started in
// its own sandbox, spoken to over its stdio with the official Go SDK. It
// implements apps.App, so that the spoke runs it like a built-in app.
type externalApp struct {
	decl   External
	server *serverProcess
	proxy  *egressProxy // nil without egress
	direct *transparent // nil without egress
	out    *stdoutFilter
	log    zerolog.Logger

	startOnce sync.Once
	startErr  error
	session   *mcp.ClientSession
	spec      apps.Spec
	tools     map[string]string // function name → MCP tool name
	typed     map[string]bool   // function has an output schema
	rt        *runtime

	stderrMu sync.Mutex
	tail     []string
	refused  []string // syscalls the sandbox refused the server, by name

	egressMu      sync.Mutex
	egressRefused []string // TLS connections egress refused during the call

	// callMu guards calling: the proxy forwards a request only while a
	// tool call is in progress, and a call ends only once every request it
	// caused has been answered, so no request outlives its step.
	callMu  sync.RWMutex
	calling bool

	failMu sync.Mutex
	failed error
}

var _ hostedApp = (*externalApp)(nil)

// prepareExternal does what an external app's spoke must do before it
// confines itself: read the app's environment from fd 4, bring up loopback
// and open the egress proxy (with egress), and start the server under its
// own sandbox. The spoke's own policy is policy; the server's is derived
// from it (serverPolicy).
func prepareExternal(declText string, policy sandbox.Policy, log zerolog.Logger) (*externalApp, error) {
	decl, err := decodeExternal(declText)
	if err != nil {
		return nil, err
	}
	env, err := readPrivate("the app's environment")
	if err != nil {
		return nil, err
	}
	e := &externalApp{decl: decl, log: log.With().Str("app", decl.Name).Logger()}
	if decl.CallTimeout <= 0 {
		e.decl.CallTimeout = defaultCallTimeout
	}
	// A home, XDG directories and a temporary directory in the scratch
	// directory, and the declaration's placeholders expanded (serverfiles.go).
	if e.decl, err = withScratch(e.decl, policy.Scratch); err != nil {
		return nil, err
	}
	if env, err = scratchVars(env, policy.Scratch); err != nil {
		return nil, err
	}
	var port uint16
	if decl.Egress && policy.Scratch == "" {
		return nil, fmt.Errorf("app %s declares egress but its spoke has no scratch directory for the proxy's CA", decl.Name)
	}
	if decl.Egress {
		if policy.Profile != sandbox.ProfileProxy {
			return nil, fmt.Errorf("app %s declares egress but its spoke's profile is %q, not %q", decl.Name, policy.Profile, sandbox.ProfileProxy)
		}
		nameservers := systemNameservers()
		if err := sandbox.UpLoopback(nameservers...); err != nil {
			return nil, err
		}
		if e.proxy, err = newEgressProxy(policy.Scratch, e.log.With().Str("component", "egress_proxy").Logger()); err != nil {
			return nil, err
		}
		e.proxy.forward = e.forward
		port = e.proxy.port()
		env = append(env, e.proxy.env()...)
		if own, why := sandbox.OwnNetworkNamespace(); own {
			if e.direct, err = openTransparent(nameservers, e.log.With().Str("component", "egress_transparent").Logger()); err != nil {
				return nil, err
			}
		} else {
			e.log.Warn().Str("why", why).Msg("No network namespace of its own (weaker sandbox allowed): the app reaches the network through its proxy only")
		}
		if err := sandbox.DropCapabilities(); err != nil {
			return nil, err
		}
	}
	if e.server, err = startServer(e.decl, serverPolicy(e.decl, policy, port), env); err != nil {
		return nil, err
	}
	e.out = newStdoutFilter(e.server.stdout, maxMCPMessage, func(line string) {
		e.log.Warn().Str("line", bounded(line, 200)).Msg("Skipped a line of the app server's stdout that is not a JSON-RPC message")
	})
	go e.logStderr()
	go e.serveListener()
	return e, nil
}

// attach gives the app its runtime, once the spoke is confined, and starts
// the proxy, which from then on only accepts connections.
func (e *externalApp) attach(rt *runtime) {
	e.rt = rt
	if e.proxy != nil {
		go e.proxy.serve()
		if e.direct != nil {
			go e.direct.serve(e.proxy, e.carry)
		}
	}
}

func (e *externalApp) Spec() apps.Spec { return e.spec }

// start initializes the MCP session and builds the app's spec from
// tools/list. A server that lists more than apps.MaxFunctions tools, or
// whose tools changed since discovery, is refused.
func (e *externalApp) start(ctx context.Context) error {
	e.startOnce.Do(func() {
		e.startErr = e.connect(ctx)
		if e.startErr != nil {
			e.fail(e.startErr)
		}
	})
	return e.startErr
}

func (e *externalApp) connect(ctx context.Context) error {
	client := mcp.NewClient(&mcp.Implementation{Name: "secgpt", Version: "1"}, &mcp.ClientOptions{
		// Nothing is offered to the server: no roots, no sampling (a model
		// the hub did not broker), no elicitation.
		Capabilities: &mcp.ClientCapabilities{},
		Logger:       slog.New(slog.DiscardHandler),
		// A server may report progress; it is noted, not shown.
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			e.log.Debug().Float64("progress", req.Params.Progress).Float64("total", req.Params.Total).Msg("App server progress")
		},
	})
	cctx, cancel := context.WithTimeout(ctx, e.decl.CallTimeout)
	defer cancel()
	// The SDK's own bound is a little looser than e.out's, so that e.out
	// sees, and can name, a message over the limit.
	session, err := client.Connect(cctx, &mcp.IOTransport{Reader: e.out, Writer: e.server.stdin, MaxLineLength: maxMCPMessage + 64<<10}, nil)
	if err != nil {
		return e.explain(cctx, "initialize", err)
	}
	e.session = session
	init := session.InitializeResult()
	var listed []*mcp.Tool
	cursor := ""
	for page := 0; ; page++ {
		if page == maxToolPages {
			return fmt.Errorf("the MCP server's tool list has more than %d pages", maxToolPages)
		}
		res, err := session.ListTools(cctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return e.explain(cctx, "tools/list", err)
		}
		listed = append(listed, res.Tools...)
		if len(listed) > apps.MaxFunctions {
			return fmt.Errorf("the MCP server lists more than %d tools (at least %d); an app may have at most %d functions", apps.MaxFunctions, len(listed), apps.MaxFunctions)
		}
		if res.NextCursor == "" {
			break
		}
		cursor = res.NextCursor
	}
	e.spec = apps.Spec{Name: e.decl.Name, Version: "unversioned", Profile: apps.ProfileExec, Description: e.decl.Description}
	if init != nil && init.ServerInfo != nil && init.ServerInfo.Version != "" {
		e.spec.Version = bounded(init.ServerInfo.Version, apps.MaxVersionLength)
	}
	if e.spec.Description == "" && init != nil {
		e.spec.Description = bounded(init.Instructions, apps.MaxDescription)
	}
	if e.spec.Description == "" {
		e.spec.Description = "An MCP server without a description."
	}
	e.tools, e.typed = map[string]string{}, map[string]bool{}
	for _, t := range listed {
		if e.out.requiresTask(t.Name) {
			e.log.Warn().Str("tool", bounded(t.Name, 100)).Msg("Skipped a tool that can only run as a task, which secgpt does not offer")
			continue
		}
		fn, err := toolFunction(t)
		if err != nil {
			e.log.Warn().Err(err).Str("tool", bounded(t.Name, 100)).Msg("Skipped a tool of the app")
			continue
		}
		if _, dup := e.tools[fn.Name]; dup {
			e.log.Warn().Str("tool", bounded(t.Name, 100)).Str("function", fn.Name).Msg("Skipped a tool whose name maps to another tool's function name")
			continue
		}
		e.tools[fn.Name] = t.Name
		e.typed[fn.Name] = t.OutputSchema != nil
		e.spec.Functions = append(e.spec.Functions, fn)
	}
	if len(e.spec.Functions) == 0 {
		return errors.New("the MCP server lists no usable tools")
	}
	if e.decl.Functions != "" && FunctionsDigest(e.spec.Functions) != e.decl.Functions {
		return errors.New("the MCP server's tools are not those it listed when secgpt started (names, descriptions or schemas changed); restart secgpt to review them")
	}
	e.log.Debug().Int("functions", len(e.spec.Functions)).Str("version", e.spec.Version).Msg("MCP server ready")
	return nil
}

// Call runs one tool. A tool error is the call's error; a failure of the
// server (death, silence, a message over the limit) also ends the spoke.
func (e *externalApp) Call(ctx context.Context, _ apps.Env, function string, args json.RawMessage) (json.RawMessage, error) {
	tool, ok := e.tools[function]
	if !ok {
		return nil, fmt.Errorf("no function %q", function)
	}
	if err := e.failure(); err != nil {
		return nil, err
	}
	e.callMu.Lock()
	e.calling = true
	e.callMu.Unlock()
	e.takeRefusals() // those of an earlier call, or of none
	defer func() {
		// Waits for the proxy's requests in flight.
		e.callMu.Lock()
		e.calling = false
		e.callMu.Unlock()
	}()
	cctx, cancel := context.WithTimeout(ctx, e.decl.CallTimeout)
	defer cancel()
	res, err := e.session.CallTool(cctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		err = e.explain(cctx, "tools/call "+bounded(tool, 64), err)
		e.fail(err)
		return nil, err
	}
	out, err := MCPResult(res, e.typed[function])
	return out, e.withRefusals(err)
}

// forward is the proxy's way to the broker: only during a tool call.
func (e *externalApp) forward(req *http.Request) (*http.Response, error) {
	e.callMu.RLock()
	defer e.callMu.RUnlock()
	if !e.calling || e.rt == nil {
		return nil, errNoCall
	}
	return brokerTransport{rt: e.rt}.RoundTrip(req)
}

// errNoCall refuses a request the server makes outside a tool call: no
// step is in progress to account it to.
var errNoCall = errors.New("no tool call is in progress; the app may use the network only while it runs one")

func (e *externalApp) fail(err error) {
	e.failMu.Lock()
	defer e.failMu.Unlock()
	if e.failed == nil {
		e.failed = err
		e.log.Error().Err(err).Msg("The app's MCP server failed; ending the spoke")
	}
}

func (e *externalApp) failure() error {
	e.failMu.Lock()
	defer e.failMu.Unlock()
	return e.failed
}

// explain says in words why an MCP request to the server failed.
func (e *externalApp) explain(ctx context.Context, what string, err error) error {
	switch {
	case e.out.over():
		return fmt.Errorf("the MCP server sent a message over the %d-byte limit during %s", maxMCPMessage, what)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return e.diagnose(what, fmt.Sprintf("did not answer within %s%s", e.decl.CallTimeout, e.out.skippedLines()))
	case errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return e.diagnose(what, "exited or closed its output")
	default:
		return e.diagnose(what, "failed: "+bounded(err.Error(), 300))
	}
}

// logStderr logs the server's stderr, bounded and rate-limited, and keeps
// its last lines.
func (e *externalApp) logStderr() {
	r := bufio.NewReaderSize(e.server.stderr, stderrLine)
	window, count, dropped := time.Now(), 0, 0
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 {
			// What the server wrote is data: shown, never interpreted, in
			// the log and in the error messages that quote it.
			text := reveal.Line(strings.TrimRight(string(line), "\r\n"))
			if errors.Is(err, bufio.ErrBufferFull) {
				text += "…"
				// Skip the rest of the over-long line.
				for errors.Is(err, bufio.ErrBufferFull) {
					_, err = r.ReadSlice('\n')
				}
			}
			if !strings.HasPrefix(text, launchBanner) {
				e.stderrMu.Lock()
				e.tail = append(e.tail, bounded(text, 200))
				if len(e.tail) > stderrTail {
					e.tail = e.tail[1:]
				}
				e.stderrMu.Unlock()
			}
			if now := time.Now(); now.Sub(window) > time.Second {
				if dropped > 0 {
					e.log.Warn().Int("dropped", dropped).Msg("Dropped app server stderr lines over the rate limit")
				}
				window, count, dropped = now, 0, 0
			}
			if count++; count <= stderrLinesPerSecond {
				e.log.Info().Str("app_stderr", text).Msg("App server stderr")
			} else {
				dropped++
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// toolNameChars are what a function name keeps of a tool's name.
var toolNameChars = regexp.MustCompile(`[^a-z0-9]+`)

// functionName maps an MCP tool's name to a function name (see
// apps.ValidName): lower case, runs of other characters as one underscore,
// starting with a letter, at most 32 characters.
func functionName(tool string) string {
	s := strings.Trim(toolNameChars.ReplaceAllString(strings.ToLower(tool), "_"), "_")
	if s != "" && (s[0] < 'a' || s[0] > 'z') {
		s = "t_" + s
	}
	if len(s) > 32 {
		s = strings.TrimRight(s[:32], "_")
	}
	return s
}

// toolFunction turns an MCP tool into a function: its input schema is the
// request schema; its output schema, when it declares one, the response
// schema, and otherwise the response is bounded untrusted text.
func toolFunction(t *mcp.Tool) (apps.Function, error) {
	name := functionName(t.Name)
	if !apps.ValidName(name) {
		return apps.Function{}, fmt.Errorf("tool name %q maps to no valid function name", bounded(t.Name, 64))
	}
	fn := apps.Function{Name: name, Description: bounded(t.Description, apps.MaxDescription), Response: untrustedTextSchema()}
	req, err := toolSchema("input", t.InputSchema)
	if err != nil {
		return apps.Function{}, err
	}
	var obj struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(req, &obj) != nil || obj.Type != "object" {
		return apps.Function{}, errors.New("its input schema is not an object schema")
	}
	fn.Request = req
	if t.OutputSchema != nil {
		if fn.Response, err = toolSchema("output", t.OutputSchema); err != nil {
			return apps.Function{}, err
		}
	}
	if a := t.Annotations; a != nil && !a.ReadOnlyHint && a.DestructiveHint != nil && *a.DestructiveHint {
		// A hint from untrusted text may only make the hub stricter.
		fn.Irreversible = true
	}
	return fn, nil
}

func toolSchema(what string, schema any) (json.RawMessage, error) {
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("its %s schema cannot be encoded: %w", what, err)
	}
	if len(b) > apps.MaxSchemaBytes {
		return nil, fmt.Errorf("its %s schema is %d bytes, over the %d-byte limit", what, len(b), apps.MaxSchemaBytes)
	}
	if err := apps.CheckSchema(b); err != nil {
		return nil, fmt.Errorf("its %s schema is not usable: %w", what, err)
	}
	return b, nil
}

// bounded cuts s to at most n bytes, on a rune boundary.
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
