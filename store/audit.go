package store

import (
	"context"
	"fmt"
	"time"
)

// AuditEntry is one permission decision, asked or answered from a stored
// grant. The store keeps the fields as the hub wrote them.
type AuditEntry struct {
	ID         int64
	Time       time.Time
	User       string
	SessionID  string
	QueryID    string
	Category   string
	Subject    string
	AppVersion string
	// Decision is what was decided (allow, deny, ...).
	Decision string
	// Source is where the decision came from (user, stored grant, rule, ...).
	Source string
	Detail string
}

// AppendAudit appends an entry to the audit log. Time defaults to now.
func (s *Store) AppendAudit(ctx context.Context, e AuditEntry) error {
	if err := checkName("user", e.User); err != nil {
		return fmt.Errorf("failed to append audit entry: %w", err)
	}
	if e.Decision == "" {
		return fmt.Errorf("failed to append audit entry: %w: empty decision", ErrInvalid)
	}
	if len(e.Detail) > MaxContentBytes {
		return fmt.Errorf("failed to append audit entry: %w: detail longer than %d bytes", ErrInvalid, MaxContentBytes)
	}
	at := e.Time.UnixNano()
	if e.Time.IsZero() {
		at = nowNanos()
	}
	err := s.write(ctx, func(ctx context.Context) error {
		_, err := s.db.Exec(ctx, `INSERT INTO audit_log
			(at, user_id, session_id, query_id, category, subject, app_version, decision, source, detail)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			at, e.User, e.SessionID, e.QueryID, e.Category, e.Subject, e.AppVersion, e.Decision, e.Source, e.Detail)
		return err
	})
	if err != nil {
		return fmt.Errorf("failed to append audit entry: %w", err)
	}
	return nil
}

// RecentAudit returns the user's last limit audit entries, the most recently
// appended first. A limit ≤ 0 or over MaxListLimit means MaxListLimit.
func (s *Store) RecentAudit(ctx context.Context, user string, limit int) ([]AuditEntry, error) {
	if err := checkName("user", user); err != nil {
		return nil, fmt.Errorf("failed to read audit log: %w", err)
	}
	rows, err := s.db.Query(ctx, `SELECT id, at, user_id, session_id, query_id, category, subject, app_version, decision, source, detail
		FROM audit_log WHERE user_id=$1 ORDER BY id DESC LIMIT $2`, user, listLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("failed to read audit log: %w", err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var at int64
		if err := rows.Scan(&e.ID, &at, &e.User, &e.SessionID, &e.QueryID, &e.Category, &e.Subject,
			&e.AppVersion, &e.Decision, &e.Source, &e.Detail); err != nil {
			return nil, fmt.Errorf("failed to read audit log: %w", err)
		}
		e.Time = fromNanos(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("failed to read audit log: %w", err)
	}
	return out, nil
}
