package sandboxcheck

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/secgpt/secgpt/apps/hostile"
	"github.com/secgpt/secgpt/spoke"
)

// Attack is one attempt of the hostile app, what it aims at and how it
// must be stopped.
type Attack struct {
	// Name is the attack's test-case name.
	Name string
	// Title says what the attack tries, for the table.
	Title string
	// Function is the hostile app's function that makes the attempt.
	Function string

	// args are the function's arguments, in the order the query names them.
	args func(*Lab) []arg
	// stop is what must stop the attempt.
	stop stop
	// leak, when set, is text the attacker would see had it succeeded; it
	// must appear nowhere in the attacker's reply or logs.
	leak func(*Lab) string
	// outside checks from outside the spoke that nothing happened.
	outside func(*evidence) error
}

// arg is one keyed value of the attack's query.
type arg struct{ key, value string }

// stop is what must stop an attempt.
type stop struct {
	// by is the mechanism's kind.
	by stopKind
	// causes are, for byKill, the spoke failures that count.
	causes []error
	// signals are, for byKill of an MCP server, the signals that count:
	// the server dies, and its spoke reports how.
	signals []string
	// overMemory: for byKill of an MCP server, the spoke must also have
	// seen the kernel kill it at its memory bound.
	overMemory bool
}

type stopKind int

const (
	// byReport: a system call fails with an errno a protection gives,
	// and the app reports the attempt blocked.
	byReport stopKind = iota + 1
	// byKill: the spoke is killed before it can report (a seccomp kill, a
	// resource limit, the hub), with one of causes.
	byKill
	// byBroker: the hub's egress broker refuses the request.
	byBroker
	// allowed: a control, which must succeed, so that the check is seen to
	// notice a success.
	allowed
	// byReportOrKill: byReport, or byKill: an interpreter either reports
	// a refused resource or is ended for it.
	byReportOrKill
	// byOwnResolver: an MCP server's own name lookup is answered by its
	// spoke's resolver with a loopback address, and nothing is resolved
	// outside (egress goes through the broker, which resolves).
	byOwnResolver
)

var (
	reported = stop{by: byReport}
	refused  = stop{by: byBroker}
	control  = stop{by: allowed}
)

func killed(causes ...error) stop { return stop{by: byKill, causes: causes} }

func path(p string) []arg { return []arg{{"path", p}} }

// Attacks returns the attacks of the issue, each its own case.
func Attacks() []Attack {
	return []Attack{
		{
			Name: "read_etc_shadow", Title: "read /etc/shadow", Function: hostile.ReadFile,
			args: func(*Lab) []arg { return path("/etc/shadow") }, stop: reported,
			leak: func(*Lab) string { return "root:" },
		},
		{
			Name: "read_hub_database", Title: "read the hub's SQLite database", Function: hostile.ReadFile,
			args: func(l *Lab) []arg { return path(l.Database) }, stop: reported,
			leak: func(*Lab) string { return "SQLite format 3" },
		},
		{
			Name: "read_config_file", Title: "read the config file", Function: hostile.ReadFile,
			args: func(l *Lab) []arg { return path(l.config) }, stop: reported,
			leak: func(l *Lab) string { return l.secret },
		},
		{
			Name: "read_other_users_scratch", Title: "read another user's scratch directory (same uid)", Function: hostile.ReadFile,
			args: func(l *Lab) []arg { return path(l.victimSecret) }, stop: reported,
			leak: func(l *Lab) string { return l.secret },
		},
		{
			Name: "read_hub_environ", Title: "read /proc/<hub pid>/environ", Function: hostile.ReadFile,
			args: func(l *Lab) []arg { return path(fmt.Sprintf("/proc/%d/environ", l.hubPID)) }, stop: reported,
			leak: func(*Lab) string { return "PATH=" },
		},
		{
			Name: "read_hub_memory", Title: "read /proc/<hub pid>/mem", Function: hostile.ReadFile,
			args: func(l *Lab) []arg { return path(fmt.Sprintf("/proc/%d/mem", l.hubPID)) }, stop: reported,
		},
		{
			Name: "write_outside_scratch", Title: "append to a world-writable file outside its scratch", Function: hostile.WriteFile,
			args: func(l *Lab) []arg { return path(l.outside) }, stop: reported,
			outside: func(e *evidence) error { return unchanged(e.lab.outside, outsideContent) },
		},
		{
			Name: "create_outside_scratch", Title: "create a file in a world-writable directory outside its scratch", Function: hostile.WriteFile,
			args: func(l *Lab) []arg { return path(l.outsideNew) }, stop: reported,
			outside: func(e *evidence) error { return absent(e.lab.outsideNew) },
		},
		{
			Name: "tcp_to_loopback", Title: "TCP to 127.0.0.1 (the homeserver's listener)", Function: hostile.DialTCP,
			args: func(l *Lab) []arg { return []arg{{"address", l.loopbackTCP()}} }, stop: reported,
			outside: func(e *evidence) error { return untouched("TCP listener", e.lab.tcp.accepted.Load()) },
		},
		{
			Name: "udp_to_loopback", Title: "UDP to 127.0.0.1", Function: hostile.DialUDP,
			args: func(l *Lab) []arg { return []arg{{"address", l.loopbackUDP()}} }, stop: reported,
			outside: func(e *evidence) error { return untouched("UDP socket", e.lab.udp.received.Load()) },
		},
		{
			Name: "tcp_to_public", Title: "TCP to a public address", Function: hostile.DialTCP,
			args: func(*Lab) []arg { return []arg{{"address", publicTCP}} }, stop: reported,
		},
		{
			Name: "udp_to_public", Title: "UDP to a public address (a DNS server)", Function: hostile.DialUDP,
			args: func(*Lab) []arg { return []arg{{"address", publicUDP}} }, stop: reported,
		},
		{
			Name: "resolve_name", Title: "resolve a name by itself", Function: hostile.Resolve,
			args: func(*Lab) []arg { return []arg{{"host", "example.net"}} }, stop: reported,
		},
		{
			Name: "connect_unix_socket", Title: "connect to a unix socket by path (the hub's or a spoke's)", Function: hostile.DialUnix,
			args: func(l *Lab) []arg { return path(l.unixSocket) }, stop: reported,
			outside: func(e *evidence) error { return untouched("unix socket", e.lab.unix.accepted.Load()) },
		},
		{
			Name: "fork_bomb", Title: "fork bomb (clone without CLONE_THREAD)", Function: hostile.ForkBomb,
			args: func(*Lab) []arg { return nil }, stop: reported,
			outside: func(e *evidence) error { return aloneInGroup(e.pid) },
		},
		{
			Name: "execve", Title: "execve /bin/sh", Function: hostile.Execute,
			args: func(l *Lab) []arg { return []arg{{"program", "/bin/sh"}, {"marker", l.execMarker}} }, stop: reported,
			outside: func(e *evidence) error { return absent(e.lab.execMarker) },
		},
		{
			Name: "ptrace_hub", Title: "ptrace the hub", Function: hostile.Ptrace,
			args: func(l *Lab) []arg { return []arg{{"pid", strconv.Itoa(l.hubPID)}} }, stop: killed(spoke.ErrCrashed),
			outside: func(*evidence) error { return notTraced() },
		},
		{
			Name: "allocate_4gib", Title: "allocate 4 GiB", Function: hostile.Allocate,
			args: func(*Lab) []arg { return []arg{{"bytes", strconv.Itoa(4 << 30)}} }, stop: reported,
			outside: func(e *evidence) error { return peakBelow(e.pid, 4<<30) },
		},
		{
			Name: "spin_cpu_forever", Title: "spin the CPU forever", Function: hostile.Spin,
			args: func(*Lab) []arg { return nil }, stop: killed(spoke.ErrCrashed, spoke.ErrDeadline),
		},
		{
			Name: "write_10gib_file", Title: "write a 10 GiB file", Function: hostile.BigFile,
			args:    func(*Lab) []arg { return []arg{{"path", bigFileName}, {"bytes", strconv.Itoa(10 << 30)}} },
			stop:    reported,
			outside: func(e *evidence) error { return sizeAtMost(e.inScratch(bigFileName), e.limits.FileSize) },
		},
		{
			Name: "fill_scratch", Title: "fill its scratch with 1 MiB files, up to 100 GiB", Function: hostile.FillDisk,
			args:    func(*Lab) []arg { return []arg{{"path", "."}, {"count", "102400"}} },
			stop:    reported,
			outside: func(e *evidence) error { return scratchWithin(e.inScratch(""), e.limits) },
		},
		{
			Name: "open_100000_files", Title: "open 100,000 files", Function: hostile.ManyFiles,
			args: func(*Lab) []arg { return []arg{{"path", "."}, {"count", "100000"}} }, stop: reported,
			outside: func(e *evidence) error { return openFilesAtMost(e.pid, e.limits.OpenFiles) },
		},
		{
			Name: "flood_10000_frames", Title: "send 10,000 frames a second", Function: hostile.Flood,
			args: func(*Lab) []arg { return []arg{{"frames", "10000"}} }, stop: killed(spoke.ErrFlood),
		},
		{
			Name: "stall_unread_replies", Title: "send 10,000 requests and never read the replies", Function: hostile.Stall,
			args: func(*Lab) []arg { return []arg{{"frames", "10000"}} }, stop: killed(spoke.ErrFlood, spoke.ErrDeadline),
		},
		{
			Name: "egress_undeclared_domain", Title: "egress to a domain not declared", Function: hostile.Fetch,
			args: func(*Lab) []arg { return []arg{{"url", undeclaredURL}} }, stop: refused,
			outside: func(e *evidence) error { return e.nothingResolvedOrDialled() },
		},
		{
			Name: "egress_declared_to_loopback", Title: "egress to a declared domain resolving to 127.0.0.1", Function: hostile.Fetch,
			// The default port: the broker refuses any other before it
			// resolves, and this attack is on the address check.
			args: func(*Lab) []arg { return []arg{{"url", "http://" + loopbackHost + "/"}} },
			stop: refused,
			outside: func(e *evidence) error {
				return e.nothingDialled()
			},
		},
		{
			Name: "egress_declared_to_metadata", Title: "egress to a declared domain resolving to 169.254.169.254", Function: hostile.Fetch,
			args:    func(*Lab) []arg { return []arg{{"url", "http://" + metadataHost + "/latest/meta-data/"}} },
			stop:    refused,
			outside: func(e *evidence) error { return e.nothingDialled() },
		},
		{
			Name: "egress_redirect_to_loopback", Title: "egress redirected to a name resolving to 127.0.0.1", Function: hostile.Fetch,
			args: func(*Lab) []arg { return []arg{{"url", "http://" + publicHost + pathToLoopback}} }, stop: refused,
			outside: func(e *evidence) error {
				return e.onlyPublicDialled(pathToLoopback)
			},
		},
		{
			Name: "egress_redirect_to_metadata", Title: "egress redirected to 169.254.169.254", Function: hostile.Fetch,
			args: func(*Lab) []arg { return []arg{{"url", "http://" + publicHost + pathToMetadata}} }, stop: refused,
			outside: func(e *evidence) error { return e.onlyPublicDialled(pathToMetadata) },
		},
	}
}

// bigFileName is the file the 10 GiB attempt writes in its own scratch.
const bigFileName = "huge.bin"

// ownFileName is the file the control writes in its own scratch.
const ownFileName = "own.txt"

// Controls are attempts that must succeed: they show that the check sees
// a success when there is one, so that a blocked verdict means something.
func Controls() []Attack {
	return []Attack{
		{
			Name: "control_write_own_scratch", Title: "write a file in its own scratch", Function: hostile.WriteFile,
			args: func(*Lab) []arg { return path(ownFileName) }, stop: control,
			outside: func(e *evidence) error {
				if _, err := os.Stat(e.inScratch(ownFileName)); err != nil {
					return fmt.Errorf("the control's file is not in its scratch: %w", err)
				}
				return nil
			},
		},
		{
			Name: "control_fetch_declared_domain", Title: "egress to its declared domain", Function: hostile.Fetch,
			args: func(*Lab) []arg { return []arg{{"url", "http://" + publicHost + pathPage}} }, stop: control,
			outside: func(e *evidence) error {
				if e.lab.webHits(pathPage) <= e.before.hits[pathPage] {
					return errors.New("the lab's web server got no request")
				}
				return nil
			},
		},
	}
}
