package spoke_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/spoke/spoketest"
)

// spareOptions keeps n spares under the strict policy spoketest.Policy
// gives, and records the scratch directory of every spoke started.
func spareOptions(t *testing.T, n int) (spoke.Options, func(spoke.Key) string) {
	inner := spoketest.Policy(t)
	var mu sync.Mutex
	scratch := map[spoke.Key]string{}
	opts := spoke.Options{
		Spares:      n,
		SparePolicy: sandbox.Policy{Profile: sandbox.ProfileStrict},
		Policy: func(k spoke.Key) (sandbox.Policy, error) {
			p, err := inner(k)
			mu.Lock()
			scratch[k] = p.Scratch
			mu.Unlock()
			return p, err
		},
	}
	return opts, func(k spoke.Key) string {
		mu.Lock()
		defer mu.Unlock()
		return scratch[k]
	}
}

// procField returns the value of a "Name:\tvalue" line of /proc/PID/status.
func procField(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", name, pid)
	return ""
}

// runningSpares lists the waiting spares of this test process: the
// children of its spawners started with --spare (zombies excluded) that are
// not confined yet.
func runningSpares(t testing.TB) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte("\x00--spare")) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 || fields[0] == "Z" || parentOf(fields[1]) != strconv.Itoa(os.Getpid()) {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err == nil && bytes.Contains(status, []byte("\nSeccomp:\t0\n")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// parentOf is the parent pid of pid, or "".
func parentOf(pid string) string {
	stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return ""
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 2 {
		return ""
	}
	return fields[1]
}

// waitSpares waits until n spares run and m holds them, and returns them.
func waitSpares(t *testing.T, m *spoke.Manager, n int) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := runningSpares(t)
		if len(pids) == n && m.Spares() == n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spares run (%v), want %d", len(pids), pids, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSpareStartsASpoke(t *testing.T) {
	opts, scratchOf := spareOptions(t, 1)
	m := newManager(t, opts)
	spare := waitSpares(t, m, 1)[0]
	k := key("@a:x", "echo")
	res, info, err := m.Run(context.Background(), k, step("say", `{"text":"hi"}`), &handler{})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Output) != `{"text":"hi"}` {
		t.Fatalf("result = %+v", res)
	}
	if !info.Cold || !info.Prestarted || info.PID != spare {
		t.Fatalf("info = %+v, want a cold start from spare %d", info, spare)
	}
	// The spare confined itself as a spoke started directly does.
	if got := procField(t, info.PID, "Seccomp"); got != "2" {
		t.Errorf("Seccomp = %s, want 2 (filter)", got)
	}
	if got := procField(t, info.PID, "NoNewPrivs"); got != "1" {
		t.Errorf("NoNewPrivs = %s, want 1", got)
	}
	cwd, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(info.PID), "cwd"))
	if err != nil {
		t.Fatal(err)
	}
	if want := scratchOf(k); cwd != want {
		t.Errorf("working directory %s, want the scratch directory %s", cwd, want)
	}
	// Another spare takes its place.
	if next := waitSpares(t, m, 1)[0]; next == spare {
		t.Fatalf("spare %d still waiting after it was used", spare)
	}
}

// TestWaitingSpareHoldsNothing: a spare that belongs to no one yet has the
// scrubbed environment of any spoke (no secret of the hub's), is not
// sandboxed yet (it has read nothing), and becomes a spoke that reports an
// empty environment.
func TestWaitingSpareHoldsNothing(t *testing.T) {
	t.Setenv("SECGPT_TEST_API_KEY", "sk-must-not-leak")
	opts, _ := spareOptions(t, 1)
	m := newManager(t, opts)
	spare := waitSpares(t, m, 1)[0]
	environ, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(spare), "environ"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(environ, []byte("sk-must-not-leak")) || bytes.Contains(environ, []byte("SECGPT_TEST_API_KEY")) {
		t.Fatalf("a waiting spare holds the hub's secret: %q", environ)
	}
	if os.Geteuid() == 0 {
		// An id of its own, from the spokes' range (nobody inside).
		r := sandbox.DefaultIDRange
		if uid, err := strconv.Atoi(strings.Fields(procField(t, spare, "Uid"))[0]); err != nil || uid < int(r.First) || uid >= int(r.First+r.Count) {
			t.Errorf("spare runs as uid %s, want one of %+v", procField(t, spare, "Uid"), r)
		}
	}
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(spare), "fd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if n, _ := strconv.Atoi(fd.Name()); n > 4 {
			// The runtime's own descriptors are close-on-exec; only
			// 0–4 were inherited.
			link, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(spare), "fd", fd.Name()))
			if strings.Contains(link, "socket") || strings.Contains(link, ".db") {
				t.Errorf("spare holds fd %s -> %s", fd.Name(), link)
			}
		}
	}
	res, info, err := m.Run(context.Background(), key("@a:x", "faulty"), step("environ", `{}`), &handler{})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Prestarted {
		t.Fatalf("info = %+v, want a start from the spare", info)
	}
	var out struct{ Text string }
	if err := json.Unmarshal(res.Output, &out); err != nil || out.Text != "" {
		t.Fatalf("spoke environment = %q (%v), want empty", out.Text, err)
	}
}

func TestSpareOnlyForPoliciesItFits(t *testing.T) {
	tests := []struct {
		name  string
		spare sandbox.Policy
		extra []string
		want  bool
	}{
		{"same policy", sandbox.Policy{Profile: sandbox.ProfileStrict}, nil, true},
		{"spare in other namespaces", sandbox.Policy{Profile: sandbox.ProfileStrict, Namespaces: true}, nil, false},
		{"spare allows a weaker sandbox", sandbox.Policy{Profile: sandbox.ProfileStrict, AllowWeaker: true}, nil, false},
		{"spoke with arguments of its own", sandbox.Policy{Profile: sandbox.ProfileStrict}, []string{"--log-level", "warn"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, _ := spareOptions(t, 1)
			opts.SparePolicy = tt.spare
			if tt.extra != nil {
				opts.Extra = func(spoke.Key) ([]string, []byte, error) { return tt.extra, nil, nil }
			}
			m := newManager(t, opts)
			waitSpares(t, m, 1)
			_, info, err := m.Run(context.Background(), key("@a:x", "echo"), step("say", `{"text":"x"}`), &handler{})
			if err != nil {
				t.Fatal(err)
			}
			if info.Prestarted != tt.want {
				t.Fatalf("prestarted = %v, want %v", info.Prestarted, tt.want)
			}
		})
	}
}

func TestDeadSpareFallsBackToAStart(t *testing.T) {
	opts, _ := spareOptions(t, 1)
	m := newManager(t, opts)
	spare := waitSpares(t, m, 1)[0]
	if err := syscall.Kill(spare, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The manager still holds it: it learns of the death when it takes it.
	for deadline := time.Now().Add(5 * time.Second); len(runningSpares(t)) != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the killed spare is still running")
		}
	}
	_, info, err := m.Run(context.Background(), key("@a:x", "echo"), step("say", `{"text":"x"}`), &handler{})
	if err != nil {
		t.Fatalf("a dead spare failed the start: %v", err)
	}
	if info.Prestarted || !info.Cold {
		t.Fatalf("info = %+v, want a cold start without the dead spare", info)
	}
	waitSpares(t, m, 1)
}

func TestCloseStopsSpares(t *testing.T) {
	opts, _ := spareOptions(t, 2)
	m := newManager(t, opts)
	pids := waitSpares(t, m, 2)
	m.Close()
	for _, pid := range pids {
		waitGone(t, pid)
	}
	if left := runningSpares(t); len(left) != 0 {
		t.Fatalf("spares left after Close: %v", left)
	}
}

// TestExpectSizesSparesToDemand: each expected spoke that does not run
// gets a spare, up to MaxSpares; an expectation ends when its spoke
// starts, and the spares of the others stop once they have waited
// SpareIdle for nothing.
func TestExpectSizesSparesToDemand(t *testing.T) {
	opts, _ := spareOptions(t, 1)
	// Long enough for three spares to start on a loaded machine before
	// the expectations end, short enough for the shrink to be seen.
	opts.MaxSpares, opts.SpareIdle = 3, 3*time.Second
	m := newManager(t, opts)
	waitSpares(t, m, 1)
	m.Expect(time.Now(), key("@a:x", "echo"), key("@b:x", "echo"), key("@c:x", "echo"), key("@d:x", "echo"))
	waitSpares(t, m, 3)
	_, info, err := m.Run(context.Background(), key("@a:x", "echo"), step("say", `{"text":"x"}`), &handler{})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Cold || !info.Prestarted {
		t.Fatalf("info = %+v, want a start from a spare", info)
	}
	// @a's start took a spare and ended its expectation: the two left
	// wait for @b, @c and @d (none starts for the third, as old as @a's
	// was at its start), then, with the expectations ended, one (Spares,
	// and the one spoke started).
	waitSpares(t, m, 2)
	waitSpares(t, m, 1)
}

// TestNoRefillDuringABurst: a spare taken while a burst is on (a spoke
// was expected or started within SpareQuiet) is replaced only once the
// burst is over, and the pool then holds as many as the burst started.
func TestNoRefillDuringABurst(t *testing.T) {
	opts, _ := spareOptions(t, 1)
	opts.SpareQuiet = 2 * time.Second
	opts.SpareIdle = time.Minute
	m := newManager(t, opts)
	waitSpares(t, m, 1)
	keys := []spoke.Key{key("@a:x", "echo"), key("@b:x", "echo")}
	m.Expect(time.Now(), keys...)
	waitSpares(t, m, 2)
	for _, k := range keys {
		if _, info, err := m.Run(context.Background(), k, step("say", `{"text":"x"}`), &handler{}); err != nil || !info.Prestarted {
			t.Fatalf("info = %+v, %v; want a start from a spare", info, err)
		}
	}
	ran := time.Now()
	// Within the quiet period no spare starts (a refill would start
	// one per spare taken at once).
	for time.Since(ran) < opts.SpareQuiet*3/4 {
		if n := len(runningSpares(t)); n != 0 {
			t.Fatalf("%d spares run %v after the burst's last start, want none before SpareQuiet", n, time.Since(ran))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Then the pool is refilled to the two the burst started.
	waitSpares(t, m, 2)
}

func TestExpectSkipsRunningSpokes(t *testing.T) {
	tests := []struct {
		name   string
		expect spoke.Key
		want   int
	}{
		{"the spoke runs", key("@a:x", "echo"), 0},
		{"a spoke of another app", key("@a:x", "faulty"), 1},
		{"any app, a spoke of the user's runs", spoke.Key{User: "@a:x", App: spoke.AnyApp, Session: "s1"}, 0},
		{"any app, another user", spoke.Key{User: "@b:x", App: spoke.AnyApp, Session: "s1"}, 1},
		{"any app, another session", spoke.Key{User: "@a:x", App: spoke.AnyApp, Session: "s2"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, _ := spareOptions(t, 0)
			opts.SpareIdle = time.Minute
			m := newManager(t, opts)
			if _, _, err := m.Run(context.Background(), key("@a:x", "echo"), step("say", `{"text":"x"}`), &handler{}); err != nil {
				t.Fatal(err)
			}
			m.Expect(time.Now(), tt.expect)
			if tt.want > 0 {
				waitSpares(t, m, tt.want)
				return
			}
			time.Sleep(300 * time.Millisecond)
			if n := len(runningSpares(t)); n != 0 || m.Spares() != 0 {
				t.Fatalf("%d spares run, %d held; want none for a spoke that runs", n, m.Spares())
			}
		})
	}
}

// TestExpectAnyAppEndsWithTheUsersFirstSpoke: a request that names no app
// expects one spoke of the user's; its start, of whatever app, ends it.
func TestExpectAnyAppEndsWithTheUsersFirstSpoke(t *testing.T) {
	opts, _ := spareOptions(t, 0)
	opts.SpareIdle = time.Minute
	m := newManager(t, opts)
	m.Expect(time.Now(), spoke.Key{User: "@a:x", App: spoke.AnyApp, Session: "s1"})
	waitSpares(t, m, 1)
	_, info, err := m.Run(context.Background(), key("@a:x", "echo"), step("say", `{"text":"x"}`), &handler{})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Prestarted {
		t.Fatalf("info = %+v, want a start from the spare", info)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(runningSpares(t)); n != 0 {
		t.Fatalf("%d spares run after the expected spoke started, want 0", n)
	}
}

// TestPrestartedSpokeIsColdToItsFirstStep: a spoke started ahead of its
// step runs that step, which reports the start as its own.
func TestPrestartedSpokeIsColdToItsFirstStep(t *testing.T) {
	m := newManager(t, spoke.Options{})
	k := key("@a:x", "echo")
	if err := m.Prestart(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	pid := m.PIDs()[k]
	if pid == 0 {
		t.Fatal("no spoke runs after Prestart")
	}
	for i, wantCold := range []bool{true, false} {
		_, info, err := m.Run(context.Background(), k, step("say", `{"text":"x"}`), &handler{})
		if err != nil {
			t.Fatal(err)
		}
		if info.PID != pid || info.Cold != wantCold || wantCold && info.Startup == 0 {
			t.Fatalf("step %d: info = %+v, want pid %d cold %v with its start-up", i, info, pid, wantCold)
		}
	}
}
