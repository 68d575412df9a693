-- v2: An answer's transaction ID and text are kept from before it is sent
-- until the homeserver took it, so a restart sends it again under the same
-- transaction ID instead of saying it restarted (see 00-latest.sql).
ALTER TABLE bot_inbox ADD COLUMN reply_txn TEXT NOT NULL DEFAULT '';
ALTER TABLE bot_inbox ADD COLUMN reply_text TEXT NOT NULL DEFAULT '';
ALTER TABLE bot_inbox ADD COLUMN reply_kind TEXT NOT NULL DEFAULT '';
ALTER TABLE bot_inbox ADD COLUMN reply_done TEXT NOT NULL DEFAULT '';
