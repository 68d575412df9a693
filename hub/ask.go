package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/store"
)

// Deciding consent questions: from this query's earlier answers, a stored
// grant or the policy where they answer, and otherwise by asking the user,
// several questions at once where the consenter can (BatchConsenter).
// Each question is decided, audited and recorded on its own.

// verdict is how one question was decided.
type verdict struct {
	decision Decision
	// source says where the decision came from (ConsentRecord.Source).
	source string
}

// timedOut reports whether the user did not answer before the deadline.
func (v verdict) timedOut() bool { return v.source == "timeout" }

// pendingConsent is one question being decided.
type pendingConsent struct {
	req  ConsentRequest
	subj string
	// onceKey names what an answer given in this request stands for.
	onceKey string
	// remember: an answer may stand for the same question later in this
	// request (not for an irreversible action, asked every time).
	remember bool
	log      zerolog.Logger
}

// decide answers one consent request (see decideAll).
func (h *Hub) decide(ctx context.Context, q *query, req ConsentRequest) Decision {
	return h.decideAll(ctx, q, []ConsentRequest{req})[0].decision
}

// decideAll answers consent requests: each from this query's earlier
// answers, from a stored grant (only where durable allows), by the policy,
// or by asking. The questions left to ask are put to the user together
// when the consenter can (one prompt, one deadline), else one by one. It
// fails closed, and audits and records every decision on its own.
// Whatever does not allow (see Decision.allows) is a denial.
func (h *Hub) decideAll(ctx context.Context, q *query, reqs []ConsentRequest) []verdict {
	out := make([]verdict, len(reqs))
	var asked []int
	var pending []*pendingConsent
	for i, req := range reqs {
		p := h.prepare(ctx, q, req)
		if v, ok := h.known(ctx, q, p); ok {
			out[i] = h.conclude(ctx, q, p, v)
			continue
		}
		asked = append(asked, i)
		pending = append(pending, p)
	}
	if len(pending) == 0 {
		return out
	}
	for j, v := range h.ask(ctx, q, pending) {
		out[asked[j]] = h.apply(ctx, q, pending[j], v)
	}
	return out
}

// prepare fills in what the hub states about a request: its identity,
// version, warning, choices and summary.
func (h *Hub) prepare(ctx context.Context, q *query, req ConsentRequest) *pendingConsent {
	req.ID = randomID()
	req.QueryID, req.User, req.Query = q.id, q.user, q.text
	req.AppVersion = h.version(req.Caller, req.Source, req.App)
	subj := subject(req)
	onceKey := fmt.Sprintf("%s|%s|%s|%t", req.Category, subj, req.Function, req.InPlan)
	switch req.Category {
	case CategoryExec:
		// An answer given in this request stands for the calls shown only.
		calls, _ := json.Marshal(req.Calls)
		onceKey += "|" + argsDigest(req.Args) + "|" + argsDigest(calls)
	case CategoryCollab:
		// Once is for the result shown; session and always trust the pair.
		onceKey += "|" + argsDigest(req.Result)
	}
	if !req.InPlan && req.Warning == "" {
		req.Warning = "This is not part of the plan for your request."
	}
	req.Choices = onceChoices
	if durable(req) {
		req.Choices = durableChoices
	}
	req.Summary = summarize(req)
	log := zerolog.Ctx(ctx).With().Str("category", string(req.Category)).Str("subject", subj).Bool("in_plan", req.InPlan).Logger()
	return &pendingConsent{req: req, subj: subj, onceKey: onceKey, remember: !req.Irreversible, log: log}
}

// known answers p without asking, where an answer given earlier in this
// request, the out-of-plan policy or a stored grant does.
func (h *Hub) known(ctx context.Context, q *query, p *pendingConsent) (verdict, bool) {
	req := p.req
	if p.remember && q.onceGranted(p.onceKey) {
		return verdict{DecisionOnce, "request"}, true
	}
	if !req.InPlan && req.Category != CategoryData && h.opts.OutOfPlan != OutOfPlanAsk {
		return verdict{DecisionDeny, "policy"}, true
	}
	if !durable(req) {
		return verdict{}, false
	}
	g, found, err := h.store.FindGrant(ctx, q.user, string(req.Category), p.subj, req.AppVersion, q.session)
	if err != nil {
		p.log.Error().Err(err).Msg("Failed to read grants; denying")
		return verdict{DecisionDeny, "error"}, true
	}
	if found {
		return verdict{Decision(g.Duration), "stored"}, true
	}
	return verdict{}, false
}

// ask puts the pending questions to the user: all in one prompt when the
// consenter asks several at once, else one after the other, each with its
// own deadline.
func (h *Hub) ask(ctx context.Context, q *query, pending []*pendingConsent) []verdict {
	out := make([]verdict, len(pending))
	batch, ok := q.consenter.(BatchConsenter)
	if !ok {
		for i, p := range pending {
			askCtx, cancel := context.WithTimeout(ctx, h.opts.ConsentTimeout)
			p.req.Deadline, _ = askCtx.Deadline()
			d, err := q.consenter.Ask(askCtx, p.req)
			out[i] = judge(askCtx, p, d, err)
			cancel()
		}
		return out
	}
	askCtx, cancel := context.WithTimeout(ctx, h.opts.ConsentTimeout)
	defer cancel()
	reqs := make([]ConsentRequest, len(pending))
	for i, p := range pending {
		p.req.Deadline, _ = askCtx.Deadline()
		reqs[i] = p.req
	}
	ds, err := batch.AskEach(askCtx, reqs)
	if err == nil && len(ds) != len(reqs) {
		err = fmt.Errorf("failed to read answers: %d answers to %d questions", len(ds), len(reqs))
	}
	for i, p := range pending {
		var d Decision
		if err == nil {
			d = ds[i]
		}
		out[i] = judge(askCtx, p, d, err)
	}
	return out
}

// judge reads one answer: an error, the end of the deadline or an answer
// the question did not offer is a denial, with why. An answer given at or
// after the deadline is late even before the context's timer has fired
// (a loaded machine runs it late).
func judge(askCtx context.Context, p *pendingConsent, d Decision, err error) verdict {
	late := askCtx.Err() != nil || !time.Now().Before(p.req.Deadline)
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (err == nil && late):
		return verdict{DecisionDeny, "timeout"}
	case errors.Is(err, context.Canceled):
		return verdict{DecisionDeny, "cancelled"}
	case err != nil:
		p.log.Warn().Err(err).Msg("Consent could not be asked; denying")
		return verdict{DecisionDeny, "error"}
	case !slices.Contains(p.req.Choices, d):
		p.log.Warn().Str("decision", string(d)).Msg("Answer not among the choices; denying")
		return verdict{DecisionDeny, "invalid"}
	}
	return verdict{d, "asked"}
}

// apply keeps the user's answer: a stored grant for session, always and
// never, the answer for the rest of this request; then concludes.
func (h *Hub) apply(ctx context.Context, q *query, p *pendingConsent, v verdict) verdict {
	req, d := p.req, v.decision
	if d == DecisionSession || d == DecisionAlways || d == DecisionNever {
		g := store.Grant{User: q.user, Category: string(req.Category), Subject: p.subj, AppVersion: req.AppVersion, Duration: string(d)}
		if d == DecisionSession {
			g.SessionID = q.session
		}
		// The user's answer is kept even if the request was cancelled
		// meanwhile. It need not be durable before the action: the audit
		// entry that follows waits, and commits it too.
		if err := h.store.Later().PutGrant(context.WithoutCancel(ctx), g); err != nil {
			// The answer still stands for this request; it is just not kept.
			p.log.Error().Err(err).Msg("Failed to store grant")
		}
	}
	if p.remember && d.allows() {
		q.grantOnce(p.onceKey)
	}
	return h.conclude(ctx, q, p, v)
}

// conclude audits and records a decision. A decision that cannot be put
// on record is a denial (DESIGN §5).
func (h *Hub) conclude(ctx context.Context, q *query, p *pendingConsent, v verdict) verdict {
	if err := h.audit(ctx, q, p.req, p.subj, v.decision, v.source); err != nil && v.decision.allows() {
		p.log.Error().Err(err).Str("decision", string(v.decision)).Msg("Failed to write audit log; denying")
		v = verdict{DecisionDeny, "audit"}
	}
	q.recordConsent(p.req, p.subj, v.decision, v.source)
	p.log.Info().Str("decision", string(v.decision)).Str("source", v.source).Msg("Consent decided")
	if !v.decision.allows() {
		v.decision = DecisionDeny
	}
	return v
}

// Take is the decision req takes from one answer given to a prompt of
// several questions: the answer itself where req offers it, else once for
// an answer that allows (a question that offers no lasting answer, such
// as a warned one, is allowed only for this request), else deny.
func (req ConsentRequest) Take(d Decision) Decision {
	switch {
	case slices.Contains(req.Choices, d):
		return d
	case d.allows() && slices.Contains(req.Choices, DecisionOnce):
		return DecisionOnce
	}
	return DecisionDeny
}
