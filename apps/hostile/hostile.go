// Package hostile is an app that attacks its own sandbox: each function
// makes one attempt to escape (read a secret file, open a socket, fork,
// ptrace the hub, exhaust a resource, misuse the egress broker) and
// reports what happened, so that `secgpt sandbox-check` and the sandbox
// tests can show that every attempt is blocked.
//
// It owns nothing but the attempts. It is not in apps/all and registers
// itself only when Register is called, which only the sandbox check and
// tests do: it must never be installable by a user's configuration. Its
// reports are its own claims; the harness that runs it (package
// sandboxcheck) checks each one from outside as well. Like every app it
// imports nothing of secgpt's but the app SDK, and takes every target as an
// argument, because only the hub knows where they are.
package hostile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/secgpt/secgpt/apps"
)

// Name is the app's name.
const Name = "hostile"

// EgressDomain is the one registrable domain the app declares for the
// egress broker: example.com, reserved for documentation (RFC 2606) yet
// under an ICANN top-level domain, as the broker requires of a declared
// domain. The sandbox check answers for it with a simulated resolver.
const EgressDomain = "example.com"

// The functions, one attempt each. Their names are single words so that a
// planner choosing a function by the words of a query cannot confuse them.
const (
	// ReadFile opens Path and reads from it.
	ReadFile = "readfile"
	// WriteFile appends a line to Path, creating it if needed.
	WriteFile = "writefile"
	// DialTCP connects to Address over TCP.
	DialTCP = "dialtcp"
	// DialUDP sends a datagram to Address.
	DialUDP = "dialudp"
	// DialUnix connects to the unix socket at Path.
	DialUnix = "dialunix"
	// Resolve looks Host up by itself, without the hub.
	Resolve = "resolve"
	// ForkBomb creates processes (clone without CLONE_THREAD), up to 100.
	ForkBomb = "forkbomb"
	// Execute replaces the spoke with Program, which would write Marker.
	Execute = "execute"
	// Ptrace attaches to process PID.
	Ptrace = "ptrace"
	// Allocate maps Bytes of anonymous memory.
	Allocate = "allocate"
	// Spin burns CPU and never returns.
	Spin = "spin"
	// BigFile writes Bytes of data to Path.
	BigFile = "bigfile"
	// ManyFiles opens the directory Path Count times.
	ManyFiles = "manyfiles"
	// FillDisk writes up to Count files of 1 MiB in the directory Path,
	// until a write is refused: a disk fill.
	FillDisk = "filldisk"
	// Flood writes Frames request frames straight onto the ISC channel
	// (fd 3), as fast as it can, bypassing the spoke runtime, and drains
	// the replies.
	Flood = "flood"
	// Stall writes Frames request frames onto fd 3 and never reads a
	// reply.
	Stall = "stall"
	// Fetch gets URL through the hub's egress broker.
	Fetch = "fetch"
	// Grind writes Frames model requests of Bytes each straight onto the
	// ISC channel, as fast as the hub takes them, draining the replies: a
	// prompt over the hub's limit is refused, but only after the hub has
	// read it.
	Grind = "grind"
	// Burn makes Count model calls with a prompt of Bytes each, one after
	// another, straight on the ISC channel, until one is refused.
	Burn = "burn"
	// Fill stores Count documents of Bytes each in the app's own data until
	// the hub refuses one.
	Fill = "fill"

	// The attacks on what users share (issue 11):

	// Stat reads the size and times of Path without opening it, a covert
	// channel where only opening is refused.
	Stat = "stat"
	// Hog maps and touches anonymous memory in 8 MiB steps, up to Bytes,
	// and holds it.
	Hog = "hog"
	// Threads starts threads until refused, up to Count.
	Threads = "threads"
	// DiskFill writes Count files of Bytes in all under the directory
	// Path.
	DiskFill = "diskfill"
)

// Outcome is what an attempt came to.
type Outcome string

const (
	// Blocked: the attempt failed with an error a protection gives (for
	// example EACCES from Landlock, EPERM from seccomp, EMFILE from a limit,
	// a refusal from the egress broker).
	Blocked Outcome = "blocked"
	// Succeeded: the attempt did what it meant to.
	Succeeded Outcome = "succeeded"
	// Failed: the attempt failed for another reason, which proves nothing
	// about the sandbox (a missing file, an unreachable network).
	Failed Outcome = "error"
)

// Result is every function's response.
type Result struct {
	// Attack names the function and its target.
	Attack string `json:"attack"`
	// Outcome is blocked, succeeded or error.
	Outcome Outcome `json:"outcome"`
	// Detail is the error seen, with its errno name, or what succeeded.
	Detail string `json:"detail"`
}

// Limits on arguments and results.
const (
	maxArg    = 4096
	maxDetail = 2000
)

const resultSchema = `{
  "type": "object",
  "properties": {
    "attack": {"type": "string", "maxLength": 4200},
    "outcome": {"type": "string", "enum": ["blocked", "succeeded", "error"]},
    "detail": {"type": "string", "maxLength": 2000}
  },
  "required": ["attack", "outcome", "detail"],
  "additionalProperties": false
}`

// argument is one property of a function's request.
type argument struct {
	name, typ, description string
}

func str(name, description string) argument { return argument{name, "string", description} }
func num(name, description string) argument { return argument{name, "integer", description} }

// function is one attempt: its arguments (all required) and the code.
type function struct {
	name, description string
	args              []argument
	run               func(ctx context.Context, env apps.Env, in input) Result
}

// functions are the app's functions, in declaration order.
var functions = []function{
	{ReadFile, "Open a file and read from it.", []argument{str("path", "File to read.")},
		func(_ context.Context, _ apps.Env, in input) Result { return readFile(in.Path) }},
	{WriteFile, "Append a line to a file, creating it.", []argument{str("path", "File to write.")},
		func(_ context.Context, _ apps.Env, in input) Result { return writeFile(in.Path) }},
	{DialTCP, "Connect to a TCP address.", []argument{str("address", "host:port")},
		func(ctx context.Context, _ apps.Env, in input) Result { return dial(ctx, "tcp", in.Address) }},
	{DialUDP, "Send a UDP datagram.", []argument{str("address", "host:port")},
		func(ctx context.Context, _ apps.Env, in input) Result { return dial(ctx, "udp", in.Address) }},
	{DialUnix, "Connect to a unix socket by path.", []argument{str("path", "Socket path.")},
		func(ctx context.Context, _ apps.Env, in input) Result { return dial(ctx, "unix", in.Path) }},
	{Resolve, "Resolve a host name without the hub.", []argument{str("host", "Name to resolve.")},
		func(ctx context.Context, _ apps.Env, in input) Result { return resolve(ctx, in.Host) }},
	{ForkBomb, "Create processes until refused (at most 100).", nil,
		func(context.Context, apps.Env, input) Result { return forkBomb() }},
	{Execute, "Execute a program in place of the spoke.",
		[]argument{str("program", "Shell to execute."), str("marker", "File the shell would create.")},
		func(_ context.Context, _ apps.Env, in input) Result { return execute(in.Program, in.Marker) }},
	{Ptrace, "Attach to a process with ptrace.", []argument{num("pid", "Process to attach to.")},
		func(_ context.Context, _ apps.Env, in input) Result { return ptrace(in.PID) }},
	{Allocate, "Map anonymous memory.", []argument{num("bytes", "How much.")},
		func(_ context.Context, _ apps.Env, in input) Result { return allocate(in.Bytes) }},
	{Spin, "Burn CPU forever.", nil,
		func(context.Context, apps.Env, input) Result { spin(); return Result{} }},
	{BigFile, "Write a large file.", []argument{str("path", "File to write."), num("bytes", "How much.")},
		func(_ context.Context, _ apps.Env, in input) Result { return bigFile(in.Path, in.Bytes) }},
	{ManyFiles, "Open a directory many times at once.", []argument{str("path", "Directory to open."), num("count", "How many times.")},
		func(_ context.Context, _ apps.Env, in input) Result { return manyFiles(in.Path, in.Count) }},
	{FillDisk, "Write 1 MiB files in a directory until refused.", []argument{str("path", "Directory to fill."), num("count", "At most how many files.")},
		func(_ context.Context, _ apps.Env, in input) Result { return fillDisk(in.Path, in.Count) }},
	{Flood, "Send request frames to the hub as fast as possible.", []argument{num("frames", "How many.")},
		func(_ context.Context, _ apps.Env, in input) Result { return flood(in.Frames) }},
	{Stall, "Send request frames to the hub and never read its replies.", []argument{num("frames", "How many.")},
		func(_ context.Context, _ apps.Env, in input) Result { return stall(in.Frames) }},
	{Fetch, "Get a URL through the egress broker.", []argument{str("url", "URL to get.")},
		func(ctx context.Context, env apps.Env, in input) Result { return fetch(ctx, env, in.URL) }},
	{Grind, "Send large model requests to the hub as fast as it reads them.", []argument{num("frames", "How many."), num("bytes", "Size of each.")},
		func(_ context.Context, _ apps.Env, in input) Result { return grind(in.Frames, in.Bytes) }},
	{Burn, "Make model calls with large prompts until refused.", []argument{num("count", "How many."), num("bytes", "Prompt size.")},
		func(_ context.Context, _ apps.Env, in input) Result { return burnTokens(in.Count, in.Bytes) }},
	{Fill, "Store documents in the app's data until refused.", []argument{num("count", "How many."), num("bytes", "Size of each.")},
		func(ctx context.Context, env apps.Env, in input) Result { return fill(ctx, env, in.Count, in.Bytes) }},
	{Stat, "Read a file's size and times without opening it.", []argument{str("path", "File to stat.")},
		func(_ context.Context, _ apps.Env, in input) Result { return statFile(in.Path) }},
	{Hog, "Hold as much memory as possible.", []argument{num("bytes", "How much at most.")},
		func(_ context.Context, _ apps.Env, in input) Result { return hog(in.Bytes) }},
	{Threads, "Start threads until refused.", []argument{num("count", "How many at most.")},
		func(_ context.Context, _ apps.Env, in input) Result { return threads(in.Count) }},
	{DiskFill, "Fill the disk with files.", []argument{str("path", "Directory to fill."), num("bytes", "How much in all."), num("count", "How many files.")},
		func(_ context.Context, _ apps.Env, in input) Result { return diskFill(in.Path, in.Bytes, in.Count) }},
}

func requestSchema(args []argument) json.RawMessage {
	props := map[string]any{}
	required := []string{}
	for _, a := range args {
		p := map[string]any{"type": a.typ, "description": a.description}
		if a.typ == "string" {
			p["minLength"], p["maxLength"] = 1, maxArg
		} else {
			p["minimum"], p["maximum"] = 0, int64(1)<<40
		}
		props[a.name] = p
		required = append(required, a.name)
	}
	// Marshal cannot fail on maps of strings and numbers.
	b, _ := json.Marshal(map[string]any{
		"type": "object", "properties": props, "required": required, "additionalProperties": false,
	})
	return b
}

// app is the hostile app.
type app struct{ spec apps.Spec }

var _ apps.App = (*app)(nil)

func newApp() *app {
	spec := apps.Spec{
		Name:    Name,
		Version: "1.0.0",
		Description: "hostile attacks its own sandbox, one attempt per function, for secgpt sandbox-check. " +
			"It must never be installed for a user.",
		Egress:  []string{EgressDomain},
		Profile: apps.ProfileStrict,
	}
	for _, f := range functions {
		spec.Functions = append(spec.Functions, apps.Function{
			Name: f.name, Description: f.description,
			Request: requestSchema(f.args), Response: json.RawMessage(resultSchema),
		})
	}
	return &app{spec: spec}
}

var register sync.Once

// Register adds the hostile app to the built-in registry, once. Only the
// sandbox check and tests call it, in the hub and in the spoke binary. Its
// spec is made when it is first looked up: every spoke process registers
// it, and only the sandbox check's spokes host it.
func Register() {
	register.Do(func() { apps.RegisterLazy(Name, func() apps.App { return newApp() }) })
}

func (a *app) Spec() apps.Spec { return a.spec }

// input is the union of all functions' arguments.
type input struct {
	Path    string `json:"path"`
	Address string `json:"address"`
	Host    string `json:"host"`
	Program string `json:"program"`
	Marker  string `json:"marker"`
	URL     string `json:"url"`
	PID     int    `json:"pid"`
	Bytes   int64  `json:"bytes"`
	Count   int    `json:"count"`
	Frames  int    `json:"frames"`
}

// Call makes one attempt and reports it. It returns an error only for a
// call it cannot understand; a failed attempt is a result.
func (a *app) Call(ctx context.Context, env apps.Env, name string, raw json.RawMessage) (json.RawMessage, error) {
	i := slices.IndexFunc(functions, func(f function) bool { return f.name == name })
	if i < 0 {
		return nil, fmt.Errorf("hostile has no function %q", name)
	}
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("failed to decode arguments: %w", err)
	}
	r := functions[i].run(ctx, env, in)
	r.Detail = cut(r.Detail, maxDetail)
	env.Log().Info().Str("attack", r.Attack).Str("outcome", string(r.Outcome)).Str("detail", r.Detail).Msg("Hostile attempt")
	return json.Marshal(r)
}

// judge turns an attempt's error into a Result: nil is success, an errno
// in blockedBy is blocked, anything else is a failure that proves nothing.
func judge(attack string, err error, success string, blockedBy ...unix.Errno) Result {
	if err == nil {
		return Result{Attack: attack, Outcome: Succeeded, Detail: success}
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		detail := fmt.Sprintf("%v (%s)", err, unix.ErrnoName(errno))
		for _, b := range blockedBy {
			if errno == b {
				return Result{Attack: attack, Outcome: Blocked, Detail: detail}
			}
		}
		return Result{Attack: attack, Outcome: Failed, Detail: detail}
	}
	return Result{Attack: attack, Outcome: Failed, Detail: err.Error()}
}

// fetch asks the egress broker; any refusal comes back as an error.
func fetch(ctx context.Context, env apps.Env, url string) Result {
	attack := Fetch + " " + url
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Result{Attack: attack, Outcome: Failed, Detail: err.Error()}
	}
	resp, err := env.HTTP().Do(req)
	if err != nil {
		// Only the hub answers HTTP: an error is its refusal.
		return Result{Attack: attack, Outcome: Blocked, Detail: err.Error()}
	}
	defer resp.Body.Close()
	body := make([]byte, 64)
	n, _ := resp.Body.Read(body)
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("status %d, body %q", resp.StatusCode, body[:n])}
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
