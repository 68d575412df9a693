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

// EndReasonReplaced is the end reason StartSession gives the session it replaces.
const EndReasonReplaced = "replaced"

// Session is one user's conversation with the bot, from start (or !reset)
// to reset, idle timeout or restart. Session grants live as long as it.
type Session struct {
	ID         string
	User       string
	Started    time.Time
	LastActive time.Time
	// Ended is nil while the session is active.
	Ended     *time.Time
	EndReason string
}

const sessionColumns = "id, user_id, started_at, last_active, ended_at, end_reason"

// ActiveSession returns the user's active session, if any.
func (s *Store) ActiveSession(ctx context.Context, user string) (Session, bool, error) {
	if err := checkName("user", user); err != nil {
		return Session{}, false, fmt.Errorf("failed to get active session: %w", err)
	}
	row := s.db.QueryRow(ctx, "SELECT "+sessionColumns+" FROM sessions WHERE user_id=$1 AND ended_at IS NULL", user)
	se, err := scanSession(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, false, nil
	} else if err != nil {
		return Session{}, false, fmt.Errorf("failed to get active session: %w", err)
	}
	return se, true, nil
}

// StartSession starts a new session for the user with a random ID, first
// ending the user's active session, if any, with reason "replaced" (and
// deleting its session grants).
func (s *Store) StartSession(ctx context.Context, user string) (Session, error) {
	if err := checkName("user", user); err != nil {
		return Session{}, fmt.Errorf("failed to start session: %w", err)
	}
	id := newSessionID()
	now := nowNanos()
	err := s.write(ctx, func(ctx context.Context) error {
		if _, err := s.db.Exec(ctx, `DELETE FROM grants WHERE duration='session' AND session_id IN
			(SELECT id FROM sessions WHERE user_id=$1 AND ended_at IS NULL)`, user); err != nil {
			return fmt.Errorf("failed to delete grants of replaced session: %w", err)
		}
		if _, err := s.db.Exec(ctx, "UPDATE sessions SET ended_at=$2, end_reason=$3 WHERE user_id=$1 AND ended_at IS NULL",
			user, now, EndReasonReplaced); err != nil {
			return fmt.Errorf("failed to end replaced session: %w", err)
		}
		if _, err := s.db.Exec(ctx, "INSERT INTO sessions (id, user_id, started_at, last_active) VALUES ($1, $2, $3, $3)",
			id, user, now); err != nil {
			return fmt.Errorf("failed to insert session: %w", err)
		}
		return nil
	})
	if err != nil {
		return Session{}, fmt.Errorf("failed to start session: %w", err)
	}
	return Session{ID: id, User: user, Started: fromNanos(now), LastActive: fromNanos(now)}, nil
}

// TouchSession records activity in the user's active session. It returns
// ErrNoActiveSession if the session is unknown, has ended or is not the
// user's: the user is part of the key, so a session ID that leaked or
// mixed up never touches another user's session.
func (s *Store) TouchSession(ctx context.Context, user, id string) error {
	if err := checkSessionKey(user, id); err != nil {
		return fmt.Errorf("failed to touch session: %w", err)
	}
	err := s.write(ctx, func(ctx context.Context) error {
		res, err := s.db.Exec(ctx, "UPDATE sessions SET last_active=$3 WHERE id=$1 AND user_id=$2 AND ended_at IS NULL",
			id, user, nowNanos())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrNoActiveSession
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("failed to touch session %s: %w", id, err)
	}
	return nil
}

// EndSession ends the user's session and deletes its session grants in the
// same transaction. Ending an ended session changes nothing; an unknown ID,
// or another user's, returns ErrNotFound and changes nothing.
func (s *Store) EndSession(ctx context.Context, user, id, reason string) error {
	if err := checkSessionKey(user, id); err != nil {
		return fmt.Errorf("failed to end session: %w", err)
	}
	if err := checkName("end reason", reason); err != nil {
		return fmt.Errorf("failed to end session %s: %w", id, err)
	}
	err := s.write(ctx, func(ctx context.Context) error {
		var exists bool
		if err := s.db.QueryRow(ctx, "SELECT EXISTS(SELECT 1 FROM sessions WHERE id=$1 AND user_id=$2)", id, user).Scan(&exists); err != nil {
			return err
		} else if !exists {
			return ErrNotFound
		}
		if _, err := s.db.Exec(ctx, "UPDATE sessions SET ended_at=$3, end_reason=$4 WHERE id=$1 AND user_id=$2 AND ended_at IS NULL",
			id, user, nowNanos(), reason); err != nil {
			return err
		}
		_, err := s.db.Exec(ctx, "DELETE FROM grants WHERE duration='session' AND session_id=$1 AND user_id=$2", id, user)
		return err
	})
	if err != nil {
		return fmt.Errorf("failed to end session %s: %w", id, err)
	}
	return nil
}

// checkSessionKey validates the (user, session ID) pair a session is
// addressed by.
func checkSessionKey(user, id string) error {
	if err := checkName("user", user); err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("%w: empty session ID", ErrInvalid)
	}
	return nil
}

// EndAllSessions ends every active session and deletes every session grant,
// as a restart must. It returns how many sessions it ended.
func (s *Store) EndAllSessions(ctx context.Context, reason string) (int, error) {
	if err := checkName("end reason", reason); err != nil {
		return 0, fmt.Errorf("failed to end all sessions: %w", err)
	}
	var ended int64
	err := s.write(ctx, func(ctx context.Context) error {
		res, err := s.db.Exec(ctx, "UPDATE sessions SET ended_at=$1, end_reason=$2 WHERE ended_at IS NULL", nowNanos(), reason)
		if err != nil {
			return err
		}
		if ended, err = res.RowsAffected(); err != nil {
			return err
		}
		_, err = s.db.Exec(ctx, "DELETE FROM grants WHERE duration='session'")
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("failed to end all sessions: %w", err)
	}
	return int(ended), nil
}

func scanSession(row interface{ Scan(...any) error }) (Session, error) {
	var se Session
	var started, lastActive int64
	var ended sql.NullInt64
	if err := row.Scan(&se.ID, &se.User, &started, &lastActive, &ended, &se.EndReason); err != nil {
		return Session{}, err
	}
	se.Started, se.LastActive = fromNanos(started), fromNanos(lastActive)
	if ended.Valid {
		t := fromNanos(ended.Int64)
		se.Ended = &t
	}
	return se, nil
}

// newSessionID returns 128 random bits in hex. crypto/rand.Read never
// returns an error (it aborts the program if the kernel's source fails).
func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// nowNanos is the current time as stored: Unix nanoseconds.
func nowNanos() int64 {
	return time.Now().UnixNano()
}

// fromNanos turns a stored time back into a UTC time.Time.
func fromNanos(ns int64) time.Time {
	return time.Unix(0, ns).UTC()
}
