//go:build linux && cgo

package sandbox_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/sandbox/sbxtest"
)

// requireView skips t unless spokes get a mount namespace (and so a view).
func requireView(t *testing.T) sandbox.Capabilities {
	t.Helper()
	caps := sbxtest.RequireFull(t)
	if !caps.MountView {
		t.Skipf("no mount view here: %s", caps.MountViewDetail)
	}
	return caps
}

// victim lays out what user A's spoke left on the host and the hub keeps:
// A's scratch with a file whose size is A's secret, the hub's database, and
// B's own scratch beside A's, as ScratchDir makes them.
type victim struct {
	root, scratchA, secretA, db, scratchB string
	secretSize                            int
}

func newVictim(t *testing.T) victim {
	t.Helper()
	root := sbxtest.Dir(t)
	v := victim{
		root:       root,
		scratchA:   filepath.Join(root, "user-a", "notes"),
		scratchB:   filepath.Join(root, "user-b", "notes"),
		db:         filepath.Join(sbxtest.Dir(t), "secgpt.db"),
		secretSize: 4242,
	}
	v.secretA = filepath.Join(v.scratchA, "diagnosis.txt")
	for _, d := range []string{filepath.Dir(v.scratchA), filepath.Dir(v.scratchB)} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(v.scratchA, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(v.secretA, make([]byte, v.secretSize), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(v.db, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// Owned as a spoke of A left them before spokes had ids of
		// their own: by nobody, the uid B's spoke ran as too.
		for _, path := range []string{v.scratchA, v.secretA} {
			if err := os.Lchown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
	}
	return v
}

// TestStatCovertChannel is attack (1) of issue 11: user B's hostile app,
// with no network, stats what user A's app wrote (the size of a file is a
// secret), A's scratch (which apps A uses, and when), the hub's database
// (its size) and /dev/pts. Landlock does not govern stat; in its own view
// none of these exist. On a kernel without the view every stat succeeded.
func TestStatCovertChannel(t *testing.T) {
	requireView(t)
	v := newVictim(t)
	// The scratch root itself is on the way to B's own scratch: in B's
	// view it holds B's directory alone.
	targets := []string{v.secretA, v.scratchA, filepath.Dir(v.scratchA), v.db, filepath.Dir(v.db), "/dev/pts", "/home", "/var", "/etc/passwd", "/root"}
	var present []string
	for _, path := range targets {
		if _, err := os.Lstat(path); err == nil {
			present = append(present, path) // the host has it: the control
		}
	}
	p := strictPolicy(t)
	p.Scratch = v.scratchB
	p.Namespaces = true
	own := []string{v.scratchB, "/dev/null", "/proc/self/status"}
	for _, spare := range []bool{false, true} {
		t.Run(fmt.Sprintf("spare=%v", spare), func(t *testing.T) {
			out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "stat", Args: append(append([]string{}, present...), own...), Spare: spare})
			checkStats(t, v, out, present, own)
		})
	}
}

// checkStats checks what user B's spoke saw of the victim's paths present
// (ENOENT for each) and of its own (found).
func checkStats(t *testing.T, v victim, out sbxtest.Outcome, present, own []string) {
	t.Helper()
	expect{allowed: true}.check(t, out)
	results := strings.Split(out.Detail, "; ")
	if len(results) != len(present)+len(own) {
		t.Fatalf("stat results %q for %q", out.Detail, present)
	}
	for i, path := range present {
		if want := path + "=ENOENT"; results[i] != want {
			t.Errorf("user B's spoke: stat %s gave %q, want %q (the host has it)", path, results[i], want)
		}
	}
	for i, path := range own {
		if r := results[len(present)+i]; !strings.HasPrefix(r, path+"=ok") {
			t.Errorf("user B's spoke: stat of its own %s gave %q, want it found", path, r)
		}
	}
	if strings.Contains(out.Detail, "size "+strconv.Itoa(v.secretSize)) {
		t.Errorf("user B's spoke learned the size of user A's file: %s", out.Detail)
	}
}

// TestStatCovertChannelFromPython is the same attack from an interpreter
// under the exec profile, as an external app's server would make it.
func TestStatCovertChannelFromPython(t *testing.T) {
	requireView(t)
	py := sbxtest.Python(t)
	v := newVictim(t)
	code := `import os, sys
for p in sys.argv[1:]:
    try:
        print(p, "size", os.stat(p).st_size)
    except OSError as e:
        print(p, os.strerror(e.errno))
`
	script := filepath.Join(sbxtest.Dir(t), "stat.py")
	if err := os.WriteFile(script, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	p := execPolicy(t, py, script)
	p.Scratch = v.scratchB
	args := []string{"python3", "-I", "-S", script, v.secretA, v.scratchA, filepath.Dir(v.scratchA), v.db, "/dev/pts"}
	out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "exec", Args: args})
	if out.ExitCode != 0 {
		t.Fatalf("python exited %d: %s\n%s", out.ExitCode, out.Stdout, tail(out.Stderr))
	}
	for _, path := range args[4:] {
		if want := path + " No such file or directory"; !strings.Contains(out.Stdout, want+"\n") {
			t.Errorf("python in user B's spoke: want %q in\n%s", want, out.Stdout)
		}
	}
}

// TestViewNeedsItsOwnMountNamespace: a process the spoke started before
// Enter in its mount namespace would have its root moved by the spoke's
// view: Enter refuses; started with PrepareLaunch, it has its own.
func TestViewNeedsItsOwnMountNamespace(t *testing.T) {
	requireView(t)
	for _, tt := range []struct {
		args    []string
		refused bool
	}{{nil, false}, {[]string{"shared"}, true}} {
		p := strictPolicy(t)
		p.Namespaces = true
		out := sbxtest.Run(t, sbxtest.Child{Policy: p, Attempt: "share_mounts", Args: tt.args})
		refused := strings.Contains(out.EnterError, "shares the spoke's mount namespace")
		if refused != tt.refused || (!tt.refused && (out.EnterError != "" || out.ExitCode != 0)) {
			t.Errorf("args %q: exit %d, enter error %q, stderr %s; want refused %v", tt.args, out.ExitCode, out.EnterError, tail(out.Stderr), tt.refused)
		}
	}
}

// hostIDs returns the real uid and gid of pid, as the host sees them.
func hostIDs(t *testing.T, pid int) (uid, gid int) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) > 1 && (f[0] == "Uid:" || f[0] == "Gid:") {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			if f[0] == "Uid:" {
				uid = n
			} else {
				gid = n
			}
		}
	}
	return uid, gid
}

// TestTwoUsersTwoIDs: the spokes of two users run at once under two host
// uids of the spokes' range (both nobody inside), each owning its own
// scratch; their ids go back to the pool when they are gone.
func TestTwoUsersTwoIDs(t *testing.T) {
	sbxtest.RequireFull(t)
	sbxtest.RequireRoot(t)
	v := newVictim(t)
	before := sandbox.IDsInUse()
	r := sandbox.DefaultIDRange
	var uids []int
	for _, scratch := range []string{v.scratchA, v.scratchB} {
		p := strictPolicy(t)
		p.Scratch = scratch
		p.Namespaces = true
		// Kept on the host (not a tmpfs of the spoke's own), where its
		// owner shows.
		p.KeepScratch = true
		pid, stop := held(t, p, false, false)
		defer stop()
		uid, gid := hostIDs(t, pid)
		if uid < int(r.First) || uid >= int(r.First+r.Count) || gid != uid {
			t.Fatalf("spoke %d runs as %d:%d on the host, want one id of %+v", pid, uid, gid, r)
		}
		st, err := os.Stat(scratch)
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); int(sys.Uid) != uid {
			t.Errorf("scratch %s owned by %d, want its spoke's %d", scratch, sys.Uid, uid)
		}
		uids = append(uids, uid)
	}
	if uids[0] == uids[1] {
		t.Fatalf("the spokes of two users share host uid %d", uids[0])
	}
	if got := sandbox.IDsInUse(); got != before+2 {
		t.Errorf("%d ids leased with two spokes, want %d", got, before+2)
	}
}

// TestScratchChangesHands: a (user, app)'s scratch outlives its spoke; the
// next spoke may get another id, and Prepare gives it what an earlier
// spoke owned there, never what root owns.
func TestScratchChangesHands(t *testing.T) {
	sbxtest.RequireRoot(t)
	// Owned by nobody, as every spoke's scratch was before each spoke had
	// an id of its own.
	const old = 65534
	scratch := filepath.Join(sbxtest.Dir(t), "scratch")
	nested := filepath.Join(scratch, "a", "b")
	if err := os.MkdirAll(nested, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nested, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	rootFile := filepath.Join(scratch, "a", "planted")
	if err := os.WriteFile(rootFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A link an earlier spoke left to a file of root's outside.
	outside := filepath.Join(sbxtest.Dir(t), "root-only")
	if err := os.WriteFile(outside, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(nested, "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, old, old); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{scratch, filepath.Dir(nested), nested, filepath.Join(nested, "f")} {
		if err := os.Lchown(path, old, old); err != nil {
			t.Fatal(err)
		}
	}
	p := sandbox.Policy{Profile: sandbox.ProfileStrict}
	cmd := exec.Command("/bin/true")
	p.Scratch = scratch
	if err := sandbox.Prepare(cmd, p); err != nil {
		t.Fatal(err)
	}
	defer sandbox.Release(cmd)
	uid, _ := sandbox.SpokeIDs(cmd)
	owner := func(path string) int {
		st, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		return int(st.Sys().(*syscall.Stat_t).Uid)
	}
	for _, path := range []string{scratch, filepath.Dir(nested), nested, filepath.Join(nested, "f")} {
		if got := owner(path); got != uid {
			t.Errorf("%s owned by %d after Prepare, want the spoke's %d", path, got, uid)
		}
	}
	for _, path := range []string{rootFile, outside} {
		if got := owner(path); got != 0 {
			t.Errorf("root's %s given to %d", path, got)
		}
	}
	if got := owner(link); got != uid {
		t.Errorf("the earlier spoke's link owned by %d, want the spoke's %d", got, uid)
	}
}

// TestIDRangeCheck refuses a range that meets the machine's users, groups
// or sub-id ranges, or is out of bounds.
func TestIDRangeCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	restore := sandbox.SetIDFiles([4]string{
		write("passwd", "root:x:0:0::/root:/bin/sh\nodd:x:2000000500:100::/:/bin/sh\n"),
		write("group", "root:x:0:\nbig:x:2100000000:\n"),
		write("subuid", "alice:100000:65536\n"),
		write("subgid", "alice:100000:65536\nbob:3000000:1000000\n"),
	})
	defer restore()
	tests := []struct {
		name string
		r    sandbox.IDRange
		bad  string // a substring of the error; "" means the range is fine
	}{
		{"default", sandbox.DefaultIDRange, ""},
		{"empty", sandbox.IDRange{First: 1_900_000_000}, "empty"},
		{"over 2^31", sandbox.IDRange{First: 2_147_483_000, Count: 1000}, "below 2^31"},
		{"at nobody", sandbox.IDRange{First: 65534, Count: 10}, "above 65534"},
		{"a user's uid", sandbox.IDRange{First: 2_000_000_000, Count: 1000}, "passwd line 2 (odd)"},
		{"a group's gid", sandbox.IDRange{First: 2_099_999_999, Count: 2}, "group line 2 (big)"},
		{"sub uids", sandbox.IDRange{First: 165_535, Count: 10}, "subuid line 1 (alice)"},
		{"sub gids", sandbox.IDRange{First: 3_999_999, Count: 10}, "subgid line 2 (bob)"},
		{"just above sub gids", sandbox.IDRange{First: 4_000_000, Count: 10}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.r.Check()
			switch {
			case tt.bad == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tt.bad != "" && (err == nil || !strings.Contains(err.Error(), tt.bad)):
				t.Fatalf("Check = %v, want an error naming %q", err, tt.bad)
			}
		})
	}
}

// TestIDPoolExhausted: with every id of the range leased, Prepare fails
// closed; a released id is leased again.
func TestIDPoolExhausted(t *testing.T) {
	sbxtest.RequireRoot(t)
	r := sandbox.IDRange{First: 1_950_000_000, Count: 1}
	if err := sandbox.SetIDRange(r); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sandbox.SetIDRange(sandbox.DefaultIDRange); err != nil {
			t.Fatal(err)
		}
	}()
	p := sandbox.Policy{Profile: sandbox.ProfileStrict}
	first := exec.Command("/bin/true")
	if err := sandbox.Prepare(first, p); err != nil {
		t.Fatal(err)
	}
	second := exec.Command("/bin/true")
	if err := sandbox.Prepare(second, p); !errors.Is(err, sandbox.ErrUnprotected) {
		sandbox.Release(second)
		t.Fatalf("Prepare with the range used up: %v, want ErrUnprotected", err)
	}
	sandbox.Release(first)
	if err := sandbox.Prepare(second, p); err != nil {
		t.Fatalf("Prepare after Release: %v", err)
	}
	if uid, _ := sandbox.SpokeIDs(second); uid != int(r.First) {
		t.Errorf("second spoke runs as %d, want %d", uid, r.First)
	}
	sandbox.Release(second)
}
