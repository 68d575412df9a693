package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"os/user"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/reveal"
)

const chatHelp = `Type a request, or a command:
  /apps            the installed apps
  /grants          your stored permissions
  /revoke APP|all  remove permissions
  /audit           your latest permission decisions
  /usage           today's model tokens per app, your apps' stored data, the limits
  /forget          erase what the assistant remembers about you
  /reset           end your session (session permissions end, apps stop)
  /quit            leave`

func runChat(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("chat", stderr)
	configPath := fs.String("config", "", "config file")
	userID := fs.String("user", defaultChatUser(), "who you are to the assistant")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	sys, err := openFor(ctx, *configPath, stderr, false)
	if err != nil {
		return err
	}
	defer sys.Close()

	lines := make(chan string)
	go readLines(stdin, lines)
	consent := &terminalConsenter{lines: lines, out: stdout}
	fmt.Fprintf(stdout, "secgpt: %d apps installed, each in its own sandboxed process. /help for commands.\n", len(sys.hub.Apps()))
	for {
		fmt.Fprint(stdout, "you> ")
		var line string
		var ok bool
		select {
		case line, ok = <-lines:
		case <-ctx.Done():
			fmt.Fprintln(stdout)
			return nil
		}
		if !ok {
			fmt.Fprintln(stdout)
			return nil
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			continue
		case line == "/quit" || line == "/exit":
			return nil
		case strings.HasPrefix(line, "/"):
			chatCommand(ctx, sys, *userID, line, stdout)
			continue
		}
		if err := sys.cannotRun(line); err != nil {
			fmt.Fprintf(stdout, "secgpt: sorry, %v\n", err)
			continue
		}
		reply, err := sys.hub.Handle(ctx, hub.Request{User: *userID, Query: line, Consenter: consent})
		if err != nil {
			fmt.Fprintf(stdout, "secgpt: sorry, %v\n", userFacing(err))
			continue
		}
		// Apps and the model wrote the answer: shown, never interpreted.
		fmt.Fprintf(stdout, "secgpt: %s\n", reveal.Text(reply.Answer))
	}
}

func defaultChatUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "terminal:" + u.Username
	}
	return "terminal:local"
}

func readLines(r io.Reader, out chan<- string) {
	defer close(out)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<10)
	for sc.Scan() {
		out <- sc.Text()
	}
}

func chatCommand(ctx context.Context, sys *system, userID, line string, out io.Writer) {
	fields := strings.Fields(line)
	switch fields[0] {
	case "/help":
		fmt.Fprintln(out, chatHelp)
	case "/apps":
		for _, s := range sys.hub.Apps() {
			printApp(out, s, sys.cfg.appLimits(s.Name))
		}
	case "/grants":
		grants, err := sys.hub.Grants(ctx, userID)
		if err != nil {
			fmt.Fprintln(out, "secgpt:", err)
			return
		}
		if len(grants) == 0 {
			fmt.Fprintln(out, "secgpt: you have no stored permissions")
		}
		for _, g := range grants {
			fmt.Fprintf(out, "  %s %s: %s (since %s)\n", g.Category, g.Subject, g.Duration, g.Created.Format(time.DateTime))
		}
	case "/revoke":
		if len(fields) != 2 {
			fmt.Fprintln(out, "secgpt: usage: /revoke APP|all")
			return
		}
		app := fields[1]
		if app == "all" {
			app = ""
		}
		n, err := sys.hub.Revoke(ctx, userID, app)
		if err != nil {
			fmt.Fprintln(out, "secgpt:", err)
			return
		}
		fmt.Fprintf(out, "secgpt: removed %d permissions\n", n)
	case "/audit":
		entries, err := sys.hub.Audit(ctx, userID, 20)
		if err != nil {
			fmt.Fprintln(out, "secgpt:", err)
			return
		}
		for _, e := range entries {
			fmt.Fprintf(out, "  %s %s %s: %s (%s)\n", e.Time.Format(time.DateTime), e.Category, e.Subject, e.Decision, e.Source)
		}
	case "/usage":
		rep, err := sys.hub.Usage(ctx, userID)
		if err != nil {
			fmt.Fprintln(out, "secgpt:", err)
			return
		}
		printUsage(out, rep, time.Now())
	case "/forget":
		if err := sys.hub.Forget(ctx, userID); err != nil {
			fmt.Fprintln(out, "secgpt:", err)
			return
		}
		fmt.Fprintln(out, "secgpt: I have forgotten our conversations and every app's memory of you")
	case "/reset":
		if err := sys.hub.Reset(ctx, userID); err != nil {
			fmt.Fprintln(out, "secgpt:", err)
			return
		}
		fmt.Fprintln(out, "secgpt: session ended: session permissions are gone and your apps stopped")
	default:
		fmt.Fprintln(out, "secgpt: unknown command; /help lists them")
	}
}

// terminalConsenter asks in the terminal. Prompts are shown one at a time;
// no answer before the deadline, or the end of input, is a denial.
type terminalConsenter struct {
	mu    sync.Mutex
	lines <-chan string
	out   io.Writer
}

var _ hub.Consenter = (*terminalConsenter)(nil)

var decisionKeys = map[string]hub.Decision{
	"o": hub.DecisionOnce, "once": hub.DecisionOnce,
	"s": hub.DecisionSession, "session": hub.DecisionSession,
	"a": hub.DecisionAlways, "always": hub.DecisionAlways,
	"d": hub.DecisionDeny, "deny": hub.DecisionDeny,
	"n": hub.DecisionNever, "never": hub.DecisionNever,
}

func (t *terminalConsenter) Ask(ctx context.Context, req hub.ConsentRequest) (hub.Decision, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var choices []string
	for _, c := range req.Choices {
		choices = append(choices, fmt.Sprintf("[%s]%s", string(c)[:1], string(c)[1:]))
	}
	fmt.Fprintf(t.out, "\n--- permission needed (%s) ---\n%s\n", req.Category, reveal.Text(req.Summary))
	for {
		fmt.Fprintf(t.out, "%s? (answer within %s; no answer means deny) ", strings.Join(choices, " "), hub.Within(time.Until(req.Deadline)))
		select {
		case line, ok := <-t.lines:
			if !ok {
				fmt.Fprintln(t.out, "\nno more input: denied")
				return hub.DecisionDeny, nil
			}
			d, known := decisionKeys[strings.ToLower(strings.TrimSpace(line))]
			if known && slices.Contains(req.Choices, d) {
				return d, nil
			}
			fmt.Fprintln(t.out, "please answer with one of the choices")
		case <-ctx.Done():
			fmt.Fprintln(t.out, "\nyou did not answer in time: nothing was allowed")
			return hub.DecisionDeny, ctx.Err()
		}
	}
}

// printUsage writes /usage's answer: the day's tokens against the budgets,
// each app's share and stored data.
func printUsage(out io.Writer, rep hub.UsageReport, now time.Time) {
	b := rep.Budgets
	fmt.Fprintf(out, "  today (%s UTC): %d of your %d tokens a day, at most %d for one request; the daily budgets start again in %s\n",
		rep.Day, rep.Tokens, b.TokensPerUserDay, b.TokensPerQuery, rep.Resets.Sub(now).Round(time.Minute))
	for _, u := range rep.Apps {
		name := "the assistant"
		if u.App != "" {
			name = u.App
		}
		fmt.Fprintf(out, "  %s: %d tokens in %d model calls (%d estimated), the hub's time %v\n",
			name, u.Tokens(), u.Calls, u.Estimated, u.HubTime.Round(time.Millisecond))
	}
	for _, app := range slices.Sorted(maps.Keys(rep.Data)) {
		d := rep.Data[app]
		fmt.Fprintf(out, "  %s stores %d bytes in %d documents for you, of %d bytes and %d documents\n", app, d.Bytes, d.Docs, b.DataBytes, b.DataDocs)
	}
}
