package spoke

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/secgpt/secgpt/apps"
)

// External is an external app's declaration as its spoke needs it: the MCP
// server to start and what it may read. It crosses to the spoke on argv,
// which every process on the machine can read, so it holds no secret: the
// app's environment, secrets included, crosses on fd 4 (see
// ExternalLaunch).
type External struct {
	// Name is the app's name.
	Name string `json:"name"`
	// Command is the absolute path of the server's ELF executable (an
	// interpreter, for a script).
	Command string `json:"command"`
	// Args are the server's arguments. Those naming an existing regular
	// file by absolute path (scripts) become readable to it.
	Args []string `json:"args,omitempty"`
	// Dir is the server's working directory, readable to it; "" means the
	// spoke's scratch directory.
	Dir string `json:"dir,omitempty"`
	// ReadOnly are further absolute paths the server may read.
	ReadOnly []string `json:"read_only,omitempty"`
	// ReadWrite are further absolute paths the server may read and write.
	// Here and in Args, Dir and ReadOnly, a leading ScratchPlaceholder
	// stands for the (user, app)'s scratch directory.
	ReadWrite []string `json:"read_write,omitempty"`
	// Description, when set, replaces the server's instructions as the
	// app's description.
	Description string `json:"description,omitempty"`
	// Egress says the app declared egress domains: its spoke runs an egress
	// proxy, and the hub's broker decides which domains it reaches.
	Egress bool `json:"egress,omitempty"`
	// Functions, when set, is the FunctionsDigest of the functions found at
	// discovery: a server whose tools have changed since is refused.
	Functions string `json:"functions,omitempty"`
	// CallTimeout bounds each MCP request to the server; default 60 s.
	CallTimeout time.Duration `json:"call_timeout,omitempty"`
}

// ExternalArg is the flag that gives a spoke its External declaration.
const ExternalArg = "--external"

// maxPrivate bounds what a spoke reads on fd 4: an external app's
// environment, or a spare's launch arguments. It is written into a pipe in
// one write, so it must fit the pipe's buffer (64 KiB on Linux).
const maxPrivate = 32 << 10

// privateFD is the pipe on which a spoke reads, before it confines itself,
// its external app's environment or, for a spare, its launch arguments.
const privateFD = 4

// ExternalLaunch returns what the spoke of an external app gets beyond the
// common arguments (see Options.Extra): its declaration as arguments, and
// the app's whole environment (variables, secrets included) as the private
// bytes the spoke reads on fd 4 before it confines itself.
func ExternalLaunch(e External, env map[string]string) (args []string, private []byte, err error) {
	decl, err := json.Marshal(e)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to encode external app declaration: %w", err)
	}
	vars := make([]string, 0, len(env))
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
			return nil, nil, fmt.Errorf("invalid environment variable %q for app %s", k, e.Name)
		}
		vars = append(vars, k+"="+v)
	}
	slices.Sort(vars)
	private, err = json.Marshal(vars)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to encode environment of app %s: %w", e.Name, err)
	}
	if len(private) > maxPrivate {
		return nil, nil, fmt.Errorf("the environment of app %s is %d bytes, over the %d-byte limit", e.Name, len(private), maxPrivate)
	}
	return []string{ExternalArg, string(decl)}, private, nil
}

// decodeExternal strictly parses the declaration from argv.
func decodeExternal(s string) (External, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var e External
	if err := dec.Decode(&e); err != nil {
		return External{}, fmt.Errorf("failed to decode external app declaration: %w", err)
	}
	if !apps.ValidName(e.Name) || !strings.HasPrefix(e.Command, "/") {
		return External{}, errors.New("invalid external app declaration: needs a name and an absolute command")
	}
	return e, nil
}

// readPrivate reads a list of strings (what, for errors) from fd 4 and
// closes it.
func readPrivate(what string) ([]string, error) {
	f := os.NewFile(privateFD, "private")
	if f == nil {
		return nil, fmt.Errorf("no pipe on fd 4 for %s", what)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPrivate+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", what, err)
	}
	if len(b) > maxPrivate {
		return nil, fmt.Errorf("%s is over the %d-byte limit", what, maxPrivate)
	}
	var list []string
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&list); err != nil {
		return nil, fmt.Errorf("failed to decode %s: %w", what, err)
	}
	return list, nil
}

// FunctionsDigest identifies an app's functions (names, descriptions,
// schemas), so that a spoke can refuse a server whose tools changed after
// the user saw them.
func FunctionsDigest(fns []apps.Function) string {
	b, err := json.Marshal(fns)
	if err != nil {
		// Functions are plain data with valid RawMessage schemas.
		b = []byte(fmt.Sprintf("%#v", fns))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// discoverySession is the session of every discovery spoke.
const discoverySession = "discovery"

// DiscoveryKey is the key of the spoke that describes app at start. Its
// user is "", which no request can have: the hub refuses a query without a
// user, so no user's data, memory or grants can reach this spoke, and
// Describe's handler refuses everything it asks.
func DiscoveryKey(app string) Key { return Key{App: app, Session: discoverySession} }

// IsDiscovery reports whether k is a discovery spoke's key.
func IsDiscovery(k Key) bool { return k.User == "" && k.Session == discoverySession }

// Describe starts app's discovery spoke on m, asks it for the app's spec
// (an external app's spoke starts its server and lists its tools) and
// returns it unchecked: the caller completes and validates it. The spoke
// is served by a handler that refuses every request.
func Describe(ctx context.Context, m *Manager, app string) (apps.Spec, error) {
	res, _, err := m.Run(ctx, DiscoveryKey(app), Step{ID: "describe", Describe: true}, refuseAll{})
	if err != nil {
		return apps.Spec{}, err
	}
	if res.Diagnosis != nil {
		return apps.Spec{}, fmt.Errorf("%s: %w", app, res.Diagnosis)
	}
	if res.Error != "" {
		return apps.Spec{}, fmt.Errorf("%s: %s", app, res.Error)
	}
	var spec apps.Spec
	if err := DecodeBody(res.Output, &spec); err != nil {
		return apps.Spec{}, fmt.Errorf("%s: the spoke's description is malformed: %w", app, err)
	}
	if spec.Name != app {
		return apps.Spec{}, fmt.Errorf("%s: the spoke described an app named %q", app, spec.Name)
	}
	return spec, nil
}

// refuseAll serves a discovery spoke: no model, no other app, no network,
// no memory, no data.
type refuseAll struct{}

var _ Handler = refuseAll{}

var errDiscovery = errors.New("not available while an app is being discovered")

func (refuseAll) Complete(context.Context, LLMRequest) (LLMReply, error) {
	return LLMReply{}, errDiscovery
}
func (refuseAll) Probe(context.Context, Probe) (ProbeReply, error) { return ProbeReply{}, errDiscovery }
func (refuseAll) CallApp(context.Context, AppCall) (AppCallReply, error) {
	return AppCallReply{}, errDiscovery
}
func (refuseAll) HTTP(context.Context, HTTPRequest) (HTTPResponse, error) {
	return HTTPResponse{}, errDiscovery
}
func (refuseAll) AppendMemory(context.Context, MemoryAppend) error { return errDiscovery }
func (refuseAll) Data(context.Context, DataOp) (DataReply, error)  { return DataReply{}, errDiscovery }

// hostedApp is an app whose code runs outside the spoke's own process (an
// external app's MCP server): it starts before its first step, and once it
// has failed the spoke reports why and ends.
type hostedApp interface {
	apps.App
	// start starts talking to the app; it is idempotent.
	start(ctx context.Context) error
	// failure is non-nil once the app can no longer be used.
	failure() error
}

// handleStep runs one step: a description of the hosted app, or a step of
// its work. fatal says the hosted app failed and the spoke must end once
// it has reported why.
func (rt *runtime) handleStep(ctx context.Context, step Step) (res Result, fatal bool) {
	hosted, isHosted := rt.app.(hostedApp)
	if isHosted {
		if err := hosted.start(ctx); err != nil {
			return failedResult(err, nil), true
		}
	}
	if step.Describe {
		if rt.app == nil {
			return Result{Error: "a vanilla spoke hosts no app to describe"}, false
		}
		b, err := json.Marshal(rt.app.Spec())
		if err != nil {
			return Result{Error: "failed to encode the app's spec"}, false
		}
		return Result{Output: b}, false
	}
	res = rt.runStep(ctx, step)
	if isHosted {
		if err := hosted.failure(); err != nil {
			// The hub reports the app's failure, not an answer written
			// around it.
			return failedResult(err, res.Calls), true
		}
	}
	return res, false
}

// failedResult reports a hosted app's failure, with its diagnosis when
// there is one.
func failedResult(err error, calls []CallLog) Result {
	res := Result{Error: err.Error(), Calls: calls}
	var d *Diagnosis
	if errors.As(err, &d) {
		res.Diagnosis = d
	}
	return res
}
