-- v0 -> v2: Latest revision

-- The bot's own tables, beside the store's and mautrix's in the same file.
-- Every *_at column holds Unix nanoseconds (UTC).

-- Settings the bot generates once and must keep (the crypto pickle key).
CREATE TABLE bot_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- Every accepted incoming message, written inside the /sync handler before
-- the sync token that covers it is saved, then served per user in seq order.
-- state: queued -> working -> sending -> answered; refused (rate or queue
-- limit); interrupted (found working at start: the bot crashed while serving
-- it, and the notice saying so is sent like an answer); failed (the answer
-- could not be sent) -> reported (the user was told).
-- A row is sending from before its reply goes out until the homeserver took
-- it: reply_txn, reply_text and reply_kind are what a restart sends again,
-- with the same transaction ID, so the homeserver posts it once; reply_done
-- is the state after. All are erased once it went out.
CREATE TABLE bot_inbox (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT NOT NULL UNIQUE,
    room_id         TEXT NOT NULL,
    user_id         TEXT NOT NULL,
    thread_root     TEXT NOT NULL DEFAULT '',
    kind            TEXT NOT NULL,
    body            TEXT NOT NULL,
    state           TEXT NOT NULL,
    received_at     INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    answer_event_id TEXT NOT NULL DEFAULT '',
    reply_txn       TEXT NOT NULL DEFAULT '',
    reply_text      TEXT NOT NULL DEFAULT '',
    reply_kind      TEXT NOT NULL DEFAULT '',
    reply_done      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX bot_inbox_user_state ON bot_inbox (user_id, state, seq);

-- Consent prompts, so that a restart can mark those left open as expired.
-- state: pending -> decided | expired.
CREATE TABLE bot_prompts (
    event_id       TEXT PRIMARY KEY,
    room_id        TEXT NOT NULL,
    user_id        TEXT NOT NULL,
    query_event_id TEXT NOT NULL,
    markdown       TEXT NOT NULL,
    state          TEXT NOT NULL,
    outcome        TEXT NOT NULL DEFAULT '',
    expires_at     INTEGER NOT NULL,
    created_at     INTEGER NOT NULL
);
CREATE INDEX bot_prompts_state ON bot_prompts (state);

-- The bot's own messages, so that a reply to one of them addresses the bot.
CREATE TABLE bot_sent (
    event_id TEXT PRIMARY KEY,
    room_id  TEXT NOT NULL,
    kind     TEXT NOT NULL,
    sent_at  INTEGER NOT NULL
);
