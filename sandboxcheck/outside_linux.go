package sandboxcheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/scratch"
)

// The checks from outside the spoke. Each returns nil when it sees no
// trace of the attempt, or says what it saw.

// unchanged: the file still holds want.
func unchanged(path, want string) error {
	got, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", path, err)
	}
	if string(got) != want {
		return fmt.Errorf("%s changed: %q", path, got)
	}
	return nil
}

// absent: nothing exists at path.
func absent(path string) error {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return fmt.Errorf("%s exists", path)
	case errors.Is(err, fs.ErrNotExist):
		return nil
	default:
		return fmt.Errorf("failed to stat %s: %w", path, err)
	}
}

// untouched: a trap saw no connection or datagram since the lab started.
func untouched(what string, n int64) error {
	if n > 0 {
		return fmt.Errorf("the lab's %s was reached %d times", what, n)
	}
	return nil
}

// procStat is the fields of /proc/<pid>/stat the checks read.
type procStat struct {
	state      byte
	ppid, pgrp int
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name is in parentheses and may hold anything.
	i := bytes.LastIndexByte(b, ')')
	fields := strings.Fields(string(b[i+1:]))
	if i < 0 || len(fields) < 3 || len(fields[0]) != 1 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	ppid, err1 := strconv.Atoi(fields[1])
	pgrp, err2 := strconv.Atoi(fields[2])
	if err1 != nil || err2 != nil {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return procStat{state: fields[0][0], ppid: ppid, pgrp: pgrp}, nil
}

// gone waits until pid has exited (or is a zombie awaiting its parent).
func gone(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := readStat(pid)
		if errors.Is(err, fs.ErrNotExist) || err == nil && st.state == 'Z' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("spoke %d is still running %v after it was reported killed", pid, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// aloneInGroup: the spoke's process group (it leads its own) holds no
// other process, living or zombie.
func aloneInGroup(pid int) error {
	if pid == 0 {
		return errors.New("no spoke ran")
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("failed to list processes: %w", err)
	}
	var others []string
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil || p == pid {
			continue
		}
		st, err := readStat(p)
		if err == nil && (st.pgrp == pid || st.ppid == pid) {
			others = append(others, d.Name())
		}
	}
	if len(others) > 0 {
		return fmt.Errorf("spoke %d has %d more processes: %s", pid, len(others), strings.Join(others, ", "))
	}
	return nil
}

// notTraced: no process traces the hub.
func notTraced() error {
	v, err := statusField(os.Getpid(), "TracerPid")
	if err != nil {
		return err
	}
	if v != "0" {
		return fmt.Errorf("the hub is traced by process %s", v)
	}
	return nil
}

// peakBelow: the spoke's address space never reached n bytes.
func peakBelow(pid int, n int64) error {
	if pid == 0 {
		return errors.New("no spoke ran")
	}
	v, err := statusField(pid, "VmPeak")
	if err != nil {
		return err
	}
	kb, err := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
	if err != nil {
		return fmt.Errorf("malformed VmPeak %q", v)
	}
	if kb*1024 >= n {
		return fmt.Errorf("spoke %d reached %d bytes of address space", pid, kb*1024)
	}
	return nil
}

// statusField reads one field of /proc/<pid>/status.
func statusField(pid int, name string) (string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", fmt.Errorf("failed to read the status of %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("no %s in the status of %d", name, pid)
}

// sizeAtMost: the file the spoke wrote is no larger than limit. It then
// removes the file, which is only filler.
func sizeAtMost(path string, limit uint64) error {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to stat %s: %w", path, err)
	}
	defer os.Remove(path)
	if uint64(st.Size()) > limit {
		return fmt.Errorf("%s grew to %d bytes, over the %d-byte limit", filepath.Base(path), st.Size(), limit)
	}
	return nil
}

// scratchWithin: what the attacker left in its scratch (measured without
// following symlinks) is within its disk limits, and is removed.
func scratchWithin(dir string, l sandbox.Limits) error {
	u, err := scratch.Usage(dir)
	if err != nil {
		return err
	}
	defer func() {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}()
	if u.Bytes > l.DiskBytes || u.Files > l.DiskFiles {
		return fmt.Errorf("its scratch holds %d bytes in %d files, over the limit of %d bytes and %d files", u.Bytes, u.Files, l.DiskBytes, l.DiskFiles)
	}
	return nil
}

// openFilesAtMost: the spoke's open-files limit, as the kernel holds it, is
// at most limit.
func openFilesAtMost(pid int, limit uint64) error {
	if pid == 0 {
		return errors.New("no spoke ran")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return fmt.Errorf("failed to read the limits of %d: %w", pid, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Max open files")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) < 2 {
			break
		}
		soft, err1 := strconv.ParseUint(fields[0], 10, 64)
		hard, err2 := strconv.ParseUint(fields[1], 10, 64)
		if err1 != nil || err2 != nil || soft > limit || hard > limit {
			return fmt.Errorf("spoke %d may open %s/%s files, over %d", pid, fields[0], fields[1], limit)
		}
		return nil
	}
	return fmt.Errorf("no open-files limit for %d", pid)
}

// onlyServer: an external app's spoke has one child, its server, and the
// server has none.
func onlyServer(pid int) error {
	if pid == 0 {
		return errors.New("no spoke ran")
	}
	children := func(parent int) []int {
		dirs, _ := os.ReadDir("/proc")
		var out []int
		for _, d := range dirs {
			p, err := strconv.Atoi(d.Name())
			if err != nil {
				continue
			}
			if st, err := readStat(p); err == nil && st.ppid == parent {
				out = append(out, p)
			}
		}
		return out
	}
	servers := children(pid)
	if len(servers) > 1 {
		return fmt.Errorf("spoke %d has %d children: %v", pid, len(servers), servers)
	}
	for _, s := range servers {
		if more := children(s); len(more) > 0 {
			return fmt.Errorf("the server %d of spoke %d has children: %v", s, pid, more)
		}
	}
	return nil
}
