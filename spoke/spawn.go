package spoke

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/secgpt/secgpt/sandbox"
)

// Starting a spoke's process: its descriptors, made here, and its start,
// which the spawner (spawner.go) does. The Manager (manager.go) decides
// what to start and supervises it once started.

// child is a started spoke process that the manager does not supervise
// yet: a spare, or a spoke waiting to become ready.
type child struct {
	proc   *spokeProc
	conn   net.Conn
	stderr io.ReadCloser
	// launch is the hub's end of the pipe on which a spare waits for
	// its launch arguments; nil for any other child.
	launch *launchPipe
	// cg is its cgroup, which its spawner made and removes; nil where
	// the machine offers none.
	cg *sandbox.Cgroup
	// tunnels is the hub's end of a ProfileProxy spoke's tunnel socket;
	// nil for any other child.
	tunnels *net.UnixConn
}

// discard kills a child that will not be used, and reaps it.
func (c *child) discard() {
	c.proc.kill()
	c.conn.Close()
	c.stderr.Close()
	if c.tunnels != nil {
		c.tunnels.Close()
	}
	if c.launch != nil {
		c.launch.close()
	}
	// The spawner reaps it, and removes its cgroup, once released.
	go func() {
		_ = c.proc.wait()
		c.proc.release()
	}()
}

// spawn starts the binary with args under policy, encoded (policy.Encode,
// which the caller has put in args too), through the spawner, with its ISC
// channel on fd 3 and fd4, when not nil, on fd 4. label names the app in
// errors.
func (m *Manager) spawn(ctx context.Context, label string, args []string, fd4 *os.File, policy sandbox.Policy, encoded string) (*child, error) {
	// A missing protection is refused here with its whole error; the
	// spawner checks again in sandbox.Prepare, and prepares the scratch
	// for the id it leases the spoke.
	if err := sandbox.CheckPolicy(policy); err != nil {
		return nil, &Failure{App: label, Message: "could not be sandboxed", Err: err}
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("failed to create ISC socket pair: %w", err)
	}
	parentFile := os.NewFile(uintptr(fds[0]), "isc-hub")
	childFile := os.NewFile(uintptr(fds[1]), "isc-spoke")
	defer childFile.Close()
	conn, err := net.FileConn(parentFile)
	parentFile.Close()
	if err != nil {
		return nil, fmt.Errorf("failed to open ISC channel: %w", err)
	}
	files := []*os.File{childFile} // fd 3
	if fd4 != nil || policy.Profile == sandbox.ProfileProxy {
		files = append(files, fd4) // fd 4; closed if nil
	}
	var tunnels *net.UnixConn
	if policy.Profile == sandbox.ProfileProxy {
		var spokeEnd *os.File
		if tunnels, spokeEnd, err = tunnelPair(); err != nil {
			conn.Close()
			return nil, err
		}
		defer spokeEnd.Close()
		files = append(files, spokeEnd) // fd 5: TunnelFD
	}
	closeAll := func() {
		conn.Close()
		if tunnels != nil {
			tunnels.Close()
		}
	}
	stderr, stderrW, err := os.Pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("failed to open spoke log pipe: %w", err)
	}
	defer stderrW.Close()
	sp, err := m.liveSpawner()
	var proc *spokeProc
	if err == nil {
		proc, err = sp.spawn(ctx, args, encoded, stderrW, files)
	}
	if err != nil {
		closeAll()
		stderr.Close()
		var se *sandboxError
		if errors.As(err, &se) {
			return nil, &Failure{App: label, Message: "could not be sandboxed", Err: se.err}
		}
		return nil, &Failure{App: label, Message: "could not start", Err: err}
	}
	c := &child{proc: proc, conn: conn, stderr: stderr, tunnels: tunnels}
	if policy.Cgroup {
		// Fail closed: a spoke outside its cgroup has no memory bound.
		// The spawner moved it in before it replied.
		if c.cg, err = sandbox.OpenCgroup(proc.cgroup, policy.Limits.WithDefaults(policy.Profile)); err != nil {
			c.discard()
			return nil, &Failure{App: label, Message: "could not be sandboxed", Err: err}
		}
	}
	return c, nil
}

// liveSpawner returns the manager's spawner, starting one if none runs
// (the first start, or the last spawner died).
func (m *Manager) liveSpawner() (*spawner, error) {
	m.spawnerMu.Lock()
	defer m.spawnerMu.Unlock()
	if m.spawner != nil && m.spawner.alive() {
		return m.spawner, nil
	}
	if m.spawner != nil {
		m.opts.Log.Warn().Err(m.spawner.err).Msg("Spoke spawner died; starting a new one")
	}
	sp, err := startSpawner(m.opts.Binary, m.opts.Log.With().Str("component", "spawner").Logger())
	if err != nil {
		return nil, err
	}
	m.spawner = sp
	return sp, nil
}

// closeSpawner ends the spawner, if one runs.
func (m *Manager) closeSpawner() {
	m.spawnerMu.Lock()
	defer m.spawnerMu.Unlock()
	if m.spawner != nil {
		m.spawner.close()
	}
}

// privatePipe returns the read end of a pipe for b and fill, which writes b
// and closes the write end. b must fit the pipe's buffer, so fill never
// blocks.
func privatePipe(b []byte) (r *os.File, fill func() error, err error) {
	if len(b) > maxPrivate {
		return nil, nil, fmt.Errorf("private data of %d bytes is over the %d-byte limit", len(b), maxPrivate)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("failed to make the private pipe: %w", err)
	}
	fill = func() error {
		_, err := w.Write(b)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("failed to fill the private pipe: %w", err)
		}
		return nil
	}
	return r, fill, nil
}
