//go:build linux && cgo

package sandbox

import (
	"encoding/binary"
	"os"
	"slices"
	"testing"

	seccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Seccomp return values (linux/seccomp.h).
const (
	retAllow       = 0x7fff0000
	retKillProcess = 0x80000000
	retEPERM       = 0x00050000 | uint32(unix.EPERM)
	retENOSYS      = 0x00050000 | uint32(unix.ENOSYS)
)

const auditArchI386 = 0x40000003

// testPID stands for the spoke's own PID in the compiled filter.
const testPID = 4242

// compiled is one profile's filter as libseccomp compiles it, run in
// process by a classic-BPF interpreter: no kernel, no irreversible load.
type compiled struct {
	vm   *bpf.VM
	arch uint32
}

func compile(t *testing.T, p Profile) compiled {
	t.Helper()
	filter, _, err := buildFilter(p, testPID, defaultAction)
	if err != nil {
		t.Fatal(err)
	}
	defer filter.Release()
	// ExportBPFMem needs libseccomp 2.6; Debian 12 has 2.5.4.
	f, err := os.CreateTemp(t.TempDir(), "filter.bpf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := filter.ExportBPF(f); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	prog := make([]bpf.Instruction, 0, len(raw)/8)
	for i := 0; i+8 <= len(raw); i += 8 {
		ins := bpf.RawInstruction{
			Op: binary.NativeEndian.Uint16(raw[i:]),
			Jt: raw[i+2],
			Jf: raw[i+3],
			K:  binary.NativeEndian.Uint32(raw[i+4:]),
		}
		prog = append(prog, ins.Disassemble())
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	arch, err := seccomp.GetNativeArch()
	if err != nil {
		t.Fatal(err)
	}
	native := map[seccomp.ScmpArch]uint32{seccomp.ArchAMD64: 0xc000003e, seccomp.ArchARM64: 0xc00000b7}[arch]
	if native == 0 {
		t.Skipf("no audit arch value for %v in this test", arch)
	}
	return compiled{vm: vm, arch: native}
}

// run evaluates the filter on one call. The interpreter loads 32-bit words
// big-endian, so each word of struct seccomp_data is stored big-endian at
// the offset the kernel's (little-endian) layout gives it.
func (c compiled) run(t *testing.T, arch uint32, nr int, args ...uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], uint32(nr))
	binary.BigEndian.PutUint32(data[4:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(data[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(data[20+8*i:], uint32(a>>32))
	}
	ret, err := c.vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(ret)
}

func (c compiled) call(t *testing.T, name string, args ...uint64) uint32 {
	t.Helper()
	nr, err := seccomp.GetSyscallFromName(name)
	if err != nil {
		t.Fatalf("resolve %s: %v", name, err)
	}
	return c.run(t, c.arch, int(nr), args...)
}

func wantRet(a action) uint32 {
	return map[action]uint32{actAllow: retAllow, actKill: retKillProcess, actENOSYS: retENOSYS}[a]
}

// tableAction is what the table says a call gets in profile p: the action
// of a rule whose conditions all hold, else EPERM.
func tableAction(p Profile, name string, args []uint64) uint32 {
	for _, r := range tableFor(p) {
		if r.Name != name {
			continue
		}
		holds := true
		for _, cd := range r.When {
			switch cd.Op {
			case opEq:
				holds = holds && args[cd.Arg] == resolve(cd.Value)
			case opMaskedEq:
				holds = holds && args[cd.Arg]&cd.Mask == cd.Value
			}
		}
		if holds {
			return wantRet(r.Action)
		}
	}
	return retEPERM
}

// TestRuleTable checks every entry of the table against the compiled
// filter: a call that meets the rule's conditions gets the rule's action,
// and a call that breaks a condition gets EPERM, unless another rule for
// the same syscall allows it (fcntl's commands).
func TestRuleTable(t *testing.T) {
	for _, p := range allProfiles {
		t.Run(string(p), func(t *testing.T) {
			c := compile(t, p)
			actions := map[string]action{}
			for _, r := range tableFor(p) {
				if r.Reason == "" {
					t.Errorf("rule %s has no reason", r.Name)
				}
				// One action per syscall, so that OR-ed rules cannot
				// shadow one another.
				if a, ok := actions[r.Name]; ok && a != r.Action {
					t.Errorf("rule %s: two actions in profile %s", r.Name, p)
				}
				actions[r.Name] = r.Action
				args := make([]uint64, 6)
				for _, cd := range r.When {
					args[cd.Arg] = resolve(cd.Value)
				}
				if got, want := c.call(t, r.Name, args...), wantRet(r.Action); got != want {
					t.Errorf("%s%v: got %#x, want %#x (%s)", r.Name, args, got, want, r.Reason)
				}
				for _, cd := range r.When {
					broken := append([]uint64(nil), args...)
					switch cd.Op {
					case opEq:
						broken[cd.Arg] = resolve(cd.Value) + 1
					case opMaskedEq:
						broken[cd.Arg] = cd.Value ^ (cd.Mask & -cd.Mask)
					}
					if got, want := c.call(t, r.Name, broken...), tableAction(p, r.Name, broken); got != want {
						t.Errorf("%s%v breaking a condition: got %#x, want %#x", r.Name, broken, got, want)
					}
				}
			}
		})
	}
}

func resolve(v uint64) uint64 {
	if v == selfPID {
		return testPID
	}
	return v
}

// TestFilterDenies lists calls a spoke must never make, beyond what the
// table says: each must be denied as shown.
func TestFilterDenies(t *testing.T) {
	other := uint64(testPID + 1)
	tests := []struct {
		name     string
		syscall  string
		args     []uint64
		profiles []Profile
		want     uint32
	}{
		{"IPv4 socket", "socket", []uint64{unix.AF_INET, unix.SOCK_STREAM}, []Profile{ProfileStrict, ProfileProxy, ProfileExec}, retEPERM},
		{"IPv6 socket", "socket", []uint64{unix.AF_INET6, unix.SOCK_DGRAM}, both, retEPERM},
		{"netlink socket", "socket", []uint64{unix.AF_NETLINK, unix.SOCK_RAW}, both, retEPERM},
		{"packet socket", "socket", []uint64{unix.AF_PACKET, unix.SOCK_RAW}, both, retEPERM},
		{"vsock socket", "socket", []uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, both, retEPERM},
		{"connect", "connect", nil, []Profile{ProfileStrict, ProfileProxy, ProfileExec}, retEPERM},
		{"bind", "bind", nil, both, retEPERM},
		{"listen", "listen", nil, both, retEPERM},
		{"accept4", "accept4", nil, []Profile{ProfileStrict, ProfileExec, ProfileExecNet}, retEPERM},
		// The proxy's resolver answers at an address, and the proxy
		// passes connections to the hub with sendmsg: it can create no
		// socket to aim them with.
		{"sendto an address", "sendto", []uint64{3, 0, 0, 0, 0x1000, 16}, []Profile{ProfileStrict, ProfileExec, ProfileExecNet}, retEPERM},
		{"sendmsg", "sendmsg", nil, []Profile{ProfileStrict, ProfileExec, ProfileExecNet}, retEPERM},
		{"sendmmsg outside exec_net", "sendmmsg", nil, []Profile{ProfileStrict, ProfileProxy, ProfileExec}, retEPERM},
		{"fork", "fork", nil, both, retEPERM},
		{"vfork", "vfork", nil, both, retEPERM},
		{"clone a process", "clone", []uint64{uint64(unix.SIGCHLD)}, both, retEPERM},
		{"clone vfork", "clone", []uint64{unix.CLONE_VM | unix.CLONE_VFORK | uint64(unix.SIGCHLD)}, both, retEPERM},
		{"clone a thread in a new user namespace", "clone", []uint64{unix.CLONE_THREAD | unix.CLONE_NEWUSER}, both, retEPERM},
		{"clone a thread in a new network namespace", "clone", []uint64{unix.CLONE_THREAD | unix.CLONE_NEWNET}, both, retEPERM},
		{"clone3", "clone3", nil, both, retENOSYS},
		{"execve in strict", "execve", nil, []Profile{ProfileStrict, ProfileProxy}, retEPERM},
		{"execveat", "execveat", nil, both, retEPERM},
		{"executable mmap in strict", "mmap", []uint64{0, 4096, unix.PROT_READ | unix.PROT_EXEC}, []Profile{ProfileStrict, ProfileProxy}, retEPERM},
		{"executable mprotect in strict", "mprotect", []uint64{0, 4096, unix.PROT_EXEC}, []Profile{ProfileStrict, ProfileProxy}, retEPERM},
		{"kill another process", "kill", []uint64{other, 9}, both, retEPERM},
		{"kill a process group", "kill", []uint64{0, 9}, both, retEPERM},
		{"tgkill another process", "tgkill", []uint64{other, other, 9}, both, retEPERM},
		{"tkill", "tkill", nil, both, retEPERM},
		{"pidfd_send_signal", "pidfd_send_signal", nil, both, retEPERM},
		{"raise a limit", "prlimit64", []uint64{0, unix.RLIMIT_NOFILE, 0x1000}, both, retEPERM},
		{"setrlimit", "setrlimit", nil, both, retEPERM},
		{"setuid", "setuid", nil, both, retEPERM},
		{"prctl", "prctl", []uint64{unix.PR_SET_DUMPABLE, 1}, both, retEPERM},
		{"seccomp", "seccomp", nil, both, retEPERM},
		{"landlock_restrict_self", "landlock_restrict_self", nil, both, retEPERM},
		{"ioctl", "ioctl", []uint64{0, unix.TIOCSTI}, both, retEPERM},
		{"fcntl F_SETOWN (signals to another process)", "fcntl", []uint64{3, unix.F_SETOWN, other}, both, retEPERM},
		{"fcntl F_SETOWN_EX", "fcntl", []uint64{3, unix.F_SETOWN_EX, 0x1000}, both, retEPERM},
		{"fcntl F_SETSIG", "fcntl", []uint64{3, unix.F_SETSIG, 9}, both, retEPERM},
		{"fcntl O_ASYNC", "fcntl", []uint64{3, unix.F_SETFL, unix.O_ASYNC | unix.O_NONBLOCK}, both, retEPERM},
		{"fcntl F_SETLEASE", "fcntl", []uint64{3, unix.F_SETLEASE, 1}, both, retEPERM},
		{"fcntl F_NOTIFY", "fcntl", []uint64{3, unix.F_NOTIFY, 1}, both, retEPERM},
		{"MPTCP socket", "socket", []uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}, allProfiles, retEPERM},
		{"SCTP socket", "socket", []uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP}, allProfiles, retEPERM},
		{"memfd_create", "memfd_create", nil, both, retEPERM},
		{"truncate by path", "truncate", nil, both, retEPERM},
		{"symlinkat", "symlinkat", nil, both, retEPERM},
		{"linkat", "linkat", nil, both, retEPERM},
		{"mknodat", "mknodat", nil, both, retEPERM},
		{"chmod in strict", "fchmodat", nil, []Profile{ProfileStrict, ProfileProxy}, retEPERM},
		{"chmod set-uid", "fchmodat", []uint64{0, 0, unix.S_ISUID | 0o755}, both, retEPERM},
		{"chmod set-gid", "chmod", []uint64{0, unix.S_ISGID | 0o755}, both, retEPERM},
		{"chmod world-writable", "fchmod", []uint64{3, 0o666}, both, retEPERM},
		{"chmod group-writable", "fchmodat", []uint64{0, 0, 0o664}, both, retEPERM},
		{"setxattr", "setxattr", nil, both, retEPERM},
		{"personality", "personality", []uint64{0x0040000}, both, retEPERM},
		{"kexec_load", "kexec_load", nil, both, retKillProcess},
		{"init_module", "init_module", nil, both, retKillProcess},
		{"process_vm_writev", "process_vm_writev", nil, both, retKillProcess},
		{"prctl PR_SET_SECCOMP", "prctl", []uint64{unix.PR_SET_SECCOMP, 2}, both, retEPERM},
		{"prctl PR_SET_PTRACER", "prctl", []uint64{unix.PR_SET_PTRACER, ^uint64(0)}, both, retEPERM},
		{"chown", "fchownat", nil, both, retEPERM},
		{"shmget", "shmget", nil, both, retEPERM},
		{"ptrace", "ptrace", nil, both, retKillProcess},
		{"process_vm_readv", "process_vm_readv", nil, both, retKillProcess},
		{"mount", "mount", nil, both, retKillProcess},
		{"unshare", "unshare", nil, both, retKillProcess},
		{"setns", "setns", nil, both, retKillProcess},
		{"bpf", "bpf", nil, both, retKillProcess},
		{"keyctl", "keyctl", nil, both, retKillProcess},
		{"perf_event_open", "perf_event_open", nil, both, retKillProcess},
		{"userfaultfd", "userfaultfd", nil, both, retKillProcess},
		{"io_uring_setup", "io_uring_setup", nil, both, retENOSYS},

		// The egress proxy's profiles add what the proxy needs, and
		// nothing a spoke could reach anything else with.
		{"IPv4 datagram socket outside exec_net", "socket", []uint64{unix.AF_INET, unix.SOCK_DGRAM}, []Profile{ProfileStrict, ProfileProxy, ProfileExec}, retEPERM},
		{"UDP-Lite socket in exec_net", "socket", []uint64{unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_UDPLITE}, []Profile{ProfileExecNet}, retEPERM},
		{"setsockopt IP_TOS outside exec_net", "setsockopt", []uint64{3, unix.SOL_IP, unix.IP_TOS}, []Profile{ProfileStrict, ProfileProxy, ProfileExec}, retEPERM},
		{"setsockopt IP_HDRINCL in exec_net", "setsockopt", []uint64{3, unix.SOL_IP, unix.IP_HDRINCL}, []Profile{ProfileExecNet}, retEPERM},
		{"IPv4 raw socket in exec_net", "socket", []uint64{unix.AF_INET, unix.SOCK_RAW}, []Profile{ProfileExecNet}, retEPERM},
		{"IPv6 stream socket in exec_net", "socket", []uint64{unix.AF_INET6, unix.SOCK_STREAM}, []Profile{ProfileExecNet}, retEPERM},
		{"unix socket in exec_net", "socket", []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, []Profile{ProfileExecNet}, retEPERM},
		{"unix datagram pair in exec_net", "socketpair", []uint64{unix.AF_UNIX, unix.SOCK_DGRAM}, []Profile{ProfileExecNet}, retEPERM},
		{"setsockopt SO_BINDTODEVICE", "setsockopt", []uint64{3, unix.SOL_SOCKET, unix.SO_BINDTODEVICE}, allProfiles, retEPERM},
		{"setsockopt outside the proxy's profiles", "setsockopt", []uint64{3, unix.IPPROTO_TCP, unix.TCP_NODELAY}, []Profile{ProfileStrict, ProfileExec}, retEPERM},
		{"ioctl TIOCSTI in the exec profiles", "ioctl", []uint64{0, unix.TIOCSTI}, []Profile{ProfileExec, ProfileExecNet}, retEPERM},
		{"ioctl SIOCSIFFLAGS", "ioctl", []uint64{3, unix.SIOCSIFFLAGS}, allProfiles, retEPERM},
	}
	for _, p := range allProfiles {
		c := compile(t, p)
		for _, tt := range tests {
			if !contains(tt.profiles, p) {
				continue
			}
			t.Run(string(p)+"/"+tt.name, func(t *testing.T) {
				if got := c.call(t, tt.syscall, tt.args...); got != tt.want {
					t.Fatalf("%s%v: got %#x, want %#x", tt.syscall, tt.args, got, tt.want)
				}
			})
		}
		t.Run(string(p)+"/other architecture", func(t *testing.T) {
			// execve is 11 in the i386 table that int 0x80 reaches.
			if got := c.run(t, auditArchI386, 11); got != retKillProcess {
				t.Fatalf("i386 execve: got %#x, want kill", got)
			}
		})
		t.Run(string(p)+"/x32 syscall numbers", func(t *testing.T) {
			nr, err := seccomp.GetSyscallFromName("getpid")
			if err != nil {
				t.Fatal(err)
			}
			if got := c.run(t, c.arch, int(nr)|0x40000000); got == retAllow {
				t.Fatalf("x32 getpid: allowed, want denied")
			}
		})
	}
}

var (
	both        = []Profile{ProfileStrict, ProfileProxy, ProfileExec, ProfileExecNet}
	allProfiles = both
)

func contains(ps []Profile, p Profile) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// TestProxyProfilesAddOnly checks that each profile of the egress proxy is
// its base profile plus the few calls the proxy needs: ProfileProxy is
// ProfileStrict plus accept4 and setsockopt; ProfileExecNet is ProfileExec
// plus connect, setsockopt and shutdown (with narrower socket and socketpair
// rules).
func TestProxyProfilesAddOnly(t *testing.T) {
	allowed := func(p Profile) map[string]bool {
		out := map[string]bool{}
		for _, r := range tableFor(p) {
			if r.Action == actAllow {
				out[r.Name] = true
			}
		}
		return out
	}
	for _, tt := range []struct {
		profile, base Profile
		added         []string
	}{
		{ProfileProxy, ProfileStrict, []string{"accept4", "recvfrom", "sendmsg", "sendto", "setsockopt"}},
		{ProfileExecNet, ProfileExec, []string{"connect", "sendmmsg", "setsockopt", "shutdown"}},
	} {
		got, base := allowed(tt.profile), allowed(tt.base)
		var added []string
		for name := range got {
			if !base[name] {
				added = append(added, name)
			}
		}
		slices.Sort(added)
		if !slices.Equal(added, tt.added) {
			t.Errorf("%s adds %v to %s, want %v", tt.profile, added, tt.base, tt.added)
		}
		for name := range base {
			if !got[name] {
				t.Errorf("%s lacks %s of %s", tt.profile, name, tt.base)
			}
		}
	}
}

// TestStrictSmallerThanExec checks that the strict profile allows nothing
// the exec profile does not.
func TestStrictSmallerThanExec(t *testing.T) {
	exec := map[string]bool{}
	for _, r := range tableFor(ProfileExec) {
		exec[r.Name] = true
	}
	for _, r := range tableFor(ProfileStrict) {
		if r.Action == actAllow && !exec[r.Name] {
			t.Errorf("%s is allowed in strict but not in exec", r.Name)
		}
	}
}
