package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/secgpt/secgpt/store"
)

// Category is what a consent is about.
type Category string

// The consent categories. Each is a flow of the user's power or data that a
// third-party app cannot cause on its own.
var Categories = []struct {
	Category Category
	Reason   string
}{
	{CategoryExec, "running an app spends the user's authority: it acts and sees arguments on the user's behalf"},
	{CategoryData, "sharing data the user did not type in this request (memory, or values the planner added) gives a third party something it was not given"},
	{CategoryCollab, "one app's result reaching another app is a flow between parties that do not trust each other"},
}

const (
	CategoryExec   Category = "exec"
	CategoryData   Category = "data"
	CategoryCollab Category = "collab"
)

// Decision is the user's answer to a consent request.
type Decision string

const (
	DecisionOnce    Decision = "once"    // for the rest of this request
	DecisionSession Decision = "session" // until the user's session ends
	DecisionAlways  Decision = "always"  // stored, bound to the app's version
	DecisionDeny    Decision = "deny"    // this time
	DecisionNever   Decision = "never"   // stored denial
)

// allows reports whether the decision lets the request go ahead.
func (d Decision) allows() bool {
	return d == DecisionOnce || d == DecisionSession || d == DecisionAlways
}

// durable reports whether the decision allows beyond the request: an exec
// grant for the session or always covers the app's planned functions with
// any arguments, where once covers exactly the calls shown.
func (d Decision) durable() bool { return d == DecisionSession || d == DecisionAlways }

// DataItem is one value a data consent would share.
type DataItem struct {
	Field string `json:"field"`
	Value string `json:"value"`
}

// PlannedCall is one planned call of an app's function.
type PlannedCall struct {
	Function string          `json:"function"`
	Args     json.RawMessage `json:"args"`
	// Completes are the required arguments the plan left out, which the
	// app completes itself: a once-answer covers one call that gives every
	// argument shown its value and adds only these.
	Completes []string `json:"completes,omitempty"`
	// From maps an argument to the other app's result field it is copied
	// from ("app.field"), with a consent of its own showing the value.
	From map[string]string `json:"from,omitempty"`
}

// ConsentRequest is one question to the user. The hub fills every field;
// front ends render Summary and may show the details.
type ConsentRequest struct {
	ID       string   `json:"id"`
	QueryID  string   `json:"query_id"`
	User     string   `json:"user"`
	Category Category `json:"category"`
	// App is the app that would run or receive something.
	App string `json:"app"`
	// Caller is the app asking, for app-to-app requests; Source is the app
	// whose result would be given away (collab).
	Caller     string `json:"caller,omitempty"`
	Source     string `json:"source,omitempty"`
	AppVersion string `json:"app_version"`
	Function   string `json:"function,omitempty"`
	// Args are the canonical bytes the app would receive: for exec, the
	// call's arguments; for data, the arguments the shared values are in.
	Args json.RawMessage `json:"args,omitempty"`
	// Calls, for an exec request covering planned calls of App, are each
	// call with its arguments; Function then lists them, and for one call
	// Args holds its arguments too.
	Calls  []PlannedCall   `json:"calls,omitempty"`
	Data   []DataItem      `json:"data,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	// InPlan is false for anything the plan did not name; Warning says so.
	InPlan bool `json:"in_plan"`
	// Irreversible is set when the function's effect cannot be undone: the
	// user is asked every time, and no stored grant answers.
	Irreversible bool   `json:"irreversible,omitempty"`
	Warning      string `json:"warning,omitempty"`
	// Query is the user's request that caused this question.
	Query string `json:"query"`
	// Summary is the question in plain words.
	Summary string `json:"summary"`
	// Choices are the answers this request accepts; anything else is deny.
	// Calls outside the plan and irreversible actions can only be allowed
	// once.
	Choices  []Decision `json:"choices"`
	Deadline time.Time  `json:"deadline"`
}

// Consenter asks the user. Ask blocks until the user answers or ctx ends;
// the hub treats an error, a timeout or an answer not in req.Choices as deny.
// It may be called concurrently for one query.
type Consenter interface {
	Ask(ctx context.Context, req ConsentRequest) (Decision, error)
}

// BatchConsenter also puts several questions to the user at once: every
// question a plan needs before it runs, in one prompt (see Hub.decideAll).
// AskEach returns one decision per request, in their order, each judged
// as Ask's; an error denies them all. A front end that asks a person
// implements it, so that a request asks once.
type BatchConsenter interface {
	Consenter
	AskEach(ctx context.Context, reqs []ConsentRequest) ([]Decision, error)
}

var (
	durableChoices = []Decision{DecisionOnce, DecisionSession, DecisionAlways, DecisionDeny, DecisionNever}
	onceChoices    = []Decision{DecisionOnce, DecisionDeny}
)

// durable reports whether a stored grant may answer req and whether the
// user may give one. Only what the plan named and can be undone is:
// calls outside the plan are by definition not what the user asked for,
// data the user did not type comes with a warning (and a warned prompt
// never offers "always": what alarmed once must be looked at each time),
// and irreversible actions are asked every time.
func durable(req ConsentRequest) bool {
	return req.InPlan && !req.Irreversible && req.Warning == ""
}

// AllowPlanned is the consent policy for scripts and the case studies: it
// grants, once, what the plan names, and denies everything else, including
// any data the user did not type in the request.
type AllowPlanned struct{}

var _ Consenter = AllowPlanned{}

func (AllowPlanned) Ask(_ context.Context, req ConsentRequest) (Decision, error) {
	if req.InPlan {
		return DecisionOnce, nil
	}
	return DecisionDeny, nil
}

// DenyAll denies every request.
type DenyAll struct{}

var _ Consenter = DenyAll{}

func (DenyAll) Ask(context.Context, ConsentRequest) (Decision, error) { return DecisionDeny, nil }

// subject names what a grant covers: an app, a caller->callee pair, or for
// data an app and the fingerprint of exactly the data shown.
func subject(req ConsentRequest) string {
	switch {
	case req.Category == CategoryData:
		return req.App + "#" + dataFingerprint(req.Data)
	case req.Category == CategoryCollab:
		return req.Source + "->" + req.App
	case req.Caller != "":
		return req.Caller + "->" + req.App
	default:
		return req.App
	}
}

// dataFingerprint identifies exactly the data shown. JSON encodes each
// field and value unambiguously, so no two lists of items share a
// fingerprint by the way they are written down.
func dataFingerprint(items []DataItem) string {
	b, err := json.Marshal(items)
	if err != nil {
		// DataItem is two strings; Marshal cannot fail on it.
		panic(fmt.Sprintf("hub: failed to encode data items: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// argsDigest identifies the canonical arguments a once-answer is bound to.
func argsDigest(args json.RawMessage) string {
	sum := sha256.Sum256(args)
	return hex.EncodeToString(sum[:16])
}

// version binds a grant to every app it involves.
func (h *Hub) version(names ...string) string {
	var parts []string
	for _, n := range names {
		if n != "" {
			parts = append(parts, h.catalog.hashes[n])
		}
	}
	if len(parts) == 1 {
		return parts[0]
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, "+")))
	return hex.EncodeToString(sum[:16])
}

// audit writes one decision to the audit log and returns once it is
// durable: the action a decision allows follows it. The write outlives a
// cancelled request: every decision made must be on record.
func (h *Hub) audit(ctx context.Context, q *query, req ConsentRequest, subj string, d Decision, source string) error {
	ctx = context.WithoutCancel(ctx)
	detail, _ := json.Marshal(map[string]any{
		"function": req.Function, "in_plan": req.InPlan, "summary": truncate(req.Summary, 2000),
	})
	err := h.store.AppendAudit(ctx, store.AuditEntry{
		User: q.user, SessionID: q.session, QueryID: q.id, Category: string(req.Category),
		Subject: subj, AppVersion: req.AppVersion, Decision: string(d), Source: source, Detail: string(detail),
	})
	if err != nil {
		return fmt.Errorf("failed to write audit log: %w", err)
	}
	return nil
}

// summarize says what the request means, in plain words. Arguments,
// results and data are shown whole, as the canonical bytes the app would
// receive: a cut could hide the very part that matters.
func summarize(req ConsentRequest) string {
	var b strings.Builder
	if req.Warning != "" {
		b.WriteString("WARNING: " + req.Warning + " ")
	}
	switch req.Category {
	case CategoryExec:
		switch {
		case len(req.Calls) == 1:
			fmt.Fprintf(&b, "Run the app %q (function %s) with %s%s.", req.App, req.Calls[0].Function, showJSON(req.Calls[0].Args), completion(req.Calls[0]))
		case len(req.Calls) > 0:
			fmt.Fprintf(&b, "Run the app %q for %d calls:", req.App, len(req.Calls))
			for i, c := range req.Calls {
				sep := ";"
				if i == len(req.Calls)-1 {
					sep = "."
				}
				fmt.Fprintf(&b, " %s with %s%s%s", c.Function, showJSON(c.Args), completion(c), sep)
			}
		case req.Caller != "":
			fmt.Fprintf(&b, "The app %q asks to use the app %q (function %s) with %s.", req.Caller, req.App, req.Function, showJSON(req.Args))
		default:
			fmt.Fprintf(&b, "Run the app %q (function %s) with %s.", req.App, req.Function, showJSON(req.Args))
		}
	case CategoryData:
		fmt.Fprintf(&b, "Share with the app %q data that you did not type in this request:", req.App)
		for _, d := range req.Data {
			fmt.Fprintf(&b, " %s = %q;", d.Field, d.Value)
		}
		if len(req.Args) > 0 {
			fmt.Fprintf(&b, " It would receive exactly %s.", showJSON(req.Args))
		}
	case CategoryCollab:
		fmt.Fprintf(&b, "Give the result of %q to the app %q: %s.", req.Source, req.App, showJSON(req.Result))
	}
	if req.Category == CategoryExec && slices.ContainsFunc(req.Data, func(d DataItem) bool { return d.Field == RequestField }) {
		b.WriteString(" The app reads your request, all of it, to write its part of the answer.")
	}
	if req.Irreversible {
		b.WriteString(" This cannot be undone.")
	}
	if req.Category == CategoryExec && slices.Contains(req.Choices, DecisionSession) {
		fmt.Fprintf(&b, " Once allows exactly the calls shown; for this session or always allows %q to run the functions a request plans, with any arguments.", req.App)
	}
	return b.String()
}

// completion says what the app adds to a planned call's arguments.
func completion(c PlannedCall) string {
	var parts []string
	if len(c.Completes) > 0 {
		parts = append(parts, "the app completes "+strings.Join(c.Completes, ", "))
	}
	for _, arg := range sortedKeys(c.From) {
		parts = append(parts, arg+" comes from "+c.From[arg]+" (you are asked before it is copied)")
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// showJSON shows a canonical document as the bytes it is.
func showJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	return string(raw)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// sortedKeys is used where maps must render deterministically.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Within says how long the user has to answer, rounded as people say it:
// "5 minutes" for a deadline 4 minutes 59.9 seconds away.
func Within(d time.Duration) string {
	plural := func(n int, unit string) string {
		if n == 1 {
			return "1 " + unit
		}
		return fmt.Sprintf("%d %ss", n, unit)
	}
	if d < 59500*time.Millisecond {
		return plural(max(0, int(math.Round(d.Seconds()))), "second")
	}
	m := int(math.Round(d.Minutes()))
	if m%60 == 0 {
		return plural(m/60, "hour")
	}
	return plural(m, "minute")
}
