//go:build linux && cgo && (amd64 || arm64)

package spoke_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/spoke/spoketest"
)

// statusField is the value of key in /proc/PID/status, or "" if pid is gone.
func statusField(pid int, key string) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// catchChild returns the first child but known any thread of pid starts,
// stopped (SIGSTOP) as soon as it is seen, or 0 if none came within a
// second.
func catchChild(pid, known int) int {
	tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil {
		return 0
	}
	var files []*os.File
	for _, task := range tasks {
		f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "task", task.Name(), "children"))
		if err == nil {
			defer f.Close()
			files = append(files, f)
		}
	}
	buf := make([]byte, 64)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		for _, f := range files {
			n, _ := f.ReadAt(buf, 0)
			for _, field := range strings.Fields(string(buf[:n])) {
				if c, err := strconv.Atoi(field); err == nil && c != known {
					_ = syscall.Kill(c, syscall.SIGSTOP)
					return c
				}
			}
		}
	}
	return 0
}

// TestCloneStartSpawnerDiedBeforePdeathsig: a spoke whose spawner dies
// after writing its uid and gid maps but before the spoke's start set its
// Pdeathsig must not run: nothing would kill it, it has no cgroup yet
// (the spawner adds it after the start) and no hub knows its pid. The
// start checks that its parent still lives after it set Pdeathsig; in a
// new PID namespace getppid answers 0 whatever the parent, and the
// SIGKILL the check sends itself is ignored by a namespace's first
// process, so the check must look elsewhere.
//
// The test stops the child while it still blocks every signal (before
// its Pdeathsig), kills the spawner, lets the child go on, and requires
// that it dies instead of executing the spoke.
func TestCloneStartSpawnerDiedBeforePdeathsig(t *testing.T) {
	caps := sandbox.Probe()
	if !caps.UserNS || !caps.PIDNS {
		t.Skip("the spoke's start makes no PID namespace on this machine:", caps.NSDetail)
	}
	policy := sandbox.Policy{Profile: sandbox.ProfileStrict, Limits: sandbox.DefaultLimits(), Namespaces: true}
	if err := sandbox.CheckPolicy(policy); err != nil {
		t.Skip("this machine cannot sandbox the policy:", err)
	}
	encoded, err := policy.Encode()
	if err != nil {
		t.Fatal(err)
	}
	const attempts = 30
	for attempt := 0; attempt < attempts; attempt++ {
		if caught := spawnerDiesBeforePdeathsig(t, encoded); caught {
			return
		}
	}
	t.Skipf("could not stop a child before its Pdeathsig in %d attempts", attempts)
}

// spawnerDiesBeforePdeathsig runs one attempt and reports whether it
// caught the child before its Pdeathsig.
func spawnerDiesBeforePdeathsig(t *testing.T, encoded string) bool {
	t.Helper()
	s, err := spoke.StartTestSpawner(spoketest.Binary)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The spare waits on fd 4 for its launch arguments: it runs until
	// killed.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	ch3, ch3peer, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer ch3.Close()
	defer ch3peer.Close()
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A first spoke, so that the next child is a spoke's start: the
	// spawner's first Prepare probes the namespaces with a child of its
	// own.
	first, err := s.Spawn(ctx, []string{spoke.ChildArg, "--spare", "--policy", encoded}, encoded, devnull, []*os.File{ch3, r})
	if err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(first, syscall.SIGKILL)
	time.Sleep(20 * time.Millisecond)
	spawned := make(chan struct{})
	go func() {
		defer close(spawned)
		_, _ = s.Spawn(ctx, []string{spoke.ChildArg, "--spare", "--policy", encoded}, encoded, devnull, []*os.File{ch3, r})
	}()
	// The files are closed only once the request is done with them.
	defer func() {
		cancel()
		<-spawned
	}()
	child := catchChild(s.PID(), first)
	if child == 0 {
		return false
	}
	defer func() {
		_ = syscall.Kill(child, syscall.SIGKILL)
		_ = syscall.Kill(child, syscall.SIGCONT)
	}()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		if st := statusField(child, "State"); strings.HasPrefix(st, "T") || st == "" {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// Every signal but SIGKILL and SIGSTOP blocked: the child has not
	// reached its Pdeathsig (it unblocks them before).
	blk, err := strconv.ParseUint(statusField(child, "SigBlk"), 16, 64)
	if err != nil || blk != ^uint64(0)&^(1<<(syscall.SIGKILL-1)|1<<(syscall.SIGSTOP-1)) {
		return false
	}
	// The spawner writes the maps meanwhile.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		if b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(child), "gid_map")); len(b) > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// and then tells the child to go on.
	time.Sleep(20 * time.Millisecond)
	if err := syscall.Kill(s.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); liveProcess(s.PID()) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if err := syscall.Kill(child, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var cmdline []byte
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		if !liveProcess(child) {
			t.Logf("child %d died (last seen as %q)", child, cmdline)
			return true
		}
		cmdline, _ = os.ReadFile(filepath.Join("/proc", strconv.Itoa(child), "cmdline"))
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("child %d of a spawner that died before its Pdeathsig runs on (%q), with no Pdeathsig, no cgroup and no supervisor", child, strings.ReplaceAll(string(cmdline), "\x00", " "))
	return true
}
