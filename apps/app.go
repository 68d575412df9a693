// Package apps is the app SDK: what an app declares (its Spec), what it may
// reach while it runs (its Env), and the registry of built-in apps.
//
// An app is untrusted: its code, its description and its outputs. The SDK
// therefore gives an app nothing but what its Env brokers through the hub: its
// own per-user data, HTTP through the hub's egress broker, and a logger. This
// package must never import the hub, the store or the spoke runtime, and must
// never hold a secret.
package apps

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Profile names a sandbox profile an app runs under.
type Profile string

const (
	// ProfileStrict is for built-in Go apps: no exec, no network of its own.
	ProfileStrict Profile = "strict"
	// ProfileExec is for external apps that must start one declared command.
	ProfileExec Profile = "exec"
)

// AnnotationFunction is the one function every annotation app has: it
// answers the user's query under the app's annotation text.
const AnnotationFunction = "respond"

// Spec is everything an app declares about itself. All text in it is
// third-party text: only the app's own spoke's model reads it; the
// planner sees the app's identifiers and typed signatures only.
type Spec struct {
	// Name is the app's unique name: lower-case letters, digits and
	// underscores, starting with a letter (see ValidName).
	Name string `json:"name"`
	// Version is the vendor's version string. Grants are bound to Hash, which
	// covers the version and everything else in the spec.
	Version string `json:"version"`
	// Description says what the app does. Untrusted.
	Description string `json:"description"`
	// Annotation, for annotation apps only, is the text that alters the
	// answering model's behaviour inside the app's own spoke. Untrusted.
	Annotation string `json:"annotation,omitempty"`
	// Functions are the app's callable functions, each with typed request and
	// response JSON schemas. Annotation apps have exactly one, named
	// AnnotationFunction.
	Functions []Function `json:"functions"`
	// Egress lists the registrable domains (eTLD+1) the app may reach through
	// the hub's egress broker. Empty means no network at all.
	Egress []string `json:"egress,omitempty"`
	// Profile is the sandbox profile the app's spoke runs under.
	Profile Profile `json:"profile"`
	// Identity, when set, is extra material that identifies the app's code
	// (for external apps: a hash of the executable and its declaration). It
	// enters Hash so that a changed app asks for consent again.
	Identity string `json:"identity,omitempty"`
}

// Function is one callable function of an app.
type Function struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Request is the JSON schema of the arguments (an object schema).
	Request json.RawMessage `json:"request"`
	// Response is the JSON schema of the result. Built-in apps use typed
	// schemas (numbers, enums, bounded strings) so that free text cannot ride
	// along with a result that crosses to another app.
	Response json.RawMessage `json:"response"`
	// Irreversible marks a function whose effect cannot be undone (sending,
	// deleting, booking, paying). The user is asked every time it runs: no
	// stored grant covers it.
	Irreversible bool `json:"irreversible,omitempty"`
}

// IsAnnotation reports whether the app is an annotation app.
func (s Spec) IsAnnotation() bool { return s.Annotation != "" }

// Function returns the named function.
func (s Spec) Function(name string) (Function, bool) {
	for _, f := range s.Functions {
		if f.Name == name {
			return f, true
		}
	}
	return Function{}, false
}

// Hash identifies this exact spec: grants name it, so any change to the app
// (version, text, schemas, egress, profile, code identity) asks again.
func (s Spec) Hash() string {
	b, err := json.Marshal(s)
	if err != nil {
		// A Spec is plain data; Marshal cannot fail on it except for invalid
		// RawMessage schemas, which Validate rejects before an app is used.
		b = []byte(fmt.Sprintf("%#v", s))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// validIdent reports whether s matches ^[a-z][a-z0-9_]{0,31}$, the form of
// app and function names. It is written out rather than a regexp: compiling
// one at package init cost every spoke process about 380 allocations.
func validIdent(s string) bool {
	if len(s) == 0 || len(s) > 32 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// ValidName reports whether name is a valid app or function name. Names
// never contain a double underscore, which separates app and function in
// tool names (see ToolName).
func ValidName(name string) bool {
	return validIdent(name) && !containsDoubleUnderscore(name)
}

func containsDoubleUnderscore(s string) bool {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '_' && s[i+1] == '_' {
			return true
		}
	}
	return false
}

// ToolName is the name under which a model sees an app's function.
func ToolName(app, function string) string { return app + "__" + function }

// SplitToolName is the inverse of ToolName.
func SplitToolName(tool string) (app, function string, ok bool) {
	for i := 0; i+1 < len(tool); i++ {
		if tool[i] == '_' && tool[i+1] == '_' {
			app, function = tool[:i], tool[i+2:]
			return app, function, ValidName(app) && validIdent(function)
		}
	}
	return "", "", false
}

// Limits on what a spec may declare, so a hostile app cannot flood a
// planner's context or the user's consent prompts.
const (
	MaxFunctions      = 32
	MaxDescription    = 2000
	MaxSchemaBytes    = 16 << 10
	MaxEgressDomains  = 16
	MaxVersionLength  = 64
	MaxAnnotationText = 4000
)

// ReservedNames are the names no app may take, each with the reason: the
// product speaks or keeps state under them, and an app so named would
// pass for it.
var ReservedNames = map[string]string{
	"secgpt":  "the product's own voice: the hub's notes and the front ends' replies are signed secgpt",
	"vanilla": "the no-app spoke's name: its scratch directory, audit subjects and records go by it",
}

// Validate checks that the spec is well formed. It does not judge the text.
func (s Spec) Validate() error {
	switch {
	case !ValidName(s.Name):
		return fmt.Errorf("invalid app name %q: use lower-case letters, digits and single underscores", s.Name)
	case ReservedNames[s.Name] != "":
		return fmt.Errorf("app name %q is reserved: %s", s.Name, ReservedNames[s.Name])
	case s.Version == "" || len(s.Version) > MaxVersionLength:
		return fmt.Errorf("app %s: version must be 1 to %d characters", s.Name, MaxVersionLength)
	case len(s.Description) > MaxDescription:
		return fmt.Errorf("app %s: description longer than %d bytes", s.Name, MaxDescription)
	case len(s.Annotation) > MaxAnnotationText:
		return fmt.Errorf("app %s: annotation longer than %d bytes", s.Name, MaxAnnotationText)
	case len(s.Functions) == 0 || len(s.Functions) > MaxFunctions:
		return fmt.Errorf("app %s: must declare 1 to %d functions", s.Name, MaxFunctions)
	case len(s.Egress) > MaxEgressDomains:
		return fmt.Errorf("app %s: more than %d egress domains", s.Name, MaxEgressDomains)
	case s.Profile != ProfileStrict && s.Profile != ProfileExec:
		return fmt.Errorf("app %s: unknown sandbox profile %q", s.Name, s.Profile)
	}
	if s.IsAnnotation() && (len(s.Functions) != 1 || s.Functions[0].Name != AnnotationFunction) {
		return fmt.Errorf("app %s: an annotation app has exactly one function, %q", s.Name, AnnotationFunction)
	}
	seen := map[string]bool{}
	for _, f := range s.Functions {
		if !validIdent(f.Name) || containsDoubleUnderscore(f.Name) {
			return fmt.Errorf("app %s: invalid function name %q", s.Name, f.Name)
		}
		if seen[f.Name] {
			return fmt.Errorf("app %s: function %q declared twice", s.Name, f.Name)
		}
		seen[f.Name] = true
		if len(f.Description) > MaxDescription {
			return fmt.Errorf("app %s: function %s: description longer than %d bytes", s.Name, f.Name, MaxDescription)
		}
		for what, schema := range map[string]json.RawMessage{"request": f.Request, "response": f.Response} {
			if len(schema) == 0 || len(schema) > MaxSchemaBytes || !json.Valid(schema) {
				return fmt.Errorf("app %s: function %s: %s schema must be valid JSON of at most %d bytes", s.Name, f.Name, what, MaxSchemaBytes)
			}
		}
	}
	return nil
}

// App is an app's code. Call runs one function with arguments that the hub
// has already validated against the function's request schema, in their
// canonical encoding (see Canonical); the result must validate against its
// response schema, duplicate object keys refused, or the hub discards it.
//
// Call may be invoked concurrently only for different users' spokes, which
// are different processes; within one process calls are sequential.
type App interface {
	Spec() Spec
	Call(ctx context.Context, env Env, function string, args json.RawMessage) (json.RawMessage, error)
}

// Env is everything an app may reach while it runs. Every method is brokered
// by the hub, which knows the caller from the channel it came in on.
type Env interface {
	// Data is this user's private data for this app.
	Data() DataStore
	// HTTP returns a client whose transport is the hub's egress broker: only
	// the app's declared domains are reachable.
	HTTP() *http.Client
	// Log returns the app's logger, already tagged with app and user.
	Log() *zerolog.Logger
}

// ErrNotFound is returned by DataStore.Get and Delete for a missing document.
var ErrNotFound = errors.New("not found")

// DataStore is an app's per-user document store, kept by the hub in SQLite.
// Collections and IDs are short names chosen by the app.
type DataStore interface {
	// Get returns one document, or ErrNotFound.
	Get(ctx context.Context, collection, id string) (json.RawMessage, error)
	// Put creates or replaces a document.
	Put(ctx context.Context, collection, id string, body json.RawMessage) error
	// Delete removes a document, or returns ErrNotFound.
	Delete(ctx context.Context, collection, id string) error
	// List returns up to limit documents of a collection, newest first.
	List(ctx context.Context, collection string, limit int) ([]Doc, error)
}

// Doc is one stored document.
type Doc struct {
	ID      string          `json:"id"`
	Body    json.RawMessage `json:"body"`
	Updated time.Time       `json:"updated"`
}

var (
	registryMu sync.RWMutex
	registry   = map[string]*builtin{}
)

// builtin is a registered app, or what makes it when it is first needed.
type builtin struct {
	once    sync.Once
	app     App
	makeApp func() App
}

// get returns the app, making and checking it on first use.
func (b *builtin) get(name string) App {
	b.once.Do(func() {
		if b.makeApp == nil {
			return
		}
		a := b.makeApp()
		b.makeApp = nil
		if a == nil {
			panic(fmt.Sprintf("apps: app %q registered and not made", name))
		}
		if got := a.Spec().Name; got != name {
			panic(fmt.Sprintf("apps: app registered as %q is named %q", name, got))
		}
		mustValidate(a.Spec())
		b.app = a
	})
	return b.app
}

func mustValidate(spec Spec) {
	if err := spec.Validate(); err != nil {
		panic(fmt.Sprintf("apps: failed to register app: %v", err))
	}
}

// Register adds a built-in app. It panics on an invalid spec or a duplicate
// name: both are programming errors in the binary.
func Register(a App) {
	spec := a.Spec()
	mustValidate(spec)
	add(spec.Name, &builtin{app: a})
}

// RegisterLazy adds a built-in app named name that newApp makes when it is
// first looked up (or listed by Builtin), for apps whose spec costs work
// to build: a spoke process hosts one app and makes only that one. It
// panics on a duplicate name now, and on an invalid spec or a spec of
// another name when the app is made.
func RegisterLazy(name string, newApp func() App) {
	add(name, &builtin{makeApp: newApp})
}

func add(name string, b *builtin) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("apps: app %q registered twice", name))
	}
	registry[name] = b
}

// Lookup returns the built-in app with that name.
func Lookup(name string) (App, bool) {
	registryMu.RLock()
	b, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, false
	}
	return b.get(name), true
}

// Builtin returns every registered built-in app, sorted by name.
func Builtin() []App {
	registryMu.RLock()
	names := make([]string, 0, len(registry))
	for name := range registry {
		names = append(names, name)
	}
	registryMu.RUnlock()
	sort.Strings(names)
	out := make([]App, len(names))
	for i, name := range names {
		out[i], _ = Lookup(name)
	}
	return out
}
