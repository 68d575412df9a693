package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Doc is one app document of a user.
type Doc struct {
	ID      string
	Body    json.RawMessage
	Updated time.Time
}

// GetDoc returns the body of one of the user's documents of app, or
// ErrNotFound.
func (s *Store) GetDoc(ctx context.Context, user, app, collection, id string) (json.RawMessage, error) {
	if err := checkDocKey(user, app, collection, id); err != nil {
		return nil, fmt.Errorf("failed to get document: %w", err)
	}
	var body string
	err := s.db.QueryRow(ctx, "SELECT body FROM app_docs WHERE user_id=$1 AND app=$2 AND collection=$3 AND doc_id=$4",
		user, app, collection, id).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("failed to get document %s/%s of %s: %w", collection, id, app, ErrNotFound)
	} else if err != nil {
		return nil, fmt.Errorf("failed to get document %s/%s of %s: %w", collection, id, app, err)
	}
	return json.RawMessage(body), nil
}

// PutDoc creates or replaces a document. The body must be valid JSON of at
// most MaxDocBytes. Its Updated time is now, but always later than any other
// update of the user's documents of app, so a later put lists as newer even
// within one clock tick.
func (s *Store) PutDoc(ctx context.Context, user, app, collection, id string, body json.RawMessage) error {
	return s.PutDocWithin(ctx, DocQuota{}, user, app, collection, id, body)
}

// DocQuota bounds what one app stores for one user: the bytes of its
// documents' bodies and their number. A zero field is no bound.
type DocQuota struct {
	Bytes int64
	Docs  int64
}

// ErrQuota is wrapped by every refusal of a put over a DocQuota.
var ErrQuota = errors.New("over quota")

// QuotaError is a put that would take an app's data over its quota; its
// message names the bound.
type QuotaError struct {
	App string
	// What is "bytes" or "documents"; Would what the put would make it,
	// Limit the bound.
	What         string
	Would, Limit int64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%s would store %d %s for this user, over its limit of %d", e.App, e.Would, e.What, e.Limit)
}

func (e *QuotaError) Unwrap() error { return ErrQuota }

// PutDocWithin is PutDoc bounded by q: a put that would take the app's
// data for the user over q is refused with a *QuotaError and changes
// nothing. The check and the write are one transaction, so concurrent puts
// cannot pass the bound together.
func (s *Store) PutDocWithin(ctx context.Context, q DocQuota, user, app, collection, id string, body json.RawMessage) error {
	if err := checkDoc(user, app, collection, id, body); err != nil {
		return fmt.Errorf("failed to put document: %w", err)
	}
	err := s.write(ctx, func(ctx context.Context) error {
		if err := s.checkQuota(ctx, q, user, app, collection, id, body); err != nil {
			return err
		}
		return s.putDoc(ctx, user, app, collection, id, body)
	})
	if err != nil {
		return fmt.Errorf("failed to put document %s/%s of %s: %w", collection, id, app, err)
	}
	return nil
}

// checkQuota refuses a put that would take the app's data over q; it runs
// inside the put's write transaction.
func (s *Store) checkQuota(ctx context.Context, q DocQuota, user, app, collection, id string, body json.RawMessage) error {
	if q.Bytes <= 0 && q.Docs <= 0 {
		return nil
	}
	used, err := s.dataUsage(ctx, user, app)
	if err != nil {
		return err
	}
	// A replaced document gives back its bytes and its place.
	var old int64
	err = s.db.QueryRow(ctx, `SELECT length(CAST(body AS BLOB)) FROM app_docs
		WHERE user_id=$1 AND app=$2 AND collection=$3 AND doc_id=$4`, user, app, collection, id).Scan(&old)
	replaced := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	bytes, docs := used.Bytes-old+int64(len(body)), used.Docs
	if !replaced {
		docs++
	}
	if q.Docs > 0 && docs > q.Docs {
		return &QuotaError{App: app, What: "documents", Would: docs, Limit: q.Docs}
	}
	// A put that shrinks the data is let through even over the bound (a
	// bound lowered since): it can only help.
	if q.Bytes > 0 && bytes > q.Bytes && int64(len(body)) > old {
		return &QuotaError{App: app, What: "bytes", Would: bytes, Limit: q.Bytes}
	}
	return nil
}

// putDoc writes a checked document inside a write transaction.
func (s *Store) putDoc(ctx context.Context, user, app, collection, id string, body json.RawMessage) error {
	var last int64
	if err := s.db.QueryRow(ctx, "SELECT COALESCE(MAX(updated_at), 0) FROM app_docs WHERE user_id=$1 AND app=$2",
		user, app).Scan(&last); err != nil {
		return err
	}
	updated := max(nowNanos(), last+1)
	_, err := s.db.Exec(ctx, `INSERT INTO app_docs (user_id, app, collection, doc_id, body, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (user_id, app, collection, doc_id) DO UPDATE SET body=excluded.body, updated_at=excluded.updated_at`,
		user, app, collection, id, string(body), updated)
	return err
}

// DeleteDoc deletes a document, or returns ErrNotFound.
func (s *Store) DeleteDoc(ctx context.Context, user, app, collection, id string) error {
	if err := checkDocKey(user, app, collection, id); err != nil {
		return fmt.Errorf("failed to delete document: %w", err)
	}
	err := s.write(ctx, func(ctx context.Context) error {
		res, err := s.db.Exec(ctx, "DELETE FROM app_docs WHERE user_id=$1 AND app=$2 AND collection=$3 AND doc_id=$4",
			user, app, collection, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("failed to delete document %s/%s of %s: %w", collection, id, app, err)
	}
	return nil
}

// ListDocs returns up to limit documents of a collection, newest first (by
// Updated, then by insertion). A limit ≤ 0 or over MaxListLimit means
// MaxListLimit.
func (s *Store) ListDocs(ctx context.Context, user, app, collection string, limit int) ([]Doc, error) {
	if err := checkCollection(user, app, collection); err != nil {
		return nil, fmt.Errorf("failed to list documents: %w", err)
	}
	rows, err := s.db.Query(ctx, `SELECT doc_id, body, updated_at FROM app_docs
		WHERE user_id=$1 AND app=$2 AND collection=$3
		ORDER BY updated_at DESC, seq DESC LIMIT $4`, user, app, collection, listLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("failed to list documents %s of %s: %w", collection, app, err)
	}
	defer rows.Close()
	var out []Doc
	for rows.Next() {
		var d Doc
		var body string
		var updated int64
		if err := rows.Scan(&d.ID, &body, &updated); err != nil {
			return nil, fmt.Errorf("failed to list documents %s of %s: %w", collection, app, err)
		}
		d.Body, d.Updated = json.RawMessage(body), fromNanos(updated)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("failed to list documents %s of %s: %w", collection, app, err)
	}
	return out, nil
}

// CountDocs returns how many documents a collection holds.
func (s *Store) CountDocs(ctx context.Context, user, app, collection string) (int, error) {
	if err := checkCollection(user, app, collection); err != nil {
		return 0, fmt.Errorf("failed to count documents: %w", err)
	}
	var n int
	if err := s.db.QueryRow(ctx, "SELECT COUNT(*) FROM app_docs WHERE user_id=$1 AND app=$2 AND collection=$3",
		user, app, collection).Scan(&n); err != nil {
		return 0, fmt.Errorf("failed to count documents %s of %s: %w", collection, app, err)
	}
	return n, nil
}

func checkCollection(user, app, collection string) error {
	if err := checkUserApp(user, app); err != nil {
		return err
	}
	return checkKey("collection", collection)
}

func checkDocKey(user, app, collection, id string) error {
	if err := checkCollection(user, app, collection); err != nil {
		return err
	}
	return checkKey("document ID", id)
}

func checkDoc(user, app, collection, id string, body json.RawMessage) error {
	if err := checkDocKey(user, app, collection, id); err != nil {
		return err
	}
	if len(body) > MaxDocBytes {
		return fmt.Errorf("%w: document body longer than %d bytes", ErrInvalid, MaxDocBytes)
	}
	if !json.Valid(body) {
		return fmt.Errorf("%w: document body is not valid JSON", ErrInvalid)
	}
	return nil
}
