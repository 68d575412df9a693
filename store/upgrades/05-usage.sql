-- v4 -> v5: Model tokens per user, app and day; each app's stored data per user
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
