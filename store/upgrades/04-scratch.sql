-- v4: Scratch directories named by a random id
-- The scratch directory of a (user, app) is named by a random id, so that
-- its path says nothing of the user; used_at drives reaping.
CREATE TABLE scratch (
	user_id    TEXT    NOT NULL,
	app        TEXT    NOT NULL,
	id         TEXT    NOT NULL UNIQUE,
	created_at INTEGER NOT NULL,
	used_at    INTEGER NOT NULL,

	PRIMARY KEY (user_id, app)
);
CREATE INDEX scratch_used_idx ON scratch (used_at);
