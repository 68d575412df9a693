//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// Enter confines the calling process according to p. The child calls it
// first thing and exits if it returns an error. It applies, in this order:
//
//  1. an empty environment (os.Clearenv);
//  2. closing every inherited file descriptor but 0–3 (see closeInherited);
//  3. resource limits (setLimits);
//  4. no_new_privs on every thread (set here on the calling thread,
//     carried to the others by Landlock and seccomp's TSYNC);
//  5. a view of its own (viewSkeleton, then view.finish), where it holds CAP_SYS_ADMIN in a
//     mount namespace of its own: a root holding only the paths Landlock
//     names below, a minimal /dev and its own /proc; then every capability
//     is dropped;
//  6. Landlock: read-only access to the executable and the libraries it
//     maps, to p.ReadOnly, and for ProfileExec and ProfileExecNet to the
//     system paths (systemPaths); EXECUTE only on p.ExecPath and its ELF interpreter;
//     read-write access to p.Scratch; no TCP or UDP port but, for
//     ProfileExecNet, TCP connect to p.ProxyPort and TransparentTCPPorts
//     and UDP to ResolverPort; abstract unix sockets and signals scoped to
//     the spoke;
//  7. the seccomp allowlist of p.Profile, on every thread (TSYNC).
//
// First it runs SetUpNamespaces, if the caller did not, and bounds the
// spoke's scratch (mountScratch). Before the limits it drops every
// capability the process holds (CAP_SYS_ADMIN over its own namespaces,
// which the scratch and the view need, and, for a ProfileProxy spoke that
// did not call UpLoopback and DropCapabilities, the network ones). Without
// a mount namespace of its own the view is off and the report says why. ProfileProxy
// and ProfileExecNet need a network namespace of their own, as seen from
// inside (loopback is the only interface).
//
// If seccomp or Landlock or such a namespace is unavailable, Enter fails
// with a *MissingError before it changes anything, unless p.AllowWeaker, in
// which case it reports the protection off and goes on. Any other failure is an error: a
// half-applied sandbox is never reported as applied. Once Enter has run, it
// cannot be undone.
//
// The caller must run Enter before it reads its first frame or runs any app
// code. Threads, timers and an os.File for fd 3 created before Enter are
// fine: every thread is confined, and descriptors the process opened
// itself are kept.
func Enter(p Policy) (Report, error) {
	e, err := begin(p)
	if err != nil {
		return e.rep, err
	}
	return e.finish(p)
}

// Spare is a spoke started ahead of need (see Policy.Prestartable) whose
// sandbox is applied as far as it can be before the spoke knows its
// policy: EnterSpare did that part of Enter, and Spare.Enter does the rest
// once the policy is known.
type Spare struct {
	e    *entering
	used bool
}

// EnterSpare does the part of Enter that does not depend on the policy a
// spare will be given, under spare, the policy it was started under (see
// Policy.Prestartable), so that only the policy's own part is left when
// it is claimed: the environment is cleared, the inherited descriptors but
// 0-4 closed (fd 4 is where a spare reads its launch arguments; Spare.Enter
// closes it), the namespaces checked, the files the process maps found, the
// view's skeleton built (its root, /dev, /proc and the mapped files bound,
// pivoted, the host's root detached) and the seccomp filter of spare's
// profile compiled. The process reads nothing
// but its own /proc and the host's view of its own binary. If it fails,
// the spare is of no use and must exit: it is not half confined.
func EnterSpare(spare Policy) (*Spare, error) {
	if !spare.Prestartable(spare) || spare.Scratch != "" {
		return nil, fmt.Errorf("%w: a spare's policy must be a strict one without scratch", ErrInvalidPolicy)
	}
	// fd 4 is the spare's own until it is claimed.
	if _, err := unix.FcntlInt(spareLaunchFD, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("failed to keep the spare's launch descriptor: %w", err)
	}
	e, err := begin(spare)
	if err != nil {
		return nil, err
	}
	e.spare = true
	if e.view != nil {
		// The grace period a detach waits for is spent now, not when
		// the spare is claimed: what its policy may add to the view
		// needs nothing of the host (see SpareCanBecome).
		start := time.Now()
		if err := e.view.detachHost(); err != nil {
			return nil, err
		}
		e.viewTime += time.Since(start)
		// Its paths are in the view now.
		if e.landlock, err = prepareLandlock(e.abi, e.mapped); err != nil {
			return nil, err
		}
	}
	if e.scOK {
		if e.filter, err = compileFilter(spare.Profile, unix.Getpid()); err != nil {
			return nil, err
		}
	}
	// The claim signals every thread (psx) to drop capabilities, and
	// again for Landlock: a first round now, of a syscall that changes
	// nothing, takes the page faults of that path (the handler, the
	// threads' signal stacks) before the claim, not in it.
	if _, _, errno := psx.Syscall6(unix.SYS_PRCTL, unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0, 0); errno != 0 {
		return nil, fmt.Errorf("failed to reach the spare's threads: %w", errno)
	}
	return &Spare{e: e}, nil
}

// SpareCanBecome reports whether a spare started under spare can become a
// spoke under p here: p is Prestartable under spare and, where the spare
// builds a view (it is given a mount namespace of its own: see Prepare),
// needs nothing of the host's files but the executable the spare maps
// already, since the spare detaches the host's root before it is claimed:
// no read-only or read-write path and no scratch but a tmpfs of its own.
func SpareCanBecome(p, spare Policy) bool {
	if !p.Prestartable(spare) {
		return false
	}
	c := capabilities()
	views := spare.Namespaces && c.UserNS && c.PIDNS
	return !views || !needsHost(p)
}

// needsHost reports whether a spoke under p needs host paths in its view
// beyond its executable: read-only or read-write paths, an executable, or
// a scratch directory the hub keeps.
func needsHost(p Policy) bool {
	return len(p.ReadOnly) > 0 || len(p.ReadWrite) > 0 || p.ExecPath != "" || p.Scratch != "" && !p.ownScratch()
}

// spareLaunchFD is the descriptor on which a spare reads its launch
// arguments, which EnterSpare keeps open.
const spareLaunchFD = 4

// Enter applies the rest of the sandbox for p, which must be Prestartable
// under the spare's policy, as Enter would have applied it from the start:
// the report says the same, line for line. The caller has read and closed
// fd 4 (its launch arguments) before. It may be called once.
func (s *Spare) Enter(p Policy) (Report, error) {
	if s.used {
		return Report{Listener: -1}, errors.New("the spare's sandbox is already applied")
	}
	s.used = true
	if !p.Prestartable(s.e.base) || s.e.view != nil && needsHost(p) {
		return s.e.rep, fmt.Errorf("%w: the policy does not fit the spare (profile %s)", ErrInvalidPolicy, p.Profile)
	}
	return s.e.finish(p)
}

// entering is Enter's state between what does not depend on the spoke's
// policy (begin) and what does (finish).
type entering struct {
	// base is the policy begin ran under: the spoke's own, or a spare's.
	base Policy
	// spare says begin ran ahead of the policy (EnterSpare).
	spare     bool
	rep       Report
	abi       int
	llDetail  string
	scOK      bool
	scDetail  string
	netOwn    bool
	netDetail string
	mapped    []string
	viewOK    bool
	viewWhy   string
	view      *view // the view being built; nil without one
	viewTime  time.Duration
	cwd       string
	filter    *compiledFilter // base's filter, compiled ahead; nil to build in finish
	// landlock is base's ruleset, made ahead; nil to make in finish.
	landlock *landlockRuleset
}

// begin does what Enter does before it looks at p's paths, limits and
// rules: steps 1, 2 and the part of 5 that holds for every policy of p's
// profile, and the checks.
func begin(p Policy) (*entering, error) {
	e := &entering{base: p, rep: Report{Listener: -1}}
	if err := p.Validate(); err != nil {
		return e, err
	}
	if err := SetUpNamespaces(); err != nil {
		return e, err
	}
	e.abi, e.llDetail = landlockSupport()
	e.scOK, e.scDetail = seccompSupport()
	var missing []string
	if e.abi < 1 {
		missing = append(missing, "landlock: "+e.llDetail)
	}
	if !e.scOK {
		missing = append(missing, "seccomp: "+e.scDetail)
	}
	e.netOwn = true
	if p.Profile.ownNetwork() {
		if e.netOwn, e.netDetail = ownNetworkNamespace(); !e.netOwn {
			missing = append(missing, "network namespace: "+e.netDetail)
		}
	}
	if len(missing) > 0 && !p.AllowWeaker {
		return e, &MissingError{Missing: missing}
	}

	n := len(os.Environ())
	os.Clearenv()
	e.rep.add("environment", true, fmt.Sprintf("cleared %d variables", n))

	closed, err := closeInherited()
	if err != nil {
		return e, err
	}
	e.rep.add("file descriptors", true, fmt.Sprintf("closed %d inherited; kept 0-3", closed))

	ns := namespacesDetail()
	e.rep.add(namespacesProtection, ns != "none", ns)
	if p.Profile.ownNetwork() {
		if e.netOwn {
			e.rep.add("network namespace", true, "its own, loopback only (profile "+string(p.Profile)+")")
		} else {
			e.rep.add("network namespace", false, "weaker sandbox allowed: "+e.netDetail)
		}
	}

	// Paths are gathered before the view and the limits: reading
	// /proc/self/maps needs a descriptor and memory, Landlock will forbid
	// it, and they are the paths the view holds.
	e.viewOK, e.viewWhy = canBuildView()
	if e.abi > 0 || e.viewOK {
		if e.mapped, err = mappedFiles(); err != nil {
			return e, err
		}
	}
	if e.cwd, err = os.Getwd(); err != nil {
		e.cwd = "/"
	}
	if e.viewOK {
		start := time.Now()
		if e.view, err = viewSkeleton(e.mapped); err != nil {
			return e, err
		}
		e.viewTime = time.Since(start)
	}
	return e, nil
}

// finish applies the rest of Enter for p: the scratch, the policy's own
// paths in the view, the capabilities, limits, Landlock and seccomp.
func (e *entering) finish(p Policy) (Report, error) {
	rep := &e.rep
	if err := p.Validate(); err != nil {
		return *rep, err
	}
	p.Limits = p.Limits.WithDefaults(p.Profile)
	// no_new_privs and the seccomp filter are set by this thread first.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	// While the spoke may still mount (see SetUpNamespaces); in the
	// view's skeleton the host is at hostMount.
	host, inView := "", false
	if e.view != nil {
		if host = hostMount; e.view.hostGone {
			host, inView = "", true
		}
	}
	diskOn, diskDetail, err := mountScratch(p, host, inView)
	if err != nil {
		return *rep, err
	}
	rep.add(diskProtection, diskOn, diskDetail)

	var lp landlockPaths
	if e.abi > 0 || e.viewOK {
		if lp, err = landlockRules(p, e.mapped, host); err != nil {
			return *rep, err
		}
	}
	cwd := e.cwd
	if p.Scratch != "" {
		cwd = p.Scratch
	}
	if e.view != nil {
		start := time.Now()
		if err := e.view.finish(lp, cwd); err != nil {
			return *rep, err
		}
		rep.add(viewProtection, true, e.view.detail(time.Since(start), e.viewTime, e.spare))
	} else {
		if p.Scratch != "" {
			if err := os.Chdir(p.Scratch); err != nil {
				return *rep, fmt.Errorf("failed to enter the spoke's scratch: %w", err)
			}
		}
		rep.add(viewProtection, false, e.viewWhy+": the spoke can stat (not read) the host's files")
	}

	// A spare's ruleset restricts its threads while they hold
	// CAP_SYS_ADMIN (see landlockRuleset); it is reported in its place.
	var spareLandlock string
	if e.landlock != nil {
		if spareLandlock, err = e.landlock.restrict(lp); err != nil {
			return *rep, err
		}
	}

	// A spoke in a mount namespace holds CAP_SYS_ADMIN over it until
	// here, and a ProfileProxy spoke CAP_NET_ADMIN over its own network
	// namespace until UpLoopback; no spoke runs on with a capability.
	if dropped, err := dropCapabilities(); err != nil {
		return *rep, err
	} else if dropped {
		rep.add("capabilities", true, "dropped from every thread")
	}

	limits, err := setLimits(p.Limits, !(p.Cgroup && p.Profile.executes()))
	if err != nil {
		return *rep, err
	}
	rep.add("rlimits", true, limits)

	// Seccomp (TSYNC) and Landlock as applyLandlock applies it each
	// carry no_new_privs to every thread; only without both must it be
	// set on each thread here. A spare's ruleset restricted its threads
	// on CAP_SYS_ADMIN, without it (see landlockRuleset).
	if e.scOK || e.abi > 0 && e.landlock == nil {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return *rep, fmt.Errorf("failed to set no_new_privs: %w", err)
		}
	} else if err := ll.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return *rep, fmt.Errorf("failed to set no_new_privs: %w", err)
	}
	rep.add("no_new_privs", true, "all threads")

	if spareLandlock != "" {
		rep.add("landlock", true, spareLandlock)
	} else if e.abi > 0 {
		detail, err := applyLandlock(lp)
		if err != nil {
			return *rep, err
		}
		rep.add("landlock", true, detail)
	} else {
		rep.add("landlock", false, "weaker sandbox allowed: "+e.llDetail)
	}

	if e.scOK {
		notify := p.Notify && p.Profile.executes()
		var detail string
		var listener int
		if e.filter != nil && e.filter.profile == p.Profile && !notify {
			detail, err = e.filter.load()
			listener = -1
		} else {
			detail, listener, err = installSeccomp(p.Profile, notify)
		}
		if err != nil {
			return *rep, err
		}
		rep.Listener = listener
		rep.add("seccomp", true, fmt.Sprintf("profile %s: %s", p.Profile, detail))
	} else {
		rep.add("seccomp", false, "weaker sandbox allowed: "+e.scDetail)
	}
	return *rep, nil
}

// closeInherited closes every descriptor above 3 that was inherited across
// execve, and returns how many it closed.
//
// It does not use close_range(4, ~0): the Go runtime (1.25+) opens its
// cgroup CPU-limit files at start and keeps reading them, so descriptors
// above 3 may be the runtime's own. Every descriptor that survived execve
// lacks FD_CLOEXEC (the kernel closed the others), and every descriptor Go
// creates has it; so the inherited ones are exactly those without it.
func closeInherited() (int, error) {
	dir, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("failed to list file descriptors: %w", err)
	}
	names, err := dir.Readdirnames(-1)
	dirFD := int(dir.Fd())
	if err != nil {
		dir.Close()
		return 0, fmt.Errorf("failed to list file descriptors: %w", err)
	}
	closed := 0
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd <= 3 || fd == dirFD {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		if err := unix.Close(fd); err != nil {
			dir.Close()
			return closed, fmt.Errorf("failed to close inherited descriptor %d: %w", fd, err)
		}
		closed++
	}
	if err := dir.Close(); err != nil {
		return closed, fmt.Errorf("failed to close /proc/self/fd: %w", err)
	}
	return closed, nil
}

// setLimits sets l as soft and hard limits (CPU: hard one second above
// soft), and RLIMIT_CORE to 0. It never raises a limit the parent already
// set lower. syscall.Setrlimit is used so that Go does not restore its
// start-up NOFILE limit on exec.
//
// RLIMIT_NPROC is not set: it counts every thread of the uid in every
// process, and all spokes of a root hub share uid 65534, so one spoke could
// starve the others. The seccomp clone rule stops fork bombs, and the
// spoke's cgroup bounds its tasks.
//
// RLIMIT_AS is set only when addressSpace; otherwise it is left as the
// parent set it (unlimited), and the spoke's cgroup bounds its memory.
func setLimits(l Limits, addressSpace bool) (string, error) {
	as := l.AddressSpace
	if !addressSpace {
		as = unix.RLIM_INFINITY
	}
	set := []struct {
		name     string
		resource int
		cur, max uint64
	}{
		{"cpu", unix.RLIMIT_CPU, l.CPUSeconds, l.CPUSeconds + 1},
		{"as", unix.RLIMIT_AS, as, as},
		{"fsize", unix.RLIMIT_FSIZE, l.FileSize, l.FileSize},
		{"nofile", unix.RLIMIT_NOFILE, l.OpenFiles, l.OpenFiles},
		{"core", unix.RLIMIT_CORE, 0, 0},
	}
	var parts []string
	for _, s := range set {
		var old syscall.Rlimit
		if err := syscall.Getrlimit(s.resource, &old); err != nil {
			return "", fmt.Errorf("failed to get rlimit %s: %w", s.name, err)
		}
		lim := syscall.Rlimit{Cur: min(s.cur, old.Max), Max: min(s.max, old.Max)}
		if err := syscall.Setrlimit(s.resource, &lim); err != nil {
			return "", fmt.Errorf("failed to set rlimit %s: %w", s.name, err)
		}
		parts = append(parts, fmt.Sprintf("%s %d/%d", s.name, lim.Cur, lim.Max))
	}
	return strings.Join(parts, ", "), nil
}

// namespacesDetail says which new namespaces the process runs in, as far
// as it can tell from inside: a user namespace maps fewer than all uids, a
// PID namespace makes it PID 1, a network namespace shows only loopback.
func namespacesDetail() string {
	var in []string
	if m, err := os.ReadFile("/proc/self/uid_map"); err == nil && !strings.Contains(string(m), "4294967295") {
		in = append(in, "user ("+strings.Join(strings.Fields(string(m)), " ")+")")
	}
	if os.Getpid() == 1 {
		in = append(in, pidNamespaceDetail())
	}
	if dev, err := os.ReadFile("/proc/self/net/dev"); err == nil {
		lines := strings.Split(strings.TrimSpace(string(dev)), "\n")
		if len(lines) == 3 && strings.HasPrefix(strings.TrimSpace(lines[2]), "lo:") {
			in = append(in, "net (loopback only)")
		}
	}
	if len(in) == 0 {
		return "none"
	}
	return strings.Join(in, ", ")
}

// Exec replaces the spoke with p.ExecPath (ProfileExec and ProfileExecNet
// only), after Enter.
// argv[0] is the program's name; env is its whole environment. Exec returns
// only on failure.
//
// What the exec profile guarantees: the seccomp filter, the Landlock
// domain, the limits and no_new_privs carry over to the new program and to
// anything it might execute; Landlock grants EXECUTE on ExecPath and its ELF
// interpreter and on nothing else, so neither the spoke nor the program can
// execute another file (EACCES), and execveat and fork stay denied. What it
// does not: a seccomp filter cannot tell the first execve from a later one,
// so the program may execute ExecPath again (for instance through
// /proc/self/exe), or its interpreter on another readable ELF file. Both
// run under the same sandbox and gain nothing the program could not do by
// itself. Enter refuses a script as ExecPath: its interpreter would need
// EXECUTE.
func Exec(p Policy, argv, env []string) error {
	if !p.Profile.executes() {
		return fmt.Errorf("%w: profile %q", ErrWrongProfile, p.Profile)
	}
	err := syscall.Exec(p.ExecPath, argv, env)
	return fmt.Errorf("failed to exec %s: %w", p.ExecPath, err)
}
