//go:build linux && cgo && (amd64 || arm64)

package spoke

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/secgpt/secgpt/sandbox"
)

// procState is what a started process holds that its start decides, as
// /proc shows it, with its own pid and leased id written as symbols: the
// same for two processes started alike.
type procState struct {
	Status     map[string]string
	UIDMap     string
	GIDMap     string
	Setgroups  string
	NewNS      map[string]bool // namespace type: not the test's own
	LeadsGroup bool
	PIDLevels  int
	FDs        map[string]string // fd: target and flags
	Environ    string
	Cwd        string
	Exe        string
	Limits     string
}

func readProcState(t *testing.T, pid, id, nfds int) procState {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return strings.ReplaceAll(string(b), strconv.Itoa(id), "ID")
	}
	s := procState{Status: map[string]string{}, NewNS: map[string]bool{}, FDs: map[string]string{}}
	for _, line := range strings.Split(read("status"), "\n") {
		k, v, ok := strings.Cut(line, ":")
		switch k {
		case "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs",
			"Seccomp", "Seccomp_filters", "SigBlk", "SigIgn", "SigCgt", "Cpus_allowed_list":
			// Not SigQ: the signals queued to the whole uid.
			if ok {
				s.Status[k] = strings.TrimSpace(v)
			}
		case "NSpid":
			s.PIDLevels = len(strings.Fields(v))
		}
	}
	s.UIDMap, s.GIDMap, s.Setgroups = read("uid_map"), read("gid_map"), read("setgroups")
	for _, ns := range []string{"user", "pid", "mnt", "net", "ipc", "uts", "cgroup", "time"} {
		mine, err1 := os.Readlink("/proc/self/ns/" + ns)
		its, err2 := os.Readlink(filepath.Join(dir, "ns", ns))
		if err1 != nil || err2 != nil {
			continue
		}
		s.NewNS[ns] = mine != its
	}
	stat := read("stat")
	f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	s.LeadsGroup = f[2] == strconv.Itoa(pid)
	entries, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n, _ := strconv.Atoi(e.Name()); n >= nfds {
			// Not the start's to give: the clone closes it, os/exec
			// passes on what this process leaks without close-on-exec.
			if leaked(n) {
				continue
			}
		}
		target, err := os.Readlink(filepath.Join(dir, "fd", e.Name()))
		info := read("fdinfo/" + e.Name())
		if err != nil || info == "" {
			continue // closed meanwhile: the program's own
		}
		flags := ""
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags = strings.TrimSpace(v)
			}
		}
		if f, err := strconv.ParseUint(flags, 8, 64); err == nil && f&syscall.O_CLOEXEC != 0 {
			// Not inherited (exec closed those): the program's own,
			// as the dynamic loader's libc while it starts.
			continue
		}
		s.FDs[e.Name()] = target + " " + flags
	}
	s.Environ = read("environ")
	s.Cwd, _ = os.Readlink(filepath.Join(dir, "cwd"))
	s.Exe, _ = os.Readlink(filepath.Join(dir, "exe"))
	s.Limits = read("limits")
	return s
}

// startBoth starts the same prepared command by os/exec and by the clone,
// from one thread locked until stop is closed (their Pdeathsig follows
// it), and returns both pids and leased ids.
func startBoth(t *testing.T, p sandbox.Policy, path string, files []*os.File, stop chan struct{}) (pids, ids [2]int, errs [2]error) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		goruntime.LockOSThread()
		defer close(done)
		if unix.Gettid() == unix.Getpid() {
			err := errors.New("the starting goroutine runs on the main thread, which the runtime parks instead of ending")
			errs[0], errs[1] = err, err
			return
		}
		stack, err := newStarterStack()
		if err != nil {
			errs[0], errs[1] = err, err
			return
		}
		for i, start := range []func(*exec.Cmd) (int, error){goStart, stack.startCmd} {
			cmd := exec.Command(path, "60")
			cmd.Args[0] = "secgpt-spoke"
			cmd.Stderr = files[0]
			cmd.ExtraFiles = files[1:]
			if err := sandbox.Prepare(cmd, p); err != nil {
				errs[i] = err
				continue
			}
			t.Cleanup(func() { sandbox.Release(cmd) })
			ids[i], _ = sandbox.SpokeIDs(cmd)
			pids[i], errs[i] = start(cmd)
		}
		done <- struct{}{}
		<-stop
		// The thread ends here: the goroutine exits locked.
	}()
	<-done
	return pids, ids, errs
}

// The test binary's main goroutine keeps the main thread. Tests here end a
// spoke's parent by letting a goroutine exit locked to its thread, which
// ends that thread; but the runtime only parks the main thread, where such
// a goroutine may otherwise run while the main goroutine waits, and the
// spoke then outlived its "ended" thread (TestCloneStartPdeathsig, 1 in
// about 30 runs). Not in a child: a spoke runs as the product's does.
func init() {
	if !IsChild() {
		goruntime.LockOSThread()
	}
}

func killReap(pid int) {
	if pid > 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		reap(pid)
	}
}

// TestCloneStartMatchesGo: a spoke started by the spawner's clone holds
// exactly what one started by os/exec holds: namespaces, uid and gid maps,
// setgroups, credentials and capabilities (ambient ones included), signal
// dispositions and mask, process group, descriptors and their flags,
// environment, directory, limits.
func TestCloneStartMatchesGo(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary to start:", err)
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	files := []*os.File{devnull, w, nil, r}
	caps := sandbox.Probe()
	for _, tc := range []struct {
		name string
		p    sandbox.Policy
	}{
		{"strict", sandbox.Policy{Profile: sandbox.ProfileStrict, Limits: sandbox.DefaultLimits()}},
		{"namespaces", sandbox.Policy{Profile: sandbox.ProfileStrict, Limits: sandbox.DefaultLimits(), Namespaces: true}},
		{"proxy", sandbox.Policy{Profile: sandbox.ProfileProxy, Limits: sandbox.DefaultLimitsFor(sandbox.ProfileProxy), Namespaces: true}},
		{"scratch", sandbox.Policy{Profile: sandbox.ProfileStrict, Limits: sandbox.DefaultLimits(), Scratch: filepath.Join(reachable(t), "s"), Namespaces: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := sandbox.CheckPolicy(tc.p); err != nil {
				t.Skip("this machine cannot sandbox the policy:", err)
			}
			stop := make(chan struct{})
			pids, ids, errs := startBoth(t, tc.p, sleep, files, stop)
			defer func() {
				close(stop)
				killReap(pids[0])
				killReap(pids[1])
			}()
			if errs[0] != nil || errs[1] != nil {
				t.Fatalf("os/exec: %v; clone: %v", errs[0], errs[1])
			}
			nfds := 3 + len(files) - 1
			viaGo, viaClone := readProcState(t, pids[0], ids[0], nfds), readProcState(t, pids[1], ids[1], nfds)
			if !reflect.DeepEqual(viaGo, viaClone) {
				t.Errorf("os/exec's spoke:\n%+v\nthe clone's:\n%+v", viaGo, viaClone)
			}
			if tc.p.Namespaces && caps.UserNS && !viaClone.NewNS["user"] {
				t.Errorf("the clone's spoke shares the test's user namespace: %+v", viaClone.NewNS)
			}
		})
	}
}

// TestCloneStartPdeathsig: a spoke started by the clone is killed when the
// thread that started it ends, as one started by os/exec is.
func TestCloneStartPdeathsig(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary to start:", err)
	}
	p := sandbox.Policy{Profile: sandbox.ProfileStrict, Limits: sandbox.DefaultLimits(), Namespaces: true}
	stop := make(chan struct{})
	pids, _, errs := startBoth(t, p, sleep, []*os.File{os.Stderr}, stop)
	if errs[0] != nil || errs[1] != nil {
		close(stop)
		killReap(pids[0])
		killReap(pids[1])
		t.Fatalf("os/exec: %v; clone: %v", errs[0], errs[1])
	}
	close(stop)
	for i, pid := range pids {
		deadline := time.Now().Add(10 * time.Second)
		for {
			status, ended, err := waitid(unix.P_PID, uintptr(pid), unix.WEXITED|unix.WNOWAIT|unix.WNOHANG)
			if err != nil {
				t.Fatal(err)
			}
			if ended {
				if !status.Signaled() || status.Signal() != syscall.SIGKILL {
					t.Errorf("start %d: spoke ended with %v, want SIGKILL", i, exitError(status))
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("start %d: spoke %d outlived its thread", i, pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
		reap(pid)
	}
}

// TestCloneStartExecError: a spoke that cannot be executed fails its start
// with os/exec's error, and leaves no process behind.
func TestCloneStartExecError(t *testing.T) {
	p := sandbox.Policy{Profile: sandbox.ProfileStrict, Limits: sandbox.DefaultLimits(), Namespaces: true}
	dir := reachable(t)
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte{0, 1, 2, 3}, 0o755); err != nil {
		t.Fatal(err)
	}
	aDir := filepath.Join(dir, "dir")
	if err := os.Mkdir(aDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// ENOEXEC and EACCES from execve itself (sandbox.Prepare refuses a
	// path the spoke's uid cannot reach before any start).
	for _, path := range []string{garbage, aDir} {
		stop := make(chan struct{})
		pids, _, errs := startBoth(t, p, path, []*os.File{os.Stderr}, stop)
		close(stop)
		killReap(pids[0])
		killReap(pids[1])
		var pe *os.PathError
		if !errors.As(errs[1], &pe) || pe.Op != "fork/exec" || errs[0] == nil || errs[0].Error() != errs[1].Error() {
			t.Errorf("%s: os/exec: %v; clone: %v", path, errs[0], errs[1])
		}
		if pids[1] != 0 {
			t.Errorf("%s: the clone's failed start returned pid %d", path, pids[1])
		}
	}
}

// leaked reports whether this process holds fd without close-on-exec (an
// inheritance from whatever started the test).
func leaked(fd int) bool {
	flags, err := unixFcntl(fd, syscall.F_GETFD)
	return err == nil && flags&syscall.FD_CLOEXEC == 0
}

func unixFcntl(fd, cmd int) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), uintptr(cmd), 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// reachable is a temporary directory every uid may pass through.
func reachable(t *testing.T) string {
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
