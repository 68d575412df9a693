//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
)

// idPool leases the ids of a range, one per started command, until
// Release. It hands them out round robin, so that an id just released is
// the last to be leased again.
type idPool struct {
	mu      sync.Mutex
	r       IDRange
	checked bool  // r has been checked: its check reads the machine's id files
	err     error // why r cannot be used, once checked
	leased  map[uint32]*exec.Cmd
	byCmd   map[*exec.Cmd]uint32
	next    uint32
}

// spokeIDs is the pool of a root hub's spokes. Its range is checked when
// first used, not at package init: a spoke process never leases an id, and
// the check reads four files.
var spokeIDs = newIDPool(DefaultIDRange)

func newIDPool(r IDRange) *idPool {
	return &idPool{r: r, leased: map[uint32]*exec.Cmd{}, byCmd: map[*exec.Cmd]uint32{}}
}

// checkLocked checks the range once; it returns why it cannot be used.
func (p *idPool) checkLocked() error {
	if !p.checked {
		p.err, p.checked = p.r.Check(), true
	}
	return p.err
}

// SetIDRange makes r the ids of the spokes that Prepare starts from now
// on, after checking it (see IDRange.Check). Ids leased from the previous
// range stay leased until Release. It is for the operator's configuration,
// before the first spoke.
func SetIDRange(r IDRange) error {
	if err := r.Check(); err != nil {
		return err
	}
	spokeIDs.mu.Lock()
	defer spokeIDs.mu.Unlock()
	spokeIDs.r, spokeIDs.checked, spokeIDs.err, spokeIDs.next = r, true, nil, 0
	return nil
}

// spokes reports whether id is one a spoke may have had: nobody, or one
// of the range.
func (p *idPool) spokes(id uint32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return id == nobody || (id >= p.r.First && uint64(id) < uint64(p.r.First)+uint64(p.r.Count))
}

// lease returns cmd's id, leasing one if cmd has none: prefer, if it is a
// free id of the range (the owner of the scratch the spoke will use, which
// then need not change hands), else the next free one.
func (p *idPool) lease(cmd *exec.Cmd, prefer uint32) (uint32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.byCmd[cmd]; ok {
		return id, nil
	}
	if err := p.checkLocked(); err != nil {
		return 0, fmt.Errorf("failed to give the spoke an id of its own: %w", err)
	}
	if _, busy := p.leased[prefer]; !busy && prefer >= p.r.First && uint64(prefer) < uint64(p.r.First)+uint64(p.r.Count) {
		p.leased[prefer] = cmd
		p.byCmd[cmd] = prefer
		return prefer, nil
	}
	for range p.r.Count {
		id := p.r.First + p.next%p.r.Count
		p.next = (p.next + 1) % p.r.Count
		if _, busy := p.leased[id]; !busy {
			p.leased[id] = cmd
			p.byCmd[cmd] = id
			return id, nil
		}
	}
	return 0, fmt.Errorf("%w: all %d spoke ids from %d are in use", ErrUnprotected, p.r.Count, p.r.First)
}

// release returns cmd's id, if it has one.
func (p *idPool) release(cmd *exec.Cmd) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.byCmd[cmd]; ok {
		delete(p.byCmd, cmd)
		delete(p.leased, id)
	}
}

// held returns cmd's id, if it has one.
func (p *idPool) held(cmd *exec.Cmd) (uint32, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.byCmd[cmd]
	return id, ok
}

// inUse reports how many ids are leased.
func (p *idPool) inUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.leased)
}

// detail says whether a root hub's spokes get ids of their own, for Probe.
func (p *idPool) detail() (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if os.Geteuid() != 0 {
		return false, fmt.Sprintf("the hub runs as uid %d, not root, and can map only its own uid: every spoke runs as that one uid", os.Geteuid())
	}
	if err := p.checkLocked(); err != nil {
		return false, err.Error()
	}
	return true, fmt.Sprintf("each live spoke its own host uid and gid from %d..%d (%d), nobody (%d) inside its user namespace", p.r.First, uint64(p.r.First)+uint64(p.r.Count)-1, p.r.Count, nobody)
}

// Release returns the id that Prepare leased for cmd to the pool. Call it
// once cmd's process has been waited for (and, without a PID namespace,
// every process it started has died), also when cmd failed to start. A
// command without a lease is ignored.
func Release(cmd *exec.Cmd) { spokeIDs.release(cmd) }

// SpokeIDs returns the host uid and gid that cmd's process runs as, as
// Prepare set them up.
func SpokeIDs(cmd *exec.Cmd) (uid, gid int) {
	if id, ok := spokeIDs.held(cmd); ok {
		return int(id), int(id)
	}
	return os.Geteuid(), os.Getegid()
}

// CurrentIDRange is the range spokes' ids are leased from, and whether it
// is usable, for a process that leases them for this one (the spoke
// spawner, see SetIDRange).
func CurrentIDRange() (IDRange, bool) {
	spokeIDs.mu.Lock()
	defer spokeIDs.mu.Unlock()
	return spokeIDs.r, spokeIDs.checkLocked() == nil
}
