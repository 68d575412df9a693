package bot

import (
	"context"
	"fmt"
	"strings"

	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/format"
	"maunium.net/go/mautrix/id"
)

// KindKey is the content key naming what a bot message is (one of the
// kind* values below), for clients and tests that want to tell them apart.
const KindKey = "org.secgpt.kind"

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

// content renders Markdown as a notice. Raw HTML in the text is escaped,
// not rendered (the text may come from the model), and nobody is pinged.
func content(markdown string) *event.MessageEventContent {
	if len(markdown) > maxAnswerBytes {
		markdown = strings.ToValidUTF8(markdown[:maxAnswerBytes], "") + "\n\n… (cut: the rest was too long for one message)"
	}
	c := format.RenderMarkdown(markdown, true, false)
	c.MsgType = event.MsgNotice
	c.Mentions = &event.Mentions{}
	return &c
}

// send replies to the message replyTo (in its thread, if threadRoot is set)
// and records the message as the bot's.
func (b *Bot) send(ctx context.Context, room id.RoomID, replyTo, threadRoot id.EventID, markdown, kind string) (id.EventID, error) {
	c := content(markdown)
	rel := &event.RelatesTo{}
	if threadRoot != "" {
		rel.SetThread(threadRoot, "")
	}
	if replyTo != "" {
		rel.SetReplyTo(replyTo)
	}
	if rel.Type != "" || rel.InReplyTo != nil {
		c.RelatesTo = rel
	}
	resp, err := b.cli.SendMessageEvent(ctx, room, event.EventMessage, &event.Content{Parsed: c, Raw: map[string]any{KindKey: kind}})
	if err != nil {
		return "", fmt.Errorf("failed to send message: %w", err)
	}
	if err := b.db.addSent(ctx, resp.EventID, room, kind); err != nil {
		b.log.Warn().Err(err).Msg("Failed to record a sent message")
	}
	return resp.EventID, nil
}

// edit replaces the text of one of the bot's messages.
func (b *Bot) edit(ctx context.Context, room id.RoomID, target id.EventID, markdown, kind string) error {
	c := content(markdown)
	c.SetEdit(target)
	if _, err := b.cli.SendMessageEvent(ctx, room, event.EventMessage, &event.Content{Parsed: c, Raw: map[string]any{KindKey: kind}}); err != nil {
		return fmt.Errorf("failed to edit message: %w", err)
	}
	return nil
}
