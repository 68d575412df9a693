// Package store owns secgpt's SQLite database: sessions, permission grants,
// the audit log, hub memory (per user), spoke memory (per user and app) and
// the built-in apps' per-user documents, and what discovering each external
// app found for the identity of its code, in one WAL-mode file whose schema
// it migrates at Open. Other parts (the Matrix bot, mautrix's crypto and
// state stores) keep their own tables in the same file through DB.
//
// The store never interprets app data: documents, spoke memory and
// discovered specs are opaque to it beyond being valid JSON or text within a size limit. It never
// makes a security decision either: it stores and returns what the hub
// decided, and only keeps its records consistent (one active session per
// user, session grants ending with their session).
//
// Every method is safe for concurrent use. A write method that returns
// without error has committed with synchronous=FULL, so an acknowledged
// write survives a crash of the process, or of the machine if its disk
// honours fsync; the writes waiting at one moment share one commit (group
// commit, commit.go), and a store from Later acknowledges a write at once,
// for what no action waits on.
package store

import (
	"context"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"go.mau.fi/util/dbutil"

	// Registers the sqlite3-fk-wal* drivers (mattn/go-sqlite3, cgo).
	_ "go.mau.fi/util/dbutil/litestream"
)

// driverName is the database/sql driver Open uses. Its connect hook sets
// foreign_keys=ON, journal_mode=WAL, busy_timeout=5000 and synchronous=FULL.
// FULL syncs the WAL at every commit, so a power loss cannot undo a commit
// (NORMAL only survives a crash of the process). On the 2-core reference VM
// (ext4) one small commit took 0.2-0.4 ms with FULL against 0.02 ms with
// NORMAL (BenchmarkCommit), under the 2 ms we allow; FULL rose to 1.5-3.8 ms
// only while other jobs loaded the same disk.
const driverName = "sqlite3-fk-wal-fullsync"

// VersionTable is the table holding the store's schema version. Other
// schemas in the same file use their own (dbutil's Child).
const VersionTable = "secgpt_version"

//go:embed upgrades/*.sql
var upgradeFiles embed.FS

// upgradeTable is built from upgrades/: 00-latest.sql holds the whole
// current schema ("-- v0 -> vN: Latest revision"); a later change bumps N
// there and adds NN-name.sql headed "-- vN: what it does".
var upgradeTable = dbutil.BuildUpgradeTable().WithFSPath(upgradeFiles, "upgrades").Finish()

// Errors returned by Store methods; test them with errors.Is.
var (
	// ErrNotFound is returned by GetDoc and DeleteDoc for a missing
	// document and by EndSession for an unknown session.
	ErrNotFound = errors.New("not found")
	// ErrNoActiveSession is returned by TouchSession, and by PutGrant for a
	// session grant, when the session is not the user's active session.
	ErrNoActiveSession = errors.New("no such active session")
	// ErrInvalid wraps every rejection of a malformed argument (empty user,
	// bad collection name, body that is not JSON, unknown category, ...).
	ErrInvalid = errors.New("invalid argument")
)

// Store is the database. Create it with Open, release it with Close.
type Store struct {
	db *dbutil.Database
	// committer runs this process's writes, in batches, one at a time.
	// SQLite has one writer at a time; queueing in Go is fair and
	// cancellable, while SQLite's busy handler polls with sleeps of up to
	// 100 ms.
	committer *committer
	// later is set on the view Later returns.
	later bool
	// scratch remembers the scratch ids named and their last recorded
	// use (scratch.go); shared by the views.
	scratch *scratchCache
}

// Open opens (creating if missing) the database file at path, with mode
// 0600, and migrates its schema. The parent directory must exist.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("failed to open store: %w: empty path", ErrInvalid)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("failed to open store %s: %w", path, err)
	}
	if err := prepareFile(ctx, abs); err != nil {
		return nil, fmt.Errorf("failed to open store %s: %w", abs, err)
	}
	db, err := dbutil.NewWithDialect(dsn(abs), driverName)
	if err != nil {
		return nil, fmt.Errorf("failed to open store %s: %w", abs, err)
	}
	// One writer plus readers; WAL lets readers run beside the writer.
	db.RawDB.SetMaxOpenConns(4)
	db.RawDB.SetMaxIdleConns(4)
	db.VersionTable = VersionTable
	db.UpgradeTable = upgradeTable
	log := zerolog.Ctx(ctx).With().Str("component", "store").Logger()
	db.Log = dbutil.ZeroLogger(log)
	if err := db.Upgrade(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("failed to upgrade store schema in %s: %w", abs, err)
	}
	s := &Store{db: db, scratch: newScratchCache()}
	s.committer = newCommitter(s, log)
	return s, nil
}

// dsn is the go-sqlite3 data source for path: a URI, so the path is escaped;
// _txlock=immediate makes a write transaction take the lock at BEGIN and
// wait for it there instead of failing with SQLITE_BUSY on its first write;
// _secure_delete overwrites deleted content with zeros in the pages a delete
// writes, so it does not linger in free space of the database file. It
// cannot reach copies written before the delete: the write-ahead log keeps
// them until it is checkpointed and reused (ForgetUser truncates it), and
// nothing here reaches the file system's own copies or backups;
// _stmt_cache_size keeps each connection's last prepared statements, so
// that the statements every query runs (a grant's lookup, a memory's
// read, the usage and audit inserts, the group commit's savepoints) are
// parsed and planned once per connection, not on every run (a grant's
// lookup took 37–43 µs of CPU with preparing, 20–27 µs without:
// BenchmarkFindGrant).
func dsn(path string) string {
	return "file:" + (&url.URL{Path: path}).EscapedPath() + fmt.Sprintf("?_txlock=immediate&_secure_delete=true&_stmt_cache_size=%d", stmtCacheSize)
}

// stmtCacheSize is how many prepared statements a connection keeps: more
// than the store has distinct statements on a query's path.
const stmtCacheSize = 128

// prepareFile creates the database file with mode 0600 if missing, or checks
// that the existing one (and its -wal and -shm) are regular files and
// restricts them to 0600.
func prepareFile(ctx context.Context, path string) error {
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("parent directory %s does not exist", dir)
	} else if err != nil {
		return fmt.Errorf("failed to check parent directory: %w", err)
	} else if !st.IsDir() {
		return fmt.Errorf("parent %s is not a directory", dir)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		// Chmod too: a umask cannot loosen 0600, but an odd one could
		// tighten it so far that SQLite cannot write.
		err = errors.Join(f.Chmod(0o600), f.Close())
		if err != nil {
			return fmt.Errorf("failed to create database file: %w", err)
		}
		return nil
	} else if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("failed to create database file: %w", err)
	}
	if err := restrictMode(ctx, path); err != nil {
		return err
	}
	// SQLite creates -wal and -shm with the main file's mode; tighten any
	// left by an earlier run whose main file was looser.
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := restrictMode(ctx, path+suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// restrictMode makes sure path is a regular file readable by its owner only.
func restrictMode(ctx context.Context, path string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("failed to check %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if st.Mode().Perm() == 0o600 {
		return nil
	}
	zerolog.Ctx(ctx).Warn().
		Str("path", path).
		Str("mode", st.Mode().Perm().String()).
		Msg("Restricting database file to mode 0600")
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("failed to restrict %s to mode 0600: %w", path, err)
	}
	return nil
}

// Close commits the writes still queued and closes the database. It is
// never called on a store from Later.
func (s *Store) Close() error {
	s.committer.close()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("failed to close store: %w", err)
	}
	return nil
}

// DB returns the underlying database, for tables owned by other packages
// (give them their own version table with Child). Writes made through it
// directly do not queue behind the store's writers (they wait in SQLite's
// busy handler): make them through Write.
func (s *Store) DB() *dbutil.Database {
	return s.db
}

// How truncateWAL waits for readers. The connection's busy handler would
// wait its busy_timeout (5 s) in one go, deaf to the context; short attempts
// bound the wait at about a second, which a store whose reads take
// milliseconds only exceeds when a reader is stuck.
const (
	checkpointAttempts = 5
	checkpointBusyMS   = 100 // busy_timeout of one attempt, in milliseconds
	checkpointPause    = 100 * time.Millisecond
)

// truncateWAL copies every committed page into the database file and
// truncates the write-ahead log to zero bytes, so that page images from
// before a delete leave the log. It needs every reader to have left the log
// (PRAGMA wal_checkpoint(TRUNCATE) waits for them and for any writer, and
// blocks new writers meanwhile); it tries checkpointAttempts times and
// reports failure if readers still hold it.
func (s *Store) truncateWAL(ctx context.Context) (err error) {
	conn, err := s.db.RawDB.Conn(ctx)
	if err != nil {
		return fmt.Errorf("failed to get a connection to checkpoint: %w", err)
	}
	defer conn.Close()
	var busyTimeout int
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busyTimeout); err != nil {
		return fmt.Errorf("failed to read the busy timeout: %w", err)
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", checkpointBusyMS)); err != nil {
		return fmt.Errorf("failed to set the busy timeout: %w", err)
	}
	defer func() {
		if _, rerr := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", busyTimeout)); rerr != nil {
			// Never return a connection with the short timeout to the pool.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	for attempt := 1; ; attempt++ {
		var busy, logFrames, checkpointed int
		if err := conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logFrames, &checkpointed); err != nil {
			return fmt.Errorf("failed to checkpoint the write-ahead log: %w", err)
		}
		if busy == 0 {
			return nil
		}
		if attempt == checkpointAttempts {
			return fmt.Errorf("failed to checkpoint the write-ahead log: readers kept it busy through %d attempts", attempt)
		}
		select {
		case <-time.After(checkpointPause):
		case <-ctx.Done():
			return fmt.Errorf("failed to checkpoint the write-ahead log: %w", ctx.Err())
		}
	}
}

// Limits on stored values.
const (
	// MaxNameBytes bounds users, apps, grant subjects and app versions.
	MaxNameBytes = 255
	// MaxKeyRunes bounds document collections and IDs.
	MaxKeyRunes = 64
	// MaxDocBytes bounds one document body.
	MaxDocBytes = 256 << 10
	// MaxContentBytes bounds one memory entry; it matches the ISC frame limit.
	MaxContentBytes = 1 << 20
	// MaxListLimit caps every limit argument; a limit ≤ 0 means MaxListLimit.
	MaxListLimit = 1000
)

// checkName validates a user, app, subject or other identifier.
func checkName(what, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	case len(v) > MaxNameBytes:
		return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalid, what, MaxNameBytes)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, what)
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %s contains a control character", ErrInvalid, what)
	}
	return nil
}

// checkKey validates a document collection or ID: 1 to MaxKeyRunes printable
// characters.
func checkKey(what, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, what)
	case utf8.RuneCountInString(v) > MaxKeyRunes:
		return fmt.Errorf("%w: %s longer than %d characters", ErrInvalid, what, MaxKeyRunes)
	case strings.IndexFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("%w: %s contains a non-printable character", ErrInvalid, what)
	}
	return nil
}

// checkContent bounds a memory entry.
func checkContent(v string) error {
	if len(v) > MaxContentBytes {
		return fmt.Errorf("%w: content longer than %d bytes", ErrInvalid, MaxContentBytes)
	}
	return nil
}

// listLimit applies MaxListLimit.
func listLimit(limit int) int {
	if limit <= 0 || limit > MaxListLimit {
		return MaxListLimit
	}
	return limit
}
