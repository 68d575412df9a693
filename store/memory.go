package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Memory roles. Hub memory holds only the user's messages and the final
// answers; spoke memory entries all have RoleSpoke.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleSpoke     = "spoke"
)

// MemoryEntry is one remembered message.
type MemoryEntry struct {
	ID      int64
	Time    time.Time
	Role    string
	Content string
}

// AppendHubMemory appends one entry (role "user" or "assistant") to the
// user's hub memory.
func (s *Store) AppendHubMemory(ctx context.Context, user, role, content string) error {
	if err := checkHubEntry(user, role, content); err != nil {
		return fmt.Errorf("failed to append hub memory: %w", err)
	}
	err := s.write(ctx, func(ctx context.Context) error {
		return s.insertHubMemory(ctx, user, role, content, nowNanos())
	})
	if err != nil {
		return fmt.Errorf("failed to append hub memory: %w", err)
	}
	return nil
}

// RecordTurn appends the user's query and the final answer to the user's
// hub memory in one transaction, so a crash never leaves half a turn.
func (s *Store) RecordTurn(ctx context.Context, user, query, answer string) error {
	if err := checkHubEntry(user, RoleUser, query); err != nil {
		return fmt.Errorf("failed to record turn: %w", err)
	}
	if err := checkContent(answer); err != nil {
		return fmt.Errorf("failed to record turn: %w", err)
	}
	now := nowNanos()
	err := s.write(ctx, func(ctx context.Context) error {
		if err := s.insertHubMemory(ctx, user, RoleUser, query, now); err != nil {
			return err
		}
		return s.insertHubMemory(ctx, user, RoleAssistant, answer, now)
	})
	if err != nil {
		return fmt.Errorf("failed to record turn: %w", err)
	}
	return nil
}

func (s *Store) insertHubMemory(ctx context.Context, user, role, content string, at int64) error {
	_, err := s.db.Exec(ctx, "INSERT INTO hub_memory (user_id, role, content, created_at) VALUES ($1, $2, $3, $4)",
		user, role, content, at)
	return err
}

func checkHubEntry(user, role, content string) error {
	if err := checkName("user", user); err != nil {
		return err
	}
	if role != RoleUser && role != RoleAssistant {
		return fmt.Errorf("%w: hub memory role %q", ErrInvalid, role)
	}
	return checkContent(content)
}

// HubMemory returns the user's last limit hub-memory entries, oldest first.
// A limit ≤ 0 or over MaxListLimit means MaxListLimit.
func (s *Store) HubMemory(ctx context.Context, user string, limit int) ([]MemoryEntry, error) {
	if err := checkName("user", user); err != nil {
		return nil, fmt.Errorf("failed to read hub memory: %w", err)
	}
	out, err := s.readMemory(ctx, `SELECT id, created_at, role, content FROM hub_memory
		WHERE user_id=$1 ORDER BY id DESC LIMIT $2`, user, listLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("failed to read hub memory: %w", err)
	}
	return out, nil
}

// AppendSpokeMemory appends one entry to the memory of the user's spoke for
// app. The content is the app's untrusted text, kept as is.
func (s *Store) AppendSpokeMemory(ctx context.Context, user, app, content string) error {
	if err := checkUserApp(user, app); err != nil {
		return fmt.Errorf("failed to append spoke memory: %w", err)
	}
	if err := checkContent(content); err != nil {
		return fmt.Errorf("failed to append spoke memory of %s: %w", app, err)
	}
	err := s.write(ctx, func(ctx context.Context) error {
		_, err := s.db.Exec(ctx, "INSERT INTO spoke_memory (user_id, app, content, created_at) VALUES ($1, $2, $3, $4)",
			user, app, content, nowNanos())
		return err
	})
	if err != nil {
		return fmt.Errorf("failed to append spoke memory of %s: %w", app, err)
	}
	return nil
}

// SpokeMemory returns the last limit entries of the user's memory for app,
// oldest first. A limit ≤ 0 or over MaxListLimit means MaxListLimit.
func (s *Store) SpokeMemory(ctx context.Context, user, app string, limit int) ([]MemoryEntry, error) {
	if err := checkUserApp(user, app); err != nil {
		return nil, fmt.Errorf("failed to read spoke memory: %w", err)
	}
	out, err := s.readMemory(ctx, `SELECT id, created_at, 'spoke', content FROM spoke_memory
		WHERE user_id=$1 AND app=$2 ORDER BY id DESC LIMIT $3`, user, app, listLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("failed to read spoke memory of %s: %w", app, err)
	}
	return out, nil
}

// readMemory runs a newest-first query and returns its rows oldest first.
func (s *Store) readMemory(ctx context.Context, query string, args ...any) ([]MemoryEntry, error) {
	rows, err := s.db.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []MemoryEntry
	for rows.Next() {
		var e MemoryEntry
		var at int64
		if err := rows.Scan(&e.ID, &at, &e.Role, &e.Content); err != nil {
			return nil, err
		}
		e.Time = fromNanos(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Reverse(out)
	return out, nil
}

// ForgetUser erases the user's hub memory and all of the user's spoke
// memories. Grants, sessions, the audit log and app data stay.
//
// Deleting rows is not enough: the write-ahead log still holds the pages
// as they were before the delete until a checkpoint copies the newer ones
// over and the log is reused, which may take a long time on a quiet bot.
// So after the commit ForgetUser checkpoints and truncates the log
// (truncateWAL). If readers keep it from doing so, it returns an error
// that says so, though the rows are gone; calling it again retries.
func (s *Store) ForgetUser(ctx context.Context, user string) error {
	if err := checkName("user", user); err != nil {
		return fmt.Errorf("failed to forget user: %w", err)
	}
	err := s.holdWriteSlot(ctx, func() error {
		err := s.db.DoTxn(ctx, nil, func(ctx context.Context) error {
			if _, err := s.db.Exec(ctx, "DELETE FROM hub_memory WHERE user_id=$1", user); err != nil {
				return err
			}
			_, err := s.db.Exec(ctx, "DELETE FROM spoke_memory WHERE user_id=$1", user)
			return err
		})
		if err != nil {
			return err
		}
		// Committed: finish the erasure even if the caller gives up now.
		if err := s.truncateWAL(context.WithoutCancel(ctx)); err != nil {
			return fmt.Errorf("memory deleted, but the write-ahead log may still hold it: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("failed to forget user: %w", err)
	}
	return nil
}

func checkUserApp(user, app string) error {
	if err := checkName("user", user); err != nil {
		return err
	}
	return checkName("app", app)
}
