-- v3: External apps' discovery cached by code identity
-- What an external app's server listed (its spec, as JSON), for the
-- identity of its code and declaration: while the identity is the same,
-- secgpt starts no server to learn its tools again.
CREATE TABLE app_discovery (
	app           TEXT    NOT NULL PRIMARY KEY,
	identity      TEXT    NOT NULL,
	spec          TEXT    NOT NULL,
	discovered_at INTEGER NOT NULL
);
