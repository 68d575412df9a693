package store

import (
	"context"
	"fmt"
	"time"
)

// Usage is what one user's use of one app cost on one UTC day: the model
// calls made for it, the tokens the endpoint billed (or that were
// estimated from bytes where it reported none), and the hub's own time
// spent serving the app's spokes. App "" is the hub's own calls: the
// planner and the no-app assistant.
type Usage struct {
	App              string
	Calls            int64
	PromptTokens     int64
	CompletionTokens int64
	// Estimated counts the tokens of PromptTokens and CompletionTokens
	// that were estimated from bytes.
	Estimated int64
	HubTime   time.Duration
}

// Tokens is the total of prompt and completion tokens.
func (u Usage) Tokens() int64 { return u.PromptTokens + u.CompletionTokens }

// Day is the key of a UTC day in the usage table.
func Day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// AddUsage adds u to the user's usage of u.App on day (see Day). It does
// not wait for durability on a store from Later.
func (s *Store) AddUsage(ctx context.Context, user, day string, u Usage) error {
	if err := checkName("user", user); err != nil {
		return fmt.Errorf("failed to add usage: %w", err)
	}
	if len(u.App) > MaxNameBytes {
		return fmt.Errorf("failed to add usage: %w: app longer than %d bytes", ErrInvalid, MaxNameBytes)
	}
	err := s.write(ctx, func(ctx context.Context) error {
		_, err := s.db.Exec(ctx, `INSERT INTO model_usage
			(user_id, day, app, calls, prompt_tokens, completion_tokens, estimated, hub_ns)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (user_id, day, app) DO UPDATE SET
				calls = calls + excluded.calls,
				prompt_tokens = prompt_tokens + excluded.prompt_tokens,
				completion_tokens = completion_tokens + excluded.completion_tokens,
				estimated = estimated + excluded.estimated,
				hub_ns = hub_ns + excluded.hub_ns`,
			user, day, u.App, u.Calls, u.PromptTokens, u.CompletionTokens, u.Estimated, u.HubTime.Nanoseconds())
		return err
	})
	if err != nil {
		return fmt.Errorf("failed to add usage of %q: %w", u.App, err)
	}
	return nil
}

// DayUsage returns the user's usage on day, one entry per app used, by app
// name ("" first).
func (s *Store) DayUsage(ctx context.Context, user, day string) ([]Usage, error) {
	if err := checkName("user", user); err != nil {
		return nil, fmt.Errorf("failed to read usage: %w", err)
	}
	rows, err := s.db.Query(ctx, `SELECT app, calls, prompt_tokens, completion_tokens, estimated, hub_ns
		FROM model_usage WHERE user_id=$1 AND day=$2 ORDER BY app`, user, day)
	if err != nil {
		return nil, fmt.Errorf("failed to read usage: %w", err)
	}
	defer rows.Close()
	var out []Usage
	for rows.Next() {
		var u Usage
		var ns int64
		if err := rows.Scan(&u.App, &u.Calls, &u.PromptTokens, &u.CompletionTokens, &u.Estimated, &ns); err != nil {
			return nil, fmt.Errorf("failed to read usage: %w", err)
		}
		u.HubTime = time.Duration(ns)
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("failed to read usage: %w", err)
	}
	return out, nil
}

// DataUsage is what one app stores for one user.
type DataUsage struct {
	Bytes int64
	Docs  int64
}

// DataUsage returns how many bytes of document bodies, in how many
// documents, app stores for user.
func (s *Store) DataUsage(ctx context.Context, user, app string) (DataUsage, error) {
	if err := checkUserApp(user, app); err != nil {
		return DataUsage{}, fmt.Errorf("failed to read data usage: %w", err)
	}
	u, err := s.dataUsage(ctx, user, app)
	if err != nil {
		return DataUsage{}, fmt.Errorf("failed to read data usage of %s: %w", app, err)
	}
	return u, nil
}

// dataUsage reads the counters the triggers on app_docs keep.
func (s *Store) dataUsage(ctx context.Context, user, app string) (DataUsage, error) {
	var u DataUsage
	err := s.db.QueryRow(ctx, `SELECT COALESCE(SUM(bytes), 0), COALESCE(SUM(docs), 0)
		FROM app_data_usage WHERE user_id=$1 AND app=$2`, user, app).Scan(&u.Bytes, &u.Docs)
	return u, err
}
