package bot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// Bounds of findSent's look back through a room: a reply is looked for
// among the events since it was stored to be sent, less clockSkew (the
// homeserver's clock stamps them), in at most sentPages pages.
const (
	sentPage  = 50
	sentPages = 20
	clockSkew = 10 * time.Minute
)

// findSent returns the event of r if the homeserver already posted it: a
// message of the bot's own in r's room, since r was stored, carrying r's
// transaction ID (TxnKey). The transaction ID alone does not prevent a
// second post after a restart: a homeserver may persist a send whose
// request was cut off, without remembering its transaction ID as done
// (Dendrite does, when the bot is killed while the request is in flight).
// An encrypted message is decrypted with the bot's own session keys. An
// empty ID and no error: not found, send it.
func (b *Bot) findSent(ctx context.Context, r reply) (id.EventID, error) {
	since := r.Since.Add(-clockSkew)
	from := ""
	for range sentPages {
		resp, err := b.cli.Messages(ctx, r.Row.RoomID, from, "", mautrix.DirectionBackward, nil, sentPage)
		if err != nil {
			return "", fmt.Errorf("failed to read the room's latest messages: %w", err)
		}
		for _, evt := range resp.Chunk {
			if evt.Timestamp < since.UnixMilli() {
				return "", nil
			}
			if evt.Sender != b.cli.UserID || b.txnOf(ctx, r.Row.RoomID, evt) != r.Txn {
				continue
			}
			return evt.ID, nil
		}
		if resp.End == "" || len(resp.Chunk) == 0 {
			return "", nil
		}
		from = resp.End
	}
	return "", nil
}

// txnOf returns the transaction ID the bot wrote into evt (TxnKey), or ""
// when it has none or cannot be read.
func (b *Bot) txnOf(ctx context.Context, room id.RoomID, evt *event.Event) string {
	evt.RoomID = room
	if err := evt.Content.ParseRaw(evt.Type); err != nil && !errors.Is(err, event.ErrContentAlreadyParsed) {
		return ""
	}
	if evt.Type == event.EventEncrypted {
		if b.crypto == nil {
			return ""
		}
		dec, err := b.crypto.Decrypt(ctx, evt)
		if err != nil {
			b.log.Debug().Err(err).Str("event_id", evt.ID.String()).Msg("Failed to decrypt one of the bot's own messages")
			return ""
		}
		evt = dec
	}
	txn, _ := evt.Content.Raw[TxnKey].(string)
	return txn
}
