package sandboxcheck

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/apps"
	_ "github.com/secgpt/secgpt/apps/all"
	"github.com/secgpt/secgpt/apps/hostile"
	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/hub/hubtest"
	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/spoke/spoketest"
)

func TestMain(m *testing.M) {
	hostile.Register()
	os.Exit(spoketest.Main(m))
}

// testLimits are the default limits but for CPU, lowered so that the spin
// attack is killed in seconds, not half a minute.
func testLimits() sandbox.Limits {
	l := sandbox.DefaultLimits()
	l.CPUSeconds = 2
	return l
}

// testStepTimeout is a spoke's deadline per step in these tests: long enough
// for the spin attack's CPU limit (see testLimits) to strike first.
const testStepTimeout = 15 * time.Second

// newRunner builds a real hub whose spokes run the test spoke binary in
// the strict sandbox, with the lab's offline egress broker, and a Runner
// watching its logs. It skips when this kernel cannot apply the sandbox.
func newRunner(t *testing.T) *Runner {
	t.Helper()
	limits := testLimits()
	// As the product's: the spoke mounts its own scratch where it can.
	policy := sandbox.Policy{Profile: sandbox.ProfileStrict, Limits: limits, Namespaces: true}
	if err := sandbox.Probe().Check(policy); err != nil {
		t.Skipf("the spoke sandbox cannot be applied on this kernel, so no app may run: %v", err)
	}
	scratch := spoketest.NewScratch(t)
	lab, err := NewLab(scratch.Root())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	logs := &Logs{}
	log := zerolog.New(logs).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	sys := hubtest.NewSystem(t, hubtest.Options{
		Apps: []string{hostile.Name, VictimApp},
		Hub: func(o *hub.Options) {
			o.Log = log.With().Str("component", "hub").Logger()
			o.Egress = lab.Egress()
		},
		Spokes: func(o *spoke.Options) {
			o.Log = log.With().Str("component", "spoke").Logger()
			o.StepTimeout = testStepTimeout
			o.Policy = func(k spoke.Key) (sandbox.Policy, error) {
				dir, err := scratch.Dir(k)
				if err != nil {
					return sandbox.Policy{}, err
				}
				p := policy
				p.Scratch = dir
				return p, nil
			}
		},
	})
	lab.Database = filepath.Join(sys.Dir, "secgpt.db")
	r, err := NewRunner(Options{
		Hub: sys.Hub, Lab: lab, Logs: logs, Limits: limits,
		Scratch:        func(user, app string) (string, error) { return scratch.Dir(spoke.Key{User: user, App: app}) },
		AttemptTimeout: 2 * testStepTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("hub log:\n%s", logs.String())
		}
	})
	return r
}

// TestAttacks runs every attack of the hostile app through the hub, each
// its own case: each must be blocked, seen from outside, logged, and leave
// the hub serving another user.
func TestAttacks(t *testing.T) {
	r := newRunner(t)
	ctx := context.Background()
	for _, a := range Attacks() {
		t.Run(a.Name, func(t *testing.T) {
			if a.Function == hostile.FillDisk && !sandbox.OwnScratch(sandbox.Policy{Profile: sandbox.ProfileStrict, Namespaces: true}) {
				t.Skip("no tmpfs of its own for a spoke here (no mount namespace), and this test's hub makes no filesystem image: the scratch is bounded by the product's hub only (cmd/secgpt)")
			}
			v := r.Run(ctx, a)
			if !v.Blocked {
				t.Fatalf("%s: NOT BLOCKED (%s):\n  %s", a.Title, v.How, strings.Join(v.Problems, "\n  "))
			}
			t.Logf("%s: blocked: %s", a.Title, v.How)
		})
	}
}

// TestControls shows that the check sees a success: attempts the sandbox
// allows succeed through the same path.
func TestControls(t *testing.T) {
	r := newRunner(t)
	ctx := context.Background()
	for _, a := range Controls() {
		t.Run(a.Name, func(t *testing.T) {
			v := r.Run(ctx, a)
			if v.Blocked || !v.OK() {
				t.Fatalf("%s: control failed (%s):\n  %s", a.Title, v.How, strings.Join(v.Problems, "\n  "))
			}
		})
	}
}

// TestJudgeStop checks the judgement of each kind of stop on evidence that
// must and must not count as blocked.
func TestJudgeStop(t *testing.T) {
	blocked := &hostile.Result{Attack: "readfile /x", Outcome: hostile.Blocked, Detail: "EACCES"}
	succeeded := &hostile.Result{Attack: "readfile /x", Outcome: hostile.Succeeded, Detail: "read 3 bytes"}
	failedErr := &hostile.Result{Attack: "readfile /x", Outcome: hostile.Failed, Detail: "ENOENT"}
	flood := &spoke.Failure{App: hostile.Name, Message: "flooded", Err: spoke.ErrFlood}
	crash := &spoke.Failure{App: hostile.Name, Message: "crashed", Err: spoke.ErrCrashed}
	tests := []struct {
		name    string
		stop    stop
		e       evidence
		blocked bool
	}{
		{"report blocked", reported, evidence{report: blocked}, true},
		{"report succeeded", reported, evidence{report: succeeded}, false},
		{"report other error", reported, evidence{report: failedErr}, false},
		{"no report", reported, evidence{err: errors.New("spoke could not start")}, false},
		{"refusal", refused, evidence{report: blocked}, true},
		{"killed as expected", killed(spoke.ErrFlood), evidence{failure: flood, pid: 42}, true},
		{"killed for another reason", killed(spoke.ErrFlood), evidence{failure: crash, pid: 42}, false},
		{"lived to report", killed(spoke.ErrCrashed), evidence{report: succeeded, failure: crash, pid: 42}, false},
		{"never started", killed(spoke.ErrCrashed), evidence{failure: crash}, false},
		{"control succeeded", control, evidence{report: succeeded}, true},
		{"control blocked", control, evidence{report: blocked}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, problems := judgeStop(Attack{stop: tt.stop}, &tt.e)
			if got := len(problems) == 0; got != tt.blocked {
				t.Errorf("stopped as required = %v, want %v (problems %v)", got, tt.blocked, problems)
			}
		})
	}
}

// TestEveryAttackOfTheIssue keeps the catalogue complete: one case per
// attempt the issue lists.
func TestEveryAttackOfTheIssue(t *testing.T) {
	want := []string{
		"read_etc_shadow", "read_hub_database", "read_config_file", "read_other_users_scratch",
		"read_hub_environ", "read_hub_memory", "write_outside_scratch", "create_outside_scratch",
		"tcp_to_loopback", "udp_to_loopback", "tcp_to_public", "udp_to_public", "resolve_name",
		"connect_unix_socket", "fork_bomb", "execve", "ptrace_hub", "allocate_4gib",
		"spin_cpu_forever", "write_10gib_file", "fill_scratch", "open_100000_files", "flood_10000_frames", "stall_unread_replies",
		"egress_undeclared_domain", "egress_declared_to_loopback", "egress_declared_to_metadata",
		"egress_redirect_to_loopback", "egress_redirect_to_metadata",
	}
	app, ok := apps.Lookup(hostile.Name)
	if !ok {
		t.Fatal("the hostile app is not registered")
	}
	var got []string
	for _, a := range Attacks() {
		got = append(got, a.Name)
		if _, ok := app.Spec().Function(a.Function); !ok {
			t.Errorf("%s uses %q, which the hostile app does not have", a.Name, a.Function)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("attacks = %v\nwant      %v", got, want)
	}
}
