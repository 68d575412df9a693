package bot

import (
	"context"
	"fmt"
	"sync"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// syncer is mautrix's DefaultSyncer with two changes: the sync token is
// saved after a response's events were handled (so that every message the
// token covers is in the inbox), and it knows which timeline events are
// history the bot must not answer.
//
// An encrypted event whose keys have not arrived is handled later, when
// cryptohelper has them (or gives up, after about 25 s), while the sync
// goes on. Until then the tokens of its response and later ones are held
// back: a crash meanwhile makes the homeserver send the event again rather
// than lose it. Events handled twice that way are recognised by the inbox.
type syncer struct {
	*mautrix.DefaultSyncer
	bot    *Bot
	tokens *deferredTokens

	tokenMu sync.Mutex
	// seq numbers the responses; waiting are the events still waiting for
	// keys, with their response's number and when they came; settled are
	// events handled (or given up) before the syncer saw them wait.
	seq     int64
	waiting map[id.EventID]waitingEvent
	settled map[id.EventID]bool
	// unsaved are the tokens not saved yet, oldest first.
	unsaved []unsavedToken

	mu sync.Mutex
	// beforeJoin are timeline events of rooms the bot joined that precede
	// its join (history too), with when they were marked. Marks outlive
	// their response by historyMarkTTL: an event whose keys arrive later is
	// decrypted and handled after the next responses.
	beforeJoin map[id.EventID]time.Time
}

// historyMarkTTL is how long a history mark, and a token held back for an
// event waiting for keys, is kept; cryptohelper gives up waiting for an
// event's keys after about 25 s.
const historyMarkTTL = 5 * time.Minute

type waitingEvent struct {
	seq int64
	at  time.Time
}

type unsavedToken struct {
	seq   int64
	token string
}

var (
	_ mautrix.Syncer             = (*syncer)(nil)
	_ mautrix.ExtensibleSyncer   = (*syncer)(nil)
	_ mautrix.DispatchableSyncer = (*syncer)(nil)
)

func newSyncer(b *Bot) *syncer {
	return &syncer{
		DefaultSyncer: mautrix.NewDefaultSyncer(), bot: b, beforeJoin: map[id.EventID]time.Time{},
		waiting: map[id.EventID]waitingEvent{}, settled: map[id.EventID]bool{},
	}
}

// ProcessResponse handles a response's events, then saves its token unless
// an event of it or of an earlier response still waits for keys.
func (s *syncer) ProcessResponse(ctx context.Context, resp *mautrix.RespSync, since string) error {
	s.tokenMu.Lock()
	s.seq++
	seq := s.seq
	s.tokenMu.Unlock()
	if err := s.DefaultSyncer.ProcessResponse(context.WithValue(ctx, responseSeqKey{}, seq), resp, since); err != nil {
		return err
	}
	s.tokenMu.Lock()
	defer s.tokenMu.Unlock()
	s.unsaved = append(s.unsaved, unsavedToken{seq: seq, token: resp.NextBatch})
	if err := s.saveTokens(ctx); err != nil {
		return fmt.Errorf("failed to save sync token: %w", err)
	}
	return nil
}

// responseSeqKey carries a response's number in the context of its events,
// which cryptohelper keeps for the events it decrypts later.
type responseSeqKey struct{}

// afterEncrypted is an event handler for encrypted events, registered after
// cryptohelper's: an event it neither decrypted nor gave up on by now waits
// for keys.
func (s *syncer) afterEncrypted(ctx context.Context, evt *event.Event) {
	s.tokenMu.Lock()
	defer s.tokenMu.Unlock()
	if s.settled[evt.ID] {
		delete(s.settled, evt.ID)
		return
	}
	if seq, ok := ctx.Value(responseSeqKey{}).(int64); ok {
		s.waiting[evt.ID] = waitingEvent{seq: seq, at: time.Now()}
	}
}

// settle is called once an encrypted event was handled after decryption,
// or given up on: the tokens it held back may be saved.
func (s *syncer) settle(ctx context.Context, evt id.EventID) {
	s.tokenMu.Lock()
	defer s.tokenMu.Unlock()
	if _, ok := s.waiting[evt]; !ok {
		// Settled within cryptohelper's handler, before afterEncrypted.
		s.settled[evt] = true
		return
	}
	delete(s.waiting, evt)
	if err := s.saveTokens(ctx); err != nil {
		s.bot.log.Warn().Err(err).Msg("Failed to save sync token")
	}
}

// saveTokens saves the newest token no waiting event holds back; s.tokenMu
// is held. An event that waits beyond historyMarkTTL holds back nothing.
func (s *syncer) saveTokens(ctx context.Context) error {
	oldest := int64(-1)
	for evt, w := range s.waiting {
		switch {
		case time.Since(w.at) > historyMarkTTL:
			delete(s.waiting, evt)
		case oldest < 0 || w.seq < oldest:
			oldest = w.seq
		}
	}
	i := len(s.unsaved)
	if oldest >= 0 {
		// The token of the response before the oldest waiting event's.
		i = 0
		for i < len(s.unsaved) && s.unsaved[i].seq < oldest {
			i++
		}
	}
	if i == 0 {
		return nil
	}
	if s.tokens != nil {
		if err := s.tokens.commit(ctx, s.unsaved[i-1].token); err != nil {
			return err
		}
	}
	s.unsaved = s.unsaved[i:]
	return nil
}

// beforeDispatch is an OnSync handler: it marks what in the response is
// history. Unlike mautrix's DontProcessOldEvents it removes nothing, so the
// state store and the crypto machine still see every state event.
func (s *syncer) beforeDispatch(_ context.Context, resp *mautrix.RespSync, _ string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for evt, at := range s.beforeJoin {
		if now.Sub(at) > historyMarkTTL {
			delete(s.beforeJoin, evt)
		}
	}
	me := s.bot.opts.UserID.String()
	for _, room := range resp.Rooms.Join {
		for _, evt := range room.Timeline.Events[:historyEnd(room.Timeline.Events, me)] {
			s.beforeJoin[evt.ID] = now
		}
	}
	return true
}

// historyEnd is how many of a joined room's timeline events are history:
// those up to the bot's invite, when the timeline holds the bot's join. What
// was sent while the invite was pending was meant for the bot (a client
// starting a direct chat sends the first message at once); what came before
// the invite was not. Without the invite in the timeline, everything up to
// the join is history. A join over a join is no join but a change of the
// bot's display name or avatar (made at start): what precedes it is what
// was sent while the bot was down, to be answered.
func historyEnd(timeline []*event.Event, me string) int {
	invite, join := -1, -1
	for i, evt := range timeline {
		if evt.Type != event.StateMember || evt.GetStateKey() != me {
			continue
		}
		switch membership(&evt.Content) {
		case event.MembershipInvite:
			invite = i
		case event.MembershipJoin:
			if membership(evt.Unsigned.PrevContent) != event.MembershipJoin {
				join = i
			}
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

// membership reads a member event's content as the syncer sees it, before
// mautrix has parsed it.
func membership(c *event.Content) event.Membership {
	if c == nil {
		return ""
	}
	m, _ := c.Raw["membership"].(string)
	return event.Membership(m)
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
	_, marked := s.beforeJoin[evt.ID]
	return marked
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
