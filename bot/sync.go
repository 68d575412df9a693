package bot

import (
	"context"
	"fmt"
	"sync"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// syncer is mautrix's DefaultSyncer with two changes: the sync token is
// saved after a response's events were handled (so that every message the
// token covers is in the inbox), and it knows which timeline events are
// history the bot must not answer.
type syncer struct {
	*mautrix.DefaultSyncer
	bot    *Bot
	tokens *deferredTokens

	mu sync.Mutex
	// beforeJoin are timeline events of rooms the bot joined in this
	// response that precede its join: history too.
	beforeJoin map[id.EventID]bool
}

var (
	_ mautrix.Syncer             = (*syncer)(nil)
	_ mautrix.ExtensibleSyncer   = (*syncer)(nil)
	_ mautrix.DispatchableSyncer = (*syncer)(nil)
)

func newSyncer(b *Bot) *syncer {
	return &syncer{DefaultSyncer: mautrix.NewDefaultSyncer(), bot: b, beforeJoin: map[id.EventID]bool{}}
}

// ProcessResponse handles a response's events, then saves its token.
func (s *syncer) ProcessResponse(ctx context.Context, resp *mautrix.RespSync, since string) error {
	if err := s.DefaultSyncer.ProcessResponse(ctx, resp, since); err != nil {
		return err
	}
	if s.tokens == nil {
		return nil
	}
	if err := s.tokens.commit(ctx, resp.NextBatch); err != nil {
		return fmt.Errorf("failed to save sync token: %w", err)
	}
	return nil
}

// beforeDispatch is an OnSync handler: it marks what in the response is
// history. Unlike mautrix's DontProcessOldEvents it removes nothing, so the
// state store and the crypto machine still see every state event.
func (s *syncer) beforeDispatch(_ context.Context, resp *mautrix.RespSync, _ string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.beforeJoin)
	me := s.bot.opts.UserID.String()
	for _, room := range resp.Rooms.Join {
		for _, evt := range room.Timeline.Events[:historyEnd(room.Timeline.Events, me)] {
			s.beforeJoin[evt.ID] = true
		}
	}
	return true
}

// historyEnd is how many of a joined room's timeline events are history:
// those up to the bot's invite, when the timeline holds the bot's join. What
// was sent while the invite was pending was meant for the bot (a client
// starting a direct chat sends the first message at once); what came before
// the invite was not. Without the invite in the timeline, everything up to
// the join is history.
func historyEnd(timeline []*event.Event, me string) int {
	invite, join := -1, -1
	for i, evt := range timeline {
		if evt.Type != event.StateMember || evt.GetStateKey() != me {
			continue
		}
		switch m, _ := evt.Content.Raw["membership"].(string); event.Membership(m) {
		case event.MembershipInvite:
			invite = i
		case event.MembershipJoin:
			join = i
		}
	}
	switch {
	case join < 0:
		return 0
	case invite >= 0 && invite < join:
		return invite + 1
	default:
		return join + 1
	}
}

// isHistory reports whether a timeline event is from before the bot could
// have answered it: the first sync of a new database, or a room's backlog
// up to the bot's join. Events decrypted later keep their sync's context.
func (s *syncer) isHistory(ctx context.Context, evt *event.Event) bool {
	if since, ok := ctx.Value(mautrix.SyncTokenContextKey).(string); ok && since == "" {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.beforeJoin[evt.ID]
}

// deferredTokens is the crypto store's sync store, except that mautrix's
// save (made before a response is handled) is ignored: commit saves the
// token once its events are handled.
type deferredTokens struct {
	mautrix.SyncStore
	user id.UserID
}

var _ mautrix.SyncStore = (*deferredTokens)(nil)

// SaveNextBatch is called by mautrix before the response's events are
// handled; the syncer commits the token after.
func (d *deferredTokens) SaveNextBatch(context.Context, id.UserID, string) error { return nil }

func (d *deferredTokens) commit(ctx context.Context, token string) error {
	return d.SyncStore.SaveNextBatch(ctx, d.user, token)
}
