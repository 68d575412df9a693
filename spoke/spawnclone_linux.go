//go:build linux && cgo && (amd64 || arm64)

package spoke

/*
#include <stdlib.h>
#include "spawnclone_linux.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// cloneStackSize is the child's stack until it executes: spawn_child's few
// locals and clone's frame; a guard page below it.
const cloneStackSize = 64 << 10

// maxCloneFDs is spawnclone_linux.c's MAX_FDS.
const maxCloneFDs = 64

// starterStack is one starter thread's stack for the children it starts,
// one at a time (see spawnclone_linux.c for the invariants).
type starterStack struct {
	mem []byte // guard page, then the stack
}

func newStarterStack() (*starterStack, error) {
	page := os.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, page+cloneStackSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("failed to map a stack for spoke starts: %w", err)
	}
	if err := syscall.Mprotect(mem[:page], syscall.PROT_NONE); err != nil {
		_ = syscall.Munmap(mem)
		return nil, fmt.Errorf("failed to guard the stack for spoke starts: %w", err)
	}
	return &starterStack{mem: mem}, nil
}

// startCmd starts cmd, prepared by sandbox.Prepare, as cmd.Start would
// and returns its pid, without copying the spawner's address space (see
// spawnclone_linux.c for the invariants the child keeps). A command it
// cannot start so (an attribute Prepare does not set, too many
// descriptors) starts by cmd.Start; no process is left to Go's os.Process
// either way: the caller reaps pid.
//
// What the child gets is what os/exec gives it (TestCloneStartMatchesGo):
// the same namespaces, uid and gid maps and setgroups, written by this
// thread before the child goes on; credentials; ambient capabilities;
// process group; Pdeathsig, tied to this thread (call it from a locked
// thread that outlives the child); descriptors 0–2 (/dev/null for a nil
// stdin or stdout) and ExtraFiles from 3, every other one closed at exec;
// cmd.Environ(); cmd.Dir; the original RLIMIT_NOFILE; its exec's error as
// os/exec words it. A failed start leaves no process.
//
// One difference outside the child: under a root spawner the child's
// setuid, on memory it shares with the spawner, makes the spawner
// non-dumpable (as posix_spawn's would): it no longer dumps core, and as a
// root process no unprivileged one could inspect it before either.
func (st *starterStack) startCmd(cmd *exec.Cmd) (int, error) {
	if st == nil || !cloneable(cmd) {
		return goStart(cmd)
	}
	var pinned []unsafe.Pointer
	cstr := func(s string) (*C.char, error) {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, syscall.EINVAL
		}
		p := C.CString(s)
		pinned = append(pinned, unsafe.Pointer(p))
		return p, nil
	}
	cvec := func(ss []string) (**C.char, error) {
		vec := (**C.char)(C.calloc(C.size_t(len(ss)+1), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
		pinned = append(pinned, unsafe.Pointer(vec))
		elems := unsafe.Slice(vec, len(ss)+1)
		for i, s := range ss {
			p, err := cstr(s)
			if err != nil {
				return nil, err
			}
			elems[i] = p
		}
		return vec, nil
	}
	defer func() {
		for _, p := range pinned {
			C.free(p)
		}
	}()
	pathErr := func(err error) error { return &os.PathError{Op: "fork/exec", Path: cmd.Path, Err: err} }

	r := (*C.struct_spawn_req)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_spawn_req{}))))
	pinned = append(pinned, unsafe.Pointer(r))
	var err error
	if r.path, err = cstr(cmd.Path); err != nil {
		return 0, pathErr(err)
	}
	if r.argv, err = cvec(cmd.Args); err != nil {
		return 0, pathErr(err)
	}
	if r.envp, err = cvec(cmd.Environ()); err != nil {
		return 0, pathErr(err)
	}
	if cmd.Dir != "" {
		if r.dir, err = cstr(cmd.Dir); err != nil {
			return 0, pathErr(err)
		}
	}
	// Descriptors as os/exec gives them: /dev/null for a nil stdin or
	// stdout, each opened for this child alone.
	files, closeAfter, err := childFiles(cmd)
	defer closeFiles(closeAfter)
	if err != nil {
		return 0, err
	}
	fds := (*C.int)(C.calloc(C.size_t(len(files)), C.size_t(unsafe.Sizeof(C.int(0)))))
	pinned = append(pinned, unsafe.Pointer(fds))
	for i, fd := range files {
		unsafe.Slice(fds, len(files))[i] = C.int(fd)
	}
	r.fds, r.nfds = fds, C.int(len(files))

	attr := cmd.SysProcAttr
	r.cloneflags = C.ulong(attr.Cloneflags)
	r.setpgid = cbool(attr.Setpgid)
	r.pdeathsig = C.int(attr.Pdeathsig)
	if cred := attr.Credential; cred != nil {
		r.cred = 1
		r.uid, r.gid = C.uint(cred.Uid), C.uint(cred.Gid)
		// Go's rule: no setgroups in a user namespace that denies it.
		r.setgroups = cbool(!(attr.GidMappings != nil && !attr.GidMappingsEnableSetgroups))
	}
	for _, c := range attr.AmbientCaps {
		r.ambient |= C.ulonglong(1) << c
	}
	if attr.UidMappings != nil {
		if r.uid_map, err = cstr(idMappings(attr.UidMappings)); err != nil {
			return 0, pathErr(err)
		}
	}
	if attr.GidMappings != nil {
		setgroups := "deny"
		if attr.GidMappingsEnableSetgroups {
			setgroups = "allow"
		}
		if r.setgroups_text, err = cstr(setgroups); err != nil {
			return 0, pathErr(err)
		}
		if r.gid_map, err = cstr(idMappings(attr.GidMappings)); err != nil {
			return 0, pathErr(err)
		}
	}
	stack := st.mem[os.Getpagesize():]
	r.stack, r.stack_size = unsafe.Pointer(&stack[0]), C.size_t(len(stack))

	// As Go's forkExec: no descriptor is made meanwhile that is not yet
	// close-on-exec.
	syscall.ForkLock.Lock()
	pid := C.spawn_clone(r)
	syscall.ForkLock.Unlock()
	if pid < 0 {
		return 0, pathErr(syscall.Errno(-pid))
	}
	C.spawn_maps(r)
	if err := awaitExec(int(r.err_r), int(pid)); err != nil {
		return 0, pathErr(err)
	}
	return int(pid), nil
}

// awaitExec waits, on Go's poller (no thread held in a system call), for
// the child's exec: EOF on its error pipe errPipe, which it closes. If the
// child wrote why it failed instead, awaitExec reaps it and returns that.
func awaitExec(errPipe, pid int) error {
	f := os.NewFile(uintptr(errPipe), "spawn-exec")
	var b [4]byte
	n, err := io.ReadFull(f, b[:])
	f.Close()
	switch {
	case n == 0 && err == io.EOF:
		return nil
	case n == len(b):
		err = syscall.Errno(binary.NativeEndian.Uint32(b[:]))
	case err == nil || err == io.ErrUnexpectedEOF:
		err = syscall.EPIPE
	}
	// It failed (or its pipe did: fail closed): it ends, and is reaped
	// before its stack is used again; no process is left of a failed
	// start.
	_ = syscall.Kill(pid, syscall.SIGKILL)
	reap(pid)
	return err
}

// cloneable reports whether startCmd's clone does everything cmd asks:
// the attributes sandbox.Prepare sets and no other, descriptors as files.
func cloneable(cmd *exec.Cmd) bool {
	attr := cmd.SysProcAttr
	if attr == nil || cmd.Stdin != nil && !isFile(cmd.Stdin) || cmd.Stdout != nil && !isFile(cmd.Stdout) ||
		cmd.Stderr != nil && !isFile(cmd.Stderr) || 3+len(cmd.ExtraFiles) > maxCloneFDs ||
		cmd.Process != nil || cmd.Err != nil || cmd.Cancel != nil || cmd.WaitDelay != 0 {
		return false
	}
	for _, c := range attr.AmbientCaps {
		if c >= 64 {
			return false
		}
	}
	if cred := attr.Credential; cred != nil && (len(cred.Groups) > 0 || cred.NoSetGroups) {
		return false
	}
	rest := *attr
	rest.Cloneflags &^= syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET |
		syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP
	rest.Setpgid, rest.Pdeathsig, rest.Credential, rest.AmbientCaps = false, 0, nil, nil
	rest.UidMappings, rest.GidMappings, rest.GidMappingsEnableSetgroups = nil, nil, false
	return reflect.DeepEqual(rest, syscall.SysProcAttr{})
}

func isFile(v any) bool {
	f, ok := v.(*os.File)
	return ok && f != nil
}

// childFiles are the child's descriptors, fd i at index i (-1: closed),
// and the /dev/null files opened for it, which the caller closes once the
// child has executed.
func childFiles(cmd *exec.Cmd) (fds []int, opened []*os.File, err error) {
	std := func(v any, flag int) (int, error) {
		if v != nil {
			return int(v.(*os.File).Fd()), nil
		}
		f, err := os.OpenFile(os.DevNull, flag, 0)
		if err != nil {
			return -1, err
		}
		opened = append(opened, f)
		return int(f.Fd()), nil
	}
	for _, s := range []struct {
		v    any
		flag int
	}{{fileOrNil(cmd.Stdin), os.O_RDONLY}, {fileOrNil(cmd.Stdout), os.O_WRONLY}, {fileOrNil(cmd.Stderr), os.O_WRONLY}} {
		fd, err := std(s.v, s.flag)
		if err != nil {
			return nil, opened, err
		}
		fds = append(fds, fd)
	}
	for _, f := range cmd.ExtraFiles {
		if f == nil {
			fds = append(fds, -1)
			continue
		}
		fds = append(fds, int(f.Fd()))
	}
	return fds, opened, nil
}

// fileOrNil is v as an *os.File, or an untyped nil: cloneable admits
// nothing else.
func fileOrNil(v any) any {
	if f, ok := v.(*os.File); ok && f != nil {
		return f
	}
	return nil
}

// idMappings is Go's formatIDMappings: one "inside outside count" line per
// range.
func idMappings(m []syscall.SysProcIDMap) string {
	var b strings.Builder
	for _, im := range m {
		b.WriteString(strconv.Itoa(im.ContainerID) + " " + strconv.Itoa(im.HostID) + " " + strconv.Itoa(im.Size) + "\n")
	}
	return b.String()
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
