package sandbox_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/sandbox"
)

func TestPolicyRoundTrip(t *testing.T) {
	p := sandbox.Policy{
		Profile:    sandbox.ProfileExec,
		Limits:     sandbox.Limits{CPUSeconds: 5, OpenFiles: 32},
		Scratch:    "/var/lib/secgpt/scratch/u1/mail",
		ReadOnly:   []string{"/opt/app"},
		ExecPath:   "/opt/app/server",
		Namespaces: true,
	}
	s, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := sandbox.DecodePolicy(s)
	if err != nil {
		t.Fatal(err)
	}
	if got.Profile != p.Profile || got.Limits != p.Limits || got.Scratch != p.Scratch ||
		len(got.ReadOnly) != 1 || got.ReadOnly[0] != p.ReadOnly[0] || got.ExecPath != p.ExecPath ||
		got.Namespaces != p.Namespaces || got.AllowWeaker != p.AllowWeaker {
		t.Fatalf("round trip: got %+v, want %+v", got, p)
	}
}

func TestPolicyInvalid(t *testing.T) {
	tests := []struct {
		name   string
		policy sandbox.Policy
	}{
		{"unknown profile", sandbox.Policy{Profile: "loose"}},
		{"empty profile", sandbox.Policy{}},
		{"exec without path", sandbox.Policy{Profile: sandbox.ProfileExec}},
		{"exec path in strict", sandbox.Policy{Profile: sandbox.ProfileStrict, ExecPath: "/bin/true"}},
		{"relative exec path", sandbox.Policy{Profile: sandbox.ProfileExec, ExecPath: "bin/true"}},
		{"relative scratch", sandbox.Policy{Profile: sandbox.ProfileStrict, Scratch: "scratch"}},
		{"unclean scratch", sandbox.Policy{Profile: sandbox.ProfileStrict, Scratch: "/srv/../etc"}},
		{"relative read-only", sandbox.Policy{Profile: sandbox.ProfileStrict, ReadOnly: []string{"etc"}}},
		{"address space too small", sandbox.Policy{Profile: sandbox.ProfileStrict, Limits: sandbox.Limits{AddressSpace: 512 << 20}}},
		{"exec path in proxy", sandbox.Policy{Profile: sandbox.ProfileProxy, ExecPath: "/bin/true"}},
		{"exec_net without path", sandbox.Policy{Profile: sandbox.ProfileExecNet, ProxyPort: 8080}},
		{"exec_net without proxy port", sandbox.Policy{Profile: sandbox.ProfileExecNet, ExecPath: "/bin/true"}},
		{"proxy port in exec", sandbox.Policy{Profile: sandbox.ProfileExec, ExecPath: "/bin/true", ProxyPort: 8080}},
		{"proxy port in proxy", sandbox.Policy{Profile: sandbox.ProfileProxy, ProxyPort: 8080}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.policy.Encode(); !errors.Is(err, sandbox.ErrInvalidPolicy) {
				t.Fatalf("Encode: got %v, want ErrInvalidPolicy", err)
			}
			if err := (sandbox.Capabilities{}).Check(tt.policy); !errors.Is(err, sandbox.ErrInvalidPolicy) {
				t.Fatalf("Check: got %v, want ErrInvalidPolicy", err)
			}
		})
	}
}

func TestDecodePolicyRefuses(t *testing.T) {
	tests := map[string]string{
		"unknown field": `{"profile":"strict","seccomp":false}`,
		"trailing data": `{"profile":"strict"} {}`,
		"not json":      `strict`,
		"bad profile":   `{"profile":"none"}`,
	}
	for name, s := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := sandbox.DecodePolicy(s); !errors.Is(err, sandbox.ErrInvalidPolicy) {
				t.Fatalf("got %v, want ErrInvalidPolicy", err)
			}
		})
	}
}

// TestCheck simulates a kernel without a protection by handing Check a
// Capabilities value: Check must fail closed and name what is missing.
func TestCheck(t *testing.T) {
	full := sandbox.Capabilities{Seccomp: true, LandlockABI: 7, NoNewPrivs: true}
	strict := sandbox.Policy{Profile: sandbox.ProfileStrict}
	weaker := sandbox.Policy{Profile: sandbox.ProfileStrict, AllowWeaker: true}
	tests := []struct {
		name    string
		caps    sandbox.Capabilities
		policy  sandbox.Policy
		missing []string
	}{
		{"full", full, strict, nil},
		{"no seccomp", sandbox.Capabilities{LandlockABI: 7, NoNewPrivs: true, SeccompDetail: "kernel API level 1"}, strict, []string{"seccomp: kernel API level 1"}},
		{"no landlock", sandbox.Capabilities{Seccomp: true, NoNewPrivs: true, LandlockDetail: "not enabled"}, strict, []string{"landlock: not enabled"}},
		{"no no_new_privs", sandbox.Capabilities{Seccomp: true, LandlockABI: 1}, strict, []string{"no_new_privs"}},
		{"nothing", sandbox.Capabilities{}, strict, []string{"seccomp", "landlock", "no_new_privs"}},
		{"nothing but weaker allowed", sandbox.Capabilities{}, weaker, nil},
		{"no namespaces is fine", sandbox.Capabilities{Seccomp: true, LandlockABI: 1, NoNewPrivs: true},
			sandbox.Policy{Profile: sandbox.ProfileStrict, Namespaces: true}, nil},
		{"proxy without a network namespace", full, sandbox.Policy{Profile: sandbox.ProfileProxy}, []string{"network namespace"}},
		{"exec_net without a network namespace", sandbox.Capabilities{Seccomp: true, LandlockABI: 7, NoNewPrivs: true, UserNS: true},
			sandbox.Policy{Profile: sandbox.ProfileExecNet, ExecPath: "/bin/true", ProxyPort: 80}, []string{"network namespace"}},
		{"proxy with one", sandbox.Capabilities{Seccomp: true, LandlockABI: 7, NoNewPrivs: true, UserNS: true, NetNS: true},
			sandbox.Policy{Profile: sandbox.ProfileProxy}, nil},
		{"proxy without one, weaker allowed", full, sandbox.Policy{Profile: sandbox.ProfileProxy, AllowWeaker: true}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.caps.Check(tt.policy)
			if tt.missing == nil {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			var me *sandbox.MissingError
			if !errors.As(err, &me) || !errors.Is(err, sandbox.ErrUnprotected) {
				t.Fatalf("got %v, want a *MissingError wrapping ErrUnprotected", err)
			}
			if len(me.Missing) != len(tt.missing) {
				t.Fatalf("missing %q, want %q", me.Missing, tt.missing)
			}
			for i, want := range tt.missing {
				if !strings.HasPrefix(me.Missing[i], want) {
					t.Errorf("missing[%d] = %q, want prefix %q", i, me.Missing[i], want)
				}
			}
		})
	}
}

func TestCapabilitiesLines(t *testing.T) {
	lines := sandbox.Capabilities{Seccomp: true, SeccompDetail: "libseccomp 2.5.4", LandlockABI: 7}.Lines()
	if len(lines) != 7 || lines[0] != "seccomp: on (libseccomp 2.5.4)" || !strings.HasPrefix(lines[1], "landlock: on (ABI 7") ||
		lines[2] != "no_new_privs: off" || !strings.HasPrefix(lines[3], "namespaces: user off") ||
		!strings.HasPrefix(lines[4], "cgroup per spoke: off") || !strings.Contains(lines[4], "only the rlimits") ||
		!strings.HasPrefix(lines[5], "uid separation: off") || !strings.HasPrefix(lines[6], "mount view: off") {
		t.Fatalf("Lines() = %q", lines)
	}
}

func TestReportWeaker(t *testing.T) {
	on := sandbox.Report{Protections: []sandbox.Protection{{Name: "seccomp", On: true}, {Name: "namespaces"}, {Name: "mount view"}}}
	off := sandbox.Report{Protections: []sandbox.Protection{{Name: "seccomp", On: true}, {Name: "landlock"}}}
	if on.Weaker() || !off.Weaker() {
		t.Fatalf("Weaker: full without namespaces %v, missing landlock %v", on.Weaker(), off.Weaker())
	}
}

// TestStubsCompile proves the fail-closed stubs build: on another OS, and on
// Linux without cgo (no libseccomp). go vet also type-checks their tests.
func TestStubsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package for other targets: skipped in -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not in PATH: %v", err)
	}
	for _, env := range [][]string{
		{"GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=0"},
		{"GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0"},
		{"GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0"},
		{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0"},
	} {
		t.Run(strings.Join(env, ","), func(t *testing.T) {
			cmd := exec.Command(goTool, "vet", ".")
			cmd.Env = append(os.Environ(), env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go vet with %v: %v\n%s", env, err, out)
			}
		})
	}
}
