package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ScratchEntry is the scratch directory of one (user, app), named by a
// random id.
type ScratchEntry struct {
	User, App, ID string
	UsedAt        time.Time
}

// Scratch returns the id of the (user, app)'s scratch directory, a random
// 32-digit hex string made on first use, and marks it used now. The id is
// durable before Scratch returns it, so no directory is made under an id
// the store could forget; the use is recorded later (Later), and to within
// scratchUseGrain: every spoke start names its scratch, and a read and a
// commit per start were most of the hub's own CPU for a spoke started from
// a spare.
func (s *Store) Scratch(ctx context.Context, user, app string) (string, error) {
	if err := checkUserApp(user, app); err != nil {
		return "", fmt.Errorf("failed to name scratch: %w", err)
	}
	now := time.Now()
	if id, ok := s.scratch.recent(user, app, now); ok {
		return id, nil
	}
	gen := s.scratch.generation()
	id, err := s.scratchID(ctx, user, app)
	switch {
	case err == nil:
		err = s.Later().write(ctx, func(ctx context.Context) error {
			_, err := s.db.Exec(ctx, "UPDATE scratch SET used_at=$1 WHERE id=$2", now.UnixNano(), id)
			return err
		})
	case errors.Is(err, sql.ErrNoRows):
		var b [16]byte
		rand.Read(b[:])
		err = s.write(ctx, func(ctx context.Context) error {
			_, err := s.db.Exec(ctx, `INSERT INTO scratch (user_id, app, id, created_at, used_at) VALUES ($1, $2, $3, $4, $4)
				ON CONFLICT (user_id, app) DO NOTHING`, user, app, hex.EncodeToString(b[:]), now.UnixNano())
			return err
		})
		if err == nil {
			id, err = s.scratchID(ctx, user, app)
		}
	}
	if err != nil {
		return "", fmt.Errorf("failed to name scratch of %s: %w", app, err)
	}
	s.scratch.used(user, app, id, now, gen)
	return id, nil
}

// scratchUseGrain is how precisely a scratch's last use is recorded: a use
// within it of the last one recorded is not written. The reaper's idle
// time (hours to days) is far longer, and it never reaps the scratch of a
// spoke that runs.
const scratchUseGrain = time.Minute

// scratchCache remembers, for the ids this process named, when their use
// was last recorded, so that a spoke started within scratchUseGrain of the
// last record of its scratch costs no database access.
type scratchCache struct {
	mu  sync.Mutex
	ids map[[2]string]scratchUse // by (user, app)
	// gen counts the deletions, so that an id read before one is not
	// remembered after it.
	gen uint64
}

type scratchUse struct {
	id   string
	used time.Time
}

func newScratchCache() *scratchCache {
	return &scratchCache{ids: map[[2]string]scratchUse{}}
}

// recent returns the id of (user, app) when its use was recorded less than
// scratchUseGrain before now.
func (c *scratchCache) recent(user, app string, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.ids[[2]string{user, app}]
	if !ok || now.Sub(u.used) >= scratchUseGrain || now.Before(u.used) {
		return "", false
	}
	return u.id, true
}

func (c *scratchCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// used remembers that the use of id, read at generation gen, was recorded
// at t, unless an id was deleted since.
func (c *scratchCache) used(user, app, id string, t time.Time, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen {
		c.ids[[2]string{user, app}] = scratchUse{id: id, used: t}
	}
}

// forget drops id.
func (c *scratchCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for k, u := range c.ids {
		if u.id == id {
			delete(c.ids, k)
		}
	}
}

func (s *Store) scratchID(ctx context.Context, user, app string) (string, error) {
	var id string
	err := s.db.QueryRow(ctx, "SELECT id FROM scratch WHERE user_id=$1 AND app=$2", user, app).Scan(&id)
	return id, err
}

// IdleScratches lists the scratch directories last used before t (as
// recorded: to within scratchUseGrain), oldest first.
func (s *Store) IdleScratches(ctx context.Context, t time.Time) ([]ScratchEntry, error) {
	return s.scratches(ctx, "SELECT user_id, app, id, used_at FROM scratch WHERE used_at < $1 ORDER BY used_at", t.UnixNano())
}

// UserScratches lists the user's scratch directories.
func (s *Store) UserScratches(ctx context.Context, user string) ([]ScratchEntry, error) {
	return s.scratches(ctx, "SELECT user_id, app, id, used_at FROM scratch WHERE user_id=$1 ORDER BY app", user)
}

// ScratchIDs lists every scratch id the store knows.
func (s *Store) ScratchIDs(ctx context.Context) (map[string]bool, error) {
	all, err := s.scratches(ctx, "SELECT user_id, app, id, used_at FROM scratch WHERE used_at >= $1", int64(0))
	if err != nil {
		return nil, err
	}
	ids := make(map[string]bool, len(all))
	for _, e := range all {
		ids[e.ID] = true
	}
	return ids, nil
}

func (s *Store) scratches(ctx context.Context, query string, arg any) ([]ScratchEntry, error) {
	rows, err := s.db.Query(ctx, query, arg)
	if err != nil {
		return nil, fmt.Errorf("failed to list scratch directories: %w", err)
	}
	defer rows.Close()
	var out []ScratchEntry
	for rows.Next() {
		var e ScratchEntry
		var used int64
		if err := rows.Scan(&e.User, &e.App, &e.ID, &used); err != nil {
			return nil, fmt.Errorf("failed to list scratch directories: %w", err)
		}
		e.UsedAt = fromNanos(used)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("failed to list scratch directories: %w", err)
	}
	return out, nil
}

// DeleteScratch forgets the scratch id, once its directory is gone; a
// later Scratch of its (user, app) makes a new one.
func (s *Store) DeleteScratch(ctx context.Context, id string) error {
	s.scratch.forget(id)
	err := s.write(ctx, func(ctx context.Context) error {
		_, err := s.db.Exec(ctx, "DELETE FROM scratch WHERE id=$1", id)
		return err
	})
	// Again: a Scratch that read id before the delete committed does not
	// keep it (see scratchCache.used).
	s.scratch.forget(id)
	if err != nil {
		return fmt.Errorf("failed to delete scratch %s: %w", id, err)
	}
	return nil
}
