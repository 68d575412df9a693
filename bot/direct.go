package bot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"go.mau.fi/util/ptr"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/secgpt/secgpt/hub"
)

// showsPrivateData reports whether a prompt for req would show more than
// the user typed in the message that caused it. Data and collab prompts
// always do: they exist to show the user's stored data or another app's
// result. An exec prompt does when an app wrote its arguments, or when one
// of its values is not in the message (the planner took it from the
// user's history, or the user allowed it in a data prompt).
func showsPrivateData(req hub.ConsentRequest) bool {
	if req.Category != hub.CategoryExec || req.Caller != "" || len(req.Result) > 0 {
		return true
	}
	typed := strings.ToLower(strings.Join(strings.Fields(req.Query), " "))
	inMessage := func(v string) bool {
		return strings.Contains(typed, strings.ToLower(strings.Join(strings.Fields(v), " ")))
	}
	for _, d := range req.Data {
		if !inMessage(d.Value) {
			return true
		}
	}
	// One call's arguments, or each of several planned calls'.
	shown := []json.RawMessage{req.Args}
	for _, c := range req.Calls {
		shown = append(shown, c.Args)
	}
	for _, raw := range shown {
		if len(raw) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var args any
		if dec.Decode(&args) != nil || !allLeaves(args, inMessage) {
			return true
		}
	}
	return false
}

// allLeaves reports whether ok holds for every string and number in v.
func allLeaves(v any, ok func(string) bool) bool {
	switch t := v.(type) {
	case string:
		return t == "" || ok(t)
	case json.Number:
		return ok(t.String())
	case map[string]any:
		for _, e := range t {
			if !allLeaves(e, ok) {
				return false
			}
		}
	case []any:
		for _, e := range t {
			if !allLeaves(e, ok) {
				return false
			}
		}
	}
	return true
}

// directWith reports whether the bot and user are the room's only members,
// joined or invited. When in doubt it is no direct chat.
func (b *Bot) directWith(ctx context.Context, room id.RoomID, user id.UserID) bool {
	members, err := b.cli.StateStore.GetRoomJoinedOrInvitedMembers(ctx, room)
	return err == nil && len(members) == 2 && slices.Contains(members, b.opts.UserID) && slices.Contains(members, user)
}

// canReadEncrypted reports whether user has a device with end-to-end
// encryption keys, which reading an encrypted room needs. When the
// homeserver cannot say, it assumes so: this avoids a prompt that would
// time out unread, and decides nothing about what is allowed.
func (b *Bot) canReadEncrypted(ctx context.Context, user id.UserID) bool {
	resp, err := b.cli.QueryKeys(ctx, &mautrix.ReqQueryKeys{DeviceKeys: mautrix.DeviceKeysRequest{user: mautrix.DeviceIDList{}}})
	if err != nil {
		b.log.Debug().Err(err).Str("user", user.String()).Msg("Failed to query a user's device keys")
		return true
	}
	return len(resp.DeviceKeys[user]) > 0
}

// directChat returns a room in which only the bot and user are, preferring
// one the user has joined; with none, it creates one (is_direct, encrypted)
// and invites the user. created reports a new room.
func (b *Bot) directChat(ctx context.Context, user id.UserID) (room id.RoomID, created bool, err error) {
	b.dmMu.Lock()
	defer b.dmMu.Unlock()
	if r, ok := b.dms[user]; ok && b.directWith(ctx, r, user) {
		return r, false, nil
	}
	joined, err := b.cli.JoinedRooms(ctx)
	if err != nil {
		return "", false, fmt.Errorf("failed to list joined rooms: %w", err)
	}
	var invitedOnly id.RoomID
	for _, r := range joined.JoinedRooms {
		if !b.directWith(ctx, r, user) {
			continue
		}
		if b.cli.StateStore.IsInRoom(ctx, r, user) {
			b.dms[user] = r
			return r, false, nil
		}
		if invitedOnly == "" {
			invitedOnly = r
		}
	}
	if invitedOnly != "" {
		b.dms[user] = invitedOnly
		return invitedOnly, false, nil
	}
	resp, err := b.cli.CreateRoom(ctx, &mautrix.ReqCreateRoom{
		Preset: "trusted_private_chat", IsDirect: true, Invite: []id.UserID{user},
		InitialState: []*event.Event{{
			Type: event.StateEncryption, StateKey: ptr.Ptr(""),
			Content: event.Content{Parsed: &event.EncryptionEventContent{Algorithm: id.AlgorithmMegolmV1}},
		}},
	})
	if err != nil {
		return "", false, fmt.Errorf("failed to create a direct chat: %w", err)
	}
	b.log.Info().Str("room_id", resp.RoomID.String()).Str("user", user.String()).Msg("Created a direct chat for prompts")
	b.dms[user] = resp.RoomID
	return resp.RoomID, true, nil
}
