package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Group commit. SQLite has one writer at a time, and with synchronous=FULL
// each commit syncs the write-ahead log: under load, commits one after
// another queue behind each other's fsync. So every write of this process
// goes to one committer, which takes all the writes waiting at that moment
// and runs them as one transaction, each inside a savepoint of its own (a
// write that fails rolls back alone), and commits them with one sync.
//
// A writer either waits for the commit of its write (write: what must be
// durable before an action, such as the audit entry of a decision that
// allows something) or does not (writeLater: what nothing waits on, such
// as a session's last activity). The queue is first in, first out, and
// batches commit in order, so a write that waited for its commit has made
// every write queued before it durable too: a later write is never lost
// while a write after it was acknowledged. Writes no one waits for may
// wait up to laterDelay for company: a query's own waited write (its
// turn's record) usually takes them along, one commit instead of several.

// maxBatch bounds the writes committed together, so that one transaction
// stays short.
const maxBatch = 256

// laterDelay is how long a batch of writes no one waits for may stay
// queued for others to join it; a write that waits ends it at once.
const laterDelay = 100 * time.Millisecond

// errStoreClosed is the error of a write queued after Close.
var errStoreClosed = errors.New("store closed")

// writeOp is one write waiting for the committer.
type writeOp struct {
	// fn runs inside the batch's transaction; exclusive, instead, runs
	// alone, outside any transaction, while no other write runs.
	fn        func(ctx context.Context) error
	exclusive func(ctx context.Context) error
	// done receives the outcome once the write's batch has committed or
	// failed; nil when no one waits (see Store.Later).
	done chan error
	// queued is when the write was queued.
	queued time.Time
}

// waited reports whether someone waits for op's commit.
func (op *writeOp) waited() bool { return op.done != nil || op.exclusive != nil }

// committer runs the store's writes in batches, one at a time.
type committer struct {
	s   *Store
	log zerolog.Logger

	mu      sync.Mutex
	queue   []*writeOp
	wake    chan struct{} // signalled when the queue grows
	closing bool
	done    chan struct{} // closed when the loop has ended

	// writes and commits count the writes committed and the transactions
	// that committed them.
	writes, commits atomic.Int64
}

func newCommitter(s *Store, log zerolog.Logger) *committer {
	c := &committer{s: s, log: log, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go c.loop()
	return c
}

// enqueue adds op to the queue.
func (c *committer) enqueue(op *writeOp) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return errStoreClosed
	}
	op.queued = time.Now()
	c.queue = append(c.queue, op)
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// withdraw removes op from the queue if the committer has not taken it
// yet, and reports whether it did.
func (c *committer) withdraw(op *writeOp) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, o := range c.queue {
		if o == op {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			return true
		}
	}
	return false
}

// next takes the next batch: an exclusive write alone, or up to maxBatch
// writes; writes no one waits for, once the first has waited laterDelay
// or another write waits. It returns nil once the store is closing and the
// queue is empty.
func (c *committer) next() []*writeOp {
	for {
		c.mu.Lock()
		if len(c.queue) > 0 && !c.closing && len(c.queue) < maxBatch && !slices.ContainsFunc(c.queue, (*writeOp).waited) {
			if wait := laterDelay - time.Since(c.queue[0].queued); wait > 0 {
				c.mu.Unlock()
				t := time.NewTimer(wait)
				select {
				case <-c.wake:
				case <-t.C:
				}
				t.Stop()
				continue
			}
		}
		if len(c.queue) > 0 {
			n := 1
			if c.queue[0].exclusive == nil {
				for n < len(c.queue) && n < maxBatch && c.queue[n].exclusive == nil {
					n++
				}
			}
			batch := make([]*writeOp, n)
			copy(batch, c.queue)
			c.queue = append(c.queue[:0], c.queue[n:]...)
			c.mu.Unlock()
			return batch
		}
		closing := c.closing
		c.mu.Unlock()
		if closing {
			return nil
		}
		<-c.wake
	}
}

func (c *committer) loop() {
	defer close(c.done)
	for batch := c.next(); batch != nil; batch = c.next() {
		errs := c.run(batch)
		for i, op := range batch {
			if op.done != nil {
				op.done <- errs[i]
			} else if errs[i] != nil {
				c.log.Error().Err(errs[i]).Msg("A write no one waited for failed")
			}
		}
	}
}

// run commits one batch and returns each write's outcome.
func (c *committer) run(batch []*writeOp) []error {
	errs := make([]error, len(batch))
	// The batch outlives any one writer: a writer that gives up after its
	// write was taken does not roll back the others.
	ctx := c.log.WithContext(context.Background())
	if batch[0].exclusive != nil {
		if errs[0] = guard(ctx, batch[0].exclusive); errs[0] == nil {
			c.commits.Add(1)
			c.writes.Add(1)
		}
		return errs
	}
	if len(batch) == 1 {
		// Alone, a write needs no savepoint: its failure rolls back the
		// transaction, which holds nothing else.
		err := c.s.db.DoTxn(ctx, nil, func(ctx context.Context) error { return guard(ctx, batch[0].fn) })
		if err == nil {
			c.commits.Add(1)
			c.writes.Add(1)
		}
		return []error{err}
	}
	err := c.s.db.DoTxn(ctx, nil, func(ctx context.Context) error {
		for i, op := range batch {
			if _, err := c.s.db.Exec(ctx, "SAVEPOINT secgpt_write"); err != nil {
				return err
			}
			if errs[i] = guard(ctx, op.fn); errs[i] != nil {
				if _, err := c.s.db.Exec(ctx, "ROLLBACK TO secgpt_write"); err != nil {
					// SQLite ended the transaction itself (a full disk, an
					// I/O error): nothing of the batch stands.
					return fmt.Errorf("failed to roll back a failed write: %w", err)
				}
			}
			if _, err := c.s.db.Exec(ctx, "RELEASE secgpt_write"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	c.commits.Add(1)
	for _, e := range errs {
		if e == nil {
			c.writes.Add(1)
		}
	}
	return errs
}

// guard runs fn, turning a panic into an error: one bad write must not
// end the committer every other write waits on.
func guard(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("write panicked: %v", p)
		}
	}()
	return fn(ctx)
}

// close lets the committer finish every queued write, then stops it.
func (c *committer) close() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	<-c.done
}

// wait queues op and waits for its outcome. A writer whose context ends
// before the committer took its write withdraws it; once taken, the write
// is committed or fails with its batch, and the writer learns which.
func (c *committer) wait(ctx context.Context, op *writeOp) error {
	op.done = make(chan error, 1)
	if err := c.enqueue(op); err != nil {
		return err
	}
	select {
	case err := <-op.done:
		return err
	case <-ctx.Done():
		if c.withdraw(op) {
			return ctx.Err()
		}
		return <-op.done
	}
}

// write runs fn in a write transaction, committed together with the other
// writes waiting at that moment, and returns once it is durable; on a
// store from Later it returns at once. fn must not call write again.
func (s *Store) write(ctx context.Context, fn func(ctx context.Context) error) error {
	op := &writeOp{fn: fn}
	if s.later {
		if err := s.committer.enqueue(op); err != nil {
			return fmt.Errorf("failed to queue a write: %w", err)
		}
		return nil
	}
	return s.committer.wait(ctx, op)
}

// Write runs fn, a write of tables another package keeps in the store's
// database (see DB), as the store's own writes run: committed with the
// writes waiting at that moment, returning once durable, or at once on a
// store from Later. fn must make its statements with the context it is
// given (they run in the batch's transaction) and must not write again.
func (s *Store) Write(ctx context.Context, fn func(ctx context.Context) error) error {
	return s.write(ctx, fn)
}

// writeAlone runs fn while no other write of this process runs, outside
// any transaction (fn makes its own), and returns once it has.
func (s *Store) writeAlone(ctx context.Context, fn func(ctx context.Context) error) error {
	return s.committer.wait(ctx, &writeOp{exclusive: fn})
}

// Later returns the store as a writer that does not wait for durability:
// each of its writes is checked, queued and acknowledged at once, and
// committed with the next batch (a failure then is logged). It is for
// writes that no action depends on: a session's last activity, an app's
// notes to itself, a grant whose decision's audit entry, written next and
// waited for, commits it. Reads are the store's. The next write that
// waits, from any writer, commits every write queued before it.
func (s *Store) Later() *Store {
	l := *s
	l.later = true
	return &l
}

// WriteStats are the store's writes since Open and the transactions that
// committed them: with group commit, many writes share one commit (and
// one sync of the log).
type WriteStats struct {
	Writes  int64 `json:"writes"`
	Commits int64 `json:"commits"`
}

// WriteStats returns how many writes have committed, in how many commits.
func (s *Store) WriteStats() WriteStats {
	return WriteStats{Writes: s.committer.writes.Load(), Commits: s.committer.commits.Load()}
}
