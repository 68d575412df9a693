package hub_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/hub/hubtest"
)

// holdingConsenter holds the first question hold selects until released
// or the request ends, and answers everything else as AllowPlanned.
type holdingConsenter struct {
	hold    func(hub.ConsentRequest) bool
	held    chan struct{} // closed when the question is held
	release chan struct{}
	once    sync.Once
}

func (c *holdingConsenter) Ask(ctx context.Context, req hub.ConsentRequest) (hub.Decision, error) {
	if c.hold(req) {
		c.once.Do(func() { close(c.held) })
		select {
		case <-c.release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return hub.AllowPlanned{}.Ask(ctx, req)
}

// TestEndingASessionFencesRunningQueries: a query still running when the
// user resets the session or erases memory starts no spoke afterwards and
// writes nothing back, and the user's spokes are stopped.
func TestEndingASessionFencesRunningQueries(t *testing.T) {
	inPlan := func(r hub.ConsentRequest) bool { return r.InPlan }
	outOfPlan := func(r hub.ConsentRequest) bool { return !r.InPlan }
	tests := []struct {
		name  string
		end   func(context.Context, *hub.Hub) error
		apps  []string
		query string
		// hold picks the question the query waits on when the session ends:
		// before any spoke, or inside a spoke's step.
		hold func(hub.ConsentRequest) bool
	}{
		{"forget before the spokes", forget, []string{"metro_hail"}, "Use metro_hail from 'Main Street' to 'Elm Avenue'.", inPlan},
		{"reset before the spokes", reset, []string{"metro_hail"}, "Use metro_hail from 'Main Street' to 'Elm Avenue'.", inPlan},
		{"forget inside a spoke's step", forget, []string{"email", "drive"}, "Summarize the newest email.", outOfPlan},
		{"reset inside a spoke's step", reset, []string{"email", "drive"}, "Summarize the newest email.", outOfPlan},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sys := hubtest.NewSystem(t, hubtest.Options{Apps: tt.apps})
			seedMailbox(t, sys)
			ctx := context.Background()
			c := &holdingConsenter{hold: tt.hold, held: make(chan struct{}), release: make(chan struct{})}
			done := make(chan error, 1)
			go func() {
				_, err := sys.Hub.Handle(ctx, hub.Request{User: alice, Query: tt.query, Consenter: c})
				done <- err
			}()
			select {
			case <-c.held:
			case <-time.After(20 * time.Second):
				t.Fatal("the query never asked the question to hold")
			}
			ended := make(chan error, 1)
			go func() { ended <- tt.end(ctx, sys.Hub) }()
			select {
			case err := <-ended:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("ending the session waited for the running query")
			}
			close(c.release)
			if err := <-done; err == nil {
				t.Error("the fenced query succeeded")
			}
			for key := range sys.Spokes.PIDs() {
				if key.User == alice {
					t.Errorf("a spoke runs after the end: %+v", key)
				}
			}
			if mem, err := sys.Store.HubMemory(ctx, alice, 10); err != nil || len(mem) != 0 {
				t.Errorf("hub memory = %+v, %v; the fenced query wrote its turn", mem, err)
			}
			for _, app := range tt.apps {
				if mem, err := sys.Store.SpokeMemory(ctx, alice, app, 10); err != nil || len(mem) != 0 {
					t.Errorf("%s memory = %+v, %v; the fenced query's spoke wrote it", app, mem, err)
				}
			}
			// The user is served again at once.
			reply := ask(t, sys, alice, tt.query, hub.AllowPlanned{})
			if reply.Answer == "" {
				t.Fatal("no answer after the end")
			}
		})
	}
}

func forget(ctx context.Context, h *hub.Hub) error { return h.Forget(ctx, alice) }
func reset(ctx context.Context, h *hub.Hub) error  { return h.Reset(ctx, alice) }
