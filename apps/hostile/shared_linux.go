package hostile

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// The attacks of issue 11 on what the spokes of all users share: the
// file tree's metadata, memory, tasks and disk (those on the hub's time,
// the model bill and the store are in budget_linux.go).

func statFile(path string) Result {
	attack := Stat + " " + path
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		// ENOENT counts: the target exists (the harness checks), so a
		// view without it is the refusal.
		return judge(attack, os.NewSyscallError("stat", err), "", unix.EACCES, unix.EPERM, unix.ENOENT)
	}
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("size %d bytes, modified %s, owner uid %d",
		st.Size, time.Unix(st.Mtim.Unix()).UTC().Format(time.RFC3339), st.Uid)}
}

// hogStep is how much hog maps at a time.
const hogStep = 8 << 20

// hog maps and touches memory a step at a time and keeps it all; past
// its cgroup's bound the kernel kills the spoke before it can report.
func hog(most int64) Result {
	attack := fmt.Sprintf("%s %d", Hog, most)
	var held int64
	for held < most {
		mem, err := unix.Mmap(-1, 0, hogStep, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return judge(attack, fmt.Errorf("after %d bytes: %w", held, os.NewSyscallError("mmap", err)), "", unix.ENOMEM)
		}
		for i := 0; i < len(mem); i += os.Getpagesize() {
			mem[i] = 1
		}
		held += hogStep
	}
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("held %d bytes", held)}
}

// diskFill writes count files of size/count bytes each under dir.
func diskFill(dir string, size int64, count int) Result {
	attack := fmt.Sprintf("%s %s %d %d", DiskFill, dir, size, count)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return judge(attack, err, "", unix.EACCES, unix.EPERM, unix.ENOSPC, unix.EDQUOT)
	}
	each := size / int64(max(count, 1))
	chunk := make([]byte, min(each, 1<<20))
	var written int64
	for i := range count {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("f%06d", i)), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return judge(attack, fmt.Errorf("after %d files, %d bytes: %w", i, written, err), "", unix.ENOSPC, unix.EDQUOT)
		}
		for n := int64(0); n < each; {
			m, err := f.Write(chunk[:min(int64(len(chunk)), each-n)])
			n += int64(m)
			written += int64(m)
			if err != nil {
				f.Close()
				return judge(attack, fmt.Errorf("after %d files, %d bytes: %w", i, written, err), "", unix.ENOSPC, unix.EDQUOT)
			}
		}
		if err := f.Close(); err != nil {
			return judge(attack, fmt.Errorf("after %d files, %d bytes: %w", i+1, written, err), "", unix.ENOSPC, unix.EDQUOT)
		}
	}
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("wrote %d bytes in %d files", written, count)}
}
