package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Grant categories (see DESIGN §5).
const (
	CategoryExec   = "exec"   // run the app for the user
	CategoryData   = "data"   // share the user's data with the app
	CategoryCollab = "collab" // one app's result goes to another
)

// Grant durations that are stored. "once" is never stored.
const (
	DurationSession = "session" // until the session ends
	DurationAlways  = "always"  // until revoked
	DurationNever   = "never"   // a stored denial, until revoked
)

// Grant is one stored permission decision of a user.
//
// Subject is an app name ("metro_hail"), a caller->callee pair
// ("email->drive"), or for data grants "app#fingerprint". SessionID is set
// exactly when Duration is DurationSession.
type Grant struct {
	ID         int64
	User       string
	Category   string
	Subject    string
	AppVersion string
	Duration   string
	SessionID  string
	Created    time.Time
}

const grantColumns = "id, user_id, category, subject, app_version, duration, session_id, created_at"

func checkCategory(c string) error {
	switch c {
	case CategoryExec, CategoryData, CategoryCollab:
		return nil
	}
	return fmt.Errorf("%w: unknown grant category %q", ErrInvalid, c)
}

// FindGrant returns the grant that applies to (user, category, subject,
// appVersion) in session sessionID: one with duration "always" or "never",
// or "session" for that very session. A "never" grant wins over an allowing
// one; between allowing grants "always" comes first. A grant for another
// app version does not match.
func (s *Store) FindGrant(ctx context.Context, user, category, subject, appVersion, sessionID string) (Grant, bool, error) {
	if err := checkGrantKey(user, category, subject, appVersion); err != nil {
		return Grant{}, false, fmt.Errorf("failed to find grant: %w", err)
	}
	row := s.db.QueryRow(ctx, "SELECT "+grantColumns+` FROM grants
		WHERE user_id=$1 AND category=$2 AND subject=$3 AND app_version=$4
		  AND (duration IN ('always', 'never') OR (duration='session' AND session_id=$5))
		ORDER BY CASE duration WHEN 'never' THEN 0 WHEN 'always' THEN 1 ELSE 2 END, id
		LIMIT 1`, user, category, subject, appVersion, sessionID)
	g, err := scanGrant(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Grant{}, false, nil
	} else if err != nil {
		return Grant{}, false, fmt.Errorf("failed to find grant: %w", err)
	}
	return g, true, nil
}

// PutGrant stores a grant, replacing one with the same user, category,
// subject, app version, duration and session. Created defaults to now. A
// session grant must name the user's active session, or PutGrant returns
// ErrNoActiveSession: a grant answered after its session ended is not kept.
func (s *Store) PutGrant(ctx context.Context, g Grant) error {
	if err := checkGrantKey(g.User, g.Category, g.Subject, g.AppVersion); err != nil {
		return fmt.Errorf("failed to put grant: %w", err)
	}
	switch g.Duration {
	case DurationAlways, DurationNever:
		if g.SessionID != "" {
			return fmt.Errorf("failed to put grant: %w: a %q grant has no session", ErrInvalid, g.Duration)
		}
	case DurationSession:
		if g.SessionID == "" {
			return fmt.Errorf("failed to put grant: %w: a session grant needs a session ID", ErrInvalid)
		}
	default:
		return fmt.Errorf("failed to put grant: %w: duration %q is not stored", ErrInvalid, g.Duration)
	}
	created := g.Created.UnixNano()
	if g.Created.IsZero() {
		created = nowNanos()
	}
	err := s.write(ctx, func(ctx context.Context) error {
		if g.Duration == DurationSession {
			var active bool
			if err := s.db.QueryRow(ctx, "SELECT EXISTS(SELECT 1 FROM sessions WHERE id=$1 AND user_id=$2 AND ended_at IS NULL)",
				g.SessionID, g.User).Scan(&active); err != nil {
				return err
			} else if !active {
				return ErrNoActiveSession
			}
		}
		_, err := s.db.Exec(ctx, `INSERT INTO grants (user_id, category, subject, app_version, duration, session_id, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (user_id, category, subject, app_version, duration, session_id) DO UPDATE SET created_at=excluded.created_at`,
			g.User, g.Category, g.Subject, g.AppVersion, g.Duration, g.SessionID, created)
		return err
	})
	if err != nil {
		return fmt.Errorf("failed to put %s grant for %s: %w", g.Category, g.Subject, err)
	}
	return nil
}

// ListGrants returns all of the user's grants, oldest first.
func (s *Store) ListGrants(ctx context.Context, user string) ([]Grant, error) {
	if err := checkName("user", user); err != nil {
		return nil, fmt.Errorf("failed to list grants: %w", err)
	}
	rows, err := s.db.Query(ctx, "SELECT "+grantColumns+" FROM grants WHERE user_id=$1 ORDER BY id", user)
	if err != nil {
		return nil, fmt.Errorf("failed to list grants: %w", err)
	}
	defer rows.Close()
	var out []Grant
	for rows.Next() {
		g, err := scanGrant(rows)
		if err != nil {
			return nil, fmt.Errorf("failed to list grants: %w", err)
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("failed to list grants: %w", err)
	}
	return out, nil
}

// RevokeGrants deletes the user's grants whose subject names app ("app",
// "app#…", "app->x", "x->app", matching whole names only), or all of the
// user's grants when app is "". It returns how many it deleted.
func (s *Store) RevokeGrants(ctx context.Context, user, app string) (int, error) {
	if err := checkName("user", user); err != nil {
		return 0, fmt.Errorf("failed to revoke grants: %w", err)
	}
	var revoked int
	err := s.write(ctx, func(ctx context.Context) error {
		if app == "" {
			res, err := s.db.Exec(ctx, "DELETE FROM grants WHERE user_id=$1", user)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			revoked = int(n)
			return err
		}
		ids, err := s.grantIDsNaming(ctx, user, app)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if _, err := s.db.Exec(ctx, "DELETE FROM grants WHERE id=$1", id); err != nil {
				return err
			}
		}
		revoked = len(ids)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("failed to revoke grants of %s: %w", app, err)
	}
	return revoked, nil
}

// grantIDsNaming lists the IDs of the user's grants whose subject names app.
// The match is done in Go so that no character of an app name acts as a
// pattern.
func (s *Store) grantIDsNaming(ctx context.Context, user, app string) ([]int64, error) {
	rows, err := s.db.Query(ctx, "SELECT id, subject FROM grants WHERE user_id=$1", user)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		var subject string
		if err := rows.Scan(&id, &subject); err != nil {
			return nil, err
		}
		if subjectNamesApp(subject, app) {
			ids = append(ids, id)
		}
	}
	return ids, rows.Err()
}

// subjectNamesApp reports whether a grant subject ("app", "app#fingerprint",
// "caller->callee") names app as a whole name.
func subjectNamesApp(subject, app string) bool {
	names, _, _ := strings.Cut(subject, "#")
	if caller, callee, ok := strings.Cut(names, "->"); ok {
		return caller == app || callee == app
	}
	return names == app
}

func checkGrantKey(user, category, subject, appVersion string) error {
	if err := checkName("user", user); err != nil {
		return err
	}
	if err := checkCategory(category); err != nil {
		return err
	}
	if err := checkName("subject", subject); err != nil {
		return err
	}
	if len(appVersion) > MaxNameBytes {
		return fmt.Errorf("%w: app version longer than %d bytes", ErrInvalid, MaxNameBytes)
	}
	return nil
}

func scanGrant(row interface{ Scan(...any) error }) (Grant, error) {
	var g Grant
	var created int64
	if err := row.Scan(&g.ID, &g.User, &g.Category, &g.Subject, &g.AppVersion, &g.Duration, &g.SessionID, &created); err != nil {
		return Grant{}, err
	}
	g.Created = fromNanos(created)
	return g, nil
}
