package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
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
// the store could forget; the use is recorded later (Later).
func (s *Store) Scratch(ctx context.Context, user, app string) (string, error) {
	if err := checkUserApp(user, app); err != nil {
		return "", fmt.Errorf("failed to name scratch: %w", err)
	}
	id, err := s.scratchID(ctx, user, app)
	switch {
	case err == nil:
		err = s.Later().write(ctx, func(ctx context.Context) error {
			_, err := s.db.Exec(ctx, "UPDATE scratch SET used_at=$1 WHERE id=$2", nowNanos(), id)
			return err
		})
	case errors.Is(err, sql.ErrNoRows):
		var b [16]byte
		rand.Read(b[:])
		err = s.write(ctx, func(ctx context.Context) error {
			now := nowNanos()
			_, err := s.db.Exec(ctx, `INSERT INTO scratch (user_id, app, id, created_at, used_at) VALUES ($1, $2, $3, $4, $4)
				ON CONFLICT (user_id, app) DO NOTHING`, user, app, hex.EncodeToString(b[:]), now)
			return err
		})
		if err == nil {
			id, err = s.scratchID(ctx, user, app)
		}
	}
	if err != nil {
		return "", fmt.Errorf("failed to name scratch of %s: %w", app, err)
	}
	return id, nil
}

func (s *Store) scratchID(ctx context.Context, user, app string) (string, error) {
	var id string
	err := s.db.QueryRow(ctx, "SELECT id FROM scratch WHERE user_id=$1 AND app=$2", user, app).Scan(&id)
	return id, err
}

// IdleScratches lists the scratch directories last used before t, oldest
// first.
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
	err := s.write(ctx, func(ctx context.Context) error {
		_, err := s.db.Exec(ctx, "DELETE FROM scratch WHERE id=$1", id)
		return err
	})
	if err != nil {
		return fmt.Errorf("failed to delete scratch %s: %w", id, err)
	}
	return nil
}
