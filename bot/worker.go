package bot

import (
	"context"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"maunium.net/go/mautrix/id"

	"github.com/secgpt/secgpt/hub"
)

// userQueue serves one user's inbox, one message at a time, in order.
type userQueue struct {
	running bool
	// kick wakes a running server when a message arrived meanwhile.
	kick chan struct{}
	// cancel stops the query being served, for !cancel.
	cancel context.CancelFunc
}

// wake makes sure user's inbox is being served.
func (b *Bot) wake(user id.UserID) {
	b.queueMu.Lock()
	defer b.queueMu.Unlock()
	q, ok := b.queues[user]
	if !ok {
		q = &userQueue{kick: make(chan struct{}, 1)}
		b.queues[user] = q
	}
	if q.running {
		select {
		case q.kick <- struct{}{}:
		default:
		}
		return
	}
	q.running = true
	b.goBackground(func(ctx context.Context) { b.serve(ctx, user, q) })
}

// serve works through user's queued messages until none is left.
func (b *Bot) serve(ctx context.Context, user id.UserID, q *userQueue) {
	log := b.log.With().Str("user", user.String()).Logger()
	for ctx.Err() == nil {
		// The user is here again: a good time to say what could not be
		// delivered before.
		b.reportUndelivered(ctx, user)
		row, ok, err := b.db.next(ctx, user)
		if err != nil {
			log.Error().Err(err).Msg("Failed to read the inbox")
		}
		if !ok || err != nil {
			b.queueMu.Lock()
			select {
			case <-q.kick:
				if err == nil {
					b.queueMu.Unlock()
					continue
				}
			default:
			}
			q.running = false
			b.queueMu.Unlock()
			return
		}
		if !b.process(ctx, row) {
			// The inbox cannot be updated: stop rather than spin; the next
			// message wakes the queue again.
			break
		}
	}
	b.queueMu.Lock()
	q.running = false
	b.queueMu.Unlock()
}

// cancelRunning stops user's query being served, if any.
func (b *Bot) cancelRunning(user id.UserID) bool {
	b.queueMu.Lock()
	defer b.queueMu.Unlock()
	q, ok := b.queues[user]
	if !ok || q.cancel == nil {
		return false
	}
	q.cancel()
	return true
}

func (b *Bot) setCancel(user id.UserID, cancel context.CancelFunc) {
	b.queueMu.Lock()
	defer b.queueMu.Unlock()
	if q, ok := b.queues[user]; ok {
		q.cancel = cancel
	}
}

// process serves one message: it is marked working, answered, and marked
// answered right after the answer was accepted by the homeserver. The
// answer and its transaction ID are stored before it is sent, so a crash
// at any instant either sends it again under that ID or, before it was
// stored, says the bot restarted: never both, never neither. It reports
// false when the inbox could not be updated.
func (b *Bot) process(ctx context.Context, row inboxRow) bool {
	log := b.log.With().Str("event_id", row.EventID.String()).Str("user", row.UserID.String()).Str("kind", row.Kind).Logger()
	if err := b.db.setState(ctx, row.EventID, stateWorking, ""); err != nil {
		log.Error().Err(err).Msg("Failed to start serving a message")
		return false
	}
	text, kind := b.work(ctx, log, row)
	if ctx.Err() != nil {
		// The bot is stopping: the row stays working and is reported as
		// interrupted at the next start.
		return true
	}
	r := reply{Row: row, Txn: b.cli.TxnID(), Text: text, Kind: kind, Done: stateAnswered}
	if err := b.db.startSending(ctx, r); err != nil {
		log.Error().Err(err).Msg("Failed to store an answer")
		return false
	}
	return b.sendStored(ctx, r)
}

// sendStored sends a stored reply and records the outcome. Stopped while
// trying, the row stays sending, and the next start sends it again under
// the same transaction ID. It reports false when the inbox could not be
// updated.
func (b *Bot) sendStored(ctx context.Context, r reply) bool {
	log := b.log.With().Str("event_id", r.Row.EventID.String()).Str("user", r.Row.UserID.String()).Logger()
	answer, err := b.deliver(ctx, message{room: r.Row.RoomID, replyTo: r.Row.EventID, threadRoot: r.Row.ThreadRoot, markdown: r.Text, kind: r.Kind, txn: r.Txn})
	state := r.Done
	switch {
	case err != nil && ctx.Err() != nil:
		return true
	case err != nil:
		log.Error().Err(err).Msg("Failed to send an answer; the user is told when they can be reached")
		state = stateFailed
	}
	if err := b.db.finishSending(context.WithoutCancel(ctx), r.Row.EventID, state, answer); err != nil {
		log.Error().Err(err).Msg("Failed to record an answer")
		return false
	}
	return true
}

// work computes the answer to one message. A panic while serving it (in
// the bot or the hub) costs that message, not the bot: the user is told
// the request failed, and the queue goes on.
func (b *Bot) work(ctx context.Context, log zerolog.Logger, row inboxRow) (text, kind string) {
	defer func() {
		if r := recover(); r != nil {
			log.Error().Any("panic", r).Str("stack", string(debug.Stack())).Msg("Panic while serving a message")
			text, kind = "Sorry, something went wrong on my side, so your request failed.", kindError
		}
	}()
	switch row.Kind {
	case kindQuery:
		return b.query(ctx, row)
	case kindCommand:
		name, args, _ := strings.Cut(row.Body, " ")
		return b.command(ctx, row, name, strings.TrimSpace(args)), kindReply
	default:
		return row.Body, kindError
	}
}

// undeliveredNotice tells a user that an answer could not be sent. The
// answer's text is not kept: it may hold what the user asked to forget.
const undeliveredNotice = "I could not deliver my answer to this message. Send it again if you still want it."

// reportUndelivered tells users whose answers could not be sent: user, or
// everyone for "". A row is marked reported before its notice goes out (a
// crash in between loses the notice rather than sending it twice) and
// marked failed again when the notice cannot be sent either, to be tried
// when the user is next served.
func (b *Bot) reportUndelivered(ctx context.Context, user id.UserID) {
	rows, err := b.db.undelivered(ctx, user)
	if err != nil {
		b.log.Warn().Err(err).Msg("Failed to read undelivered answers")
		return
	}
	for _, r := range rows {
		log := b.log.With().Str("event_id", r.EventID.String()).Str("user", r.UserID.String()).Logger()
		if claimed, err := b.db.claimUndelivered(ctx, r.EventID); err != nil {
			log.Warn().Err(err).Msg("Failed to mark an undelivered answer reported")
			return
		} else if !claimed {
			continue
		}
		if _, err := b.send(ctx, r.RoomID, r.EventID, r.ThreadRoot, undeliveredNotice, kindError); err != nil {
			log.Warn().Err(err).Msg("Failed to tell a user an answer was not delivered")
			if err := b.db.setState(context.WithoutCancel(ctx), r.EventID, stateFailed, ""); err != nil {
				log.Error().Err(err).Msg("Failed to keep an undelivered answer for later")
			}
			return
		}
		log.Info().Msg("Told a user an answer was not delivered")
	}
}

// query has the hub serve a query, showing typing meanwhile.
func (b *Bot) query(ctx context.Context, row inboxRow) (string, string) {
	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.setCancel(row.UserID, cancel)
	defer b.setCancel(row.UserID, nil)
	t := b.startTyping(qctx, row.RoomID)
	defer t.stop()
	c := &consenter{bot: b, row: row, typing: t}
	reply, err := b.hub.Handle(qctx, hub.Request{User: row.UserID.String(), Query: row.Body, Consenter: c})
	c.settle(ctx, reply)
	switch {
	case err != nil && qctx.Err() != nil && ctx.Err() == nil:
		return "Stopped, as you asked.", kindNotice
	case err != nil:
		b.log.Info().Err(err).Str("event_id", row.EventID.String()).Msg("Query failed")
		return renderFailure(err), kindError
	}
	if strings.TrimSpace(reply.Answer) == "" {
		return "(The answer was empty.)", kindAnswer
	}
	return renderAnswer(reply), kindAnswer
}

// typingRefresh is how often the typing notice is renewed; it lasts
// typingTimeout on the homeserver.
const (
	typingRefresh = 20 * time.Second
	typingTimeout = 30 * time.Second
)

// typing shows the bot typing in a room while it works, except while a
// consent prompt waits for the user.
type typing struct {
	bot  *Bot
	room id.RoomID

	mu      sync.Mutex
	paused  int
	stopped bool
	wake    chan struct{}
	done    chan struct{}
}

func (b *Bot) startTyping(ctx context.Context, room id.RoomID) *typing {
	t := &typing{bot: b, room: room, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go t.loop(ctx)
	return t
}

func (t *typing) loop(ctx context.Context) {
	defer close(t.done)
	tick := time.NewTicker(typingRefresh)
	defer tick.Stop()
	for {
		t.mu.Lock()
		on := t.paused == 0 && !t.stopped
		stopped := t.stopped
		t.mu.Unlock()
		t.set(ctx, on)
		if stopped {
			return
		}
		select {
		case <-ctx.Done():
			t.set(context.WithoutCancel(ctx), false)
			return
		case <-tick.C:
		case <-t.wake:
		}
	}
}

func (t *typing) set(ctx context.Context, on bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	timeout := time.Duration(0)
	if on {
		timeout = typingTimeout
	}
	if _, err := t.bot.cli.UserTyping(ctx, t.room, on, timeout); err != nil && ctx.Err() == nil {
		t.bot.log.Debug().Err(err).Msg("Failed to set typing")
	}
}

func (t *typing) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *typing) pause() {
	t.mu.Lock()
	t.paused++
	t.mu.Unlock()
	t.poke()
}

func (t *typing) resume() {
	t.mu.Lock()
	t.paused--
	t.mu.Unlock()
	t.poke()
}

// stop ends typing and waits for the loop to say so.
func (t *typing) stop() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
	t.poke()
	<-t.done
}
