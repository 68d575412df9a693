package sandboxcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
	// App is the attacker's app: "" for the Go hostile app, else the name
	// of an external app running a script of apps/hostile/scripts, whose
	// attacks are InterpreterAttacks.
	App string
	// Lab holds the targets.
	Lab *Lab
	// Logs receives the hub's and the spoke manager's logs at info level
	// or lower.
	Logs *Logs
	// Limits are the attacker's spoke's resource limits.
	Limits sandbox.Limits
	// Scratch names the scratch directory of (user, app) as the hub's
	// spokes get it.
	Scratch func(user, app string) (string, error)
	// AttemptTimeout bounds how long the hub may take to answer one
	// attempt; longer is a hang, and the attempt is not blocked. It must
	// exceed the spokes' deadline per step. Default 2 min 30 s.
	AttemptTimeout time.Duration
}

// Runner runs attacks one at a time, each on a fresh spoke.
type Runner struct {
	opts    Options
	app     string // the attacker's app
	mcp     bool   // the app is an MCP server: its results are untrusted text
	scratch string // the attacker's scratch directory
}

// NewRunner returns a Runner.
func NewRunner(opts Options) (*Runner, error) {
	if opts.Hub == nil || opts.Lab == nil || opts.Logs == nil || opts.Scratch == nil {
		return nil, errors.New("sandbox check needs a hub, a lab, a log and the spokes' scratch")
	}
	if opts.AttemptTimeout <= 0 {
		opts.AttemptTimeout = 150 * time.Second
	}
	app, mcp := opts.App, true
	if app == "" {
		app, mcp = hostile.Name, false
	}
	scratch, err := opts.Scratch(Attacker, app)
	if err != nil {
		return nil, err
	}
	return &Runner{opts: opts, app: app, mcp: mcp, scratch: scratch}, nil
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
	app     string
	mcp     bool
	lab     *Lab
	scratch string // the attacker's scratch directory as the hub sees it
	limits  sandbox.Limits
	reply   *hub.Reply
	err     error
	report  *hostile.Result
	pid     int
	failure *spoke.Failure
	// serverExit is how an MCP server ended, as its spoke diagnosed it
	// ("killed by signal SIGSYS: …"); "" if it did not.
	serverExit string
	logs       []logLine
	before     snapshot
	// peaks are the resident high-water marks of the hub's children
	// during the attempt, by PID, when the attack watches them.
	peaks map[int]memPeak
	// hubCPU is the processor time the hub used during the attempt.
	hubCPU time.Duration
	// measured is what an outside check measured, for the verdict.
	measured string
	// hidden: the app found no such file where the host has one, which
	// only the spoke's mount view explains (see hiddenByView).
	hidden bool
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
	e := &evidence{app: r.app, mcp: r.mcp, lab: lab, scratch: r.scratch, limits: r.opts.Limits, before: lab.snapshot()}
	mark := r.opts.Logs.mark()
	var watch *peakWatch
	alongside := make(chan error, 1)
	if a.watch {
		watch = watchPeaks()
		go func() { alongside <- r.serveVictim(ctx) }()
	} else {
		alongside <- nil
	}
	cpu := hubCPU()
	if err := r.attempt(ctx, a, e); err != nil {
		v.Problems = append(v.Problems, err.Error())
	}
	e.hubCPU = (hubCPU() - cpu).Round(time.Millisecond)
	if watch != nil {
		e.peaks = watch.Stop()
	}
	if err := <-alongside; err != nil {
		v.Problems = append(v.Problems, "during the attempt: "+err.Error())
	}
	e.collect(a)
	if a.stop.kind(e) == byKill && !e.mcp && e.pid != 0 {
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
	// The spoke's own resolver logs nothing; the lab's count of lookups
	// is the evidence.
	if a.stop.by != allowed && a.stop.by != byOwnResolver {
		// The spoke's log reaches the hub on its own stream, which may
		// trail the reply: wait a little for the line before calling it
		// missing.
		line := e.logged(a)
		for deadline := time.Now().Add(3 * time.Second); line == "" && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			e.logs = r.opts.Logs.since(mark)
			line = e.logged(a)
		}
		if line == "" {
			v.Problems = append(v.Problems, "no log line shows the blocked attempt")
		}
	}
	if err := r.serveVictim(ctx); err != nil {
		v.Problems = append(v.Problems, err.Error())
	}
	if a.bound != nil && v.OK() {
		v.How += "; bound: " + a.bound(e)
	}
	if e.measured != "" {
		v.How += "; " + e.measured
	}
	if a.measure != nil {
		v.How += "; " + a.measure(e)
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
		reply, err := r.opts.Hub.Handle(ctx, hub.Request{User: Attacker, Query: query(r.app, a, r.opts.Lab), Consenter: hub.AllowPlanned{}})
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
func query(app string, a Attack, l *Lab) string {
	var b strings.Builder
	b.WriteString(app + " " + a.Function)
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
		if s.App == e.app {
			e.pid = s.PID
		}
	}
	if e.mcp && e.err != nil {
		e.serverExit = serverExit(e.err.Error(), a.Function)
	}
	for _, c := range e.reply.Record.Calls {
		if c.App != e.app || c.Function != a.Function || c.Source != "hub" || c.Result == nil {
			continue
		}
		if e.mcp {
			e.report = scriptReport(a, c.Result)
			continue
		}
		var r hostile.Result
		if json.Unmarshal(c.Result, &r) == nil {
			e.report = &r
		}
	}
	e.hiddenByView(a)
}

// hiddenByView counts as blocked a built-in app's ENOENT on a path (or in a
// directory) that the host has: the app cannot tell a missing file from one
// its mount view hides, and reports it as an error that proves nothing;
// the check, which made the path, can.
func (e *evidence) hiddenByView(a Attack) {
	if e.mcp || e.report == nil || e.report.Outcome != hostile.Failed || !strings.Contains(e.report.Detail, "(ENOENT)") || a.args == nil {
		return
	}
	for _, x := range a.args(e.lab) {
		if x.key != "path" {
			continue
		}
		if _, err := os.Lstat(x.value); err != nil {
			if _, err := os.Lstat(filepath.Dir(x.value)); err != nil {
				return
			}
		}
		e.hidden = true
		e.report = &hostile.Result{Attack: e.report.Attack, Outcome: hostile.Blocked, Detail: "not in the spoke's mount view, though the host has it: " + e.report.Detail}
	}
}

// scriptReport reads a hostile script's answer, the untrusted text
// "blocked: …" or "succeeded: …" (apps/hostile/scripts), as a report; nil
// when it is neither.
func scriptReport(a Attack, result json.RawMessage) *hostile.Result {
	var r map[string]string
	if json.Unmarshal(result, &r) != nil {
		return nil
	}
	text := r[spoke.UntrustedTextField]
	for _, o := range []hostile.Outcome{hostile.Blocked, hostile.Succeeded} {
		if detail, ok := strings.CutPrefix(text, string(o)+": "); ok {
			return &hostile.Result{Attack: a.Function, Outcome: o, Detail: detail}
		}
	}
	return nil
}

// judgeStop checks that the attempt was stopped the way it must be and
// says how.
func judgeStop(a Attack, e *evidence) (string, []string) {
	by := a.stop.kind(e)
	switch by {
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
		if e.mcp {
			return serverKilled(a, e)
		}
		if e.failure == nil || e.pid == 0 {
			return describeFailure(e), []string{"the spoke was not seen killed: " + describeFailure(e)}
		}
		for _, c := range a.stop.causes {
			if errors.Is(e.failure, c) {
				return fmt.Sprintf("spoke %d killed: %v", e.pid, e.failure.Err), nil
			}
		}
		if len(a.stop.causes) == 0 {
			return fmt.Sprintf("spoke %d ended: %v", e.pid, e.failure), nil
		}
		return describeFailure(e), []string{fmt.Sprintf("the spoke ended for another reason: %v", e.failure)}
	case byOwnResolver:
		if e.report == nil || e.report.Outcome != hostile.Succeeded {
			return describeFailure(e), []string{"the lookup was not answered: " + describeFailure(e)}
		}
		if ips := ipv4.FindAllString(e.report.Detail, -1); len(ips) == 0 || slices.ContainsFunc(ips, func(ip string) bool { return ip != "127.0.0.1" }) {
			return e.report.Detail, []string{"the answer is not the spoke's loopback alone: " + e.report.Detail}
		}
		return "answered by the spoke's own resolver: " + e.report.Detail + "; the broker resolved nothing", nil
	case byBudget:
		var be *hub.BudgetError
		if !errors.As(e.err, &be) {
			return describeFailure(e), []string{"the hub did not stop it at a token budget: " + describeFailure(e)}
		}
		return "the hub stopped the step: " + be.Error(), nil
	case allowed:
		if e.report == nil || e.report.Outcome != hostile.Succeeded {
			return describeFailure(e), []string{"the control did not succeed: " + describeFailure(e)}
		}
		return e.report.Detail, nil
	}
	return "", []string{"unknown kind of stop"}
}

// serverKilled judges an MCP server's death: its spoke saw it killed by
// one of the signals that stop the attempt.
func serverKilled(a Attack, e *evidence) (string, []string) {
	if e.serverExit == "" || e.pid == 0 {
		return describeFailure(e), []string{"the server was not seen killed: " + describeFailure(e)}
	}
	// The spoke manager, which reads the cgroup, puts "killed: over its
	// memory limit" first in the step's error; the hub passes it as text.
	if a.stop.overMemory && !strings.Contains(e.err.Error(), e.app+" failed: killed: "+spoke.ErrOutOfMemory.Error()) {
		return describeFailure(e), []string{"the server was killed, but not seen killed at its memory bound: " + describeFailure(e)}
	}
	for _, sig := range a.stop.signals {
		if strings.HasPrefix(e.serverExit, "killed by signal "+sig) {
			return fmt.Sprintf("server of spoke %d %s", e.pid, e.serverExit), nil
		}
	}
	return describeFailure(e), []string{fmt.Sprintf("the server ended for another reason (want %s): %s", strings.Join(a.stop.signals, " or "), e.serverExit)}
}

// serverExit reads how the server ended from the hub's error, which
// carries the spoke's diagnosis (spoke.Diagnosis) as text only: "the MCP
// server exited or closed its output during tools/call TOOL (EXIT)…". It
// returns EXIT, or "" when the text does not say the server ended during
// the call of tool.
func serverExit(msg, tool string) string {
	mark := "the MCP server exited or closed its output during tools/call " + tool + " ("
	_, rest, ok := strings.Cut(msg, mark)
	if !ok {
		return ""
	}
	exit, _, ok := strings.Cut(rest, ")")
	if !ok || !strings.HasPrefix(exit, "killed by signal ") {
		return ""
	}
	// The signal's explanation may hold parentheses of its own.
	name, _, _ := strings.Cut(strings.TrimPrefix(exit, "killed by signal "), " ")
	return "killed by signal " + strings.TrimSuffix(name, ":")
}

// kind is how the attempt must have been stopped, given its report:
// byReportOrKill is byReport when the app reported, else byKill.
func (s stop) kind(e *evidence) stopKind {
	if s.by != byReportOrKill {
		return s.by
	}
	if e.report != nil {
		return byReport
	}
	return byKill
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

// ipv4 finds IPv4 addresses in a report.
var ipv4 = regexp.MustCompile(`\b\d{1,3}(\.\d{1,3}){3}\b`)

// serverFailed is what an external app's spoke logs when its server dies.
const serverFailed = "The app's MCP server failed; ending the spoke"

// logged returns the log line that shows the attempt, or "".
func (e *evidence) logged(a Attack) string {
	by := a.stop.kind(e)
	for _, l := range e.logs {
		switch {
		case by == byKill && l.Message == "Spoke failed" && l.SpokePID == e.pid && e.pid != 0:
			return l.raw
		case by == byKill && e.mcp && l.Message == "Spoke log line" && l.SpokePID == e.pid && e.pid != 0 && l.SpokeLog.Message == serverFailed:
			return l.raw
		case by == byBroker && l.Message == "Egress request" && l.Decision == "deny" && l.App == e.app:
			return l.raw
		case by == byBudget && l.Message == "Refused a model call over budget" && l.App == e.app:
			return l.raw
		case by == byReport && e.mcp && l.Message == "Spoke log line" && l.SpokePID == e.pid && e.pid != 0 &&
			l.SpokeLog.Message == "App server stderr" && strings.HasPrefix(l.SpokeLog.AppStderr, "hostile: "+a.Function+" -> "+string(hostile.Blocked)+":"):
			return l.raw
		case by == byReport && l.Message == "Spoke log line" && l.SpokeLog.Message == "Hostile attempt" && l.SpokePID == e.pid && e.pid != 0 &&
			(l.SpokeLog.Outcome == string(hostile.Blocked) || (e.hidden && l.SpokeLog.Outcome == string(hostile.Failed))) &&
			e.report != nil && l.SpokeLog.Attack == e.report.Attack:
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

// inScratch is the path of name in the attacker's scratch as its spoke
// sees it: through the spoke's own root while it runs (its scratch may be
// a tmpfs of its own, which only its mount namespace shows), else the
// hub's directory.
func (e *evidence) inScratch(name string) string {
	if e.pid != 0 {
		own := fmt.Sprintf("/proc/%d/root%s", e.pid, filepath.Join(e.scratch, name))
		if _, err := os.Lstat(filepath.Dir(own)); err == nil {
			return own
		}
	}
	return filepath.Join(e.scratch, name)
}
