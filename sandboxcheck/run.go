package sandboxcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/secgpt/secgpt/apps/hostile"
	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/spoke"
)

// Options are what a Runner drives and watches.
type Options struct {
	// Hub is a hub with the hostile app and VictimApp installed, whose
	// spokes run in their sandbox.
	Hub *hub.Hub
	// Lab holds the targets.
	Lab *Lab
	// Logs receives the hub's and the spoke manager's logs at info level
	// or lower.
	Logs *Logs
	// Limits are the attacker's spoke's resource limits.
	Limits sandbox.Limits
	// AttemptTimeout bounds how long the hub may take to answer one
	// attempt; longer is a hang, and the attempt is not blocked. It must
	// exceed the spokes' deadline per step. Default 2 min 30 s.
	AttemptTimeout time.Duration
}

// Runner runs attacks one at a time, each on a fresh spoke.
type Runner struct {
	opts    Options
	scratch string // the attacker's scratch directory
}

// NewRunner returns a Runner.
func NewRunner(opts Options) (*Runner, error) {
	if opts.Hub == nil || opts.Lab == nil || opts.Logs == nil {
		return nil, errors.New("sandbox check needs a hub, a lab and a log")
	}
	if opts.AttemptTimeout <= 0 {
		opts.AttemptTimeout = 150 * time.Second
	}
	scratch, err := spoke.ScratchDir(opts.Lab.scratchRoot, spoke.Key{User: Attacker, App: hostile.Name})
	if err != nil {
		return nil, err
	}
	return &Runner{opts: opts, scratch: scratch}, nil
}

// Verdict is the judgement of one attack.
type Verdict struct {
	Name  string
	Title string
	// Blocked is true only when every piece of evidence agrees: the
	// attempt was stopped by the expected kind of mechanism, nothing was
	// seen to happen from outside, the attempt is in the log, and the hub
	// served another user afterwards. For a control, Blocked means the
	// control failed.
	Blocked bool
	// How says what stopped it (or what happened), in one line.
	How string
	// Problems say why the verdict is not what it should be: for an
	// attack, why it does not count as blocked; for a control, why it did
	// not succeed. Empty when all is as it should be.
	Problems []string
}

// OK reports whether the verdict is what the attack or control needs.
func (v Verdict) OK() bool { return len(v.Problems) == 0 }

// evidence is what one attempt left behind.
type evidence struct {
	lab     *Lab
	scratch string
	limits  sandbox.Limits
	reply   *hub.Reply
	err     error
	report  *hostile.Result
	pid     int
	failure *spoke.Failure
	logs    []logLine
	before  snapshot
}

// snapshot is the lab's counters before an attempt.
type snapshot struct {
	lookups, dials int
	hits           map[string]int64
}

func (l *Lab) snapshot() snapshot {
	lookups, dials := l.network()
	s := snapshot{lookups: len(lookups), dials: len(dials), hits: map[string]int64{}}
	for _, p := range []string{pathPage, pathToLoopback, pathToMetadata} {
		s.hits[p] = l.webHits(p)
	}
	return s
}

// Run makes one attempt through the hub and judges it.
func (r *Runner) Run(ctx context.Context, a Attack) Verdict {
	v := Verdict{Name: a.Name, Title: a.Title}
	lab := r.opts.Lab
	// A fresh spoke for every attempt: a killed or poisoned one from the
	// attempt before must not decide this one.
	if err := r.opts.Hub.Reset(ctx, Attacker); err != nil {
		v.Problems = append(v.Problems, fmt.Sprintf("could not reset the attacker's session: %v", err))
		return v
	}
	e := &evidence{lab: lab, scratch: r.scratch, limits: r.opts.Limits, before: lab.snapshot()}
	mark := r.opts.Logs.mark()
	if err := r.attempt(ctx, a, e); err != nil {
		v.Problems = append(v.Problems, err.Error())
	}
	e.collect(a)
	if a.stop.by == byKill && e.pid != 0 {
		if err := gone(e.pid, 5*time.Second); err != nil {
			e.failure = nil // still running: the kill was not real
			v.Problems = append(v.Problems, err.Error())
		}
	}
	e.logs = r.opts.Logs.since(mark)

	how, problems := judgeStop(a, e)
	v.How = how
	v.Problems = append(v.Problems, problems...)
	if a.outside != nil {
		if err := a.outside(e); err != nil {
			v.Problems = append(v.Problems, "seen from outside: "+err.Error())
		}
	}
	if a.leak != nil {
		if where := e.leaked(a.leak(lab)); where != "" {
			v.Problems = append(v.Problems, "the target's content reached the attacker's "+where)
		}
	}
	if a.stop.by != allowed {
		if line := e.logged(a); line == "" {
			v.Problems = append(v.Problems, "no log line shows the blocked attempt")
		}
	}
	if err := r.serveVictim(ctx); err != nil {
		v.Problems = append(v.Problems, err.Error())
	}
	if a.stop.by == allowed {
		v.Blocked = !v.OK()
	} else {
		v.Blocked = v.OK()
	}
	return v
}

// attempt has the hub serve the attacker's request, and gives up when the
// hub takes longer than AttemptTimeout.
func (r *Runner) attempt(ctx context.Context, a Attack, e *evidence) error {
	type answer struct {
		reply *hub.Reply
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		reply, err := r.opts.Hub.Handle(ctx, hub.Request{User: Attacker, Query: query(a, r.opts.Lab), Consenter: hub.AllowPlanned{}})
		done <- answer{reply, err}
	}()
	timer := time.NewTimer(r.opts.AttemptTimeout)
	defer timer.Stop()
	select {
	case ans := <-done:
		e.reply, e.err = ans.reply, ans.err
		return nil
	case <-timer.C:
	}
	// Stopping the attacker's spokes should end the hub's wait; what it
	// then answers no longer counts.
	resetErr := r.opts.Hub.Reset(ctx, Attacker)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	e.err = fmt.Errorf("no answer within %v", r.opts.AttemptTimeout)
	return errors.Join(fmt.Errorf("the hub did not answer the attacker within %v: it waited on the spoke without a deadline", r.opts.AttemptTimeout), resetErr)
}

// query is the attacker's request: the app, the function, and each
// argument as a keyed, quoted value, which a planner copies into the plan.
func query(a Attack, l *Lab) string {
	var b strings.Builder
	b.WriteString(hostile.Name + " " + a.Function)
	for _, x := range a.args(l) {
		fmt.Fprintf(&b, " %s = '%s'", x.key, x.value)
	}
	return b.String()
}

// serveVictim has the victim use the hub, which must still answer.
func (r *Runner) serveVictim(ctx context.Context) error {
	reply, err := r.opts.Hub.Handle(ctx, hub.Request{User: Victim, Query: victimQuery, Consenter: hub.AllowPlanned{}})
	if err != nil {
		return fmt.Errorf("the hub did not serve another user afterwards: %w", err)
	}
	if !strings.Contains(reply.Answer, victimAnswer) {
		return fmt.Errorf("the hub served another user a wrong answer afterwards: %q", reply.Answer)
	}
	return nil
}

// collect reads the app's report, the spoke's PID and its failure from
// the hub's reply.
func (e *evidence) collect(a Attack) {
	errors.As(e.err, &e.failure)
	if e.reply == nil || e.reply.Record == nil {
		return
	}
	for _, s := range e.reply.Record.Spokes {
		if s.App == hostile.Name {
			e.pid = s.PID
		}
	}
	for _, c := range e.reply.Record.Calls {
		if c.App != hostile.Name || c.Function != a.Function || c.Source != "hub" || c.Result == nil {
			continue
		}
		var r hostile.Result
		if json.Unmarshal(c.Result, &r) == nil {
			e.report = &r
		}
	}
}

// judgeStop checks that the attempt was stopped the way it must be and
// says how.
func judgeStop(a Attack, e *evidence) (string, []string) {
	switch a.stop.by {
	case byReport, byBroker:
		if e.report == nil {
			return describeFailure(e), []string{"the app made no report: " + describeFailure(e)}
		}
		if e.report.Outcome != hostile.Blocked {
			return string(e.report.Outcome) + ": " + e.report.Detail,
				[]string{fmt.Sprintf("the attempt was not blocked: %s: %s", e.report.Outcome, e.report.Detail)}
		}
		return e.report.Detail, nil
	case byKill:
		if e.report != nil {
			return string(e.report.Outcome) + ": " + e.report.Detail,
				[]string{fmt.Sprintf("the spoke lived to report: %s: %s", e.report.Outcome, e.report.Detail)}
		}
		if e.failure == nil || e.pid == 0 {
			return describeFailure(e), []string{"the spoke was not seen killed: " + describeFailure(e)}
		}
		for _, c := range a.stop.causes {
			if errors.Is(e.failure, c) {
				return fmt.Sprintf("spoke %d killed: %v", e.pid, e.failure.Err), nil
			}
		}
		return describeFailure(e), []string{fmt.Sprintf("the spoke ended for another reason: %v", e.failure)}
	case allowed:
		if e.report == nil || e.report.Outcome != hostile.Succeeded {
			return describeFailure(e), []string{"the control did not succeed: " + describeFailure(e)}
		}
		return e.report.Detail, nil
	}
	return "", []string{"unknown kind of stop"}
}

// describeFailure says what the reply shows when there is no report.
func describeFailure(e *evidence) string {
	switch {
	case e.report != nil:
		return string(e.report.Outcome) + ": " + e.report.Detail
	case e.err != nil:
		return e.err.Error()
	default:
		return "the hub answered without running the app"
	}
}

// logged returns the log line that shows the attempt, or "".
func (e *evidence) logged(a Attack) string {
	for _, l := range e.logs {
		switch {
		case a.stop.by == byKill && l.Message == "Spoke failed" && l.SpokePID == e.pid && e.pid != 0:
			return l.raw
		case a.stop.by == byBroker && l.Message == "Egress request" && l.Decision == "deny" && l.App == hostile.Name:
			return l.raw
		case a.stop.by == byReport && l.Message == "Spoke log line" && l.SpokeLog.Message == "Hostile attempt" && l.SpokePID == e.pid && e.pid != 0 &&
			l.SpokeLog.Outcome == string(hostile.Blocked) && e.report != nil && l.SpokeLog.Attack == e.report.Attack:
			return l.raw
		}
	}
	return ""
}

// leaked returns where s appears in what the attacker could see: its
// reply, or the logs of this attempt (an app may log what it read).
func (e *evidence) leaked(s string) string {
	if s == "" {
		return ""
	}
	if e.reply != nil {
		b, _ := json.Marshal(e.reply)
		if strings.Contains(string(b), s) {
			return "reply"
		}
	}
	for _, l := range e.logs {
		if strings.Contains(l.raw, s) {
			return "log"
		}
	}
	return ""
}

// nothingResolvedOrDialled: the broker refused before looking the name up.
func (e *evidence) nothingResolvedOrDialled() error {
	lookups, _ := e.lab.network()
	if len(lookups) > e.before.lookups {
		return fmt.Errorf("the broker resolved %v", lookups[e.before.lookups:])
	}
	return e.nothingDialled()
}

// nothingDialled: the broker connected nowhere.
func (e *evidence) nothingDialled() error {
	_, dials := e.lab.network()
	if len(dials) > e.before.dials {
		return fmt.Errorf("the broker dialled %v", dials[e.before.dials:])
	}
	return nil
}

// onlyPublicDialled: the broker reached the public server once, for path,
// and dialled nothing but it.
func (e *evidence) onlyPublicDialled(path string) error {
	_, dials := e.lab.network()
	for _, d := range dials[e.before.dials:] {
		if d != publicIP+":80" {
			return fmt.Errorf("the broker dialled %s", d)
		}
	}
	if e.lab.webHits(path) != e.before.hits[path]+1 {
		return fmt.Errorf("the public server got %d requests for %s, want 1", e.lab.webHits(path)-e.before.hits[path], path)
	}
	return nil
}
