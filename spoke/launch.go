package spoke

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/secgpt/secgpt/sandbox"
)

// LaunchArg is the hidden first argument by which the binary re-executes
// itself as the launcher of an external app's server: it confines itself
// with the server's policy and then executes the server, which inherits
// the confinement. ChildMain dispatches on it (IsChild is true for it).
const LaunchArg = "__secgpt_launch"

// launcherMain is the launcher: its stdio are its spoke's pipes, its
// environment the app's (secrets included), its arguments the server's
// policy and argv. It returns only on failure, which it explains on stderr
// (the spoke logs the server's stderr).
func launcherMain() int {
	fs := flag.NewFlagSet("secgpt-launch", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	policyText := fs.String("policy", "", "the server's sandbox policy")
	if len(os.Args) < 2 || fs.Parse(os.Args[2:]) != nil || fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "secgpt-launch: bad arguments")
		return exitUsage
	}
	policy, err := sandbox.DecodePolicy(*policyText)
	if err != nil {
		fmt.Fprintf(os.Stderr, "secgpt-launch: refusing to start the app's server without a valid sandbox policy: %v\n", err)
		return exitSandbox
	}
	// The spoke keeps its ISC socket from the launcher; should it ever
	// leak, the server would speak to the hub as the spoke.
	var st syscall.Stat_t
	if err := syscall.Fstat(iscFD, &st); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFSOCK {
		fmt.Fprintln(os.Stderr, "secgpt-launch: refusing to start the app's server: it would inherit a socket on fd 3")
		return exitSandbox
	}
	if policy.Notify {
		// The listener's pipes survive Enter (which closes what is not
		// close-on-exec) and end at Exec.
		syscall.CloseOnExec(listenerFD)
		syscall.CloseOnExec(listenerAckFD)
	}
	// Enter clears the environment; the server gets it back from Exec.
	env := os.Environ()
	report, err := sandbox.Enter(policy)
	if err != nil {
		fmt.Fprintf(os.Stderr, "secgpt-launch: refusing to start the app's server: its sandbox could not be applied: %v\n", err)
		return exitSandbox
	}
	if policy.Notify {
		if err := handOverListener(report.Listener); err != nil {
			fmt.Fprintf(os.Stderr, "secgpt-launch: refusing to start the app's server: %v\n", err)
			return exitSandbox
		}
	}
	if report.Weaker() {
		fmt.Fprintf(os.Stderr, "secgpt-launch: WARNING: the app's server runs with a weaker sandbox: %s\n", report)
	} else {
		fmt.Fprintf(os.Stderr, "%s%s\n", launchBanner, report)
	}
	err = sandbox.Exec(policy, fs.Args(), env)
	fmt.Fprintf(os.Stderr, "secgpt-launch: failed to start the app's server: %v\n", err)
	return exitSandbox
}

// serverPolicy is the sandbox of an external app's server: the exec profile
// with the spoke's own limits and scratch directory, its command as the one
// executable, and with egress (proxyPort set) the exec_net profile, which
// may connect to the spoke's egress proxy and nowhere else.
func serverPolicy(decl External, spoke sandbox.Policy, proxyPort uint16) sandbox.Policy {
	p := sandbox.Policy{
		Profile:     sandbox.ProfileExec,
		Limits:      spoke.Limits,
		Scratch:     spoke.Scratch,
		ExecPath:    decl.Command,
		Cgroup:      spoke.Cgroup,
		Notify:      true,
		AllowWeaker: spoke.AllowWeaker,
	}
	if proxyPort != 0 {
		p.Profile, p.ProxyPort = sandbox.ProfileExecNet, proxyPort
	}
	add := func(path string) {
		// What is in scratch is readable (and writable) already.
		if path != "" && !slices.Contains(p.ReadOnly, path) && !within(path, p.Scratch) {
			p.ReadOnly = append(p.ReadOnly, path)
		}
	}
	add(decl.Dir)
	for _, path := range decl.ReadOnly {
		add(path)
	}
	// Files and directories named in args (scripts, a filesystem server's
	// roots) are readable; never the whole file system, and not what is
	// already in scratch or declared read-write.
	for _, arg := range decl.Args {
		if filepath.IsAbs(arg) && filepath.Clean(arg) == arg && arg != "/" && !within(arg, p.Scratch) && !slices.Contains(decl.ReadWrite, arg) {
			if st, err := os.Stat(arg); err == nil && (st.Mode().IsRegular() || st.IsDir()) {
				add(arg)
			}
		}
	}
	for _, path := range decl.ReadWrite {
		if !within(path, p.Scratch) && !slices.Contains(p.ReadWrite, path) {
			p.ReadWrite = append(p.ReadWrite, path)
		}
	}
	return p
}

// serverProcess is an external app's server as its spoke sees it.
type serverProcess struct {
	pid    int
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr io.ReadCloser
	// listener is its seccomp listener (Policy.Notify); nil without one.
	listener *os.File
	// exited is closed once the spoke has reaped it; status is then how
	// it ended.
	exited chan struct{}
	status syscall.WaitStatus
}

// startServer starts the launcher, which confines itself with policy and
// executes the server. It must run before the spoke confines itself (which
// forbids starting processes). The server stays in the spoke's process
// group, which the hub kills when it stops the spoke and when the spoke
// exits: the spoke itself cannot signal the server, whose Landlock domain
// is not nested in its own (so no parent-death signal reaches it either).
func startServer(decl External, policy sandbox.Policy, env []string) (*serverProcess, error) {
	encoded, err := policy.Encode()
	if err != nil {
		return nil, fmt.Errorf("failed to make the server's sandbox policy: %w", err)
	}
	// The spoke's own channel to the hub must not reach the server.
	syscall.CloseOnExec(iscFD)
	cmd := exec.Command("/proc/self/exe", append([]string{LaunchArg, "--policy", encoded, "--", decl.Command}, decl.Args...)...)
	cmd.Args[0] = "secgpt-launch"
	cmd.Env = env
	cmd.Dir = decl.Dir
	if cmd.Dir == "" {
		cmd.Dir = policy.Scratch
	}
	p := &serverProcess{exited: make(chan struct{})}
	var fromLauncher, toLauncher *os.File
	if policy.Notify {
		var childEnds []*os.File
		if fromLauncher, toLauncher, childEnds, err = listenerPipes(); err != nil {
			return nil, err
		}
		defer fromLauncher.Close()
		defer toLauncher.Close()
		cmd.ExtraFiles = childEnds // fds 3 and 4
		defer func() {
			for _, f := range childEnds {
				f.Close()
			}
		}()
	}
	if p.stdin, err = cmd.StdinPipe(); err == nil {
		if p.stdout, err = cmd.StdoutPipe(); err == nil {
			p.stderr, err = cmd.StderrPipe()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("failed to make the server's pipes: %w", err)
	}
	// In a mount namespace of its own, where it builds its own view.
	sandbox.PrepareLaunch(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("failed to start the server's launcher: %w", err)
	}
	p.pid = cmd.Process.Pid
	if p.pid <= 0 {
		return nil, errors.New("failed to start the server's launcher: no process")
	}
	go p.reap()
	if policy.Notify {
		for _, f := range cmd.ExtraFiles {
			f.Close()
		}
		if p.listener, err = takeListener(p.pid, fromLauncher, toLauncher); err != nil {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			return nil, err
		}
	}
	return p, nil
}
