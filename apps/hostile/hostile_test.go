package hostile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/publicsuffix"
	"golang.org/x/sys/unix"

	"github.com/secgpt/secgpt/apps"
	_ "github.com/secgpt/secgpt/apps/all"
	"github.com/secgpt/secgpt/apps/appstest"
)

// TestRegisteredOnlyWhenAsked: linking the package (and every built-in app)
// registers nothing; Register does, once, and may be called again. The
// first half runs in a fresh process, which nothing has registered in yet.
func TestRegisteredOnlyWhenAsked(t *testing.T) {
	if os.Getenv(freshProcess) == "1" {
		if _, ok := apps.Lookup(Name); ok {
			t.Fatal("the hostile app is registered without Register: a config could install it")
		}
		for _, a := range apps.Builtin() {
			if a.Spec().Name == Name {
				t.Fatal("the hostile app is among the built-in apps")
			}
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRegisteredOnlyWhenAsked$", "-test.count=1")
	cmd.Env = append(os.Environ(), freshProcess+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("in a fresh process: %v\n%s", err, out)
	}
	Register()
	Register()
	if _, ok := apps.Lookup(Name); !ok {
		t.Fatal("Register did not register the app")
	}
}

// freshProcess marks the re-executed test binary.
const freshProcess = "SECGPT_HOSTILE_FRESH_PROCESS"

func TestSpec(t *testing.T) {
	spec := newApp().Spec()
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, f := range spec.Functions {
		for what, schema := range map[string]json.RawMessage{"request": f.Request, "response": f.Response} {
			if err := apps.CheckSchema(schema); err != nil {
				t.Errorf("%s %s schema: %v", f.Name, what, err)
			}
		}
		if strings.Contains(f.Name, "_") {
			t.Errorf("%s: function names are single words, so a planner cannot confuse them", f.Name)
		}
	}
	// The egress broker accepts only registrable domains under an ICANN
	// top-level domain.
	if d, err := publicsuffix.EffectiveTLDPlusOne(EgressDomain); err != nil || d != EgressDomain {
		t.Errorf("EffectiveTLDPlusOne(%s) = %q, %v; want itself", EgressDomain, d, err)
	}
	if _, icann := publicsuffix.PublicSuffix(EgressDomain); !icann {
		t.Errorf("%s is not under an ICANN top-level domain", EgressDomain)
	}
	if _, err := newApp().Call(context.Background(), appstest.NewEnv(), "nope", json.RawMessage(`{}`)); err == nil {
		t.Error("an unknown function did not fail")
	}
}

func TestJudge(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		want   Outcome
		detail string
	}{
		{"success", nil, Succeeded, "done"},
		{"blocking errno", &fs.PathError{Op: "open", Path: "/x", Err: unix.EACCES}, Blocked, "open /x: permission denied (EACCES)"},
		{"other errno", &fs.PathError{Op: "open", Path: "/x", Err: unix.ENOENT}, Failed, "open /x: no such file or directory (ENOENT)"},
		{"no errno", errors.New("lost"), Failed, "lost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := judge("attack", tt.err, "done", unix.EACCES, unix.EPERM)
			if r.Outcome != tt.want || r.Detail != tt.detail {
				t.Errorf("judge = %s %q, want %s %q", r.Outcome, r.Detail, tt.want, tt.detail)
			}
		})
	}
}

// TestAttemptsSucceedUnconfined runs the attempts that are safe to run
// outside a sandbox and checks that each reports success: a blocked report
// in the sandbox check is then the sandbox's doing, not the app's.
func TestAttemptsSucceedUnconfined(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	tcp, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	go acceptAll(tcp)
	sock := filepath.Join(dir, "s.sock")
	ux, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ux.Close()
	go acceptAll(ux)
	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()

	tests := []struct {
		function string
		args     string
		want     Outcome
		detail   string
	}{
		{ReadFile, fmt.Sprintf(`{"path":%q}`, secret), Succeeded, "s3cret"},
		{ReadFile, fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, "missing")), Failed, "ENOENT"},
		{WriteFile, fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, "new")), Succeeded, "appended"},
		{DialTCP, fmt.Sprintf(`{"address":%q}`, tcp.Addr()), Succeeded, "connected"},
		{DialUDP, fmt.Sprintf(`{"address":%q}`, udp.LocalAddr()), Succeeded, "connected"},
		{DialUnix, fmt.Sprintf(`{"path":%q}`, sock), Succeeded, "connected"},
		{Allocate, `{"bytes":1048576}`, Succeeded, "touched"},
		{BigFile, fmt.Sprintf(`{"path":%q,"bytes":3000000}`, filepath.Join(dir, "big")), Succeeded, "wrote 3000000"},
		{ManyFiles, fmt.Sprintf(`{"path":%q,"count":20}`, dir), Succeeded, "held 20"},
		{Fetch, `{"url":"https://www.example.com/"}`, Blocked, "egress refused by appstest"},
		{ForkBomb, `{}`, Succeeded, "created 100 processes"},
	}
	a := newApp()
	for _, tt := range tests {
		t.Run(tt.function, func(t *testing.T) {
			if tt.function == ForkBomb {
				defer reapChildren(t, 100)
			}
			out, err := a.Call(context.Background(), appstest.NewEnv(), tt.function, json.RawMessage(tt.args))
			if err != nil {
				t.Fatal(err)
			}
			if fn, _ := a.Spec().Function(tt.function); apps.ValidateDocument(fn.Response, out) != nil {
				t.Errorf("result %s does not match the response schema", out)
			}
			var r Result
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatal(err)
			}
			if r.Outcome != tt.want || !strings.Contains(r.Detail, tt.detail) {
				t.Errorf("got %s %q, want %s containing %q", r.Outcome, r.Detail, tt.want, tt.detail)
			}
		})
	}
}

func acceptAll(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// reapChildren waits for the n processes the fork bomb left, which exit at
// once.
func reapChildren(t *testing.T, n int) {
	deadline := time.Now().Add(5 * time.Second)
	for n > 0 && time.Now().Before(deadline) {
		pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.ECHILD):
			return
		case err == nil && pid > 0:
			n--
		default:
			time.Sleep(time.Millisecond)
		}
	}
	if n > 0 {
		t.Errorf("%d forked processes were not reaped", n)
	}
}

func TestOtherProcess(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		{"/proc/1/environ", true},
		{fmt.Sprintf("/proc/%d/environ", os.Getpid()), false},
		{"/proc/self/environ", false},
		{"/proc/sys/kernel/pid_max", false},
		{"/etc/shadow", false},
	}
	for _, tt := range tests {
		if got := otherProcess(tt.path); got != tt.want {
			t.Errorf("otherProcess(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

// TestFillSucceedsUnconfined: with no quota the fill stores all it was
// asked, so a refusal in the hub is the hub's doing.
func TestFillSucceedsUnconfined(t *testing.T) {
	out, err := newApp().Call(context.Background(), appstest.NewEnv(), Fill, json.RawMessage(`{"count":3,"bytes":100}`))
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := json.Unmarshal(out, &r); err != nil || r.Outcome != Succeeded || r.Detail != "stored 300 bytes in 3 documents" {
		t.Errorf("fill = %s, %v; want success storing 300 bytes", out, err)
	}
}
