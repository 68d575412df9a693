package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// MaxDiscoveryBytes bounds a cached discovery (an app's spec as JSON).
const MaxDiscoveryBytes = 1 << 20

// Discovery returns what discovering app found (its spec, opaque JSON) when
// its code and declaration had identity; ok is false when nothing is
// cached for that identity.
func (s *Store) Discovery(ctx context.Context, app, identity string) (spec json.RawMessage, ok bool, err error) {
	if app == "" || identity == "" {
		return nil, false, fmt.Errorf("failed to read discovery: %w: empty app or identity", ErrInvalid)
	}
	var body string
	err = s.db.QueryRow(ctx, "SELECT spec FROM app_discovery WHERE app=$1 AND identity=$2", app, identity).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, fmt.Errorf("failed to read discovery of %s: %w", app, err)
	}
	return json.RawMessage(body), true, nil
}

// PutDiscovery records what discovering app found for identity, replacing
// what was cached for any other identity of the app.
func (s *Store) PutDiscovery(ctx context.Context, app, identity string, spec json.RawMessage) error {
	switch {
	case app == "" || identity == "":
		return fmt.Errorf("failed to put discovery: %w: empty app or identity", ErrInvalid)
	case len(spec) > MaxDiscoveryBytes || !json.Valid(spec):
		return fmt.Errorf("failed to put discovery of %s: %w: not JSON of at most %d bytes", app, ErrInvalid, MaxDiscoveryBytes)
	}
	err := s.write(ctx, func(ctx context.Context) error {
		_, err := s.db.Exec(ctx, `INSERT INTO app_discovery (app, identity, spec, discovered_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (app) DO UPDATE SET identity=excluded.identity, spec=excluded.spec, discovered_at=excluded.discovered_at`,
			app, identity, string(spec), nowNanos())
		return err
	})
	if err != nil {
		return fmt.Errorf("failed to put discovery of %s: %w", app, err)
	}
	return nil
}
