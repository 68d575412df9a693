package spoke_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/secgpt/secgpt/spoke"
)

// TestSpokeWaitsOnTheNetpoller: a spoke waiting for the hub's next frame
// reads its channel (fd 3) non-blocking, through Go's netpoller, and no
// thread of it sits in read(2) on the channel. A thread blocked in read
// kept the runtime's sysmon polling through each wait (every 20 µs, then
// backing off, for 10 ms), a third of a waiting spoke's CPU on a machine
// where each wake-up is a costly kernel entry.
func TestSpokeWaitsOnTheNetpoller(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("reading a spoke's /proc/PID/fdinfo and syscall files needs root: the spoke runs under another uid")
	}
	m := newManager(t, spoke.Options{})
	res, info, err := m.Run(context.Background(), key("@a:x", "echo"), step("say", `{"text":"hi"}`), &handler{})
	if err != nil || res.Error != "" {
		t.Fatalf("step: %v %s", err, res.Error)
	}
	flags := fdFlags(t, info.PID, 3)
	if flags&syscall.O_NONBLOCK == 0 {
		t.Errorf("the spoke's channel (fd 3) is blocking: flags %#o", flags)
	}
	// Once the spoke waits, none of its threads may be in read(3, …).
	deadline := time.Now().Add(2 * time.Second)
	for {
		tid, blocked := threadInRead(t, info.PID, 3)
		if !blocked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d of the waiting spoke is blocked in read on its channel", tid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fdFlags are the file status flags of descriptor fd of process pid.
func fdFlags(t *testing.T, pid, fd int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "flags:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
	}
	t.Fatalf("no flags in /proc/%d/fdinfo/%d", pid, fd)
	return 0
}

// threadInRead reports a thread of pid that is in read(2) on fd, from
// /proc/PID/task/TID/syscall ("0 0x3 …" on x86-64: read, first argument).
func threadInRead(t *testing.T, pid, fd int) (int, bool) {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/syscall", pid, task.Name()))
		if err != nil {
			continue // a thread that ended
		}
		f := strings.Fields(string(b))
		if len(f) >= 2 && f[0] == strconv.Itoa(syscall.SYS_READ) && f[1] == fmt.Sprintf("%#x", fd) {
			tid, _ := strconv.Atoi(task.Name())
			return tid, true
		}
	}
	return 0, false
}
