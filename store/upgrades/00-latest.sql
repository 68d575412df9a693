-- v0 -> v5: Latest revision

-- Every *_at column holds Unix nanoseconds (UTC).

CREATE TABLE sessions (
	id          TEXT    NOT NULL PRIMARY KEY,
	user_id     TEXT    NOT NULL,
	started_at  INTEGER NOT NULL,
	last_active INTEGER NOT NULL,
	ended_at    INTEGER,
	end_reason  TEXT    NOT NULL DEFAULT '',

	-- An ended session always says why it ended.
	CHECK ((ended_at IS NULL) = (end_reason = ''))
);
-- At most one active session per user.
CREATE UNIQUE INDEX sessions_active_user_idx ON sessions (user_id) WHERE ended_at IS NULL;

CREATE TABLE grants (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	user_id     TEXT    NOT NULL,
	category    TEXT    NOT NULL CHECK (category IN ('exec', 'data', 'collab')),
	subject     TEXT    NOT NULL,
	app_version TEXT    NOT NULL,
	duration    TEXT    NOT NULL CHECK (duration IN ('session', 'always', 'never')),
	-- '' unless duration is 'session'.
	session_id  TEXT    NOT NULL DEFAULT '',
	created_at  INTEGER NOT NULL,

	CHECK ((duration = 'session') = (session_id <> '')),
	UNIQUE (user_id, category, subject, app_version, duration, session_id)
);
CREATE INDEX grants_session_idx ON grants (session_id) WHERE duration = 'session';

CREATE TABLE audit_log (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	at          INTEGER NOT NULL,
	user_id     TEXT    NOT NULL,
	session_id  TEXT    NOT NULL,
	query_id    TEXT    NOT NULL,
	category    TEXT    NOT NULL,
	subject     TEXT    NOT NULL,
	app_version TEXT    NOT NULL,
	decision    TEXT    NOT NULL,
	source      TEXT    NOT NULL,
	detail      TEXT    NOT NULL
);
CREATE INDEX audit_log_user_idx ON audit_log (user_id, id);

CREATE TABLE hub_memory (
	id         INTEGER PRIMARY KEY,
	user_id    TEXT    NOT NULL,
	role       TEXT    NOT NULL CHECK (role IN ('user', 'assistant')),
	content    TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	-- The apps whose output shaped the entry, comma-separated and sorted;
	-- '' for none; NULL for unknown (written before v2), which readers
	-- treat as shaped by apps.
	provenance TEXT
);
CREATE INDEX hub_memory_user_idx ON hub_memory (user_id, id);

CREATE TABLE spoke_memory (
	id         INTEGER PRIMARY KEY,
	user_id    TEXT    NOT NULL,
	app        TEXT    NOT NULL,
	content    TEXT    NOT NULL,
	created_at INTEGER NOT NULL
);
CREATE INDEX spoke_memory_user_app_idx ON spoke_memory (user_id, app, id);

CREATE TABLE app_docs (
	-- Insertion order, the tie-break after updated_at.
	seq        INTEGER PRIMARY KEY,
	user_id    TEXT    NOT NULL,
	app        TEXT    NOT NULL,
	collection TEXT    NOT NULL,
	doc_id     TEXT    NOT NULL,
	body       TEXT    NOT NULL,
	updated_at INTEGER NOT NULL,

	UNIQUE (user_id, app, collection, doc_id)
);
CREATE INDEX app_docs_list_idx ON app_docs (user_id, app, collection, updated_at, seq);
-- Finds the newest update of an (user, app) for the per-app monotonic clock.
CREATE INDEX app_docs_clock_idx ON app_docs (user_id, app, updated_at);

-- What an external app's server listed (its spec, as JSON), for the
-- identity of its code and declaration: one row per app, the latest.
CREATE TABLE app_discovery (
	app           TEXT    NOT NULL PRIMARY KEY,
	identity      TEXT    NOT NULL,
	spec          TEXT    NOT NULL,
	discovered_at INTEGER NOT NULL
);

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

-- What the model endpoint billed, per user, app ("" for the hub's own
-- calls: the planner and the no-app assistant) and UTC day (YYYY-MM-DD).
-- estimated counts the tokens estimated from bytes, where the endpoint
-- reported none; hub_ns the hub's time spent serving the app's spokes.
CREATE TABLE model_usage (
	user_id           TEXT    NOT NULL,
	day               TEXT    NOT NULL,
	app               TEXT    NOT NULL,
	calls             INTEGER NOT NULL DEFAULT 0,
	prompt_tokens     INTEGER NOT NULL DEFAULT 0,
	completion_tokens INTEGER NOT NULL DEFAULT 0,
	estimated         INTEGER NOT NULL DEFAULT 0,
	hub_ns            INTEGER NOT NULL DEFAULT 0,

	PRIMARY KEY (user_id, day, app)
);

-- The bytes and documents each app stores for each user, kept by the
-- triggers below so that a bounded put reads one row, not the app's data.
CREATE TABLE app_data_usage (
	user_id TEXT    NOT NULL,
	app     TEXT    NOT NULL,
	bytes   INTEGER NOT NULL,
	docs    INTEGER NOT NULL,

	PRIMARY KEY (user_id, app)
);
INSERT INTO app_data_usage (user_id, app, bytes, docs)
	SELECT user_id, app, SUM(length(CAST(body AS BLOB))), COUNT(*) FROM app_docs GROUP BY user_id, app;
CREATE TRIGGER app_docs_usage_insert AFTER INSERT ON app_docs BEGIN
	INSERT INTO app_data_usage (user_id, app, bytes, docs)
		VALUES (NEW.user_id, NEW.app, length(CAST(NEW.body AS BLOB)), 1)
		ON CONFLICT (user_id, app) DO UPDATE SET bytes = bytes + excluded.bytes, docs = docs + 1;
END;
CREATE TRIGGER app_docs_usage_update AFTER UPDATE OF body ON app_docs BEGIN
	UPDATE app_data_usage SET bytes = bytes - length(CAST(OLD.body AS BLOB)) + length(CAST(NEW.body AS BLOB))
		WHERE user_id = NEW.user_id AND app = NEW.app;
END;
CREATE TRIGGER app_docs_usage_delete AFTER DELETE ON app_docs BEGIN
	UPDATE app_data_usage SET bytes = bytes - length(CAST(OLD.body AS BLOB)), docs = docs - 1
		WHERE user_id = OLD.user_id AND app = OLD.app;
END;
