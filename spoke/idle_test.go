package spoke_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/spoke"
)

// switches is the number of context switches of a process's threads so
// far, voluntary and not, from /proc/PID/task/TID/status.
func switches(t testing.TB, pid int) int {
	t.Helper()
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/status")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("no threads of %d: %v", pid, err)
	}
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue // the thread ended
		}
		for _, line := range strings.Split(string(b), "\n") {
			if name, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(name, "ctxt_switches") {
				c, _ := strconv.Atoi(strings.TrimSpace(v))
				n += c
			}
		}
	}
	return n
}

// settle waits, up to 50 ms, until every thread of a process sleeps.
func settle(pid int) {
	for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		stats, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/stat")
		running := false
		for _, st := range stats {
			b, err := os.ReadFile(st)
			// The state follows the command name, which ends in ") ".
			if i := strings.LastIndexByte(string(b), ')'); err == nil && i+2 < len(b) && b[i+2] != 'S' {
				running = true
			}
		}
		if !running {
			return
		}
	}
}

// TestWaitingSpokeIsIdle: a spoke waiting for the hub's reply (its model
// call, here 200 ms) sleeps until the reply comes. A read blocked in the
// kernel kept Go's monitor thread waking for the first 10 ms of each wait
// (every 20 µs, backing off), each wake-up a kernel entry: with 100
// spokes waiting at once, a quarter of their CPU (issue 13).
func TestWaitingSpokeIsIdle(t *testing.T) {
	m := newManager(t, spoke.Options{})
	ctx := context.Background()
	k := key("@a:x", "echo")
	_, info, err := m.Run(ctx, k, step("say", `{"text":"x"}`), &handler{})
	if err != nil {
		t.Fatal(err)
	}
	const waits, wait = 3, 200 * time.Millisecond
	during := 0
	h := &handler{complete: func(spoke.LLMRequest) (spoke.LLMReply, error) {
		// The spoke has just sent its request; its wait begins once it
		// has gone to sleep (the hub reads the request that fast).
		settle(info.PID)
		before := switches(t, info.PID)
		time.Sleep(wait)
		during += switches(t, info.PID) - before
		return spoke.LLMReply{Message: llm.Message{Role: llm.RoleAssistant, Content: "said"}}, nil
	}}
	for range waits {
		s := step("say", `{"text":"hi"}`)
		s.Answer, s.Query = true, "please say hi"
		if res, _, err := m.Run(ctx, k, s, h); err != nil || res.Answer != "said" {
			t.Fatalf("step: %+v, %v", res, err)
		}
	}
	if during > 2*waits {
		t.Errorf("the spoke's threads switched %d times in %d waits of %v for the hub, want at most %d", during, waits, wait, 2*waits)
	}
}
