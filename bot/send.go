package bot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/format"
	"maunium.net/go/mautrix/id"

	"github.com/secgpt/secgpt/reveal"
)

// KindKey is the content key naming what a bot message is (one of the
// kind* values below), for clients and tests that want to tell them apart.
const KindKey = "org.secgpt.kind"

// TxnKey is the content key carrying a reply's transaction ID, by which
// the bot recognises, after a restart, a reply the homeserver took although
// the bot never heard so (see findSent).
const TxnKey = "org.secgpt.txn"

// What a bot message is.
const (
	kindAnswer = "answer" // the answer to a query
	kindPrompt = "prompt" // a consent prompt
	kindReply  = "reply"  // the answer to a command
	kindNotice = "notice" // a note about the bot's own state
	kindError  = "error"  // a query or message that failed
)

// maxAnswerBytes bounds the Markdown of one message; Matrix events are at
// most 64 KiB and the HTML roughly doubles the text.
const maxAnswerBytes = 24 << 10

// content renders Markdown as a notice, and nobody is pinged. The text may
// come from an app or the model: controls, bidi and invisible characters
// are shown as escapes (package reveal), raw HTML as text, images as their
// address, and links with their target (see markdown).
func content(text string) *event.MessageEventContent {
	if len(text) > maxAnswerBytes {
		text = strings.ToValidUTF8(text[:maxAnswerBytes], "") + "\n\n… (cut: the rest was too long for one message)"
	}
	c := format.RenderMarkdownCustom(reveal.Text(text), markdown)
	c.MsgType = event.MsgNotice
	c.Mentions = &event.Mentions{}
	return &c
}

// message is one message the bot sends.
type message struct {
	room id.RoomID
	// replyTo is the message answered, threadRoot its thread, if any.
	replyTo, threadRoot id.EventID
	markdown            string
	kind                string
	// mention is pinged; nobody is when it is empty.
	mention id.UserID
	// parsed, when set, is the content, written by the caller, instead of
	// markdown rendered; fields are further content keys.
	parsed *event.MessageEventContent
	fields map[string]any
	// txn is the transaction ID; sending again with the same one cannot
	// post the message twice. Empty: a new one.
	txn string
}

// send replies to the message replyTo (in its thread, if threadRoot is set)
// and records the message as the bot's.
func (b *Bot) send(ctx context.Context, room id.RoomID, replyTo, threadRoot id.EventID, markdown, kind string) (id.EventID, error) {
	return b.post(ctx, message{room: room, replyTo: replyTo, threadRoot: threadRoot, markdown: markdown, kind: kind})
}

// post sends m and records it as the bot's.
func (b *Bot) post(ctx context.Context, m message) (id.EventID, error) {
	c := m.parsed
	if c == nil {
		c = content(m.markdown)
	}
	if m.mention != "" {
		c.Mentions.UserIDs = []id.UserID{m.mention}
	}
	rel := &event.RelatesTo{}
	if m.threadRoot != "" {
		rel.SetThread(m.threadRoot, "")
	}
	if m.replyTo != "" {
		rel.SetReplyTo(m.replyTo)
	}
	if rel.Type != "" || rel.InReplyTo != nil {
		c.RelatesTo = rel
	}
	raw := map[string]any{KindKey: m.kind}
	if m.txn != "" {
		raw[TxnKey] = m.txn
	}
	for k, v := range m.fields {
		raw[k] = v
	}
	resp, err := b.cli.SendMessageEvent(ctx, m.room, event.EventMessage, &event.Content{Parsed: c, Raw: raw},
		mautrix.ReqSendEvent{TransactionID: m.txn})
	if err != nil {
		return "", fmt.Errorf("failed to send message: %w", err)
	}
	if err := b.db.addSent(ctx, resp.EventID, m.room, m.kind); err != nil {
		b.log.Warn().Err(err).Msg("Failed to record a sent message")
	}
	return resp.EventID, nil
}

// deliver posts m, trying again after each of b.retryWaits while the
// failure may pass (mautrix has already retried the request a few times by
// then). Every attempt carries one transaction ID (m.txn, or a new one), so
// a message the homeserver took before a lost response is not posted twice.
func (b *Bot) deliver(ctx context.Context, m message) (id.EventID, error) {
	if m.txn == "" {
		m.txn = b.cli.TxnID()
	}
	for attempt := 0; ; attempt++ {
		evt, err := b.post(ctx, m)
		if err == nil || attempt == len(b.retryWaits) || !transient(err) || ctx.Err() != nil {
			return evt, err
		}
		b.log.Warn().Err(err).Int("attempt", attempt+1).Stringer("room_id", m.room).Msg("Failed to send a message; trying again")
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(b.retryWaits[attempt]):
		}
	}
}

// transient reports whether sending again may succeed: anything but a
// refusal of the request itself (a 4xx other than rate limiting), such as
// the bot no longer being in the room.
func transient(err error) bool {
	var he mautrix.HTTPError
	if errors.As(err, &he) && he.Response != nil {
		code := he.Response.StatusCode
		return code == http.StatusTooManyRequests || code >= 500 || code < 400
	}
	return true
}
