package spoke_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/spoke/spoketest"
)

func TestMain(m *testing.M) { os.Exit(spoketest.Main(m)) }

// handler is a scripted hub side for one step.
type handler struct {
	mu       sync.Mutex
	complete func(spoke.LLMRequest) (spoke.LLMReply, error)
	requests []string
	memory   []string
}

var _ spoke.Handler = (*handler)(nil)

func (h *handler) note(kind string) {
	h.mu.Lock()
	h.requests = append(h.requests, kind)
	h.mu.Unlock()
}

func (h *handler) Complete(_ context.Context, req spoke.LLMRequest) (spoke.LLMReply, error) {
	h.note("llm")
	if h.complete == nil {
		return spoke.LLMReply{}, errors.New("no model in this test")
	}
	return h.complete(req)
}

func (h *handler) Probe(context.Context, spoke.Probe) (spoke.ProbeReply, error) {
	h.note("probe")
	return spoke.ProbeReply{}, errors.New("denied in tests")
}

func (h *handler) CallApp(context.Context, spoke.AppCall) (spoke.AppCallReply, error) {
	h.note("app_call")
	return spoke.AppCallReply{}, errors.New("denied in tests")
}

func (h *handler) HTTP(context.Context, spoke.HTTPRequest) (spoke.HTTPResponse, error) {
	h.note("http")
	return spoke.HTTPResponse{}, errors.New("denied in tests")
}

func (h *handler) AppendMemory(_ context.Context, m spoke.MemoryAppend) error {
	h.note("memory")
	h.mu.Lock()
	h.memory = append(h.memory, m.Content)
	h.mu.Unlock()
	return nil
}

func (h *handler) Data(context.Context, spoke.DataOp) (spoke.DataReply, error) {
	h.note("data")
	return spoke.DataReply{}, errors.New("denied in tests")
}

func newManager(t testing.TB, opts spoke.Options) *spoke.Manager {
	t.Helper()
	if opts.Policy == nil {
		opts.Policy = spoketest.Policy(t)
	}
	opts.Binary = spoketest.Binary
	opts.Log = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	m, err := spoke.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func key(user, app string) spoke.Key { return spoke.Key{User: user, App: app, Session: "s1"} }

func step(fn, args string) spoke.Step {
	return spoke.Step{ID: "s1", Function: fn, Args: json.RawMessage(args), MaxLLMCalls: 4}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("spoke %d still alive", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStepRunsWithoutModelWhenArgsSuffice(t *testing.T) {
	m := newManager(t, spoke.Options{})
	h := &handler{}
	res, info, err := m.Run(context.Background(), key("@a:x", "echo"), step("say", `{"text":"hi"}`), h)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Output) != `{"text":"hi"}` || res.Error != "" {
		t.Fatalf("result = %+v", res)
	}
	if !info.Cold || info.PID == 0 || info.PID == os.Getpid() {
		t.Fatalf("info = %+v, want a cold start in a child", info)
	}
	for _, r := range h.requests {
		if r == "llm" {
			t.Fatal("the spoke called the model although the plan's arguments sufficed")
		}
	}
}

func TestProcessPerUserAppSession(t *testing.T) {
	m := newManager(t, spoke.Options{})
	ctx := context.Background()
	pid := func(k spoke.Key) (int, bool) {
		_, info, err := m.Run(ctx, k, step("say", `{"text":"x"}`), &handler{})
		if err != nil {
			t.Fatal(err)
		}
		return info.PID, info.Cold
	}
	a1, cold1 := pid(key("@a:x", "echo"))
	a2, cold2 := pid(key("@a:x", "echo"))
	b, _ := pid(key("@b:x", "echo"))
	other, _ := pid(spoke.Key{User: "@a:x", App: "echo", Session: "s2"})
	if a1 != a2 || !cold1 || cold2 {
		t.Fatalf("same key: pids %d/%d cold %t/%t, want one warm reuse", a1, a2, cold1, cold2)
	}
	if b == a1 || other == a1 || other == b {
		t.Fatalf("different users or sessions shared a process: a=%d b=%d a/s2=%d", a1, b, other)
	}
}

func TestAnsweringStepUsesOnlyTheHubsModel(t *testing.T) {
	m := newManager(t, spoke.Options{})
	h := &handler{complete: func(req spoke.LLMRequest) (spoke.LLMReply, error) {
		return spoke.LLMReply{Message: llm.Message{Role: llm.RoleAssistant, Content: "You said hi."}}, nil
	}}
	s := step("say", `{"text":"hi"}`)
	s.Answer, s.Query = true, "please say hi"
	res, _, err := m.Run(context.Background(), key("@a:x", "echo"), s, h)
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "You said hi." || string(res.Output) != `{"text":"hi"}` {
		t.Fatalf("result = %+v", res)
	}
	if len(h.memory) == 0 {
		t.Fatal("the spoke kept no memory of the step")
	}
}

func TestRefusedToolCallNeverRuns(t *testing.T) {
	m := newManager(t, spoke.Options{})
	calls := 0
	h := &handler{complete: func(req spoke.LLMRequest) (spoke.LLMReply, error) {
		calls++
		if calls == 1 {
			return spoke.LLMReply{
				Message: llm.Message{Role: llm.RoleAssistant},
				Refused: []spoke.RefusedCall{{ID: "c1", Name: "faulty__crash", Reason: "not part of the plan"}},
			}, nil
		}
		last := req.Messages[len(req.Messages)-1]
		if last.Role != llm.RoleTool || !strings.Contains(last.Content, "Refused by the hub") {
			return spoke.LLMReply{}, fmt.Errorf("model did not see the refusal: %+v", last)
		}
		return spoke.LLMReply{Message: llm.Message{Role: llm.RoleAssistant, Content: "done"}}, nil
	}}
	s := step("ok", `{}`)
	s.Answer = true
	res, info, err := m.Run(context.Background(), key("@a:x", "faulty"), s, h)
	if err != nil {
		t.Fatalf("Run: %v (the refused crash ran?)", err)
	}
	if res.Answer != "done" || !alive(info.PID) {
		t.Fatalf("result = %+v, alive = %t", res, alive(info.PID))
	}
}

func TestFaultsKillOnlyTheSpoke(t *testing.T) {
	tests := []struct {
		fn      string
		want    error
		message string
	}{
		{"crash", spoke.ErrCrashed, "crashed"},
		{"garbage", spoke.ErrProtocol, "broke the protocol"},
		{"oversize", spoke.ErrProtocol, "broke the protocol"},
		{"impersonate", spoke.ErrProtocol, "broke the protocol"},
		{"flood", spoke.ErrFlood, "flooded the channel"},
		{"hang", spoke.ErrDeadline, "did not finish in time"},
	}
	m := newManager(t, spoke.Options{MaxFramesPerSecond: 200, StepTimeout: time.Second})
	for _, tt := range tests {
		t.Run(tt.fn, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			k := key("@mallory:x", "faulty")
			_, info, err := m.Run(ctx, k, step(tt.fn, `{}`), &handler{})
			var f *spoke.Failure
			if !errors.As(err, &f) || !errors.Is(err, tt.want) {
				t.Fatalf("Run() error = %v, want a Failure caused by %v", err, tt.want)
			}
			if f.App != "faulty" || !strings.Contains(f.Message, tt.message) {
				t.Fatalf("failure = %q for %s, want it to name the app and say %q", f.Message, f.App, tt.message)
			}
			waitGone(t, info.PID)
			// The manager and other spokes keep working; the same key gets a
			// fresh process.
			res, again, err := m.Run(context.Background(), k, step("ok", `{}`), &handler{})
			if err != nil || again.PID == info.PID || !again.Cold || string(res.Output) != `{"text":"fine"}` {
				t.Fatalf("after %s: res=%+v info=%+v err=%v", tt.fn, res, again, err)
			}
		})
	}
}

// TestStepTimeCountsOnlyTheSpoke: time the hub spends answering (a slow
// model, a user thinking about a consent) is not the spoke's; time the spoke
// spends on its own is.
func TestStepTimeCountsOnlyTheSpoke(t *testing.T) {
	m := newManager(t, spoke.Options{StepTimeout: 300 * time.Millisecond})
	slow := &handler{complete: func(spoke.LLMRequest) (spoke.LLMReply, error) {
		time.Sleep(500 * time.Millisecond)
		return spoke.LLMReply{Message: llm.Message{Role: llm.RoleAssistant, Content: "slow but fine"}}, nil
	}}
	s := step("say", `{"text":"hi"}`)
	s.Answer = true
	res, _, err := m.Run(context.Background(), key("@a:x", "echo"), s, slow)
	if err != nil || res.Answer != "slow but fine" {
		t.Fatalf("a slow hub killed the spoke: %+v, %v", res, err)
	}
	start := time.Now()
	_, _, err = m.Run(context.Background(), key("@a:x", "faulty"), step("hang", `{}`), &handler{})
	if !errors.Is(err, spoke.ErrDeadline) || time.Since(start) > 3*time.Second {
		t.Fatalf("hanging spoke: err = %v after %s, want a deadline kill after about 300ms", err, time.Since(start))
	}
}

func TestCancelledStepStopsTheSpoke(t *testing.T) {
	// 200 ms: while the step runs (or, on a loaded machine, while its
	// spoke starts); 1 ms: while the spoke starts. Either is a
	// cancellation, never reported as a deadline.
	for _, after := range []time.Duration{200 * time.Millisecond, time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			m := newManager(t, spoke.Options{})
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(after, cancel)
			_, info, err := m.Run(ctx, key("@a:x", "faulty"), step("hang", `{}`), &handler{})
			var f *spoke.Failure
			if !errors.As(err, &f) || !errors.Is(err, spoke.ErrCancelled) || !strings.Contains(f.Message, "cancelled") {
				t.Fatalf("Run() error = %v, want a cancellation", err)
			}
			if info.PID != 0 {
				waitGone(t, info.PID)
			}
		})
	}
}

// TestSpokeThatStopsReadingIsStopped: a spoke that sends requests and never
// reads the replies cannot hold the hub in a blocked write.
func TestSpokeThatStopsReadingIsStopped(t *testing.T) {
	// No frame-rate limit in the way: the write deadline must do it.
	m := newManager(t, spoke.Options{MaxFramesPerSecond: 1 << 30, StepTimeout: time.Second})
	start := time.Now()
	_, info, err := m.Run(context.Background(), key("@mallory:x", "faulty"), step("stall", `{}`), &handler{})
	var f *spoke.Failure
	if !errors.As(err, &f) || !errors.Is(err, spoke.ErrDeadline) || !strings.Contains(f.Message, "did not read the hub's messages") {
		t.Fatalf("Run() error = %v, want a deadline failure for not reading", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("took %s", time.Since(start))
	}
	waitGone(t, info.PID)
}

func TestAppPanicIsAFailedCallNotADeadSpoke(t *testing.T) {
	m := newManager(t, spoke.Options{})
	res, info, err := m.Run(context.Background(), key("@a:x", "faulty"), step("panic", `{}`), &handler{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Error == "" || !alive(info.PID) {
		t.Fatalf("result = %+v, alive = %t; want a step error from a live spoke", res, alive(info.PID))
	}
}

func TestResultOutsideSchemaIsDiscarded(t *testing.T) {
	m := newManager(t, spoke.Options{})
	res, _, err := m.Run(context.Background(), key("@a:x", "faulty"), step("badresult", `{}`), &handler{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != nil || res.Error == "" {
		t.Fatalf("result = %+v, want no output and an error", res)
	}
}

// TestChildHoldsNoSecrets: the hub's environment (with the API key) never
// reaches a spoke, seen from inside and from /proc.
func TestChildHoldsNoSecrets(t *testing.T) {
	const secret = "sk-test-do-not-leak-0123456789"
	t.Setenv("OPENAI_API_KEY", secret)
	t.Setenv("SECGPT_BOT_PASSWORD", secret)
	m := newManager(t, spoke.Options{})
	res, info, err := m.Run(context.Background(), key("@a:x", "faulty"), step("environ", `{}`), &handler{})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(res.Output, []byte(secret)) {
		t.Fatalf("the spoke sees the secret in its environment: %s", res.Output)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", info.PID))
	if err != nil {
		t.Fatalf("read child environment: %v", err)
	}
	if bytes.Contains(environ, []byte(secret)) {
		t.Fatalf("/proc/%d/environ holds the secret", info.PID)
	}
	t.Logf("child environment at exec: %q", environ)
}

func TestStopUserStopsOnlyThatUser(t *testing.T) {
	m := newManager(t, spoke.Options{})
	ctx := context.Background()
	_, a, err := m.Run(ctx, key("@a:x", "echo"), step("say", `{"text":"x"}`), &handler{})
	if err != nil {
		t.Fatal(err)
	}
	_, b, err := m.Run(ctx, key("@b:x", "echo"), step("say", `{"text":"x"}`), &handler{})
	if err != nil {
		t.Fatal(err)
	}
	m.StopUser("@a:x")
	waitGone(t, a.PID)
	if !alive(b.PID) {
		t.Fatal("stopping one user stopped another's spoke")
	}
}

func TestIdleSpokesAreReaped(t *testing.T) {
	m := newManager(t, spoke.Options{IdleTimeout: 200 * time.Millisecond})
	_, info, err := m.Run(context.Background(), key("@a:x", "echo"), step("say", `{"text":"x"}`), &handler{})
	if err != nil {
		t.Fatal(err)
	}
	waitGone(t, info.PID)
	if len(m.PIDs()) != 0 {
		t.Fatalf("manager still lists %v", m.PIDs())
	}
}

func TestUnknownAppFailsToStart(t *testing.T) {
	m := newManager(t, spoke.Options{})
	_, _, err := m.Run(context.Background(), key("@a:x", "no_such_app"), step("x", `{}`), &handler{})
	var f *spoke.Failure
	if !errors.As(err, &f) {
		t.Fatalf("Run() error = %v, want a Failure", err)
	}
}

// BenchmarkWarmStep measures one step on a running spoke.
func BenchmarkWarmStep(b *testing.B) {
	m := newManager(b, spoke.Options{})
	ctx := context.Background()
	k := key("@bench:x", "echo")
	if _, _, err := m.Run(ctx, k, step("say", `{"text":"x"}`), &handler{}); err != nil {
		b.Fatal(err)
	}
	var samples []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, _, err := m.Run(ctx, k, step("say", `{"text":"x"}`), &handler{}); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	reportPercentiles(b, "step", samples)
}

func reportPercentiles(b *testing.B, name string, samples []time.Duration) {
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	at := func(p float64) float64 {
		return float64(samples[int(p*float64(len(samples)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), name+"-p50-ms")
	b.ReportMetric(at(0.99), name+"-p99-ms")
}

// TestHandlerPanicEndsTheSpoke: a panic in the hub while it serves a
// spoke's request reaches the caller, and the spoke, left waiting for its
// reply, ends with the step; the next step gets a fresh process.
func TestHandlerPanicEndsTheSpoke(t *testing.T) {
	m := newManager(t, spoke.Options{})
	k := key("@a:x", "echo")
	h := &handler{complete: func(spoke.LLMRequest) (spoke.LLMReply, error) { panic("a bug in the hub") }}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the handler's panic did not reach the caller")
			}
		}()
		// Arguments the schema refuses: the spoke asks its model.
		m.Run(context.Background(), k, step("say", `{}`), h)
	}()
	pid := m.PIDs()[k]
	if pid == 0 {
		t.Fatal("no spoke was started")
	}
	waitGone(t, pid)
	_, info, err := m.Run(context.Background(), k, step("say", `{"text":"x"}`), &handler{})
	if err != nil || info.PID == pid || !info.Cold {
		t.Fatalf("next step: info %+v, err %v; want a fresh process", info, err)
	}
}
