//go:build linux && amd64

package sandbox

// archRules are the x86-64-only entries of the seccomp table. fork and vfork
// are deliberately absent (EPERM).
var archRules = []rule{
	{"arch_prctl", always, actAllow, inExec, "glibc's start-up sets the thread pointer (ARCH_SET_FS)"},
	{"set_tid_address", always, actAllow, inExec, "glibc's start-up registers the thread-exit futex"},
	{"access", always, actAllow, inExec, "the dynamic loader probes /etc/ld.so.preload (not a restriction boundary)"},
}
