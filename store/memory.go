package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Memory roles. Hub memory holds only the user's messages and the parts of
// the answers; spoke memory entries all have RoleSpoke.
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
	// Provenance says which apps' output shaped the entry. A user's
	// message is the user's own words: its provenance is known and empty.
	Provenance Provenance
}

// Provenance names the apps whose output shaped a hub-memory entry. The
// store keeps it; the hub decides from it which model may read the entry.
// Its zero value is unknown provenance, which readers must treat as shaped
// by apps they cannot name: forgetting to set it fails closed.
type Provenance struct {
	// Known is false for an entry whose provenance was not recorded (rows
	// written before it was kept).
	Known bool
	// Apps are the apps, sorted and distinct; none for the user's words
	// and for what no app shaped.
	Apps []string
}

// ShapedBy is the known provenance of an entry shaped by apps (none: by
// no app).
func ShapedBy(apps ...string) Provenance {
	out := slices.Clone(apps)
	slices.Sort(out)
	return Provenance{Known: true, Apps: slices.Compact(out)}
}

// AppFree reports whether no app's output shaped the entry, for certain.
func (p Provenance) AppFree() bool { return p.Known && len(p.Apps) == 0 }

// column is the provenance as stored: NULL for unknown, else the sorted
// app names joined by commas (app names have none).
func (p Provenance) column() sql.NullString {
	if !p.Known {
		return sql.NullString{}
	}
	return sql.NullString{String: strings.Join(ShapedBy(p.Apps...).Apps, ","), Valid: true}
}

func provenanceOf(col sql.NullString) Provenance {
	if !col.Valid {
		return Provenance{}
	}
	if col.String == "" {
		return ShapedBy()
	}
	return ShapedBy(strings.Split(col.String, ",")...)
}

func checkProvenance(p Provenance) error {
	for _, app := range p.Apps {
		if err := checkName("app", app); err != nil {
			return err
		}
		if strings.Contains(app, ",") {
			return fmt.Errorf("%w: app name %q", ErrInvalid, app)
		}
	}
	return nil
}

// AnswerPart is one part of an answer, as hub memory keeps it.
type AnswerPart struct {
	Content    string
	Provenance Provenance
}

// AppendHubMemory appends one entry (role "user" or "assistant") to the
// user's hub memory. A user's entry is the user's own words; an assistant's
// entry has the provenance given.
func (s *Store) AppendHubMemory(ctx context.Context, user, role, content string, p Provenance) error {
	if role == RoleUser {
		p = ShapedBy()
	}
	if err := checkHubEntry(user, role, content); err != nil {
		return fmt.Errorf("failed to append hub memory: %w", err)
	}
	if err := checkProvenance(p); err != nil {
		return fmt.Errorf("failed to append hub memory: %w", err)
	}
	err := s.write(ctx, func(ctx context.Context) error {
		return s.insertHubMemory(ctx, user, role, content, p, nowNanos())
	})
	if err != nil {
		return fmt.Errorf("failed to append hub memory: %w", err)
	}
	return nil
}

// RecordTurn appends the user's query and each part of the answer, with
// its provenance, to the user's hub memory in one transaction, so a crash
// never leaves half a turn.
func (s *Store) RecordTurn(ctx context.Context, user, query string, answer ...AnswerPart) error {
	if err := checkHubEntry(user, RoleUser, query); err != nil {
		return fmt.Errorf("failed to record turn: %w", err)
	}
	if len(answer) == 0 {
		return fmt.Errorf("failed to record turn: %w: no answer", ErrInvalid)
	}
	for _, a := range answer {
		if err := checkContent(a.Content); err != nil {
			return fmt.Errorf("failed to record turn: %w", err)
		}
		if err := checkProvenance(a.Provenance); err != nil {
			return fmt.Errorf("failed to record turn: %w", err)
		}
	}
	now := nowNanos()
	err := s.write(ctx, func(ctx context.Context) error {
		if err := s.insertHubMemory(ctx, user, RoleUser, query, ShapedBy(), now); err != nil {
			return err
		}
		for _, a := range answer {
			if err := s.insertHubMemory(ctx, user, RoleAssistant, a.Content, a.Provenance, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("failed to record turn: %w", err)
	}
	return nil
}

func (s *Store) insertHubMemory(ctx context.Context, user, role, content string, p Provenance, at int64) error {
	_, err := s.db.Exec(ctx, "INSERT INTO hub_memory (user_id, role, content, created_at, provenance) VALUES ($1, $2, $3, $4, $5)",
		user, role, content, at, p.column())
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
	out, err := s.readMemory(ctx, `SELECT id, created_at, role, content, provenance FROM hub_memory
		WHERE user_id=$1 ORDER BY id DESC LIMIT $2`, user, listLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("failed to read hub memory: %w", err)
	}
	return out, nil
}

// AppendSpokeMemory appends one entry to the memory of the user's spoke for
// app. The content is the app's untrusted text, kept as is. Only the
// newest MaxListLimit entries of an (user, app) are kept.
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
		if err != nil {
			return err
		}
		// No reader sees more than the last MaxListLimit entries: older
		// ones would only fill the disk (an app appending in a loop).
		_, err = s.db.Exec(ctx, `DELETE FROM spoke_memory WHERE user_id=$1 AND app=$2 AND id <= (
			SELECT id FROM spoke_memory WHERE user_id=$1 AND app=$2 ORDER BY id DESC LIMIT 1 OFFSET $3)`,
			user, app, MaxListLimit)
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
	// Spoke memory is one app's own: its provenance is that app.
	out, err := s.readMemory(ctx, `SELECT id, created_at, 'spoke', content, $2 FROM spoke_memory
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
		var prov sql.NullString
		if err := rows.Scan(&e.ID, &at, &e.Role, &e.Content, &prov); err != nil {
			return nil, err
		}
		e.Time = fromNanos(at)
		e.Provenance = provenanceOf(prov)
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
	err := s.writeAlone(ctx, func(ctx context.Context) error {
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
