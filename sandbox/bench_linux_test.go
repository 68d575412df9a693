//go:build linux && cgo

package sandbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/sandbox/sbxtest"
)

// reportPercentiles reports the p50 and p99 of samples in milliseconds.
func reportPercentiles(b *testing.B, samples []time.Duration) {
	b.Helper()
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	at := func(q float64) float64 {
		return float64(samples[int(q*float64(len(samples)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// benchPolicy is a strict policy with a scratch directory under dir.
func benchPolicy(dir string, namespaces bool) sandbox.Policy {
	return sandbox.Policy{
		Profile:    sandbox.ProfileStrict,
		Limits:     sandbox.DefaultLimits(),
		Scratch:    filepath.Join(dir, "scratch"),
		Namespaces: namespaces,
	}
}

// BenchmarkSpawnToReady measures a spoke's cold start as the hub sees it:
// from cmd.Start to the first byte on fd 3, which the child writes after
// Enter. Run with -benchtime=300x for stable percentiles (DESIGN §10:
// p50 ≤ 5 ms, p99 ≤ 25 ms).
func BenchmarkSpawnToReady(b *testing.B) {
	sbxtest.RequireFull(b)
	bin := sbxtest.ChildBinary(b)
	dir := sbxtest.Dir(b)
	caps := sandbox.Probe()
	noNet := caps
	noNet.NetNS = false
	cases := []struct {
		name    string
		sandbox bool
		ns      bool
		caps    sandbox.Capabilities
		keep    bool
	}{
		{"bare", false, false, caps, false},
		{"sandboxed", true, false, caps, false},
		{"sandboxed+namespaces", true, true, caps, false},
		// What the spoke's own tmpfs scratch costs: the same, with a
		// scratch the hub keeps.
		{"sandboxed+namespaces+kept-scratch", true, true, caps, true},
		// What the namespaces cost without the network namespace.
		{"sandboxed+namespaces-but-net", true, true, noNet, false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if c.ns && !caps.UserNS {
				b.Skipf("user namespaces unavailable: %s", caps.NSDetail)
			}
			defer sandbox.SetCapabilities(c.caps)()
			p := benchPolicy(dir, c.ns)
			p.KeepScratch = c.keep
			arg := sbxtest.NoEnter
			if c.sandbox {
				var err error
				if arg, err = p.Encode(); err != nil {
					b.Fatal(err)
				}
			}
			samples := make([]time.Duration, 0, b.N)
			buf := make([]byte, 1)
			for b.Loop() {
				cmd := exec.Command(bin, arg, "ready")
				if c.sandbox {
					if err := sandbox.Prepare(cmd, p); err != nil {
						b.Fatal(err)
					}
				} else {
					cmd.Env = []string{}
				}
				parent, child, err := sbxtest.SocketPair()
				if err != nil {
					b.Fatal(err)
				}
				cmd.ExtraFiles = []*os.File{child}
				start := time.Now()
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				child.Close()
				if _, err := parent.Read(buf); err != nil {
					b.Fatalf("no ready byte: %v", err)
				}
				samples = append(samples, time.Since(start))
				parent.Close()
				if err := cmd.Wait(); err != nil {
					b.Fatal(err)
				}
				sandbox.Release(cmd)
			}
			reportPercentiles(b, samples)
		})
	}
}

// BenchmarkEnter measures Enter itself inside the child, without and with
// namespaces, and what a spare has left to do once claimed (Spare.Enter);
// with namespaces, view-ms is the part of it that built the spoke's mount
// view (as the report says; for a spare, once claimed).
func BenchmarkEnter(b *testing.B) {
	caps := sbxtest.RequireFull(b)
	dir := sbxtest.Dir(b)
	builtIn := regexp.MustCompile(`built in (\d+)µs`)
	for _, c := range []struct {
		name      string
		ns, spare bool
	}{
		{"namespaces=false", false, false},
		{"namespaces=true", true, false},
		// What is left once a spare is claimed (sandbox.EnterSpare ran
		// before).
		{"spare", true, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.ns && !caps.MountView {
				b.Skipf("no mount view here: %s", caps.MountViewDetail)
			}
			samples := make([]time.Duration, 0, b.N)
			var views []time.Duration
			for b.Loop() {
				out := sbxtest.Run(b, sbxtest.Child{Policy: benchPolicy(dir, c.ns), Attempt: "enter_time", Spare: c.spare})
				if out.EnterError != "" || out.ExitCode != 0 {
					b.Fatalf("child: exit %d, %s", out.ExitCode, out.EnterError)
				}
				n, err := strconv.ParseInt(out.Detail, 10, 64)
				if err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Duration(n))
				for _, pr := range out.Report.Protections {
					if m := builtIn.FindStringSubmatch(pr.Detail); pr.Name == "mount view" && m != nil {
						us, _ := strconv.Atoi(m[1])
						views = append(views, time.Duration(us)*time.Microsecond)
					}
				}
			}
			reportPercentiles(b, samples)
			if len(views) > 0 {
				slices.Sort(views)
				b.ReportMetric(float64(views[len(views)/2])/float64(time.Millisecond), "view-p50-ms")
				b.ReportMetric(float64(views[len(views)*99/100])/float64(time.Millisecond), "view-p99-ms")
			}
		})
	}
}
