package hub

import (
	"context"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/spoke"
)

// Starting spokes ahead of their steps, so that a request's cold starts
// overlap its model rounds rather than follow them: on arrival, spares
// (processes that belong to no one and hold nothing) for the apps the
// request names; once planned, spares for every planned app; once the
// user has allowed the plan's apps to run, their spokes themselves, the
// links of a chain and the combiner's included, while the first steps run.

// Prestarter is a Runner that can start spokes ahead of their steps.
type Prestarter interface {
	// Expect says that the spokes of keys are likely to be asked for
	// soon; it starts nothing that belongs to them.
	// arrived is when the request that expects them arrived.
	Expect(arrived time.Time, keys ...spoke.Key)
	// Prestart starts the spoke of key now, when none runs.
	Prestart(ctx context.Context, key spoke.Key) error
}

var _ Prestarter = (*spoke.Manager)(nil)

// expect announces the spokes of apps for q's user ("" the vanilla
// spoke); with none, a spoke of an app not known yet.
func (h *Hub) expect(q *query, apps []string) {
	p, ok := h.runner.(Prestarter)
	if !ok {
		return
	}
	if len(apps) == 0 {
		p.Expect(q.arrived, spoke.Key{User: q.user, App: spoke.AnyApp, Session: q.session})
		return
	}
	keys := make([]spoke.Key, len(apps))
	for i, app := range apps {
		keys[i] = spoke.Key{User: q.user, App: app, Session: q.session}
	}
	p.Expect(q.arrived, keys...)
}

// spokesOf are the spokes a plan's runs use: each app's, and the vanilla
// spoke where the combiner may write the comparison (two apps or more).
func spokesOf(runs []*stepRun) []string {
	var out []string
	for _, r := range runs {
		if r.partErr == nil && !slices.Contains(out, r.App) {
			out = append(out, r.App)
		}
	}
	if len(out) > 1 {
		out = append(out, "")
	}
	return out
}

// prestart starts the spokes of the runs that may run (the user allowed
// them) in the background; each step still starts its own if this has not.
func (h *Hub) prestart(ctx context.Context, q *query, runs []*stepRun) {
	p, ok := h.runner.(Prestarter)
	if !ok {
		return
	}
	for _, app := range spokesOf(runs) {
		go func() {
			err := h.whileCurrent(q, func() error {
				return p.Prestart(ctx, spoke.Key{User: q.user, App: app, Session: q.session})
			})
			if err != nil {
				// The step's own start says what went wrong.
				zerolog.Ctx(ctx).Debug().Err(err).Str("app", appLabel(app)).Msg("Failed to start a spoke ahead of its step")
			}
		}()
	}
}
