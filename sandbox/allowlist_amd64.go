//go:build linux && amd64

package sandbox

import "golang.org/x/sys/unix"

// FIOCLEX and FIONBIO of x86-64 (asm-generic/ioctls.h).
const (
	fioclex = 0x5451
	fionbio = 0x5421
)

// archRules are the x86-64-only entries of the seccomp table. fork and vfork
// are deliberately absent (EPERM).
var archRules = []rule{
	{"arch_prctl", always, actAllow, inExec, "glibc's start-up sets the thread pointer (ARCH_SET_FS)"},
	{"set_tid_address", always, actAllow, inExec, "glibc's start-up registers the thread-exit futex"},
	{"access", always, actAllow, inExec, "the dynamic loader probes /etc/ld.so.preload (not a restriction boundary)"},
	{"poll", always, actAllow, inExec, "wait for a descriptor (CPython's socket timeouts, glibc's poll)"},
	{"readlink", always, actAllow, inExec, "interpreters resolve their own path and scripts' (CPython's realpath); Landlock does not govern links"},
	{"ioctl", []cond{{Arg: 1, Op: opEq, Value: unix.TCGETS}}, actAllow, inExec,
		"isatty(3) on stdio (CPython, glibc stdio); reads terminal settings, changes nothing"},
	{"ioctl", []cond{{Arg: 1, Op: opEq, Value: fioclex}}, actAllow, inExec,
		"CPython marks its descriptors close-on-exec with FIOCLEX and fails without it"},
	{"ioctl", []cond{{Arg: 1, Op: opEq, Value: fionbio}}, actAllow, inExec,
		"CPython makes a socket non-blocking with FIONBIO (socket timeouts)"},
}
