//go:build linux && cgo && (amd64 || arm64)

package spoke

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/secgpt/secgpt/sandbox"
)

// fdTargets are the descriptors pid holds without close-on-exec (those
// with it are the program's own, as the dynamic loader's libc while it
// starts) and what each refers to.
func fdTargets(t *testing.T, pid int) map[int]string {
	t.Helper()
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, e := range entries {
		n, _ := strconv.Atoi(e.Name())
		info, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "fdinfo", e.Name()))
		if err != nil {
			continue // closed meanwhile: the program's own
		}
		var flags uint64
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags, _ = strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			}
		}
		if flags&syscall.O_CLOEXEC != 0 {
			continue
		}
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			out[n] = target
		}
	}
	return out
}

// TestCloneStartClosesLeakedDescriptors: a descriptor the spawner holds
// without close-on-exec (a leak: Go makes every one close-on-exec) does
// not reach a spoke; os/exec would pass it on, the clone closes it.
func TestCloneStartClosesLeakedDescriptors(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary to start:", err)
	}
	leak, err := syscall.Open(os.DevNull, syscall.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(leak)
	// Above the spoke's descriptors, and one among them (fd 4 is closed
	// for the spoke).
	high, err := syscall.Dup(leak)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(high)
	if err := syscall.Dup3(leak, 200, 0); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(200)
	p := sandbox.Policy{Profile: sandbox.ProfileStrict, Limits: sandbox.DefaultLimits(), Namespaces: true}
	if err := sandbox.CheckPolicy(p); err != nil {
		t.Skip("this machine cannot sandbox the policy:", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	stop := make(chan struct{})
	pids, _, errs := startBoth(t, p, sleep, []*os.File{os.Stderr, w, nil}, stop)
	defer func() {
		close(stop)
		killReap(pids[0])
		killReap(pids[1])
	}()
	if errs[1] != nil {
		t.Fatal(errs[1])
	}
	fds := fdTargets(t, pids[1])
	for fd, target := range fds {
		if fd > 3 {
			t.Errorf("the spoke holds fd %d (%s), not one it was given (0-3); leaked ones: %d, %d, 200", fd, target, leak, high)
		}
	}
	if _, ok := fds[3]; !ok {
		t.Errorf("the spoke lacks its fd 3: %v", fds)
	}
}

// TestCloneStartConcurrentStarts: four threads start spokes at once, as
// the spawner's starters do, each with descriptors of its own; every
// spoke gets exactly its own (no request, stack or pipe is shared).
func TestCloneStartConcurrentStarts(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary to start:", err)
	}
	p := sandbox.Policy{Profile: sandbox.ProfileStrict, Limits: sandbox.DefaultLimits(), Namespaces: true}
	if err := sandbox.CheckPolicy(p); err != nil {
		t.Skip("this machine cannot sandbox the policy:", err)
	}
	const threads, perThread = 4, 8
	type started struct {
		pid  int
		cmd  *exec.Cmd // released once its spoke is gone
		want string    // its fd 3
		err  error
	}
	results := make([][]started, threads)
	stop := make(chan struct{})
	var wg, done sync.WaitGroup
	for i := range threads {
		wg.Add(1)
		done.Add(1)
		go func() {
			goruntime.LockOSThread()
			defer wg.Done()
			stack, err := newStarterStack()
			if err != nil {
				results[i] = []started{{err: err}}
				done.Done()
				return
			}
			for j := range perThread {
				r, w, err := os.Pipe()
				if err != nil {
					results[i] = append(results[i], started{err: err})
					continue
				}
				want, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(w.Fd())))
				cmd := exec.Command(sleep, "60")
				cmd.Stderr = os.Stderr
				cmd.ExtraFiles = []*os.File{w}
				if err := sandbox.Prepare(cmd, p); err != nil {
					results[i] = append(results[i], started{err: err})
					r.Close()
					w.Close()
					continue
				}
				pid, err := stack.startCmd(cmd)
				w.Close()
				r.Close()
				if err != nil {
					err = fmt.Errorf("start %d.%d: %w", i, j, err)
				}
				results[i] = append(results[i], started{pid: pid, cmd: cmd, want: want, err: err})
			}
			done.Done()
			<-stop
		}()
	}
	done.Wait()
	defer func() {
		close(stop)
		wg.Wait()
		for _, rs := range results {
			for _, s := range rs {
				killReap(s.pid)
				if s.cmd != nil {
					sandbox.Release(s.cmd)
				}
			}
		}
	}()
	for _, rs := range results {
		for _, s := range rs {
			if s.err != nil {
				t.Error(s.err)
				continue
			}
			fds := fdTargets(t, s.pid)
			if fds[3] != s.want || len(fds) != 4 {
				t.Errorf("spoke %d holds %v, want fds 0-3 with fd 3 %s", s.pid, fds, s.want)
			}
		}
	}
}

// TestCloneStartExecErrorReaps: a start whose exec fails leaves no child,
// not even a zombie: its starter reaps it before the stack it ran on is
// used again.
func TestCloneStartExecErrorReaps(t *testing.T) {
	p := sandbox.Policy{Profile: sandbox.ProfileStrict, Limits: sandbox.DefaultLimits(), Namespaces: true}
	if err := sandbox.CheckPolicy(p); err != nil {
		t.Skip("this machine cannot sandbox the policy:", err)
	}
	garbage := filepath.Join(reachable(t), "garbage")
	if err := os.WriteFile(garbage, []byte{0, 1, 2, 3}, 0o755); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		stack, err := newStarterStack()
		if err != nil {
			done <- err.Error()
			return
		}
		for range 4 {
			cmd := exec.Command(garbage)
			cmd.Stderr = os.Stderr
			if err := sandbox.Prepare(cmd, p); err != nil {
				done <- err.Error()
				return
			}
			pid, err := stack.startCmd(cmd)
			sandbox.Release(cmd)
			if err == nil {
				killReap(pid)
				done <- "a garbage binary started"
				return
			}
		}
		children, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/children", syscall.Gettid()))
		if err != nil {
			done <- err.Error()
			return
		}
		done <- strings.TrimSpace(string(children))
	}()
	if left := <-done; left != "" {
		t.Errorf("after failed starts the starter has children (or failed): %s", left)
	}
}
