//go:build linux

package sandbox

import (
	"slices"

	"golang.org/x/sys/unix"
)

// The seccomp filter is this table (plus archRules for the machine's
// architecture). Anything not listed fails with EPERM. A rule applies in the
// profiles it names; several rules for one syscall and action are OR-ed, the
// conditions inside one rule are AND-ed.
//
// The list was found by running the sbxtest child under strace with the
// filter on (a denied call shows as EPERM): a Go 1.26 cgo spoke doing JSON
// over fd 3, goroutines, timers, GC, new threads and files in scratch
// (attempts "workload" and "threads"), and for the exec profile a
// dynamically linked C program from its first instruction. It is kept as
// small as those need, plus the few the Go runtime needs only sometimes
// (netpoller set-up, GOMAXPROCS updates, vDSO fallback, fatal signals). The
// tests TestWorkloadUnderFilter and TestThreadsUnderFilter keep it enough;
// TestRuleTable checks every entry in-process.

// action is what the filter does for a matching syscall.
type action int

const (
	// actAllow lets the syscall run.
	actAllow action = iota + 1
	// actKill kills the whole process at once: for syscalls no spoke has a
	// reason to try, whose mere attempt is an attack.
	actKill
	// actENOSYS fails the syscall as if the kernel did not know it: for
	// syscalls that libraries probe and then fall back from.
	actENOSYS
)

// profiles is the set of profiles a rule applies in. ProfileProxy is
// ProfileStrict plus the rules marked inProxy; ProfileExecNet has the rules
// of ProfileExec but those marked inExecOnly, plus its own.
type profiles uint8

const (
	inStrict profiles = 1 << iota
	inExecOnly
	inExecNet
	inProxy
	inExec = inExecOnly | inExecNet
	inBoth = inStrict | inExec
)

func (ps profiles) has(p Profile) bool {
	switch p {
	case ProfileStrict:
		return ps&inStrict != 0
	case ProfileProxy:
		return ps&(inStrict|inProxy) != 0
	case ProfileExec:
		return ps&inExecOnly != 0
	case ProfileExecNet:
		return ps&inExecNet != 0
	}
	return false
}

// cmpOp compares one syscall argument.
type cmpOp int

const (
	// opEq: arg == Value.
	opEq cmpOp = iota + 1
	// opMaskedEq: arg & Mask == Value.
	opMaskedEq
)

// selfPID in a condition's Value stands for the spoke's own PID, which is
// known only when the filter is built.
const selfPID = ^uint64(0)

// cond is one condition on a syscall argument.
type cond struct {
	Arg   uint
	Op    cmpOp
	Value uint64
	Mask  uint64
}

// rule is one entry of the table.
type rule struct {
	// Name is the syscall's name as libseccomp knows it.
	Name string
	// When are conditions that must all hold; nil means always.
	When []cond
	// Action is what happens when the rule matches.
	Action action
	// Profiles are the profiles the rule applies in.
	Profiles profiles
	// Reason says why the rule exists. Every rule has one.
	Reason string
}

// sockTypeMask selects the socket type from socket(2)'s type argument,
// without SOCK_NONBLOCK and SOCK_CLOEXEC.
const sockTypeMask = 0xf

// cloneNamespaces are the clone flags that create namespaces. A thread may
// not ask for any of them.
const cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME

var (
	always     []cond
	unixDomain = []cond{{Arg: 0, Op: opEq, Value: unix.AF_UNIX}}
	// unixStream is a connected pair: connect cannot re-aim it, as it can
	// a datagram socket.
	unixStream = []cond{{Arg: 0, Op: opEq, Value: unix.AF_UNIX}, {Arg: 1, Op: opMaskedEq, Mask: sockTypeMask, Value: unix.SOCK_STREAM}}
	inetStream = []cond{{Arg: 0, Op: opEq, Value: unix.AF_INET}, {Arg: 1, Op: opMaskedEq, Mask: sockTypeMask, Value: unix.SOCK_STREAM}}
	inetDgram  = []cond{{Arg: 0, Op: opEq, Value: unix.AF_INET}, {Arg: 1, Op: opMaskedEq, Mask: sockTypeMask, Value: unix.SOCK_DGRAM}}
	noExecProt = []cond{{Arg: 2, Op: opMaskedEq, Mask: unix.PROT_EXEC, Value: 0}}
	toSelf     = []cond{{Arg: 0, Op: opEq, Value: selfPID}}
)

// chmodForbidden are the mode bits an exec-profile program may not set:
// Landlock does not govern chmod, so a program could otherwise make a file it
// owns (its scratch, or the hub's own files when the hub is not root) set-id
// or writable by others.
const chmodForbidden = unix.S_ISUID | unix.S_ISGID | unix.S_ISVTX | 0o022

// chmodReason is the reason of the chmod rules.
const chmodReason = "change a file's mode (os.chmod, fs.chmod, shutil.copy2); never set-id, sticky or writable by group or others, since Landlock does not govern chmod"

// chmodSafe matches a mode argument (arg) without chmodForbidden bits.
func chmodSafe(arg uint) []cond {
	return []cond{{Arg: arg, Op: opMaskedEq, Mask: chmodForbidden, Value: 0}}
}

// fcntlCmd matches one fcntl command.
func fcntlCmd(cmd int) []cond { return []cond{{Arg: 1, Op: opEq, Value: uint64(cmd)}} }

// genericRules is the architecture-independent part of the table.
var genericRules = []rule{
	// Threads, scheduling and synchronisation.
	{"clone", []cond{{Arg: 0, Op: opMaskedEq, Mask: unix.CLONE_THREAD | cloneNamespaces, Value: unix.CLONE_THREAD}}, actAllow, inBoth,
		"new threads only (the Go runtime and glibc's pthread_create): no process, no namespace"},
	{"clone3", always, actENOSYS, inBoth,
		"its flags sit behind a pointer the filter cannot read; ENOSYS makes glibc fall back to clone"},
	{"futex", always, actAllow, inBoth, "Go runtime and glibc locks, sleeps and wake-ups"},
	{"sched_yield", always, actAllow, inBoth, "Go runtime spinning (osyield)"},
	{"sched_getaffinity", always, actAllow, inBoth, "Go runtime sizes GOMAXPROCS from it, also after start"},
	{"nanosleep", always, actAllow, inBoth, "Go runtime usleep"},
	{"clock_gettime", always, actAllow, inBoth, "time when the vDSO falls back to the syscall"},
	{"restart_syscall", always, actAllow, inBoth, "kernel restart of a sleep interrupted by a signal"},
	{"set_robust_list", always, actAllow, inBoth, "glibc registers each new thread's robust futex list"},
	{"rseq", always, actAllow, inBoth, "glibc registers restartable sequences for each new thread"},
	{"gettid", always, actAllow, inBoth, "Go runtime and glibc thread identity"},
	{"getpid", always, actAllow, inBoth, "own process identity (signals to self)"},
	{"exit", always, actAllow, inBoth, "a thread ends"},
	{"exit_group", always, actAllow, inBoth, "the process ends"},

	// Memory.
	{"mmap", noExecProt, actAllow, inStrict, "heap, stacks and arenas; never executable: a built-in app has no code to load"},
	{"mmap", always, actAllow, inExec, "the dynamic loader maps libraries executable; JITs"},
	{"mprotect", noExecProt, actAllow, inStrict, "glibc thread stack guard pages; never executable"},
	{"mprotect", always, actAllow, inExec, "RELRO after relocation; JITs"},
	{"munmap", always, actAllow, inBoth, "Go runtime and glibc free memory"},
	{"madvise", always, actAllow, inBoth, "Go scavenger returns memory (MADV_DONTNEED) and sets huge-page hints"},
	{"mremap", always, actAllow, inExec, "glibc realloc of large blocks"},
	{"brk", always, actAllow, inExec, "glibc malloc's main arena"},

	// Signals, to itself only.
	{"rt_sigaction", always, actAllow, inBoth, "install signal handlers"},
	{"rt_sigprocmask", always, actAllow, inBoth, "Go runtime and glibc block signals per thread"},
	{"rt_sigreturn", always, actAllow, inBoth, "return from a signal handler"},
	{"sigaltstack", always, actAllow, inBoth, "Go runtime gives each thread a signal stack"},
	{"tgkill", toSelf, actAllow, inBoth, "Go runtime preempts its own threads with SIGURG; never another process"},
	{"kill", toSelf, actAllow, inBoth, "Go runtime re-raises a fatal signal on itself; never another process"},

	// Files and descriptors. Which paths may be opened is Landlock's job.
	{"openat", always, actAllow, inBoth, "open files; Landlock decides which"},
	{"close", always, actAllow, inBoth, "close descriptors"},
	{"read", always, actAllow, inBoth, "read fd 3 (ISC), files, the netpoller's eventfd"},
	{"write", always, actAllow, inBoth, "write fd 3 (ISC), stderr (logs), files, the netpoller's eventfd"},
	{"pread64", always, actAllow, inBoth, "Go runtime re-reads its cgroup CPU limit through an fd opened at start"},
	{"lseek", always, actAllow, inBoth, "seek in own files"},
	{"fstat", always, actAllow, inBoth, "stat an open descriptor"},
	{"newfstatat", always, actAllow, inBoth, "stat a path (Landlock does not restrict stat)"},
	{"getdents64", always, actAllow, inBoth, "list a directory Landlock lets it open"},
	{"mkdirat", always, actAllow, inBoth, "make directories in scratch (Landlock decides where)"},
	{"unlinkat", always, actAllow, inBoth, "remove files in scratch (Landlock decides where)"},
	{"renameat", always, actAllow, inBoth, "os.Rename in scratch (Landlock decides where)"},
	// fcntl by command: F_SETOWN, F_SETOWN_EX and F_SETSIG (with O_ASYNC)
	// would have the kernel signal any process of the spoke's uid,
	// F_SETLEASE and F_NOTIFY signal too; all are left to the default.
	{"fcntl", fcntlCmd(unix.F_GETFD), actAllow, inBoth, "Go's os.NewFile and interpreters read FD_CLOEXEC"},
	{"fcntl", fcntlCmd(unix.F_SETFD), actAllow, inBoth, "Go and interpreters set FD_CLOEXEC"},
	{"fcntl", fcntlCmd(unix.F_GETFL), actAllow, inBoth, "Go's netpoller and interpreters read O_NONBLOCK"},
	{"fcntl", []cond{{Arg: 1, Op: opEq, Value: unix.F_SETFL}, {Arg: 2, Op: opMaskedEq, Mask: unix.O_ASYNC, Value: 0}}, actAllow, inBoth,
		"set O_NONBLOCK; never O_ASYNC, which signals the descriptor's owner"},
	{"fcntl", fcntlCmd(unix.F_DUPFD_CLOEXEC), actAllow, inBoth, "duplicate a descriptor (Go's net.FileConn, os.dup)"},
	{"fcntl", fcntlCmd(unix.F_DUPFD), actAllow, inExec, "duplicate a descriptor (C programs)"},
	{"fcntl", fcntlCmd(unix.F_GETLK), actAllow, inExec, "record locks on its own files (SQLite in an app)"},
	{"fcntl", fcntlCmd(unix.F_SETLK), actAllow, inExec, "record locks on its own files (SQLite in an app)"},
	{"fcntl", fcntlCmd(unix.F_SETLKW), actAllow, inExec, "record locks on its own files (SQLite in an app)"},
	{"fcntl", fcntlCmd(unix.F_OFD_GETLK), actAllow, inExec, "open-file locks on its own files"},
	{"fcntl", fcntlCmd(unix.F_OFD_SETLK), actAllow, inExec, "open-file locks on its own files"},
	{"fcntl", fcntlCmd(unix.F_OFD_SETLKW), actAllow, inExec, "open-file locks on its own files"},

	// Go netpoller and timers.
	{"epoll_create1", always, actAllow, inBoth, "Go netpoller"},
	{"epoll_ctl", always, actAllow, inBoth, "Go netpoller"},
	{"epoll_pwait", always, actAllow, inBoth, "Go netpoller"},
	{"eventfd2", always, actAllow, inBoth, "Go netpoller wake-up"},

	// Sockets: AF_UNIX only, and no way to reach a socket by path or
	// abstract name: fd 3 is connected before the spoke starts.
	{"socket", unixDomain, actAllow, inStrict | inExecOnly, "AF_UNIX only: no IP, netlink, packet or vsock socket"},
	{"socketpair", unixDomain, actAllow, inStrict | inExecOnly, "in-process AF_UNIX pairs"},
	{"sendto", []cond{{Arg: 4, Op: opEq, Value: 0}}, actAllow, inExec,
		"send on a connected socket (CPython's socket.send, asyncio's self-pipe); never to an address"},
	{"recvfrom", always, actAllow, inExec, "receive on a connected socket (CPython's socket.recv)"},
	{"getsockopt", always, actAllow, inBoth, "Go's net.FileConn reads SO_TYPE of fd 3"},
	{"getsockname", always, actAllow, inBoth, "Go's net.FileConn reads fd 3's address"},
	{"getpeername", always, actAllow, inBoth, "Go's net.FileConn reads fd 3's peer"},

	// The egress proxy of an external app, in a network namespace of the
	// spoke's own (see ProfileProxy and ProfileExecNet): the spoke opens its
	// listener before Enter and then only accepts; the app's server only
	// connects, over TCP/IPv4, to the one port Landlock allows.
	{"accept4", always, actAllow, inProxy,
		"accept the app server's connections on the proxy's listener, opened before Enter; no socket, bind, listen or connect"},
	{"socket", slices.Concat(inetStream, []cond{{Arg: 2, Op: opEq, Value: 0}}), actAllow, inExecNet,
		"TCP over IPv4 only (protocol 0, the default), to reach the egress proxy: the namespace has no route but loopback, and Landlock allows only the proxy's TCP port"},
	{"socket", slices.Concat(inetStream, []cond{{Arg: 2, Op: opEq, Value: unix.IPPROTO_TCP}}), actAllow, inExecNet,
		"TCP over IPv4 named explicitly; no other protocol: Landlock's port rule does not cover MPTCP or SCTP"},
	{"connect", always, actAllow, inExecNet,
		"connect its TCP socket to the egress proxy; it can create no unix socket that connect could aim at a path"},
	{"socket", slices.Concat(inetDgram, []cond{{Arg: 2, Op: opEq, Value: 0}}), actAllow, inExecNet,
		"UDP over IPv4 (protocol 0) for DNS: the namespace has only loopback, where only the spoke's resolver listens, so a datagram reaches it or nothing"},
	{"socket", slices.Concat(inetDgram, []cond{{Arg: 2, Op: opEq, Value: unix.IPPROTO_UDP}}), actAllow, inExecNet,
		"UDP over IPv4 named explicitly, for DNS as above; never UDP-Lite or another protocol"},
	{"setsockopt", []cond{{Arg: 1, Op: opEq, Value: unix.SOL_SOCKET}, {Arg: 2, Op: opEq, Value: unix.SO_BROADCAST}}, actAllow, inExecNet,
		"Go's resolver sets SO_BROADCAST on every IPv4 UDP socket and fails without it; a namespace with only loopback has nowhere to broadcast"},
	{"setsockopt", []cond{{Arg: 1, Op: opEq, Value: unix.SOL_IP}, {Arg: 2, Op: opEq, Value: unix.IP_RECVERR}}, actAllow, inExecNet,
		"glibc's resolver asks for ICMP errors on its UDP socket (__res_enable_icmp) and gives up without them"},
	{"setsockopt", []cond{{Arg: 1, Op: opEq, Value: unix.SOL_IP}, {Arg: 2, Op: opEq, Value: unix.IP_TOS}}, actAllow, inExecNet,
		"Node 24's fetch (undici) sets the type of service of each HTTP connection and throws without it; a mark on loopback of the spoke's namespace changes nothing outside"},
	{"sendmmsg", always, actAllow, inExecNet,
		"glibc's resolver sends its A and AAAA queries at once; in the spoke's namespace a datagram reaches its resolver or nothing"},
	{"recvfrom", always, actAllow, inProxy,
		"the spoke's resolver reads queries on its UDP socket, bound before Enter"},
	{"sendto", always, actAllow, inProxy,
		"the spoke's resolver answers each query at its sender's address on loopback; the spoke can create no socket"},
	{"sendmsg", always, actAllow, inProxy,
		"the spoke passes an accepted TLS connection to the hub over its tunnel socket (SCM_RIGHTS); it can create no socket"},
	{"socketpair", unixStream, actAllow, inExecNet,
		"in-process stream pairs (Python asyncio's self-pipe); connected, so connect cannot aim them elsewhere"},
	{"setsockopt", []cond{{Arg: 1, Op: opEq, Value: unix.IPPROTO_TCP}, {Arg: 2, Op: opEq, Value: unix.TCP_NODELAY}}, actAllow, inProxy | inExecNet,
		"TCP_NODELAY on a proxy connection (Go sets it on every TCP connection; urllib3 and http.client fail without it)"},
	{"setsockopt", []cond{{Arg: 1, Op: opEq, Value: unix.SOL_SOCKET}, {Arg: 2, Op: opEq, Value: unix.SO_KEEPALIVE}}, actAllow, inExecNet,
		"keep-alive on a proxy connection (Go's dialer sets it)"},

	// TCP options that HTTP clients set on their connection to the egress
	// proxy: Node 24's and Go 1.23's keep-alive probes, curl's too.
	{"setsockopt", []cond{{Arg: 1, Op: opEq, Value: unix.IPPROTO_TCP}, {Arg: 2, Op: opEq, Value: unix.TCP_KEEPIDLE}}, actAllow, inExecNet,
		"keep-alive idle time (Node 24's socket.setKeepAlive, Go's KeepAliveConfig, curl)"},
	{"setsockopt", []cond{{Arg: 1, Op: opEq, Value: unix.IPPROTO_TCP}, {Arg: 2, Op: opEq, Value: unix.TCP_KEEPINTVL}}, actAllow, inExecNet,
		"keep-alive probe interval (Node 24, Go, curl)"},
	{"setsockopt", []cond{{Arg: 1, Op: opEq, Value: unix.IPPROTO_TCP}, {Arg: 2, Op: opEq, Value: unix.TCP_KEEPCNT}}, actAllow, inExecNet,
		"keep-alive probe count (Node 24, Go)"},
	{"shutdown", always, actAllow, inExecNet, "half-close a connection to the egress proxy (HTTP clients)"},

	// The spoke of an external app serves its server's seccomp listener
	// (Policy.Notify): only these two requests, which act on a listener
	// and nothing else.
	{"ioctl", []cond{{Arg: 1, Op: opEq, Value: unix.SECCOMP_IOCTL_NOTIF_RECV}}, actAllow, inStrict | inProxy,
		"receive a syscall its server's filter refused, to name it (sandbox.ServeListener)"},
	{"ioctl", []cond{{Arg: 1, Op: opEq, Value: unix.SECCOMP_IOCTL_NOTIF_SEND}}, actAllow, inStrict | inProxy,
		"refuse that syscall with EPERM (sandbox.ServeListener never lets one through)"},

	// Randomness and limits, read-only.
	{"getrandom", always, actAllow, inBoth, "crypto/rand and runtime seeding"},
	{"prlimit64", []cond{{Arg: 2, Op: opEq, Value: 0}}, actAllow, inExec,
		"read limits only (new_limit NULL): glibc reads RLIMIT_STACK; never raise a limit"},

	// What a dynamically linked glibc program needs beyond a Go spoke.
	{"readv", always, actAllow, inExec, "vectored I/O (libuv, stdio)"},
	{"writev", always, actAllow, inExec, "vectored I/O (libuv, stdio)"},
	{"statx", always, actAllow, inExec, "stat a path (libuv); Landlock does not restrict stat"},
	{"clock_nanosleep", always, actAllow, inExec, "glibc sleep functions"},
	{"readlinkat", always, actAllow, inExec, "interpreters and Go's certificate loader resolve links; Landlock does not govern links"},
	{"ppoll", always, actAllow, inExec, "wait for a descriptor (poll on architectures without the poll syscall)"},
	{"getuid", always, actAllow, inExec, "read own identity"},
	{"geteuid", always, actAllow, inExec, "read own identity"},
	{"getgid", always, actAllow, inExec, "read own identity"},
	{"getegid", always, actAllow, inExec, "read own identity"},
	{"getcwd", always, actAllow, inExec, "the working directory's path (os.getcwd); the launcher chose the directory"},

	// What real runtimes (Node 20 and 24, CPython 3.11, Go) do in ordinary
	// work, measured under strace (see TestRuntimesUnderExec). Which paths
	// they touch is Landlock's job; these rules only let the calls happen.
	{"pipe2", always, actAllow, inExec, "pipes: Node's start-up (libuv's signal and async pipes), CPython's os.pipe and subprocess"},
	{"dup", always, actAllow, inExec, "duplicate a descriptor (interpreters redirecting stdio)"},
	{"dup3", always, actAllow, inExec, "duplicate a descriptor onto another (libuv, Go's syscall.Dup3)"},
	{"close_range", always, actAllow, inExec, "close many own descriptors at once (CPython, libuv); acts on the caller's table only"},
	{"epoll_pwait2", always, actAllow, inExec, "event loops with a nanosecond timeout (newer libuv)"},
	{"timerfd_create", always, actAllow, inExec, "event-loop timers (libuv, asyncio's selectors)"},
	{"timerfd_settime", always, actAllow, inExec, "event-loop timers"},
	{"timerfd_gettime", always, actAllow, inExec, "event-loop timers"},
	{"pselect6", always, actAllow, inExec, "wait for descriptors (CPython's select.select, time.sleep)"},
	{"rt_sigtimedwait", always, actAllow, inExec, "wait for a signal sent to itself (CPython's signal.sigtimedwait, Node's signal thread)"},
	{"rt_sigsuspend", always, actAllow, inExec, "wait for a signal (signal.pause)"},
	{"wait4", always, actAllow, inBoth, "an external app's spoke reaps its server to say how it ended; elsewhere there is no child (fork is refused): ECHILD"},
	{"waitid", always, actAllow, inExec, "reap a child: as wait4"},
	{"fsync", always, actAllow, inExec, "flush its files to disk (the memory server's graph, SQLite, os.fsync)"},
	{"fdatasync", always, actAllow, inExec, "flush its files' data to disk (SQLite, Node's fs.fdatasync)"},
	{"flock", always, actAllow, inExec, "whole-file locks on files it could open (fcntl.flock, proper-lockfile)"},
	{"ftruncate", always, actAllow, inExec, "truncate a file opened for writing (Landlock ABI 3 governs truncation)"},
	{"pwrite64", always, actAllow, inExec, "write at an offset (SQLite, libuv's fs.write with a position)"},
	{"preadv", always, actAllow, inExec, "vectored read at an offset (libuv)"},
	{"pwritev", always, actAllow, inExec, "vectored write at an offset (libuv)"},
	{"sendfile", always, actAllow, inExec, "copy between its descriptors (CPython's shutil.copyfile)"},
	{"copy_file_range", always, actAllow, inExec, "copy between its descriptors (Node's fs.copyFile)"},
	{"renameat2", always, actAllow, inExec, "rename in scratch (Landlock decides where; glibc's renameat2, Node's fs.rename)"},
	{"fchmod", chmodSafe(1), actAllow, inExec, chmodReason},
	{"fchmodat", chmodSafe(2), actAllow, inExec, chmodReason},
	{"utimensat", always, actAllow, inExec, "set a file's times (os.utime, fs.utimes, shutil.copy2); needs ownership or write access"},
	{"listxattr", always, actAllow, inExec, "list a file's extended attributes (shutil.copy2 fails on EPERM); reading only"},
	{"llistxattr", always, actAllow, inExec, "list a link's extended attributes (shutil.copy2); reading only"},
	{"flistxattr", always, actAllow, inExec, "list an open file's extended attributes; reading only"},
	{"getxattr", always, actAllow, inExec, "read an extended attribute (shutil.copy2, libuv); setting them stays refused"},
	{"lgetxattr", always, actAllow, inExec, "read a link's extended attribute"},
	{"fgetxattr", always, actAllow, inExec, "read an open file's extended attribute"},
	{"faccessat", always, actAllow, inExec, "test a path's permissions (os.access); not a restriction boundary"},
	{"faccessat2", always, actAllow, inExec, "test a path's permissions (glibc's access, euidaccess)"},
	{"chdir", always, actAllow, inExec, "change the working directory (process.chdir, os.chdir); opening stays Landlock's to decide"},
	{"fchdir", always, actAllow, inExec, "change the working directory to an open directory"},
	{"uname", always, actAllow, inExec, "the kernel's name and version (os.uname, Node's os.release)"},
	{"sysinfo", always, actAllow, inExec, "total and free memory, uptime (Node's os.totalmem, glibc's sysconf)"},
	{"getppid", always, actAllow, inExec, "the parent's pid (process.ppid, os.getppid)"},
	{"getpgid", always, actAllow, inExec, "a process group's id (read only)"},
	{"getresuid", always, actAllow, inExec, "read own identity"},
	{"getresgid", always, actAllow, inExec, "read own identity"},
	{"getgroups", always, actAllow, inExec, "read own supplementary groups (os.getgroups, Node's os.userInfo)"},
	{"getrusage", always, actAllow, inExec, "own resource usage (process.resourceUsage, resource.getrusage)"},
	{"capget", always, actAllow, inExec, "read own capabilities (Node's start-up); it holds none"},
	{"clock_getres", always, actAllow, inExec, "timer resolution (time.get_clock_info, libuv)"},
	{"prctl", []cond{{Arg: 0, Op: opEq, Value: unix.PR_SET_NAME}}, actAllow, inExec, "name own threads (Node's worker and platform threads)"},
	{"prctl", []cond{{Arg: 0, Op: opEq, Value: unix.PR_SET_VMA}, {Arg: 1, Op: opEq, Value: unix.PR_SET_VMA_ANON_NAME}}, actAllow, inBoth,
		"name own anonymous mappings (the Go 1.25+ runtime names its heap; V8 its regions)"},
	{"prctl", []cond{{Arg: 0, Op: opEq, Value: unix.PR_GET_NAME}}, actAllow, inExec, "read own thread names"},
	{"recvmsg", always, actAllow, inExec, "receive on its own socket (asyncio, libuv stdio); receiving reaches no one"},
	{"pkey_alloc", always, actAllow, inExec, "V8 (Node 24) protects its JIT memory with protection keys; within its own address space"},
	{"pkey_free", always, actAllow, inExec, "V8's protection keys"},
	{"pkey_mprotect", always, actAllow, inExec, "V8's protection keys"},

	// The one execve of the exec profile. Landlock grants EXECUTE on ExecPath
	// and its ELF interpreter only, so this is the only program it can start.
	{"execve", always, actAllow, inExec, "start ExecPath (Landlock allows executing nothing else)"},

	// Never: these kill the process on sight.
	{"ptrace", always, actKill, inBoth, "reading or steering another process"},
	{"process_vm_readv", always, actKill, inBoth, "reading another process's memory"},
	{"process_vm_writev", always, actKill, inBoth, "writing another process's memory"},
	{"mount", always, actKill, inBoth, "changing the file system view"},
	{"umount2", always, actKill, inBoth, "changing the file system view"},
	{"pivot_root", always, actKill, inBoth, "changing the file system view"},
	{"chroot", always, actKill, inBoth, "changing the file system view"},
	{"fsopen", always, actKill, inBoth, "new mount API"},
	{"fsconfig", always, actKill, inBoth, "new mount API"},
	{"fsmount", always, actKill, inBoth, "new mount API"},
	{"fspick", always, actKill, inBoth, "new mount API"},
	{"move_mount", always, actKill, inBoth, "new mount API"},
	{"open_tree", always, actKill, inBoth, "new mount API"},
	{"mount_setattr", always, actKill, inBoth, "new mount API"},
	{"open_by_handle_at", always, actKill, inBoth, "opens files by handle, bypassing path checks (container escapes)"},
	{"bpf", always, actKill, inBoth, "loading kernel programs"},
	{"perf_event_open", always, actKill, inBoth, "kernel attack surface and side channels"},
	{"keyctl", always, actKill, inBoth, "kernel keyrings may hold other users' secrets"},
	{"add_key", always, actKill, inBoth, "kernel keyrings"},
	{"request_key", always, actKill, inBoth, "kernel keyrings"},
	{"kexec_load", always, actKill, inBoth, "replacing the kernel"},
	{"kexec_file_load", always, actKill, inBoth, "replacing the kernel"},
	{"init_module", always, actKill, inBoth, "loading kernel modules"},
	{"finit_module", always, actKill, inBoth, "loading kernel modules"},
	{"delete_module", always, actKill, inBoth, "unloading kernel modules"},
	{"unshare", always, actKill, inBoth, "new namespaces are a kernel attack surface; the spoke's are set by its parent"},
	{"setns", always, actKill, inBoth, "joining another namespace"},
	{"userfaultfd", always, actKill, inBoth, "a classic aid to kernel exploits (stalling the kernel on a fault)"},
	{"io_uring_setup", always, actENOSYS, inBoth,
		"io_uring bypasses this filter; ENOSYS, not kill, because libuv and others probe it and fall back"},
	{"io_uring_enter", always, actENOSYS, inBoth, "io_uring bypasses this filter"},
	{"io_uring_register", always, actENOSYS, inBoth, "io_uring bypasses this filter"},
}
