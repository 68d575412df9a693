package bot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime/debug"
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
	event id.EventID
	room  id.RoomID
	user  id.UserID
	// choices are the answers the prompt takes for all its lines.
	choices []hub.Decision
	// apps are the apps of its lines; refused are those the user refused
	// by name, whose lines are denied whatever the answer for all.
	apps    []string
	refused map[string]bool
	// answered receives the one answer; it has room for it.
	answered chan hub.Decision
	// onReact is called when an answer reaction arrives, before it counts.
	onReact func()
	done    bool
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
	if p.onReact != nil {
		go p.onReact()
	}
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

// refuse takes a reply naming apps of an open prompt: their lines are
// denied, and the prompt waits for the answer for the rest (or closes, all
// of its apps refused). It reports whether target is an open prompt of
// user naming those apps (the reply is then consumed).
func (ps *prompts) refuse(room id.RoomID, target id.EventID, user id.UserID, apps []string) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.acceptable(room, target, user, hub.DecisionDeny)
	if !ok {
		return false
	}
	for _, a := range apps {
		if !slices.Contains(p.apps, a) {
			return false
		}
	}
	for _, a := range apps {
		p.refused[a] = true
	}
	if len(p.refused) == len(p.apps) {
		ps.stopSettling(p)
		ps.decide(p, hub.DecisionDeny)
	}
	return true
}

// decide delivers the answer; ps.mu is held.
func (ps *prompts) decide(p *openPrompt, d hub.Decision) {
	p.done = true
	delete(ps.byReaction, p.settling)
	p.settling, p.timer = "", nil
	p.answered <- d
}

// openFor reports whether user has an open prompt.
func (ps *prompts) openFor(user id.UserID) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.open {
		if p.user == user && !p.done {
			return true
		}
	}
	return false
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

// consenter asks the user of one inbox message, in its room and thread,
// or in their direct chat with the bot for a prompt that shows their data
// in a room shared with others. The hub asks every question a plan needs
// up front in one AskEach: one prompt, one line per app. It may call Ask
// concurrently for parallel steps: each is its own prompt.
type consenter struct {
	bot    *Bot
	row    inboxRow
	typing *typing

	mu sync.Mutex
	// asked are the prompts closed so far, in the order they closed.
	asked []*askedPrompt
}

var _ hub.BatchConsenter = (*consenter)(nil)

// askedPrompt is a closed prompt, kept until the query ends to check what
// it shows against what the hub applied.
type askedPrompt struct {
	reqs  []hub.ConsentRequest
	event id.EventID
	room  id.RoomID
	// head is the prompt without the instructions for answering.
	head promptText
	mark promptMark
	// shown are the decisions the prompt shows, one per request.
	shown []hub.Decision
	// seeded are the bot's reactions, removed once the prompt closes.
	seeded []id.EventID
	// shownDone is closed once the edit showing the outcome was tried.
	shownDone chan struct{}
}

// closeTimeout bounds recording and editing a prompt after ctx ended.
const closeTimeout = 30 * time.Second

var (
	// errWrongUser means the hub asked a consenter about another user's
	// request; it is a denial.
	errWrongUser = errors.New("consent request for another user")
	// errNoEncryption means the user has no device with end-to-end
	// encryption keys, so cannot read the bot's direct chat; a denial.
	errNoEncryption = errors.New("the user has no device that can read an encrypted chat")
	// errAskPanicked means asking failed on a bug; it is a denial.
	errAskPanicked = errors.New("asking for consent panicked")
)

// Ask asks one question (see AskEach).
func (c *consenter) Ask(ctx context.Context, req hub.ConsentRequest) (hub.Decision, error) {
	ds, err := c.AskEach(ctx, []hub.ConsentRequest{req})
	if len(ds) != 1 {
		return hub.DecisionDeny, err
	}
	return ds[0], err
}

// AskEach posts one prompt for reqs, one line per app, seeds a reaction
// per choice and waits for the user's answer or ctx's end. One answer
// answers every line (each takes it as hub.ConsentRequest.Take says); a
// reply naming apps refuses their lines. It returns the decisions before
// the prompt is edited to show them: the hub checks its own deadline when
// AskEach returns, and settle corrects a prompt whose answer the hub did
// not apply.
func (c *consenter) AskEach(ctx context.Context, reqs []hub.ConsentRequest) (ds []hub.Decision, err error) {
	b := c.bot
	deny := func() []hub.Decision { return slices.Repeat([]hub.Decision{hub.DecisionDeny}, len(reqs)) }
	apps := promptApps(reqs)
	log := b.log.With().Str("user", c.row.UserID.String()).Strs("apps", apps).Int("questions", len(reqs)).Logger()
	defer func() {
		if r := recover(); r != nil {
			log.Error().Any("panic", r).Str("stack", string(debug.Stack())).Msg("Panic while asking for consent; denying")
			ds, err = deny(), errAskPanicked
		}
	}()
	if len(reqs) == 0 {
		return nil, nil
	}
	for _, req := range reqs {
		if id.UserID(req.User) != c.row.UserID {
			return deny(), errWrongUser
		}
	}
	c.typing.pause()
	resume := sync.OnceFunc(c.typing.resume)
	defer resume()
	offered := offeredChoices(reqs)
	w, err := c.where(ctx, reqs)
	if err != nil {
		c.unreachable(ctx, log, err)
		return deny(), err
	}
	view := promptView{user: c.row.UserID, within: time.Until(reqs[0].Deadline)}
	if w.private {
		view.origin = matrixTo(c.row.RoomID.String(), c.row.EventID.String())
	} else {
		view.mention = !b.directWith(ctx, w.room, c.row.UserID)
	}
	head, foot, err := renderPrompt(reqs, offered, view)
	if err != nil {
		log.Warn().Err(err).Msg("Denying a request too long to show")
		c.tell(ctx, log, mention(c.row.UserID)+": an app asked for something too long to show you in full in a permission prompt, so I did not allow it.", kindError)
		return deny(), err
	}
	mark := promptMark{User: c.row.UserID, Apps: apps, Expires: reqs[0].Deadline.UnixMilli()}
	for _, ch := range offered {
		mark.Choices = append(mark.Choices, string(ch.Decision))
	}
	var mentioned id.UserID
	if view.mention {
		mentioned = c.row.UserID
	}
	evt, err := b.post(ctx, message{room: w.room, replyTo: w.replyTo, threadRoot: w.threadRoot, parsed: promptContent(head.plus(foot), mentioned), fields: map[string]any{PromptKey: mark}, kind: kindPrompt})
	if err != nil {
		err = fmt.Errorf("failed to post consent prompt: %w", err)
		if w.private {
			c.unreachable(ctx, log, err)
		}
		return deny(), err
	}
	// Open at once: the user may answer as soon as the prompt shows, before
	// the notice, the record and the seeded reactions below are sent.
	var takes []hub.Decision
	for _, ch := range offered {
		takes = append(takes, ch.Decision)
	}
	p := &openPrompt{event: evt, room: w.room, user: c.row.UserID, choices: takes, apps: apps, refused: map[string]bool{}, answered: make(chan hub.Decision, 1), onReact: resume}
	b.prompts.add(p)
	if w.private {
		c.pointToDirectChat(ctx, log, w.invited)
	}
	log = log.With().Str("prompt", evt.String()).Logger()
	a := &askedPrompt{reqs: reqs, event: evt, room: w.room, head: head, mark: mark, shownDone: make(chan struct{})}
	if err := b.db.addPrompt(context.WithoutCancel(ctx), prompt{EventID: evt, RoomID: w.room, UserID: c.row.UserID, QueryEventID: c.row.EventID, Markdown: a.stored(), Expires: reqs[0].Deadline}); err != nil {
		log.Warn().Err(err).Msg("Failed to record a prompt")
	}
	for _, ch := range offered {
		if ch.Emoji == "" {
			continue
		}
		resp, err := b.cli.SendReaction(ctx, w.room, evt, ch.Emoji)
		if err != nil {
			log.Warn().Err(err).Str("emoji", ch.Emoji).Msg("Failed to seed a reaction")
			continue
		}
		a.seeded = append(a.seeded, resp.EventID)
	}
	if err := b.db.setPromptText(context.WithoutCancel(ctx), evt, a.stored()); err != nil {
		log.Warn().Err(err).Msg("Failed to record a prompt's reactions")
	}
	o := outcome{kind: outcomeAnswered, by: c.row.UserID.String(), apps: appsOf(reqs)}
	var d hub.Decision
	select {
	case d = <-p.answered:
	case <-ctx.Done():
	}
	b.prompts.remove(p)
	ds = make([]hub.Decision, len(reqs))
	for i, r := range reqs {
		ds[i] = r.Take(d)
		if p.refused[r.App] {
			ds[i] = hub.DecisionDeny
		}
	}
	// An answer that came with the end of ctx is too late for the hub.
	if err = ctx.Err(); err != nil {
		ds, o.kind = deny(), outcomeCancelled
		if errors.Is(err, context.DeadlineExceeded) {
			o.kind = outcomeTimeout
		}
	}
	o.decisions = ds
	a.shown = ds
	c.mu.Lock()
	c.asked = append(c.asked, a)
	c.mu.Unlock()
	// The hub has the decision first; the prompt shows it right after.
	showOutcome := func(context.Context) {
		defer close(a.shownDone)
		c.show(ctx, log, a, o)
	}
	if !b.goBackground(showOutcome) {
		showOutcome(ctx)
	}
	log.Info().Strs("decisions", decisionStrings(ds)).Msg("Consent prompt closed")
	return ds, err
}

// appsOf is the app of each request.
func appsOf(reqs []hub.ConsentRequest) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = r.App
	}
	return out
}

func decisionStrings(ds []hub.Decision) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d)
	}
	return out
}

// show records a prompt's outcome, edits the prompt to show it and takes
// back the seeded reactions. Once posted, a prompt shows its outcome even
// when ctx has ended.
func (c *consenter) show(ctx context.Context, log zerolog.Logger, a *askedPrompt, o outcome) {
	b := c.bot
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	state := promptDecided
	if o.kind != outcomeAnswered {
		state = promptExpired
	}
	if err := b.db.closePrompt(ctx, a.event, state, outcomeLine(o)); err != nil {
		log.Warn().Err(err).Msg("Failed to record a prompt's outcome")
	}
	b.closePromptEvent(ctx, a.room, a.event, storedPrompt{Head: a.head, Mark: a.mark, Seeded: a.seeded}, o)
	a.seeded = nil
}

// The hub's record of how it decided a request it asked about (see
// hub.ConsentRecord.Source); other sources did not ask.
const (
	sourceAsked     = "asked"
	sourceTimeout   = "timeout"
	sourceCancelled = "cancelled"
)

var askedSources = []string{sourceAsked, sourceTimeout, sourceCancelled, "error", "invalid"}

// settle makes every prompt of the query show the decisions the hub
// applied, as its record of the query says. They differ only when an answer
// reached the hub after its deadline (the hub then denies): the prompt,
// which showed the answer, is edited again.
func (c *consenter) settle(ctx context.Context, reply *hub.Reply) {
	c.mu.Lock()
	asked := c.asked
	c.mu.Unlock()
	if len(asked) == 0 {
		return
	}
	var consents []hub.ConsentRecord
	if reply != nil && reply.Record != nil {
		consents = reply.Record.Consents
	}
	used := make([]bool, len(consents))
	for _, a := range asked {
		// The correction must come after the first edit.
		<-a.shownDone
		applied := slices.Clone(a.shown)
		o := outcome{kind: outcomeAnswered, by: a.reqs[0].User, apps: appsOf(a.reqs)}
		differs := false
		for k, req := range a.reqs {
			i := -1
			for j, rec := range consents {
				if !used[j] && recordOf(rec, req) {
					i = j
					break
				}
			}
			if i < 0 {
				continue
			}
			used[i] = true
			if consents[i].Decision == a.shown[k] {
				continue
			}
			applied[k], differs = consents[i].Decision, true
			switch consents[i].Source {
			case sourceAsked:
			case sourceTimeout:
				o.kind = outcomeTimeout
			case sourceCancelled:
				o.kind = outcomeCancelled
			default:
				o.kind = outcomeNotApplied
			}
		}
		if !differs {
			continue
		}
		o.decisions = applied
		log := c.bot.log.With().Str("prompt", a.event.String()).Strs("shown", decisionStrings(a.shown)).Strs("applied", decisionStrings(applied)).Logger()
		log.Warn().Msg("The hub applied other decisions than the prompt showed; correcting the prompt")
		c.show(ctx, log, a, o)
	}
}

// recordOf reports whether rec is the hub's record of asking req.
func recordOf(rec hub.ConsentRecord, req hub.ConsentRequest) bool {
	return slices.Contains(askedSources, rec.Source) &&
		rec.Category == req.Category && rec.App == req.App && rec.Caller == req.Caller &&
		rec.Function == req.Function && rec.InPlan == req.InPlan &&
		bytes.Equal(rec.Args, req.Args) && bytes.Equal(rec.Result, req.Result) && slices.Equal(rec.Data, req.Data)
}

// place is where a prompt goes.
type place struct {
	room                id.RoomID
	replyTo, threadRoot id.EventID
	// private: the prompt goes to the user's direct chat with the bot,
	// away from the room of their message; invited: that chat is new and
	// the user only invited to it.
	private, invited bool
}

// where decides where the prompt for reqs goes: beside the message that
// caused it, unless it would show the user's data to others in that room.
// Then it goes to the user's direct chat with the bot, made if need be.
func (c *consenter) where(ctx context.Context, reqs []hub.ConsentRequest) (place, error) {
	here := place{room: c.row.RoomID, replyTo: c.row.EventID, threadRoot: c.row.ThreadRoot}
	if !slices.ContainsFunc(reqs, showsPrivateData) || c.bot.directWith(ctx, c.row.RoomID, c.row.UserID) {
		return here, nil
	}
	if !c.bot.canReadEncrypted(ctx, c.row.UserID) {
		// The direct chat is encrypted: a prompt there would wait unread
		// until it timed out.
		return place{}, errNoEncryption
	}
	room, created, err := c.bot.directChat(ctx, c.row.UserID)
	if err != nil {
		return place{}, err
	}
	return place{room: room, private: true, invited: created}, nil
}

// pointToDirectChat tells the user, in the room of their message, where
// their prompt is; it shows nothing of the request.
func (c *consenter) pointToDirectChat(ctx context.Context, log zerolog.Logger, invited bool) {
	msg := mention(c.row.UserID) + ": I need your permission for your message; I've sent the details to our direct chat."
	if invited {
		msg += " Accept my invitation to it to see them."
	}
	c.tell(ctx, log, msg, kindNotice)
}

// unreachable tells the user, in the room of their message, that a prompt
// that would have shown their data could not be put to them privately, so
// the request was denied.
func (c *consenter) unreachable(ctx context.Context, log zerolog.Logger, err error) {
	if ctx.Err() != nil {
		// The request ended meanwhile: nothing was denied for want of a chat.
		return
	}
	log.Warn().Err(err).Msg("Failed to reach a user in a direct chat; denying")
	if errors.Is(err, errNoEncryption) {
		c.tell(ctx, log, mention(c.row.UserID)+": I need your permission for your message, and the question would show your data here, so I ask in our direct chat, which is encrypted; your Matrix client has no encryption keys and could not read it, so nothing that needed it ran. Sign in with a client that supports end-to-end encryption (Element, for example) and ask again.", kindError)
		return
	}
	c.tell(ctx, log, mention(c.row.UserID)+": I need your permission for your message, and the question would show your data here, but I could not reach you in a direct chat, so nothing that needed it ran. Start a direct chat with me and ask again.", kindError)
}

// tell sends a notice about the prompt to the room of the user's message,
// pinging the user.
func (c *consenter) tell(ctx context.Context, log zerolog.Logger, msg, kind string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	_, err := c.bot.post(ctx, message{room: c.row.RoomID, replyTo: c.row.EventID, threadRoot: c.row.ThreadRoot, markdown: msg, kind: kind, mention: c.row.UserID})
	if err != nil {
		log.Warn().Err(err).Msg("Failed to send a notice about a prompt")
	}
}

// mention is a pill for user.
func mention(user id.UserID) string {
	return fmt.Sprintf("[%s](%s)", user, matrixTo(user.String()))
}

// matrixTo links to a user, a room, or an event in a room.
func matrixTo(parts ...string) string {
	link := "https://matrix.to/#"
	for _, p := range parts {
		link += "/" + url.PathEscape(p)
	}
	return link
}
