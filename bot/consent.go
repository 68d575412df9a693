package bot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"maunium.net/go/mautrix/id"

	"github.com/secgpt/secgpt/hub"
)

// prompts are the consent prompts open now, by the prompt's event ID. It
// takes answers from the sync handlers and hands each to the prompt's
// waiting Ask. Only the prompt's user answers; everyone else, the bot
// itself included, is ignored.
type prompts struct {
	settle time.Duration
	log    zerolog.Logger

	mu   sync.Mutex
	open map[id.EventID]*openPrompt
	// byReaction finds the prompt a settling reaction answers.
	byReaction map[id.EventID]*openPrompt
}

type openPrompt struct {
	event   id.EventID
	room    id.RoomID
	user    id.UserID
	choices []hub.Decision
	// answered receives the one answer; it has room for it.
	answered chan hub.Decision
	done     bool
	// settling is the reaction waiting out the settle time, if any.
	settling id.EventID
	timer    *time.Timer
}

func newPrompts(settle time.Duration, log zerolog.Logger) *prompts {
	return &prompts{settle: settle, log: log, open: map[id.EventID]*openPrompt{}, byReaction: map[id.EventID]*openPrompt{}}
}

func (ps *prompts) add(p *openPrompt) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.open[p.event] = p
}

// remove closes a prompt: later answers are ignored.
func (ps *prompts) remove(p *openPrompt) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p.done = true
	ps.stopSettling(p)
	delete(ps.open, p.event)
}

func (ps *prompts) stopSettling(p *openPrompt) {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if p.settling != "" {
		delete(ps.byReaction, p.settling)
		p.settling = ""
	}
}

// acceptable finds the open prompt target that user may answer with d
// from room.
func (ps *prompts) acceptable(room id.RoomID, target id.EventID, user id.UserID, d hub.Decision) (*openPrompt, bool) {
	p, ok := ps.open[target]
	if !ok || p.room != room {
		return nil, false
	}
	if user != p.user || p.done || !slices.Contains(p.choices, d) {
		ps.log.Debug().Str("prompt", target.String()).Str("sender", user.String()).Str("decision", string(d)).Msg("Ignoring an answer that does not count")
		return p, false
	}
	return p, true
}

// react takes a reaction: if it answers an open prompt it counts once it
// has stood for the settle time, unless a later reaction of the user
// replaces it or its redaction withdraws it.
func (ps *prompts) react(room id.RoomID, target id.EventID, user id.UserID, key string, reaction id.EventID) {
	d, ok := reactionDecision(key)
	if !ok {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.acceptable(room, target, user, d)
	if !ok {
		return
	}
	ps.stopSettling(p)
	p.settling = reaction
	ps.byReaction[reaction] = p
	p.timer = time.AfterFunc(ps.settle, func() {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if p.settling != reaction || p.done {
			return
		}
		ps.decide(p, d)
	})
}

// redacted withdraws a reaction that has not counted yet.
func (ps *prompts) redacted(evt id.EventID) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p, ok := ps.byReaction[evt]; ok {
		ps.log.Debug().Str("prompt", p.event.String()).Msg("Reaction withdrawn before it counted")
		ps.stopSettling(p)
	}
}

// answer takes a reply to a prompt. It reports whether target is an open
// prompt (the reply is then consumed, whether it counted or not).
func (ps *prompts) answer(room id.RoomID, target id.EventID, user id.UserID, d hub.Decision) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.acceptable(room, target, user, d)
	if ok {
		ps.stopSettling(p)
		ps.decide(p, d)
	}
	return p != nil
}

// decide delivers the answer; ps.mu is held.
func (ps *prompts) decide(p *openPrompt, d hub.Decision) {
	p.done = true
	delete(ps.byReaction, p.settling)
	p.settling, p.timer = "", nil
	p.answered <- d
}

// soleOpen returns user's only open prompt in room, or "" if there is not
// exactly one.
func (ps *prompts) soleOpen(room id.RoomID, user id.UserID) id.EventID {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var found id.EventID
	for _, p := range ps.open {
		if p.room == room && p.user == user && !p.done {
			if found != "" {
				return ""
			}
			found = p.event
		}
	}
	return found
}

// consenter asks the user of one inbox message, in its room and thread.
// The hub may call Ask concurrently for parallel steps: each is its own
// prompt.
type consenter struct {
	bot    *Bot
	row    inboxRow
	typing *typing
}

var _ hub.Consenter = (*consenter)(nil)

// closeTimeout bounds recording and editing a prompt after ctx ended.
const closeTimeout = 30 * time.Second

// errWrongUser means the hub asked a consenter about another user's
// request; it is a denial.
var errWrongUser = errors.New("consent request for another user")

// Ask posts a prompt, seeds a reaction per choice, waits for the user's
// answer or ctx's end, and edits the prompt to show the outcome.
func (c *consenter) Ask(ctx context.Context, req hub.ConsentRequest) (hub.Decision, error) {
	b := c.bot
	if id.UserID(req.User) != c.row.UserID {
		return hub.DecisionDeny, errWrongUser
	}
	offered := offeredChoices(req)
	head, foot := renderPrompt(req, offered, time.Now())
	c.typing.pause()
	defer c.typing.resume()
	evt, err := b.send(ctx, c.row.RoomID, c.row.EventID, c.row.ThreadRoot, head+"\n"+foot, kindPrompt)
	if err != nil {
		return hub.DecisionDeny, fmt.Errorf("failed to post consent prompt: %w", err)
	}
	p := &openPrompt{event: evt, room: c.row.RoomID, user: c.row.UserID, choices: req.Choices, answered: make(chan hub.Decision, 1)}
	b.prompts.add(p)
	defer b.prompts.remove(p)
	log := b.log.With().Str("prompt", evt.String()).Str("user", req.User).Str("category", string(req.Category)).Str("app", req.App).Logger()
	if err := b.db.addPrompt(context.WithoutCancel(ctx), prompt{EventID: evt, RoomID: c.row.RoomID, UserID: c.row.UserID, QueryEventID: c.row.EventID, Markdown: head, Expires: req.Deadline}); err != nil {
		log.Warn().Err(err).Msg("Failed to record a prompt")
	}
	for _, ch := range offered {
		if ch.Emoji == "" {
			continue
		}
		if _, err := b.cli.SendReaction(ctx, c.row.RoomID, evt, ch.Emoji); err != nil {
			log.Warn().Err(err).Str("emoji", ch.Emoji).Msg("Failed to seed a reaction")
		}
	}
	var o outcome
	var d hub.Decision
	select {
	case d = <-p.answered:
		o = outcome{kind: outcomeAnswered, decision: d, by: req.User}
	case <-ctx.Done():
		d, err = hub.DecisionDeny, ctx.Err()
		o = outcome{kind: outcomeCancelled}
		if errors.Is(err, context.DeadlineExceeded) {
			o.kind = outcomeTimeout
		}
	}
	// Once posted, the prompt shows its outcome even when ctx has ended.
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	state := promptDecided
	if o.kind != outcomeAnswered {
		state = promptExpired
	}
	line := outcomeLine(o)
	if err := b.db.closePrompt(closeCtx, evt, state, line); err != nil {
		log.Warn().Err(err).Msg("Failed to record a prompt's outcome")
	}
	if err := b.edit(closeCtx, c.row.RoomID, evt, head+"\n"+line, kindPrompt); err != nil {
		log.Warn().Err(err).Msg("Failed to show a prompt's outcome")
	}
	log.Info().Str("decision", string(d)).Msg("Consent prompt closed")
	return d, err
}
