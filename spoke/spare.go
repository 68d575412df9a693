package spoke

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/secgpt/secgpt/sandbox"
)

// spareArg tells a spoke to wait for its launch arguments on fd 4 (see
// Options.Spares). Only the manager's spares are started with it.
const spareArg = "--spare"

// keepSpares keeps Options.Spares spares started. After a failed start it
// waits to be asked again (by the next start that finds none), so that a
// machine that cannot start spokes is not kept busy trying.
func (m *Manager) keepSpares() {
	defer close(m.sparesDone)
	if cap(m.spares) == 0 {
		return
	}
	for {
		for len(m.spares) < cap(m.spares) {
			c, err := m.spawnSpare()
			if err != nil {
				m.opts.Log.Warn().Err(err).Msg("Failed to start a spare spoke; spokes start without one")
				break
			}
			select {
			case <-m.stopSpares:
				c.discard()
				return
			default:
			}
			// keepSpares is the only sender and takers only receive,
			// so there is room.
			m.spares <- c
		}
		select {
		case <-m.stopSpares:
			return
		case <-m.refill:
		}
	}
}

// spawnSpare starts a spare: the binary prepared under SparePolicy, waiting
// on a pipe for its launch arguments.
func (m *Manager) spawnSpare() (*child, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("failed to make the launch pipe: %w", err)
	}
	defer r.Close()
	c, err := m.spawn(context.Background(), "spare", []string{ChildArg, spareArg}, r, m.opts.SparePolicy)
	if err != nil {
		w.Close()
		return nil, err
	}
	c.launch = w
	return c, nil
}

// Spares returns how many spares wait, for tests and status.
func (m *Manager) Spares() int { return len(m.spares) }

// takeSpare returns a spare, or nil when none is started.
func (m *Manager) takeSpare() *child {
	select {
	case c := <-m.spares:
		return c
	default:
		return nil
	}
}

// refillSpares asks keepSpares to start spares up to Options.Spares.
func (m *Manager) refillSpares() {
	select {
	case m.refill <- struct{}{}:
	default:
	}
}

// launchSpare gives a spare the launch arguments args of a spoke under
// policy, which must be Prestartable under SparePolicy. The caller calls
// refillSpares once that spoke is ready or has failed, so that starting the
// next spare does not compete with it for the CPU. It returns nil, and
// no error, when no spare is there or the spare taken has died: the caller
// then starts the spoke itself. An error is the policy's, which a spoke
// started directly would meet too.
func (m *Manager) launchSpare(policy sandbox.Policy, args []string) (*child, error) {
	if cap(m.spares) == 0 {
		return nil, nil
	}
	// The key's own part first: a policy that fails fails without costing
	// a spare.
	if err := sandbox.PrepareScratch(policy); err != nil {
		return nil, err
	}
	c := m.takeSpare()
	if c == nil {
		return nil, nil
	}
	b, err := json.Marshal(args)
	if err != nil || len(b) > maxPrivate {
		c.discard()
		return nil, nil
	}
	if c.cg != nil {
		// The spare's cgroup was made for the spare policy's limits.
		if err := c.cg.Update(policy.Limits.WithDefaults(policy.Profile)); err != nil {
			c.discard()
			return nil, err
		}
	}
	// A spare reads at once; one that died leaves a broken pipe.
	_ = c.launch.SetWriteDeadline(time.Now().Add(m.opts.StartTimeout))
	_, err = c.launch.Write(b)
	if cerr := c.launch.Close(); err == nil {
		err = cerr
	}
	c.launch = nil
	if err != nil {
		m.opts.Log.Debug().Err(err).Int("spoke_pid", c.proc.pid).Msg("Spare spoke is gone; starting one")
		c.discard()
		return nil, nil
	}
	return c, nil
}

// closeSpares stops keepSpares and kills the spares.
func (m *Manager) closeSpares() {
	close(m.stopSpares)
	<-m.sparesDone
	for {
		select {
		case c := <-m.spares:
			c.discard()
		default:
			return
		}
	}
}
