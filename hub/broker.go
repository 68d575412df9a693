package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/store"
)

// maxMemoryContent bounds one spoke-memory entry.
const maxMemoryContent = 4000

// broker serves one step's spoke. It knows the spoke only by the channel the
// request came in on: app is the app hosted there ("" for a vanilla spoke).
type broker struct {
	h     *Hub
	q     *query
	app   string
	chain []string // apps waiting on this step, outermost first
	// step is the plan step the spoke runs, whose approvals its calls
	// may use; "" for a call of another app's.
	step  string
	calls int
	// early takes the step's output when the spoke reports it ahead of its
	// answer; nil ignores such reports.
	early func(json.RawMessage)
	// overBudget is the refusal of a model call over a token budget, if
	// any: the step fails with it.
	overBudget *BudgetError
}

var (
	_ spoke.Handler       = (*broker)(nil)
	_ spoke.OutputHandler = (*broker)(nil)
)

// Output takes a step's early output (see spoke.KindOutput), once.
func (b *broker) Output(_ context.Context, out spoke.Output) {
	if b.early != nil {
		b.early(out.Output)
		b.early = nil
	}
}

var (
	errNoTools  = errors.New("this assistant has no apps or tools")
	errNoAppDir = errors.New("a vanilla spoke has no app data or memory")
)

// Complete brokers one model call: it enforces the budgets, chooses the
// model, and removes every tool call outside the query's capability set
// before the spoke sees it.
func (b *broker) Complete(ctx context.Context, req spoke.LLMRequest) (spoke.LLMReply, error) {
	if b.calls >= b.h.opts.MaxLLMCallsPerStep {
		return spoke.LLMReply{}, fmt.Errorf("%s used up its budget of %d model calls for this step", b.label(), b.h.opts.MaxLLMCallsPerStep)
	}
	if size := llm.PromptBytes(req.Messages, req.Tools); size > b.h.opts.MaxPromptBytes {
		return spoke.LLMReply{}, fmt.Errorf("%s sent a prompt of %d bytes, over the %d-byte limit", b.label(), size, b.h.opts.MaxPromptBytes)
	}
	if b.app == "" && len(req.Tools) > 0 {
		b.refuse(ctx, "", "", "", errNoTools.Error())
		return spoke.LLMReply{}, errNoTools
	}
	if !b.q.spendLLMCall(b.h.opts.MaxLLMCallsPerQuery) {
		return spoke.LLMReply{}, fmt.Errorf("this request used up its budget of %d model calls", b.h.opts.MaxLLMCallsPerQuery)
	}
	b.calls++
	model := b.h.opts.Models.Spoke
	if b.app == "" {
		model = b.h.opts.Models.Vanilla
	} else if m, ok := b.h.opts.Models.Apps[b.app]; ok && m != "" {
		model = m
	}
	lreq := llm.Request{Model: model, Messages: req.Messages, Tools: req.Tools}
	var resp llm.Response
	err := b.h.complete(ctx, b.q, b.app, lreq, func(ctx context.Context) error {
		var err error
		// The endpoint's time is not the spoke's drain on the hub.
		spoke.Waiting(ctx, func() { resp, err = b.h.llm.Complete(ctx, lreq) })
		return err
	})
	if be, ok := errOverBudget(err); ok {
		// The step fails with the hub's words, whatever the spoke makes
		// of the refusal (see Hub.run): the first refusal's.
		if b.overBudget == nil {
			b.overBudget = be
		}
		return spoke.LLMReply{}, be
	}
	if err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Str("app", b.label()).Msg("Model call failed")
		return spoke.LLMReply{}, errors.New(describeLLMError(err, "the model call failed").Message)
	}
	reply := spoke.LLMReply{Message: resp.Message}
	reply.Message.ToolCalls = nil
	for _, tc := range resp.Message.ToolCalls {
		if reason := b.admit(ctx, &tc); reason != "" { // logged and audited by admit
			reply.Refused = append(reply.Refused, spoke.RefusedCall{ID: tc.ID, Name: tc.Name, Reason: reason})
			continue
		}
		reply.Message.ToolCalls = append(reply.Message.ToolCalls, tc)
	}
	return reply, nil
}

func (b *broker) label() string {
	if b.app == "" {
		return "the assistant"
	}
	return b.app
}

// notAllowed is the refusal of a call the user did not allow.
const notAllowed = "not part of the plan for the user's request, and not allowed by the user"

// admit decides whether a tool call the model returned may reach the spoke.
// It replaces the call's arguments with their canonical encoding, which is
// what any consent showed and what the spoke runs, and returns the reason
// for a refusal, or "".
func (b *broker) admit(ctx context.Context, tc *llm.ToolCall) string {
	if b.app == "" {
		return b.refuse(ctx, "", "", tc.Name, errNoTools.Error())
	}
	appName, fn, ok := apps.SplitToolName(tc.Name)
	if !ok {
		return b.refuse(ctx, "", "", tc.Name, "no such tool")
	}
	spec, ok := b.h.catalog.spec(appName)
	if !ok {
		return b.refuse(ctx, appName, fn, tc.Name, fmt.Sprintf("no app named %q is installed", appName))
	}
	f, ok := spec.Function(fn)
	if !ok {
		return b.refuse(ctx, appName, fn, tc.Name, fmt.Sprintf("%s has no function %q", appName, fn))
	}
	raw := json.RawMessage(tc.Arguments)
	if strings.TrimSpace(tc.Arguments) == "" {
		raw = json.RawMessage("{}")
	}
	args, why := b.checkArgs(appName, tc.Name, f.Request, raw)
	if why != "" {
		return b.refuse(ctx, appName, fn, tc.Name, why)
	}
	tc.Arguments = string(args)
	if appName == b.app {
		if !b.q.caps.canExec(appName, fn) {
			if b.outOfPlan(ctx, ConsentRequest{Category: CategoryExec, App: appName, Function: fn, Args: args}) {
				return ""
			}
			return notAllowed
		}
		if b.q.caps.admit("", b.step, appName, fn, args, f.Irreversible) {
			return ""
		}
		// The user's answer covered the calls it showed, with the
		// arguments it showed: any other call is put to the user with its
		// own arguments.
		if b.outOfPlan(ctx, ConsentRequest{Category: CategoryExec, App: appName, Function: fn, Args: args,
			Warning: "The plan did not include this call with these arguments; the arguments differ from those you were shown."}) {
			return ""
		}
		return "not part of the plan with these arguments, and not allowed by the user"
	}
	// Text the user did not type never crosses (CallApp refuses it): it
	// is refused here too, before the user is asked about such a call.
	if why := b.freeArgs(f, args); why != "" {
		return b.refuse(ctx, appName, fn, tc.Name, why)
	}
	if b.q.caps.canCall(b.app, appName, fn) {
		return "" // CallApp asks, with the arguments, where the plan needs it
	}
	if b.outOfPlan(ctx, ConsentRequest{Category: CategoryExec, App: appName, Caller: b.app, Function: fn, Args: args}) {
		// The user saw these arguments: CallApp runs exactly this call
		// without asking again.
		b.q.caps.approve(b.app, b.step, appName, fn, args, nil)
		return ""
	}
	return notAllowed
}

// refuse writes a refusal the broker decides by itself, with no consent
// asked, to the audit log and the query's record: every decision is on
// record (DESIGN §5). It returns the reason. app and fn are the target
// when they could be read from the request, tool what the spoke named.
func (b *broker) refuse(ctx context.Context, app, fn, tool, reason string) string {
	subj := b.spokeName()
	switch {
	case app != "" && app != b.app:
		subj += "->" + app
	case app == "" && tool != "":
		subj += "->?" // the spoke named no installed app; Detail has what it named
	}
	detail, _ := json.Marshal(map[string]any{"function": fn, "tool": truncate(tool, 200), "reason": truncate(reason, 1000)})
	if err := b.h.store.AppendAudit(context.WithoutCancel(ctx), store.AuditEntry{
		User: b.q.user, SessionID: b.q.session, QueryID: b.q.id, Category: string(CategoryExec),
		Subject: subj, AppVersion: b.h.catalog.hashes[app], Decision: string(DecisionDeny), Source: "broker", Detail: string(detail),
	}); err != nil {
		zerolog.Ctx(ctx).Error().Err(err).Msg("Failed to write audit log")
	}
	b.q.recordRefusal(ConsentRecord{Category: CategoryExec, Subject: subj, App: truncate(app, 200), Caller: b.app, Function: truncate(fn, 200), Decision: DecisionDeny, Source: "broker"})
	zerolog.Ctx(ctx).Info().Str("app", b.label()).Str("subject", subj).Str("reason", reason).Msg("Refused request")
	return reason
}

// spokeName names this broker's spoke in audit subjects.
func (b *broker) spokeName() string {
	if b.app == "" {
		return "vanilla"
	}
	return b.app
}

// checkArgs returns the canonical encoding of a tool call's arguments
// checked against app's function schema, or why they do not fit: in
// detail for the spoke's own app, whose schema is its own text, and
// without the schema's words (its enums, its patterns) for another app's.
func (b *broker) checkArgs(app, tool string, schema, raw json.RawMessage) (json.RawMessage, string) {
	canon, err := apps.Canonical(raw)
	if err != nil {
		return nil, fmt.Sprintf("the arguments are not a single valid document: %v", err)
	}
	args, err := apps.CanonicalDocument(schema, canon)
	switch {
	case err == nil:
		return args, ""
	case app == b.app:
		return nil, fmt.Sprintf("the arguments do not match %s's schema: %v", tool, err)
	default:
		return nil, fmt.Sprintf("the arguments do not match %s's schema", tool)
	}
}

// outOfPlan puts a request the plan did not name to the configured policy.
func (b *broker) outOfPlan(ctx context.Context, req ConsentRequest) bool {
	req.InPlan = false
	req.Irreversible = b.h.catalog.irreversible(req.App, req.Function)
	return b.h.decide(ctx, b.q, req).allows()
}

// callee resolves a tool name a spoke asked for to another installed app.
// A refusal is audited.
func (b *broker) callee(ctx context.Context, tool string) (apps.Spec, apps.Function, error) {
	if b.app == "" {
		return apps.Spec{}, apps.Function{}, errors.New(b.refuse(ctx, "", "", tool, errNoTools.Error()))
	}
	appName, fn, ok := apps.SplitToolName(tool)
	if !ok {
		return apps.Spec{}, apps.Function{}, errors.New(b.refuse(ctx, "", "", tool, fmt.Sprintf("no such tool %q", truncate(tool, 200))))
	}
	if appName == b.app {
		return apps.Spec{}, apps.Function{}, errors.New(b.refuse(ctx, appName, fn, tool, "a spoke runs its own app's functions itself"))
	}
	spec, ok := b.h.catalog.spec(appName)
	if !ok {
		return apps.Spec{}, apps.Function{}, errors.New(b.refuse(ctx, appName, fn, tool, fmt.Sprintf("no app named %q is installed", appName)))
	}
	f, ok := spec.Function(fn)
	if !ok {
		return apps.Spec{}, apps.Function{}, errors.New(b.refuse(ctx, appName, fn, tool, fmt.Sprintf("%s has no function %q", appName, fn)))
	}
	return spec, f, nil
}

// Probe gives a function's schemas to a spoke that may call it, as
// another app's spoke may see them: the request's signature and the
// schema of the typed values its result will carry, without the callee's
// prose.
func (b *broker) Probe(ctx context.Context, p spoke.Probe) (spoke.ProbeReply, error) {
	spec, f, err := b.callee(ctx, p.Tool)
	if err != nil {
		return spoke.ProbeReply{}, err
	}
	if !b.q.caps.canProbe(b.app, spec.Name, f.Name) {
		return spoke.ProbeReply{}, errors.New(b.refuse(ctx, spec.Name, f.Name, p.Tool, fmt.Sprintf("%s may not use %s for this request", b.app, p.Tool)))
	}
	return spoke.ProbeReply{Request: signature(f.Request), Response: typedSchema(f.Response)}, nil
}

// CallApp runs another app's function for a spoke: only within the
// capability set (or what the user allows outside it), with consent to run
// the callee and consent to give its typed result back. Only typed values
// cross: arguments that hold text the user did not type are refused, and
// the callee's free text is removed from its result. The callee gets the
// canonical arguments the consent showed.
func (b *broker) CallApp(ctx context.Context, c spoke.AppCall) (spoke.AppCallReply, error) {
	spec, f, err := b.callee(ctx, c.Tool)
	if err != nil {
		return spoke.AppCallReply{}, err
	}
	args, why := b.checkArgs(spec.Name, c.Tool, f.Request, c.Args)
	if why != "" {
		return spoke.AppCallReply{}, errors.New(b.refuse(ctx, spec.Name, f.Name, c.Tool, why))
	}
	if why := b.freeArgs(f, args); why != "" {
		return spoke.AppCallReply{}, errors.New(b.refuse(ctx, spec.Name, f.Name, c.Tool, why))
	}
	chain := append(slices.Clone(b.chain), b.app)
	if slices.Contains(chain, spec.Name) {
		return spoke.AppCallReply{}, errors.New(b.refuse(ctx, spec.Name, f.Name, c.Tool, fmt.Sprintf("%s is already waiting on this request; calls may not loop", spec.Name)))
	}
	if len(chain) >= b.h.opts.MaxCallDepth {
		return spoke.AppCallReply{}, errors.New(b.refuse(ctx, spec.Name, f.Name, c.Tool, fmt.Sprintf("apps may call each other at most %d deep", b.h.opts.MaxCallDepth)))
	}
	planned := b.q.caps.planned(b.app, spec.Name)
	switch {
	case b.q.caps.consume(b.app, b.step, spec.Name, f.Name, args):
		// Allowed when the model asked for exactly this call (admit).
	case b.q.caps.canCall(b.app, spec.Name, f.Name):
		if !b.h.decide(ctx, b.q, ConsentRequest{Category: CategoryExec, App: spec.Name, Caller: b.app, Function: f.Name, Args: args, InPlan: planned, Irreversible: f.Irreversible}).allows() {
			return spoke.AppCallReply{}, fmt.Errorf("the user did not allow %s to use %s", b.app, spec.Name)
		}
	default:
		if !b.outOfPlan(ctx, ConsentRequest{Category: CategoryExec, App: spec.Name, Caller: b.app, Function: f.Name, Args: args}) {
			return spoke.AppCallReply{}, fmt.Errorf("%s may not use %s: not part of the plan, and not allowed by the user", b.app, c.Tool)
		}
	}
	res, err := b.h.runApp(ctx, b.q, runSpec{app: spec.Name, function: f.Name, args: args, caller: b.app, chain: chain})
	if err != nil {
		// The caller hears the hub's words only: the callee's own (its
		// error text), and whatever an error wraps (a validation error
		// quotes the result it refused), stay out of its spoke.
		var he *Error
		if errors.As(err, &he) && he.App == "" {
			return spoke.AppCallReply{}, errors.New(he.Message)
		}
		return spoke.AppCallReply{}, fmt.Errorf("%s failed", spec.Name)
	}
	typed, err := typedProjection(res.Output, f.Response)
	if err == nil {
		_, err = apps.CanonicalDocument(typedSchema(f.Response), typed)
	}
	if err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Str("app", spec.Name).Msg("A result could not be passed on as typed values")
		return spoke.AppCallReply{}, fmt.Errorf("%s's result could not be passed on as typed values", spec.Name)
	}
	if !b.h.decide(ctx, b.q, ConsentRequest{Category: CategoryCollab, App: b.app, Source: spec.Name, Function: f.Name, Result: typed, InPlan: planned}).allows() {
		return spoke.AppCallReply{}, fmt.Errorf("the user did not allow %s's result to go to %s", spec.Name, b.app)
	}
	return spoke.AppCallReply{Result: typed}, nil
}

// freeArgs says why args, for another app's function f, may not cross:
// they hold text the user did not type; "" when they are typed.
func (b *broker) freeArgs(f apps.Function, args json.RawMessage) string {
	var reqSchema map[string]any
	_ = json.Unmarshal(f.Request, &reqSchema)
	if text := freeText(args, reqSchema, b.q.text); len(text) > 0 {
		return fmt.Sprintf("the arguments hold text you did not type (%s): only typed values pass between apps", strings.Join(text, ", "))
	}
	return ""
}

// HTTP hands an app's request to the egress broker, which fails closed.
func (b *broker) HTTP(ctx context.Context, r spoke.HTTPRequest) (spoke.HTTPResponse, error) {
	if b.app == "" {
		return spoke.HTTPResponse{}, errNoTools
	}
	spec, _ := b.h.catalog.spec(b.app)
	var resp spoke.HTTPResponse
	var sent []string
	err := errors.New("network access is not available to apps")
	if rerr := b.recordAttempt(ctx, b.egressDetail(r)); rerr != nil {
		err = rerr
	} else if b.h.opts.Egress != nil {
		// A spoke's requests come one at a time (spoke.Handler); the
		// broker shares its capacity fairly between apps.
		resp, sent, err = b.h.opts.Egress.Do(ctx, b.app, spec.Egress, r)
	}
	// Every request goes to the audit log, without credentials or query
	// strings an app may have put in the URL, as what happened: "allow"
	// with where it went, if it left (its data left even when a refusal
	// followed), and "deny" with why, if it was refused or failed.
	if err == nil || len(sent) > 0 {
		allowed := b.egressDetail(r)
		if len(sent) > 0 {
			allowed["sent_to"] = sent
		}
		if err == nil {
			allowed["status"] = resp.Status
		}
		b.auditEgress(ctx, "allow", allowed)
	}
	if err != nil {
		denied := b.egressDetail(r)
		denied["reason"] = err.Error()
		b.auditEgress(ctx, "deny", denied)
	}
	return resp, err
}

// errOffTheRecord refuses an app's request whose attempt could not be put
// on record: the audit log fails closed.
var errOffTheRecord = errors.New("the request could not be put on record, so it was not sent")

// recordAttempt writes to the audit log, durably, that the app asks to
// reach the network, before anything of its request may leave: an entry
// after the fact could not stop a request whose record fails. The
// outcome follows (auditEgress).
func (b *broker) recordAttempt(ctx context.Context, detail map[string]any) error {
	d, _ := json.Marshal(detail)
	if err := b.h.store.AppendAudit(context.WithoutCancel(ctx), store.AuditEntry{
		User: b.q.user, SessionID: b.q.session, QueryID: b.q.id, Category: "egress",
		Subject: b.app, AppVersion: b.h.catalog.hashes[b.app], Decision: "request", Source: "broker", Detail: string(d),
	}); err != nil {
		zerolog.Ctx(ctx).Error().Err(err).Str("app", b.app).Msg("Failed to write audit log; refusing the request")
		return errOffTheRecord
	}
	return nil
}

// egressDetail is what the audit keeps of an app's HTTP request.
func (b *broker) egressDetail(r spoke.HTTPRequest) map[string]any {
	return map[string]any{"method": truncate(r.Method, 16), "url": redactURL(r.URL)}
}

// auditEgress writes one egress decision to the audit log and the log.
func (b *broker) auditEgress(ctx context.Context, decision string, detail map[string]any) {
	d, _ := json.Marshal(detail)
	if err := b.h.store.AppendAudit(context.WithoutCancel(ctx), store.AuditEntry{
		User: b.q.user, SessionID: b.q.session, QueryID: b.q.id, Category: "egress",
		Subject: b.app, AppVersion: b.h.catalog.hashes[b.app], Decision: decision, Source: "broker", Detail: string(d),
	}); err != nil {
		zerolog.Ctx(ctx).Error().Err(err).Msg("Failed to write audit log")
	}
	zerolog.Ctx(ctx).Info().Str("app", b.app).Str("decision", decision).RawJSON("request", d).Msg("Egress request")
}

// redactURL keeps scheme, host and path of a URL for the log.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	u.Fragment = ""
	return truncate(u.String(), 500)
}

// AppendMemory adds to the spoke's own (user, app) memory.
func (b *broker) AppendMemory(ctx context.Context, m spoke.MemoryAppend) error {
	if b.app == "" {
		return errNoAppDir
	}
	err := b.h.whileCurrent(b.q, func() error {
		// The app's notes to itself: nothing waits on their durability,
		// and the turn's record, which waits, commits them.
		return b.h.store.Later().AppendSpokeMemory(ctx, b.q.user, b.app, truncate(m.Content, maxMemoryContent))
	})
	if err != nil {
		return fmt.Errorf("failed to save memory: %w", err)
	}
	return nil
}

// Data serves the app's own per-user documents.
func (b *broker) Data(ctx context.Context, op spoke.DataOp) (spoke.DataReply, error) {
	if b.app == "" {
		return spoke.DataReply{}, errNoAppDir
	}
	st, user, app := b.h.store, b.q.user, b.app
	var reply spoke.DataReply
	var err error
	switch op.Op {
	case spoke.DataGet:
		reply.Body, err = st.GetDoc(ctx, user, app, op.Collection, op.ID)
	case spoke.DataPut:
		bud := b.h.ledger.budgets
		err = st.PutDocWithin(ctx, store.DocQuota{Bytes: bud.DataBytes, Docs: bud.DataDocs}, user, app, op.Collection, op.ID, op.Body)
	case spoke.DataDelete:
		err = st.DeleteDoc(ctx, user, app, op.Collection, op.ID)
	case spoke.DataList:
		var docs []store.Doc
		docs, err = st.ListDocs(ctx, user, app, op.Collection, op.Limit)
		for _, d := range docs {
			reply.Docs = append(reply.Docs, apps.Doc{ID: d.ID, Body: d.Body, Updated: d.Updated})
		}
	default:
		return spoke.DataReply{}, fmt.Errorf("unknown data operation %q", op.Op)
	}
	if errors.Is(err, store.ErrNotFound) {
		return spoke.DataReply{NotFound: true}, nil
	}
	if err != nil {
		return spoke.DataReply{}, fmt.Errorf("failed to %s data: %w", op.Op, err)
	}
	return reply, nil
}

// EgressTunnel is an Egress that also carries an app's TLS connections
// whole (see spoke.KindTunnel): it reads the server name from the
// ClientHello, applies the app's declared domains and the address rules as
// for Do, and splices bytes without terminating TLS until ctx ends. It owns
// conn. host is the server name it checked ("" if none could be read);
// sent says the ClientHello left the machine.
type EgressTunnel interface {
	Tunnel(ctx context.Context, app string, domains []string, conn net.Conn) (host string, sent bool, err error)
}

var _ spoke.TunnelHandler = (*broker)(nil)

// Tunnel hands one TLS connection of an external app's server to the
// egress broker, which fails closed, and audits it like an HTTP request:
// "allow" with the server it reached, or "deny" with why. The connection
// ends with the step (ctx).
func (b *broker) Tunnel(ctx context.Context, _ spoke.TunnelRequest, conn net.Conn) (spoke.TunnelReply, error) {
	if b.app == "" {
		conn.Close()
		return spoke.TunnelReply{}, errNoTools
	}
	spec, _ := b.h.catalog.spec(b.app)
	var host string
	var sent bool
	err := errors.New("network access is not available to apps")
	detail := map[string]any{"method": "TLS", "url": "(unknown)", "via": "tunnel"}
	if rerr := b.recordAttempt(ctx, maps.Clone(detail)); rerr != nil {
		err = rerr
		conn.Close()
	} else if t, ok := b.h.opts.Egress.(EgressTunnel); ok {
		host, sent, err = t.Tunnel(ctx, b.app, spec.Egress, conn)
	} else {
		conn.Close()
	}
	if host != "" {
		detail["url"] = redactURL("https://" + host + "/")
	}
	if sent {
		allowed := maps.Clone(detail)
		allowed["sent_to"] = []string{"https://" + host}
		b.auditEgress(ctx, "allow", allowed)
	}
	if err != nil {
		detail["reason"] = err.Error()
		b.auditEgress(ctx, "deny", detail)
		return spoke.TunnelReply{}, err
	}
	return spoke.TunnelReply{Host: host}, nil
}
