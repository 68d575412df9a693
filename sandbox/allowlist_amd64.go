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
	// The legacy path forms glibc on x86-64 still calls for mkdir, rename,
	// unlink… (CPython's os.mkdir, os.rename, os.unlink, os.rmdir, os.chmod).
	// Landlock decides where, as for the …at forms.
	{"mkdir", always, actAllow, inExec, "make directories (glibc's mkdir on x86-64); Landlock decides where"},
	{"rmdir", always, actAllow, inExec, "remove directories (glibc's rmdir on x86-64); Landlock decides where"},
	{"rename", always, actAllow, inExec, "rename files (glibc's rename on x86-64); Landlock decides where"},
	{"unlink", always, actAllow, inExec, "remove files (glibc's unlink on x86-64); Landlock decides where"},
	{"chmod", chmodSafe(1), actAllow, inExec, chmodReason},
	{"stat", always, actAllow, inExec, "stat a path (older glibc and static programs); Landlock does not restrict stat"},
	{"lstat", always, actAllow, inExec, "stat a link (CPython's os.lstat, shutil)"},
	{"pipe", always, actAllow, inExec, "pipes (older libraries)"},
	{"dup2", always, actAllow, inExec, "duplicate a descriptor onto another (CPython's os.dup2)"},
	{"epoll_wait", always, actAllow, inExec, "event loops (libuv, CPython's selectors)"},
	{"epoll_create", always, actAllow, inExec, "event loops (older libraries)"},
	{"select", always, actAllow, inExec, "wait for descriptors (older libraries)"},
	{"getpgrp", always, actAllow, inExec, "own process group's id (read only)"},
	{"getrlimit", always, actAllow, inExec, "read own limits"},
	{"gettimeofday", always, actAllow, inExec, "time when the vDSO falls back to the syscall"},
	{"time", always, actAllow, inExec, "time when the vDSO falls back to the syscall"},
	{"ioctl", []cond{{Arg: 1, Op: opEq, Value: unix.TCGETS}}, actAllow, inExec,
		"isatty(3) on stdio (CPython, glibc stdio); reads terminal settings, changes nothing"},
	{"ioctl", []cond{{Arg: 1, Op: opEq, Value: fioclex}}, actAllow, inExec,
		"CPython marks its descriptors close-on-exec with FIOCLEX and fails without it"},
	{"ioctl", []cond{{Arg: 1, Op: opEq, Value: fionbio}}, actAllow, inExec,
		"CPython makes a socket non-blocking with FIONBIO (socket timeouts)"},
}
