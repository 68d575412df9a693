//go:build linux && cgo && (amd64 || arm64)

// A spoke's start without a copy of the spawner's address space: the
// child shares it (CLONE_VM), as glibc's posix_spawn's does, and does
// exactly what Go's syscall.forkAndExecInChild1 does for the attributes
// sandbox.Prepare sets, in the same order, then executes. Go cannot do it
// itself: with CLONE_NEWUSER it forks the whole process (it must write the
// child's uid and gid maps while the child waits, which CLONE_VFORK would
// not let the calling thread do), copying the spawner's page tables and
// paying copy-on-write faults in both processes after.
//
// Invariants (a red team checks these):
//   - the child runs only this file's code on its own stack, makes only raw
//     system calls (no libc call: no errno, no lock, no malloc, no TLS), and
//     writes no memory but that stack: everything it reads is the request,
//     C memory the parent keeps as long as the child may run it;
//   - the request and the stack are reused or freed only once the child
//     has executed (its close-on-exec error pipe, err_r, reaches EOF: the
//     kernel switches the child's memory before it closes those
//     descriptors) or exited (exit_mm runs before exit_files; after it
//     wrote its errno there, the parent reaps it first);
//   - every signal is blocked in the calling thread across clone, so the
//     child starts with them blocked; it resets every caught signal to
//     SIG_DFL in its own copy of the handler table (no CLONE_SIGHAND) before
//     it unblocks them, so a Go handler never runs in it;
//   - the uid and gid maps are written by the parent (only a process with
//     CAP_SETUID/CAP_SETGID over the parent user namespace may map other ids
//     than its own, user_namespaces(7)) while the child waits on a pipe; the
//     child closes its copy of the pipe's write end first, so EOF (the
//     spawner died) fails the start instead of running unmapped;
//   - descriptors: fds[i] becomes i, the others are closed at exec: every
//     descriptor the spawner holds is close-on-exec, and the child marks
//     every one above the list close-on-exec again (close_range) should one
//     not be.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "spawnclone_linux.h"

// rs makes a raw system call: a negative errno on failure, errno untouched.
static inline long rs(long n, long a, long b, long c, long d, long e, long f) {
#if defined(__x86_64__)
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;
	__asm__ volatile("svc 0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory");
	return x0;
#else
#error "spawnclone: raw system calls for amd64 and arm64 only"
#endif
}

#define RS0(n) rs(n, 0, 0, 0, 0, 0, 0)
#define RS1(n, a) rs(n, (long)(a), 0, 0, 0, 0, 0)
#define RS2(n, a, b) rs(n, (long)(a), (long)(b), 0, 0, 0, 0)
#define RS3(n, a, b, c) rs(n, (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define RS4(n, a, b, c, d) rs(n, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)

// The kernel's struct sigaction (the same layout on amd64 and arm64).
struct ksigaction {
	unsigned long handler, flags, restorer, mask;
};

struct rlim64 {
	unsigned long long cur, max;
};

// orig_nofile is the soft RLIMIT_NOFILE the process started with, read
// before Go's runtime raises it (syscall's init), under the same condition
// as Go's origRlimitNofile: the child gets it back as Go's would.
static struct rlim64 orig_nofile;
static int orig_nofile_set;

__attribute__((constructor)) static void spawn_record_nofile(void) {
	struct rlim64 l;
	if (RS4(SYS_prlimit64, 0, RLIMIT_NOFILE, 0, &l) == 0 && l.max > 0 && l.cur < l.max - 1) {
		orig_nofile = l;
		orig_nofile_set = 1;
	}
}

// parent_pid is the pid of the child's parent in the spawner's PID
// namespace, or a negative errno. In a new PID namespace getppid answers 0
// whatever the parent (it lies outside), so it is read from /proc, the
// spawner's, which the child still sees: its stat's fourth field.
static long parent_pid(const struct spawn_req *r) {
	char buf[512];
	long n, fd, pid = 0, i;

	if (!(r->cloneflags & CLONE_NEWPID))
		return RS0(SYS_getppid);
	fd = RS4(SYS_openat, AT_FDCWD, "/proc/self/stat", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return fd;
	n = RS3(SYS_read, fd, buf, sizeof buf - 1);
	RS1(SYS_close, fd);
	if (n <= 0)
		return n < 0 ? n : -EIO;
	// "pid (comm) state ppid ...": comm may hold ')', the last one ends it.
	for (i = n - 1; i >= 0 && buf[i] != ')'; i--)
		;
	if (i < 0 || i + 4 >= n || buf[i + 1] != ' ' || buf[i + 3] != ' ')
		return -EIO;
	for (i += 4; i < n && buf[i] >= '0' && buf[i] <= '9'; i++)
		pid = pid * 10 + (buf[i] - '0');
	return pid;
}

// MAX_FDS bounds a request's descriptors (the Go side falls back above it).
#define MAX_FDS 64

static int spawn_child(void *arg) {
	const struct spawn_req *r = arg;
	int fd[MAX_FDS];
	int errfd = r->err_w, nextfd, i, st;
	long e = 0;
	struct ksigaction dfl = {0}, old;

	// Caught signals to SIG_DFL (ignored ones stay ignored, as across
	// execve); the mask is still all blocked.
	for (i = 1; i <= 64; i++) {
		if (i == SIGKILL || i == SIGSTOP)
			continue;
		if (RS4(SYS_rt_sigaction, i, &dfl, &old, 8) == 0 && old.handler == (unsigned long)SIG_IGN)
			RS4(SYS_rt_sigaction, i, &old, 0, 8);
	}
	if (r->ambient) {
		e = RS2(SYS_prctl, PR_SET_KEEPCAPS, 1);
		if (e)
			goto fail;
	}
	if (r->sync_r >= 0) {
		// The maps: EOF or a short read (the spawner died) fails.
		RS1(SYS_close, r->sync_w);
		st = 0;
		do
			e = RS3(SYS_read, r->sync_r, &st, sizeof st);
		while (e == -EINTR);
		if (e < 0)
			goto fail;
		if (e != sizeof st) {
			e = -EINVAL;
			goto fail;
		}
		if (st) {
			e = -st;
			goto fail;
		}
	}
	if (r->setpgid) {
		e = RS2(SYS_setpgid, 0, 0);
		if (e)
			goto fail;
	}
	RS4(SYS_rt_sigprocmask, SIG_SETMASK, &r->oldmask, 0, 8);
	if (r->cred) {
		if (r->setgroups) {
			e = RS2(SYS_setgroups, 0, 0);
			if (e)
				goto fail;
		}
		e = RS1(SYS_setgid, r->gid);
		if (e)
			goto fail;
		e = RS1(SYS_setuid, r->uid);
		if (e)
			goto fail;
	}
	if (r->ambient) {
		struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
		struct __user_cap_data_struct data[2];
		e = RS2(SYS_capget, &hdr, data);
		if (e)
			goto fail;
		for (i = 0; i < 64; i++) {
			if (r->ambient & (1ULL << i)) {
				data[i >> 5].permitted |= 1U << (i & 31);
				data[i >> 5].inheritable |= 1U << (i & 31);
			}
		}
		e = RS2(SYS_capset, &hdr, data);
		if (e)
			goto fail;
		for (i = 0; i < 64; i++) {
			if (r->ambient & (1ULL << i)) {
				e = rs(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, i, 0, 0, 0);
				if (e)
					goto fail;
			}
		}
	}
	if (r->dir) {
		e = RS1(SYS_chdir, r->dir);
		if (e)
			goto fail;
	}
	if (r->pdeathsig) {
		e = RS2(SYS_prctl, PR_SET_PDEATHSIG, r->pdeathsig);
		if (e)
			goto fail;
		// The parent died before: signal ourselves, as Go does, and
		// fail should that not end us (the first process of a PID
		// namespace ignores its own SIGKILL).
		if (parent_pid(r) != r->ppid) {
			RS2(SYS_kill, RS0(SYS_getpid), r->pdeathsig);
			e = -ESRCH;
			goto fail;
		}
	}
	// Go's two passes: move each fds[i] < i (and the error pipe) above
	// the list, then dup each onto i.
	nextfd = r->nfds;
	for (i = 0; i < r->nfds; i++) {
		fd[i] = r->fds[i];
		if (nextfd < fd[i])
			nextfd = fd[i];
	}
	nextfd++;
	if (errfd < nextfd) {
		e = RS3(SYS_dup3, errfd, nextfd, O_CLOEXEC);
		if (e < 0)
			goto fail;
		errfd = nextfd++;
	}
	for (i = 0; i < r->nfds; i++) {
		if (fd[i] >= 0 && fd[i] < i) {
			if (nextfd == errfd)
				nextfd++;
			e = RS3(SYS_dup3, fd[i], nextfd, O_CLOEXEC);
			if (e < 0)
				goto fail;
			fd[i] = nextfd++;
		}
	}
	for (i = 0; i < r->nfds; i++) {
		if (fd[i] == -1) {
			RS1(SYS_close, i);
			continue;
		}
		if (fd[i] == i) {
			e = RS3(SYS_fcntl, i, F_SETFD, 0);
		} else {
			e = RS3(SYS_dup3, fd[i], i, 0);
		}
		if (e < 0)
			goto fail;
	}
	for (i = r->nfds; i < 3; i++)
		RS1(SYS_close, i);
	// Every other descriptor ends at exec (older kernels: they are all
	// close-on-exec already).
	RS3(SYS_close_range, r->nfds, ~0U, CLOSE_RANGE_CLOEXEC);
	if (orig_nofile_set) {
		struct rlim64 cur;
		if (RS4(SYS_prlimit64, 0, RLIMIT_NOFILE, 0, &cur) != 0 ||
		    (cur.cur == orig_nofile.max - 1 && cur.max == orig_nofile.max))
			RS4(SYS_prlimit64, 0, RLIMIT_NOFILE, &orig_nofile, 0);
	}
	e = RS3(SYS_execve, r->path, r->argv, r->envp);
fail:
	st = (int)-e;
	RS3(SYS_write, errfd, &st, sizeof st);
	for (;;)
		RS1(SYS_exit, 253);
	return 0;
}

// spawn_clone starts r's child and returns its pid, or a negative errno.
// The caller calls spawn_maps after it, then waits for EOF on err_r.
int spawn_clone(struct spawn_req *r) {
	int p[2];
	long e;
	unsigned long all = ~0UL;
	int pid, cerr;

	r->pid = -1;
	r->sync_r = r->sync_w = r->err_r = r->err_w = -1;
	// Non-blocking: the parent waits for it on Go's poller (a 4-byte
	// write to an empty pipe never blocks the child).
	e = RS2(SYS_pipe2, p, O_CLOEXEC | O_NONBLOCK);
	if (e)
		return (int)e;
	r->err_r = p[0];
	r->err_w = p[1];
	if (r->uid_map || r->gid_map) {
		e = RS2(SYS_pipe2, p, O_CLOEXEC);
		if (e) {
			RS1(SYS_close, r->err_r);
			RS1(SYS_close, r->err_w);
			return (int)e;
		}
		r->sync_r = p[0];
		r->sync_w = p[1];
	}
	r->ppid = (int)RS0(SYS_getpid);
	RS4(SYS_rt_sigprocmask, SIG_SETMASK, &all, &r->oldmask, 8);
	// No CLONE_VFORK: this thread writes the child's maps (spawn_maps).
	// No CLONE_SIGHAND: the child's handler table is its own copy.
	pid = clone(spawn_child, (char *)r->stack + r->stack_size, (int)(r->cloneflags | CLONE_VM | SIGCHLD), r);
	cerr = pid < 0 ? errno : 0;
	RS4(SYS_rt_sigprocmask, SIG_SETMASK, &r->oldmask, 0, 8);
	RS1(SYS_close, r->err_w);
	if (r->sync_r >= 0)
		RS1(SYS_close, r->sync_r);
	if (pid < 0) {
		RS1(SYS_close, r->err_r);
		if (r->sync_w >= 0)
			RS1(SYS_close, r->sync_w);
		return -cerr;
	}
	r->pid = pid;
	return pid;
}

// write_id_file writes text to /proc/PID/name, as Go's writeIDMappings.
static int write_id_file(int pid, const char *name, const char *text) {
	char path[64], digits[16];
	int n = 0, d = 0, fd;
	long e, len = 0;
	const char *s;

	for (s = "/proc/"; *s; s++)
		path[n++] = *s;
	do
		digits[d++] = (char)('0' + pid % 10);
	while ((pid /= 10) > 0);
	while (d > 0)
		path[n++] = digits[--d];
	path[n++] = '/';
	for (s = name; *s && n < (int)sizeof path - 1; s++)
		path[n++] = *s;
	path[n] = 0;
	while (text[len])
		len++;
	e = RS4(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CLOEXEC, 0);
	if (e < 0)
		return (int)e;
	fd = (int)e;
	do
		e = RS3(SYS_write, fd, text, len);
	while (e == -EINTR);
	RS1(SYS_close, fd);
	if (e < 0)
		return (int)e;
	return e == len ? 0 : -EIO;
}

// spawn_maps writes the child's uid and gid maps, as Go's
// writeUidGidMappings, and lets the child go on, or tells it why not.
void spawn_maps(struct spawn_req *r) {
	int st = 0;
	long e;

	if (r->sync_w < 0)
		return;
	if (r->uid_map)
		st = write_id_file(r->pid, "uid_map", r->uid_map);
	if (st == 0 && r->gid_map) {
		// A kernel without setgroups (before 3.19) is fine, as for Go.
		st = write_id_file(r->pid, "setgroups", r->setgroups_text);
		if (st == -ENOENT)
			st = 0;
		if (st == 0)
			st = write_id_file(r->pid, "gid_map", r->gid_map);
	}
	st = -st;
	do
		e = RS3(SYS_write, r->sync_w, &st, sizeof st);
	while (e == -EINTR);
	// r->sync_w is left as it is: the child may not have read it yet
	// (it closes its own copy), and reads no field this thread changes.
	RS1(SYS_close, r->sync_w);
}
