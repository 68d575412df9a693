// The spawner's start of a spoke without a fork of its address space (see
// spawnclone_linux.c and spawnclone_linux.go).

#ifndef SECGPT_SPAWNCLONE_H
#define SECGPT_SPAWNCLONE_H

#include <stddef.h>

// spawn_req is one start: what os/exec would be given, as C memory the
// child reads (it writes only its own stack). The Go side fills it from an
// exec.Cmd prepared by sandbox.Prepare.
struct spawn_req {
	const char *path;
	char *const *argv;
	char *const *envp;
	const char *dir;   // NULL: stay in the spawner's directory
	const int *fds;    // fds[i] becomes descriptor i; -1: i is closed
	int nfds;
	unsigned long cloneflags; // namespaces only
	int setpgid;
	int pdeathsig;
	int cred;          // setgroups(0, NULL) when setgroups, setgid(gid), setuid(uid)
	int setgroups;
	unsigned int uid, gid;
	unsigned long long ambient; // capabilities (< 64) raised as ambient ones
	// The new user namespace's maps, written by the parent (NULL: none).
	const char *uid_map, *setgroups_text, *gid_map;
	// The child's stack, stack_size bytes at stack (the top is used).
	void *stack;
	size_t stack_size;

	// Set by spawn_clone for spawn_maps and the wait for the exec.
	int pid;
	int ppid;
	int sync_r, sync_w; // the parent's map outcome to the child
	int err_r, err_w;   // the child's errno to the parent; EOF on exec
	unsigned long oldmask; // the calling thread's signal mask
};

int spawn_clone(struct spawn_req *r);
void spawn_maps(struct spawn_req *r);

#endif
