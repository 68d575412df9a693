package spoke

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/secgpt/secgpt/sandbox"
)

// Why an external app's server could not run, in terms a user can act on:
// how it ended (exit status or signal), the syscalls its filter refused,
// by name (the spoke serves the server's seccomp listener, see
// sandbox.Policy.Notify), and its last lines on stderr, without the
// launcher's own banner.

// Diagnosis says why an external app's server failed. It crosses to the
// hub in Result.Diagnosis; its Error is one line for the user, to show as
// "app X could not run: " and the line.
type Diagnosis struct {
	// App is the app's name.
	App string `json:"app"`
	// During is what the spoke asked of the server when it failed
	// ("initialize", "tools/list", "tools/call NAME").
	During string `json:"during"`
	// Problem says what went wrong, in words ("exited", "did not answer
	// within 1m0s", …).
	Problem string `json:"problem"`
	// Exit is how the server ended ("exit status 1", "killed by signal
	// SIGSYS: …"); empty while it runs.
	Exit string `json:"exit,omitempty"`
	// Refused are the syscalls the sandbox refused it, by name, in the
	// order first refused.
	Refused []string `json:"refused,omitempty"`
	// Stderr are its last lines on stderr.
	Stderr []string `json:"stderr,omitempty"`
}

// Error is the diagnosis as one line, to follow "app X could not run: ".
func (d *Diagnosis) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the MCP server %s during %s", d.Problem, d.During)
	if d.Exit != "" {
		b.WriteString(" (" + d.Exit + ")")
	}
	if len(d.Refused) > 0 {
		fmt.Fprintf(&b, "; the sandbox refused it the system call(s) %s", strings.Join(d.Refused, ", "))
	}
	if len(d.Stderr) > 0 {
		b.WriteString("; its stderr: " + strings.Join(d.Stderr, " | "))
	}
	return b.String()
}

// maxRefused bounds the distinct refused syscalls a diagnosis names.
const maxRefused = 8

// The launcher's end of the listener hand-over: it writes the listener's
// descriptor number on listenerFD and waits on listenerAckFD until the spoke
// has taken a copy.
const (
	listenerFD    = 3
	listenerAckFD = 4
)

// launchBanner starts the launcher's line that says the server is
// confined: logged, but not one of the server's last words.
const launchBanner = "secgpt-launch: the app's server is confined: "

// listenerTimeout bounds the hand-over.
const listenerTimeout = 10 * time.Second

// listenerPipes makes the hand-over's two pipes: the spoke's ends and the
// launcher's (for its fds 3 and 4).
func listenerPipes() (fromLauncher, toLauncher *os.File, childEnds []*os.File, err error) {
	r1, w1, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("failed to make the listener pipe: %w", err)
	}
	r2, w2, err := os.Pipe()
	if err != nil {
		r1.Close()
		w1.Close()
		return nil, nil, nil, fmt.Errorf("failed to make the listener pipe: %w", err)
	}
	return r1, w2, []*os.File{w1, r2}, nil
}

// handOverListener is the launcher's part: say which descriptor the
// listener is (-1 for none: seccomp off under a weaker sandbox), wait until
// the spoke has it, and close it, so that the server never holds it.
func handOverListener(listener int) error {
	out := os.NewFile(listenerFD, "listener-out")
	ack := os.NewFile(listenerAckFD, "listener-ack")
	defer out.Close()
	defer ack.Close()
	if _, err := fmt.Fprintf(out, "%d\n", listener); err != nil {
		return fmt.Errorf("failed to hand over the seccomp listener: %w", err)
	}
	var b [1]byte
	if _, err := ack.Read(b[:]); err != nil {
		return fmt.Errorf("the spoke did not take the seccomp listener: %w", err)
	}
	if listener >= 0 {
		if err := syscall.Close(listener); err != nil {
			return fmt.Errorf("failed to close the seccomp listener: %w", err)
		}
	}
	return nil
}

// takeListener is the spoke's part: read the launcher's listener number,
// take a copy of it from process pid, and let the launcher go on. It
// returns nil and no error when the launcher has none, or failed before
// (it says why on stderr).
func takeListener(pid int, from, to *os.File) (*os.File, error) {
	_ = from.SetReadDeadline(time.Now().Add(listenerTimeout))
	line, err := bufio.NewReader(from).ReadString('\n')
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, fmt.Errorf("the server's launcher did not hand over its seccomp listener within %s", listenerTimeout)
	}
	if err != nil {
		return nil, nil // the launcher failed; its stderr says why
	}
	n, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return nil, fmt.Errorf("the server's launcher sent a bad listener number %q", line)
	}
	var l *os.File
	if n >= 0 {
		if l, err = sandbox.TakeListener(pid, n); err != nil {
			return nil, err
		}
	}
	if _, err := to.Write([]byte{1}); err != nil {
		if l != nil {
			l.Close()
		}
		return nil, nil // the launcher is gone
	}
	return l, nil
}

// reap waits for the server (the spoke's one child) and records how it
// ended.
func (p *serverProcess) reap() {
	for {
		_, err := syscall.Wait4(p.pid, &p.status, 0, nil)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	close(p.exited)
}

// exit says how the server ended, waiting up to wait for it to end; "" if
// it still runs.
func (p *serverProcess) exit(wait time.Duration) string {
	select {
	case <-p.exited:
	case <-time.After(wait):
		return ""
	}
	ws := p.status
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		sig := ws.Signal()
		what := fmt.Sprintf("killed by signal %s", unix.SignalName(sig))
		switch sig {
		case syscall.SIGSYS:
			what += ": it attempted a system call the sandbox forbids outright (ptrace, mount, bpf, keyctl, namespaces…)"
		case syscall.SIGXCPU:
			what += ": over its CPU-time limit"
		case syscall.SIGKILL:
			what += " (the CPU-time or memory limit, or the hub stopping it)"
		}
		return what
	}
	return ws.Signal().String()
}

// serveListener names and refuses, until the server ends, every syscall
// its filter sends to the listener.
func (e *externalApp) serveListener() {
	if e.server.listener == nil {
		return
	}
	sandbox.ServeListener(e.server.listener, func(name string) {
		e.stderrMu.Lock()
		defer e.stderrMu.Unlock()
		if !slices.Contains(e.refused, name) && len(e.refused) < maxRefused {
			e.refused = append(e.refused, name)
			e.log.Warn().Str("syscall", name).Msg("The sandbox refused the app's server a system call")
		}
	})
}

// diagnose builds the diagnosis of a failure during what.
func (e *externalApp) diagnose(what, problem string) *Diagnosis {
	d := &Diagnosis{App: e.decl.Name, During: what, Problem: problem}
	// Give a dying server's last writes and its death a moment to arrive.
	d.Exit = e.server.exit(200 * time.Millisecond)
	e.stderrMu.Lock()
	defer e.stderrMu.Unlock()
	d.Refused = slices.Clone(e.refused)
	d.Stderr = slices.Clone(e.tail)
	return d
}
