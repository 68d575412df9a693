package bot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// live reports whether evt is a new timeline event of a joined room, sent
// by someone else: the only events the bot acts on.
func (b *Bot) live(ctx context.Context, evt *event.Event) bool {
	src := evt.Mautrix.EventSource
	return evt.Sender != b.opts.UserID &&
		src&event.SourceJoin != 0 && src&event.SourceTimeline != 0 &&
		!b.syncer.isHistory(ctx, evt)
}

// onMessage records a message addressed to the bot in the inbox, or takes
// it as the answer to a consent prompt. It runs inside /sync: it writes to
// the database and hands over, it never waits for the network.
func (b *Bot) onMessage(ctx context.Context, evt *event.Event) {
	if !b.live(ctx, evt) {
		return
	}
	log := b.log.With().Str("event_id", evt.ID.String()).Str("room_id", evt.RoomID.String()).Str("sender", evt.Sender.String()).Logger()
	if !b.allow.allows(evt.Sender) {
		log.Debug().Msg("Ignoring a message from a user the allow list does not name")
		return
	}
	content, ok := evt.Content.Parsed.(*event.MessageEventContent)
	if !ok {
		return
	}
	rel := content.RelatesTo
	switch {
	case rel.GetReplaceID() != "":
		// An edit: the original was answered (or not) as it was.
		log.Debug().Msg("Ignoring an edit")
		return
	case content.MsgType == event.MsgNotice:
		// Notices are what bots send: answering one could start a loop.
		return
	}
	// A reply may quote what it replies to; only the new text counts.
	body, html := content.Body, content.FormattedBody
	if rel.GetReplyTo() != "" {
		body, html = event.TrimReplyFallbackText(body), event.TrimReplyFallbackHTML(html)
	}
	if b.takeAnswer(ctx, log, evt, rel, body) {
		return
	}
	repliesToBot := false
	for _, target := range []id.EventID{rel.GetNonFallbackReplyTo(), rel.GetThreadParent()} {
		if target == "" {
			continue
		}
		if sent, err := b.db.isSent(ctx, target); err != nil {
			log.Warn().Err(err).Msg("Failed to check a reply's target")
		} else if sent {
			repliesToBot = true
		}
	}
	req, ok := classify(incoming{
		Body: body, FormattedBody: html,
		MentionsBot: content.Mentions.Has(b.opts.UserID), RepliesToBot: repliesToBot,
		Direct: b.isDirect(ctx, evt.RoomID), Prefix: b.prefixFor(evt.RoomID),
	}, b.me)
	if !ok {
		return
	}
	row := inboxRow{
		EventID: evt.ID, RoomID: evt.RoomID, UserID: evt.Sender, ThreadRoot: rel.GetThreadParent(),
		Kind: req.Kind, Body: req.Text, State: stateQueued,
	}
	switch {
	case len(body) > b.opts.MaxMessageBytes:
		// The quoted reply fallback is the client's, not the user's text.
		row.Kind, row.Body = kindReject, fmt.Sprintf("Your message is too long (%d bytes; the limit is %d). Please shorten it.", len(body), b.opts.MaxMessageBytes)
	case content.MsgType != event.MsgText && content.MsgType != event.MsgEmote:
		row.Kind, row.Body = kindReject, "I can only read text messages."
	case req.Kind == kindCommand && req.Command == cmdUnknown:
		row.Kind, row.Body = kindReject, fmt.Sprintf("I know no command %s: %s lists them.", code(b.prefixFor(evt.RoomID)+req.Text), code(b.prefixFor(evt.RoomID)+cmdHelp))
	case req.Kind == kindCommand:
		row.Body = req.Command + " " + req.Text
	}
	b.accept(ctx, log, row, req)
}

// accept enqueues a message, unless it was seen before or is over the
// user's limits, in which case it is refused with a notice.
func (b *Bot) accept(ctx context.Context, log zerolog.Logger, row inboxRow, req request) {
	if seen, err := b.db.seen(ctx, row.EventID); err != nil {
		log.Error().Err(err).Msg("Failed to check the inbox; message dropped")
		return
	} else if seen {
		log.Debug().Msg("Message already in the inbox")
		return
	}
	if req.Kind == kindCommand && req.Command == cmdCancel {
		// !cancel acts at once: it must not wait behind what it cancels.
		if !b.recordAnswered(ctx, log, row) {
			return
		}
		msg := "There is nothing running for you to stop."
		prompting := b.prompts.openFor(row.UserID)
		if b.cancelRunning(row.UserID) {
			if prompting {
				// The open prompt's edit says the request stopped.
				log.Info().Msg("Stopped a request at its prompt")
				return
			}
			msg = "Stopping the request I was working on for you."
		}
		b.answerNow(log, row, msg, kindNotice)
		return
	}
	refusal := ""
	ahead := 0
	if !b.limiter.allow(row.UserID, time.Now()) {
		refusal = fmt.Sprintf("You are sending messages faster than I take them (%s), so I ignored this one. Please wait a little.", rateWords(b.opts.RateMessages, b.opts.RateWindow))
	} else if n, err := b.db.waiting(ctx, row.UserID); err != nil {
		log.Error().Err(err).Msg("Failed to count the user's messages; message dropped")
		return
	} else if ahead = n; n > b.opts.MaxQueued {
		refusal = fmt.Sprintf("You already have %d messages waiting for me, so I ignored this one. Wait for my answers, or stop the current request with %s.", n, code(b.prefixFor(row.RoomID)+cmdCancel))
	}
	if refusal != "" {
		row.State = stateRefused
		if added, err := b.db.add(ctx, row); err != nil || !added {
			return
		}
		log.Info().Str("reason", refusal).Msg("Refused a message")
		if b.refusalNoticeDue(row.UserID) {
			b.goBackground(func(ctx context.Context) { b.sendLogged(ctx, row, refusal, kindError) })
		}
		return
	}
	if _, err := b.db.add(ctx, row); err != nil {
		log.Error().Err(err).Msg("Failed to record a message; it is dropped")
		return
	}
	if ahead > 0 {
		// The message waits behind others: say it was taken.
		b.goBackground(func(ctx context.Context) {
			if _, err := b.cli.SendReaction(ctx, row.RoomID, row.EventID, queuedReaction); err != nil {
				log.Warn().Err(err).Msg("Failed to acknowledge a queued message")
			}
		})
	}
	b.wake(row.UserID)
}

// queuedReaction acknowledges a message that waits behind others.
const queuedReaction = "⏳"

// recordAnswered records a message the bot answers at once, outside the
// user's queue. It reports false for a message seen before (a replayed
// sync), which must not be answered again.
func (b *Bot) recordAnswered(ctx context.Context, log zerolog.Logger, row inboxRow) bool {
	row.State = stateAnswered
	added, err := b.db.add(ctx, row)
	if err != nil {
		log.Error().Err(err).Msg("Failed to record a message; it is dropped")
	}
	return added
}

// answerNow sends msg in reply to row's message without waiting for the
// queue, within the user's rate like every other message: a flood is not
// answered by a flood, and the refusal notice is sent at most once per
// window.
func (b *Bot) answerNow(log zerolog.Logger, row inboxRow, msg, kind string) {
	if !b.limiter.allow(row.UserID, time.Now()) {
		log.Info().Msg("Not answering a message beyond the user's rate")
		if b.refusalNoticeDue(row.UserID) {
			refusal := fmt.Sprintf("You are sending messages faster than I take them (%s), so I will not answer every one. Please wait a little.", rateWords(b.opts.RateMessages, b.opts.RateWindow))
			b.goBackground(func(ctx context.Context) { b.sendLogged(ctx, row, refusal, kindError) })
		}
		return
	}
	b.goBackground(func(ctx context.Context) { b.sendLogged(ctx, row, msg, kind) })
}

// refusalNoticeDue limits refusal notices to one per user per rate
// window, so that a flood is not answered by a flood.
func (b *Bot) refusalNoticeDue(user id.UserID) bool {
	b.noticeMu.Lock()
	defer b.noticeMu.Unlock()
	if time.Since(b.lastRefusal[user]) < b.opts.RateWindow {
		return false
	}
	b.lastRefusal[user] = time.Now()
	return true
}

// closedPromptNotice answers an answer word replying to a prompt that is
// no longer open.
const closedPromptNotice = "That permission request is already closed, so your answer did not count."

// takeAnswer takes a message whose text is an answer word as the answer to
// a consent prompt. A reply answers the prompt it replies to and no other:
// one replying to a closed prompt is consumed without effect (its sender is
// told), never taken for a newer prompt. Only a message that replies to
// nothing answers its sender's only open prompt in the room. A reply that
// names apps of an open prompt refuses them (prompts.refuse). It reports
// whether the message was consumed.
func (b *Bot) takeAnswer(ctx context.Context, log zerolog.Logger, evt *event.Event, rel *event.RelatesTo, body string) bool {
	// In a thread, a client sets in_reply_to to the thread's latest event
	// as a fallback for clients without threads: that is no reply the user
	// chose.
	target := rel.GetNonFallbackReplyTo()
	if apps := refusalApps(body); len(apps) > 0 {
		// Naming apps of an open prompt refuses them; other words are not
		// about a prompt.
		p := target
		if p == "" {
			p = b.prompts.soleOpen(evt.RoomID, evt.Sender)
		}
		if p != "" && b.prompts.refuse(evt.RoomID, p, evt.Sender, apps) {
			return true
		}
	}
	d, ok := wordDecision(body)
	if !ok {
		return false
	}
	if target == "" {
		p := b.prompts.soleOpen(evt.RoomID, evt.Sender)
		return p != "" && b.prompts.answer(evt.RoomID, p, evt.Sender, d)
	}
	if b.prompts.answer(evt.RoomID, target, evt.Sender, d) {
		return true
	}
	owner, isPrompt, err := b.db.promptOwner(ctx, target)
	switch {
	case err != nil:
		// It may have been meant for a prompt: better unanswered than
		// taken for a query.
		log.Warn().Err(err).Msg("Failed to look up a reply's target; answer dropped")
		return true
	case !isPrompt:
		return false
	case owner == evt.Sender:
		row := inboxRow{EventID: evt.ID, RoomID: evt.RoomID, UserID: evt.Sender, ThreadRoot: rel.GetThreadParent(), Kind: kindReject, Body: closedPromptNotice}
		if b.recordAnswered(ctx, log, row) {
			b.answerNow(log, row, closedPromptNotice, kindNotice)
		}
	}
	return true
}

// isDirect reports whether the room's only other member (joined or
// invited) is one user. When in doubt the room counts as shared, where the
// bot answers less.
func (b *Bot) isDirect(ctx context.Context, room id.RoomID) bool {
	members, err := b.cli.StateStore.GetRoomJoinedOrInvitedMembers(ctx, room)
	if err != nil {
		return false
	}
	others := 0
	for _, m := range members {
		if m != b.opts.UserID {
			others++
		}
	}
	return others == 1
}

func (b *Bot) onReaction(ctx context.Context, evt *event.Event) {
	if !b.live(ctx, evt) {
		return
	}
	rel := evt.Content.AsReaction().RelatesTo
	if rel.Type != event.RelAnnotation || rel.EventID == "" {
		return
	}
	b.prompts.react(evt.RoomID, rel.EventID, evt.Sender, rel.Key, evt.ID)
}

func (b *Bot) onRedaction(ctx context.Context, evt *event.Event) {
	if evt.Mautrix.EventSource&event.SourceJoin == 0 {
		return
	}
	target := evt.Redacts
	if target == "" {
		target = evt.Content.AsRedaction().Redacts
	}
	if target != "" {
		b.prompts.redacted(target)
	}
}

// onMember handles invites of the bot and people leaving its rooms.
func (b *Bot) onMember(ctx context.Context, evt *event.Event) {
	m := evt.Content.AsMember()
	src := evt.Mautrix.EventSource
	if id.UserID(evt.GetStateKey()) == b.opts.UserID {
		if m.Membership == event.MembershipInvite && src&event.SourceInvite != 0 {
			b.handleInvite(evt.RoomID, evt.Sender)
		}
		return
	}
	if src&event.SourceJoin != 0 && (m.Membership == event.MembershipLeave || m.Membership == event.MembershipBan) {
		room := evt.RoomID
		b.goBackground(func(ctx context.Context) { b.leaveIfAbandoned(ctx, room) })
	}
}

// handleInvite joins when the inviter is allowed and declines otherwise.
func (b *Bot) handleInvite(room id.RoomID, inviter id.UserID) {
	b.joinMu.Lock()
	if b.joining[room] {
		b.joinMu.Unlock()
		return
	}
	b.joining[room] = true
	b.joinMu.Unlock()
	allowed := b.allow.allows(inviter)
	b.goBackground(func(ctx context.Context) {
		defer func() {
			b.joinMu.Lock()
			delete(b.joining, room)
			b.joinMu.Unlock()
		}()
		log := b.log.With().Str("room_id", room.String()).Str("inviter", inviter.String()).Logger()
		if !allowed {
			log.Info().Msg("Declining an invite from a user the allow list does not name")
			if _, err := b.cli.LeaveRoom(ctx, room, &mautrix.ReqLeave{Reason: "secgpt only joins rooms of the users it serves"}); err != nil {
				log.Warn().Err(err).Msg("Failed to decline an invite")
			}
			return
		}
		for attempt, wait := 1, time.Second; ; attempt, wait = attempt+1, wait*2 {
			_, err := b.cli.JoinRoomByID(ctx, room)
			if err == nil {
				log.Info().Msg("Joined a room")
				return
			}
			if errors.Is(err, mautrix.MForbidden) || attempt == 4 || ctx.Err() != nil {
				log.Warn().Err(err).Msg("Failed to join a room")
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	})
}

// leaveIfAbandoned leaves a room in which no allowed user remains.
func (b *Bot) leaveIfAbandoned(ctx context.Context, room id.RoomID) {
	members, err := b.cli.StateStore.GetRoomJoinedOrInvitedMembers(ctx, room)
	if err != nil {
		b.log.Warn().Err(err).Str("room_id", room.String()).Msg("Failed to read a room's members")
		return
	}
	for _, m := range members {
		if m != b.opts.UserID && b.allow.allows(m) {
			return
		}
	}
	b.log.Info().Str("room_id", room.String()).Msg("Leaving a room no allowed user is in")
	if _, err := b.cli.LeaveRoom(ctx, room); err != nil {
		b.log.Warn().Err(err).Str("room_id", room.String()).Msg("Failed to leave a room")
	}
}

// utdNoticeEvery limits "could not decrypt" notices per room.
const utdNoticeEvery = 10 * time.Minute

// onDecryptError tells a room once in a while that a recent message could
// not be decrypted: the sender's client did not share its keys with the
// bot's device, and silence would look like the bot ignoring them.
func (b *Bot) onDecryptError(evt *event.Event, err error) {
	log := b.log.With().Str("event_id", evt.ID.String()).Str("room_id", evt.RoomID.String()).Logger()
	log.Warn().Err(err).Msg("Failed to decrypt an event")
	if !errors.Is(err, crypto.ErrNoSessionFound) || evt.Sender == b.opts.UserID || !b.allow.allows(evt.Sender) ||
		time.Since(time.UnixMilli(evt.Timestamp)) > 5*time.Minute {
		return
	}
	b.noticeMu.Lock()
	due := time.Since(b.lastUTD[evt.RoomID]) > utdNoticeEvery
	if due {
		b.lastUTD[evt.RoomID] = time.Now()
	}
	b.noticeMu.Unlock()
	if !due {
		return
	}
	row := inboxRow{EventID: evt.ID, RoomID: evt.RoomID, UserID: evt.Sender}
	b.goBackground(func(ctx context.Context) {
		b.sendLogged(ctx, row, "I could not decrypt this message: your client did not share its key with my device. If it was for me, send it again; if this keeps happening, let your client send to unverified devices.", kindError)
	})
}

// sendLogged replies to row's message and logs a failure.
func (b *Bot) sendLogged(ctx context.Context, row inboxRow, markdown, kind string) {
	if _, err := b.send(ctx, row.RoomID, row.EventID, row.ThreadRoot, markdown, kind); err != nil && ctx.Err() == nil {
		b.log.Warn().Err(err).Str("event_id", row.EventID.String()).Msg("Failed to send a notice")
	}
}
