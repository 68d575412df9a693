package hostile

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The attacks of issue 11 on what the spokes of all users share: the
// file tree's metadata, memory, tasks, disk, the hub's time and the
// model bill.

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

// burnTokens asks the hub for count completions of a prompt of size bytes,
// speaking the ISC protocol itself, and stops at the first refusal.
func burnTokens(count int, size int64) Result {
	attack := fmt.Sprintf("%s %d %d", Burn, count, size)
	prompt := strings.Repeat("a", int(size))
	var sent int64
	for i := range count {
		refusal, err := askModel(uint64(1<<41+i), prompt)
		if err != nil {
			return judge(attack, fmt.Errorf("after %d completions: %w", i, err), "", unix.EPIPE, unix.ECONNRESET)
		}
		if refusal != "" {
			return Result{Attack: attack, Outcome: Blocked, Detail: fmt.Sprintf("refused after %d completions of %d prompt bytes (%d bytes, about %d tokens): %s", i, size, sent, sent/4, refusal)}
		}
		sent += size
	}
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("%d completions of %d prompt bytes (%d bytes, about %d tokens)", count, size, sent, sent/4)}
}

// grind sends, for seconds, model requests the hub must read and parse to
// refuse (their prompt is over its limit), each after the last reply. The
// hub answering something else, or ending the channel, stops it.
func grind(seconds int, size int64) Result {
	attack := fmt.Sprintf("%s %d %d", Grind, seconds, size)
	prompt := strings.Repeat("g", int(size))
	start := time.Now()
	var first string
	n := 0
	for ; time.Since(start) < time.Duration(seconds)*time.Second; n++ {
		refusal, err := askModel(uint64(1<<42+n), prompt)
		if err != nil {
			return judge(attack, fmt.Errorf("after %d requests in %v: %w", n, time.Since(start).Round(time.Millisecond), err), "", unix.EPIPE, unix.ECONNRESET)
		}
		if first == "" {
			first = refusal
		}
		if refusal == "" || refusal != first {
			return Result{Attack: attack, Outcome: Blocked, Detail: fmt.Sprintf("after %d requests in %v the hub answered: %s", n, time.Since(start).Round(time.Millisecond), cut(refusal, 300))}
		}
	}
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("the hub read and refused %d requests of %d bytes in %v: %s", n, size, time.Since(start).Round(time.Millisecond), cut(first, 200))}
}

// askModel sends one model request on the ISC channel and reads its reply:
// the hub's refusal, or "" for a completion.
func askModel(id uint64, prompt string) (string, error) {
	body, err := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": prompt}}})
	if err != nil {
		return "", err
	}
	frame, err := json.Marshal(map[string]any{"v": 1, "kind": "llm", "id": id, "body": json.RawMessage(body)})
	if err != nil {
		return "", err
	}
	if err := writeAll(iscFD, binary.BigEndian.AppendUint32(nil, uint32(len(frame))), frame); err != nil {
		return "", err
	}
	reply, err := readFrame(iscFD)
	if err != nil {
		return "", err
	}
	var f struct {
		Kind  string `json:"kind"`
		ID    uint64 `json:"id"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(reply, &f); err != nil {
		return "", fmt.Errorf("malformed reply: %w", err)
	}
	if f.Kind != "reply" || f.ID != id {
		return "", fmt.Errorf("unexpected %s frame %d", f.Kind, f.ID)
	}
	return f.Error, nil
}

func writeAll(fd int, parts ...[]byte) error {
	for _, b := range parts {
		for len(b) > 0 {
			n, err := unix.Write(fd, b)
			if err != nil {
				return os.NewSyscallError("write", err)
			}
			b = b[n:]
		}
	}
	return nil
}

// maxReply bounds a reply frame the attacks read.
const maxReply = 4 << 20

func readFrame(fd int) ([]byte, error) {
	var head [4]byte
	if err := readFull(fd, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n > maxReply {
		return nil, fmt.Errorf("reply of %d bytes", n)
	}
	b := make([]byte, n)
	return b, readFull(fd, b)
}

func readFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Read(fd, b)
		if err != nil {
			return os.NewSyscallError("read", err)
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		b = b[n:]
	}
	return nil
}
