package bot

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"go.mau.fi/util/dbutil"
	"maunium.net/go/mautrix/id"

	"github.com/secgpt/secgpt/store"
)

// VersionTable holds the schema version of the bot's tables.
const VersionTable = "secgpt_bot_version"

//go:embed upgrades/*.sql
var upgradeFiles embed.FS

var upgradeTable = dbutil.BuildUpgradeTable().WithFSPath(upgradeFiles, "upgrades").Finish()

// Inbox row states.
const (
	stateQueued  = "queued"
	stateWorking = "working"
	// stateSending: the reply's text and transaction ID are stored and the
	// reply is being sent; a restart sends it again under the same ID.
	stateSending     = "sending"
	stateAnswered    = "answered"
	stateRefused     = "refused"
	stateInterrupted = "interrupted"
	// stateFailed: the answer could not be sent, and the user is still to
	// be told; stateReported: they were told.
	stateFailed   = "failed"
	stateReported = "reported"
)

// Prompt states.
const (
	promptPending = "pending"
	promptDecided = "decided"
	promptExpired = "expired"
)

// ErrPickleKeyChanged is returned at start when the configured pickle key
// is not the one the crypto store was created with: the device's keys could
// not be read with it.
var ErrPickleKeyChanged = errors.New("the crypto pickle key differs from the one this database was created with")

// botDB is the bot's tables in the shared database. Its writes go through
// the store's group commit (store.Store.Write): one sync for the writes of
// many messages, the hub's included. Each waits for its commit: each is
// followed by something a crash must not find without it (the sync
// position after a message's entry, an app's run after its message is
// marked working, a reply sent after it is stored, the next message after
// a reply's end, which a restart would send again).
type botDB struct {
	db *dbutil.Database
	st *store.Store
}

func openBotDB(ctx context.Context, st *store.Store, log zerolog.Logger) (*botDB, error) {
	db := st.DB().Child(VersionTable, upgradeTable, dbutil.ZeroLogger(log.With().Str("db_section", "bot").Logger()))
	if err := db.Upgrade(ctx); err != nil {
		return nil, fmt.Errorf("failed to upgrade bot tables: %w", err)
	}
	return &botDB{db: db, st: st}, nil
}

// inWrite marks the context of a write the committer runs: statements
// under it run in the write's transaction.
type inWrite struct{}

// write runs fn in the store's next group commit and returns once it is
// durable; inside a write already, it runs fn there.
func (d *botDB) write(ctx context.Context, fn func(ctx context.Context) error) error {
	if ctx.Value(inWrite{}) != nil {
		return fn(ctx)
	}
	return d.st.Write(ctx, func(ctx context.Context) error { return fn(context.WithValue(ctx, inWrite{}, true)) })
}

// exec runs one statement as a write (see write) and returns the rows it
// changed.
func (d *botDB) exec(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := d.write(ctx, func(ctx context.Context) error {
		res, err := d.db.Exec(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

func now() int64 { return time.Now().UnixNano() }

// pickleKey returns the key the crypto store is pickled with. A configured
// key is used as given; otherwise one is generated on first start and kept.
// Either way its fingerprint is kept, so a changed key fails here, at start,
// rather than as unreadable device keys later.
func (d *botDB) pickleKey(ctx context.Context, configured []byte) ([]byte, error) {
	var stored string
	err := d.db.QueryRow(ctx, "SELECT value FROM bot_meta WHERE key='pickle_key'").Scan(&stored)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("failed to read pickle key: %w", err)
	}
	key := configured
	if len(key) == 0 && stored != "" {
		if key, err = base64.StdEncoding.DecodeString(stored); err != nil {
			return nil, fmt.Errorf("failed to decode stored pickle key: %w", err)
		}
	}
	if len(key) == 0 {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("failed to generate pickle key: %w", err)
		}
		if _, err := d.exec(ctx, "INSERT INTO bot_meta (key, value) VALUES ('pickle_key', $1)", base64.StdEncoding.EncodeToString(key)); err != nil {
			return nil, fmt.Errorf("failed to store pickle key: %w", err)
		}
	}
	sum := sha256.Sum256(key)
	fp := hex.EncodeToString(sum[:])
	var storedFP string
	err = d.db.QueryRow(ctx, "SELECT value FROM bot_meta WHERE key='pickle_key_sha256'").Scan(&storedFP)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := d.exec(ctx, "INSERT INTO bot_meta (key, value) VALUES ('pickle_key_sha256', $1)", fp); err != nil {
			return nil, fmt.Errorf("failed to store pickle key fingerprint: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("failed to read pickle key fingerprint: %w", err)
	case storedFP != fp:
		return nil, ErrPickleKeyChanged
	}
	return key, nil
}

// metaAccessToken names the access token of the last password login in
// bot_meta, reused at the next start (see Bot.reuseToken).
const metaAccessToken = "access_token"

// meta returns a bot_meta value, "" when unset.
func (d *botDB) meta(ctx context.Context, key string) (string, error) {
	var v string
	err := d.db.QueryRow(ctx, "SELECT value FROM bot_meta WHERE key=$1", key).Scan(&v)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("failed to read %s: %w", key, err)
	}
	return v, nil
}

// setMeta stores a bot_meta value.
func (d *botDB) setMeta(ctx context.Context, key, value string) error {
	_, err := d.exec(ctx, "INSERT INTO bot_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value=excluded.value", key, value)
	if err != nil {
		return fmt.Errorf("failed to store %s: %w", key, err)
	}
	return nil
}

// inboxRow is one accepted incoming message.
type inboxRow struct {
	Seq        int64
	EventID    id.EventID
	RoomID     id.RoomID
	UserID     id.UserID
	ThreadRoot id.EventID
	Kind       string
	Body       string
	State      string
}

const inboxColumns = "seq, event_id, room_id, user_id, thread_root, kind, body, state"

func scanInbox(row dbutil.Scannable) (inboxRow, error) {
	var r inboxRow
	err := row.Scan(&r.Seq, &r.EventID, &r.RoomID, &r.UserID, &r.ThreadRoot, &r.Kind, &r.Body, &r.State)
	return r, err
}

// seen reports whether the event is already in the inbox.
func (d *botDB) seen(ctx context.Context, evt id.EventID) (bool, error) {
	var n int
	if err := d.db.QueryRow(ctx, "SELECT COUNT(*) FROM bot_inbox WHERE event_id=$1", evt).Scan(&n); err != nil {
		return false, fmt.Errorf("failed to look up inbox: %w", err)
	}
	return n > 0, nil
}

// add records a message in the given state. It reports false when the event
// was already recorded (a replayed sync), in which case nothing changes.
func (d *botDB) add(ctx context.Context, r inboxRow) (bool, error) {
	t := now()
	n, err := d.exec(ctx, `INSERT INTO bot_inbox
		(event_id, room_id, user_id, thread_root, kind, body, state, received_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) ON CONFLICT (event_id) DO NOTHING`,
		r.EventID, r.RoomID, r.UserID, r.ThreadRoot, r.Kind, r.Body, r.State, t)
	if err != nil {
		return false, fmt.Errorf("failed to add to inbox: %w", err)
	}
	return n == 1, nil
}

// waiting counts the user's messages queued or being served.
func (d *botDB) waiting(ctx context.Context, user id.UserID) (int, error) {
	var n int
	err := d.db.QueryRow(ctx, "SELECT COUNT(*) FROM bot_inbox WHERE user_id=$1 AND state IN ('queued', 'working')", user).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("failed to count queued messages: %w", err)
	}
	return n, nil
}

// next returns the user's oldest queued message.
func (d *botDB) next(ctx context.Context, user id.UserID) (inboxRow, bool, error) {
	r, err := scanInbox(d.db.QueryRow(ctx, "SELECT "+inboxColumns+" FROM bot_inbox WHERE user_id=$1 AND state='queued' ORDER BY seq LIMIT 1", user))
	if errors.Is(err, sql.ErrNoRows) {
		return inboxRow{}, false, nil
	} else if err != nil {
		return inboxRow{}, false, fmt.Errorf("failed to read inbox: %w", err)
	}
	return r, true, nil
}

// setState moves a message to state, recording the answer's event ID if any.
func (d *botDB) setState(ctx context.Context, evt id.EventID, state string, answer id.EventID) error {
	_, err := d.exec(ctx, "UPDATE bot_inbox SET state=$2, answer_event_id=$3, updated_at=$4 WHERE event_id=$1", evt, state, answer, now())
	if err != nil {
		return fmt.Errorf("failed to update inbox: %w", err)
	}
	return nil
}

// reply is a message's reply, stored before it is sent.
type reply struct {
	Row             inboxRow
	Txn, Text, Kind string
	// Done is the message's state once the reply went out.
	Done string
	// Since is when the reply was stored to be sent (read back only for
	// replies found being sent at start).
	Since time.Time
}

// startSending stores r's text and transaction ID and marks its message
// sending, before the reply goes out: from here on a restart sends the
// same reply under the same ID rather than anything else.
func (d *botDB) startSending(ctx context.Context, r reply) error {
	_, err := d.exec(ctx, "UPDATE bot_inbox SET state=$2, reply_txn=$3, reply_text=$4, reply_kind=$5, reply_done=$6, updated_at=$7 WHERE event_id=$1",
		r.Row.EventID, stateSending, r.Txn, r.Text, r.Kind, r.Done, now())
	if err != nil {
		return fmt.Errorf("failed to store a reply: %w", err)
	}
	return nil
}

// finishSending moves a sending message to state and erases the reply's
// text, which may hold what the user later asks to forget.
func (d *botDB) finishSending(ctx context.Context, evt id.EventID, state string, answer id.EventID) error {
	// Waited for: a crash that lost it would send the reply again, and
	// the homeserver does not take a transaction ID sent again after a
	// restart as the same (TestExactlyOnceAcrossSIGKILLInABurst).
	_, err := d.exec(ctx, "UPDATE bot_inbox SET state=$2, answer_event_id=$3, reply_text='', reply_txn='', reply_kind='', reply_done='', updated_at=$4 WHERE event_id=$1",
		evt, state, answer, now())
	if err != nil {
		return fmt.Errorf("failed to update inbox: %w", err)
	}
	return nil
}

// sending returns the replies that were being sent when the bot stopped.
func (d *botDB) sending(ctx context.Context) ([]reply, error) {
	rows, err := d.db.Query(ctx, "SELECT "+inboxColumns+", reply_txn, reply_text, reply_kind, reply_done, updated_at FROM bot_inbox WHERE state=$1 ORDER BY seq", stateSending)
	return dbutil.NewRowIterWithError(rows, func(s dbutil.Scannable) (reply, error) {
		var r reply
		var since int64
		row := &r.Row
		err := s.Scan(&row.Seq, &row.EventID, &row.RoomID, &row.UserID, &row.ThreadRoot, &row.Kind, &row.Body, &row.State, &r.Txn, &r.Text, &r.Kind, &r.Done, &since)
		r.Since = time.Unix(0, since)
		return r, err
	}, err).AsList()
}

// interruptWorking turns every message found being served (the bot
// stopped while serving it) into a stored reply saying so, sent like an
// answer: once, even across another crash; or, where notice reports false
// (the user hears of it otherwise), marks it interrupted. It runs once at
// start, before any message is served.
func (d *botDB) interruptWorking(ctx context.Context, notice func(inboxRow) (reply, bool)) error {
	return d.write(ctx, func(ctx context.Context) error {
		rows, err := d.db.Query(ctx, "SELECT "+inboxColumns+" FROM bot_inbox WHERE state=$1", stateWorking)
		working, err := dbutil.NewRowIterWithError(rows, scanInbox, err).AsList()
		if err != nil {
			return fmt.Errorf("failed to read interrupted messages: %w", err)
		}
		for _, r := range working {
			n, ok := notice(r)
			if !ok {
				if err := d.setState(ctx, r.EventID, stateInterrupted, ""); err != nil {
					return err
				}
				continue
			}
			if err := d.startSending(ctx, n); err != nil {
				return err
			}
		}
		return nil
	})
}

// queuedUsers returns the users with queued messages.
func (d *botDB) queuedUsers(ctx context.Context) ([]id.UserID, error) {
	rows, err := d.db.Query(ctx, "SELECT DISTINCT user_id FROM bot_inbox WHERE state='queued'")
	return dbutil.NewRowIterWithError(rows, func(s dbutil.Scannable) (id.UserID, error) {
		var u id.UserID
		return u, s.Scan(&u)
	}, err).AsList()
}

// undelivered returns the messages whose answers could not be sent and
// whose senders were not told yet: user's, or everyone's for "".
func (d *botDB) undelivered(ctx context.Context, user id.UserID) ([]inboxRow, error) {
	rows, err := d.db.Query(ctx, "SELECT "+inboxColumns+" FROM bot_inbox WHERE state=$1 AND ($2='' OR user_id=$2) ORDER BY seq", stateFailed, user)
	return dbutil.NewRowIterWithError(rows, scanInbox, err).AsList()
}

// claimUndelivered marks a failed message reported, and reports false when
// it no longer was failed: someone else is telling the user.
func (d *botDB) claimUndelivered(ctx context.Context, evt id.EventID) (bool, error) {
	n, err := d.exec(ctx, "UPDATE bot_inbox SET state=$2, updated_at=$3 WHERE event_id=$1 AND state=$4", evt, stateReported, now(), stateFailed)
	if err != nil {
		return false, fmt.Errorf("failed to update inbox: %w", err)
	}
	return n == 1, nil
}

// forget erases the text of the user's messages and of the prompts that
// asked them, which show their data: the rows stay, so that a replayed
// event is still recognised and a prompt left open can still be closed.
func (d *botDB) forget(ctx context.Context, user id.UserID) error {
	return d.write(ctx, func(ctx context.Context) error {
		if _, err := d.exec(ctx, "UPDATE bot_inbox SET body='' WHERE user_id=$1 AND state NOT IN ('queued', 'working', 'sending')", user); err != nil {
			return fmt.Errorf("failed to erase inbox: %w", err)
		}
		if _, err := d.exec(ctx, "UPDATE bot_prompts SET markdown='' WHERE user_id=$1", user); err != nil {
			return fmt.Errorf("failed to erase prompts: %w", err)
		}
		return nil
	})
}

// prompt is one consent prompt.
type prompt struct {
	EventID      id.EventID
	RoomID       id.RoomID
	UserID       id.UserID
	QueryEventID id.EventID
	// Markdown is the prompt as its close needs it (storedPrompt, JSON): its
	// text without the instructions for answering, which the edit showing
	// the outcome drops, and the reactions the bot seeded. The column kept
	// its first name.
	Markdown string
	Expires  time.Time
}

func (d *botDB) addPrompt(ctx context.Context, p prompt) error {
	_, err := d.exec(ctx, `INSERT INTO bot_prompts
		(event_id, room_id, user_id, query_event_id, markdown, state, expires_at, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		p.EventID, p.RoomID, p.UserID, p.QueryEventID, p.Markdown, promptPending, p.Expires.UnixNano(), now())
	if err != nil {
		return fmt.Errorf("failed to record prompt: %w", err)
	}
	return nil
}

// closePrompt records a prompt's end.
func (d *botDB) closePrompt(ctx context.Context, evt id.EventID, state, outcome string) error {
	_, err := d.exec(ctx, "UPDATE bot_prompts SET state=$2, outcome=$3 WHERE event_id=$1", evt, state, outcome)
	if err != nil {
		return fmt.Errorf("failed to close prompt: %w", err)
	}
	return nil
}

// setPromptText updates what a prompt's close needs (prompt.Markdown).
func (d *botDB) setPromptText(ctx context.Context, evt id.EventID, text string) error {
	if _, err := d.exec(ctx, "UPDATE bot_prompts SET markdown=$2 WHERE event_id=$1 AND markdown<>''", evt, text); err != nil {
		return fmt.Errorf("failed to update prompt: %w", err)
	}
	return nil
}

// promptOwner returns the user a consent prompt asked, and false when evt
// is none of the bot's prompts.
func (d *botDB) promptOwner(ctx context.Context, evt id.EventID) (id.UserID, bool, error) {
	var user id.UserID
	err := d.db.QueryRow(ctx, "SELECT user_id FROM bot_prompts WHERE event_id=$1", evt).Scan(&user)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("failed to look up prompt: %w", err)
	}
	return user, true, nil
}

// pendingPrompts returns the prompts still open.
func (d *botDB) pendingPrompts(ctx context.Context) ([]prompt, error) {
	rows, err := d.db.Query(ctx, "SELECT event_id, room_id, user_id, query_event_id, markdown, expires_at FROM bot_prompts WHERE state=$1", promptPending)
	return dbutil.NewRowIterWithError(rows, func(s dbutil.Scannable) (prompt, error) {
		var p prompt
		var exp int64
		err := s.Scan(&p.EventID, &p.RoomID, &p.UserID, &p.QueryEventID, &p.Markdown, &exp)
		p.Expires = time.Unix(0, exp)
		return p, err
	}, err).AsList()
}

// addSent records one of the bot's own messages.
func (d *botDB) addSent(ctx context.Context, evt id.EventID, room id.RoomID, kind string) error {
	_, err := d.exec(ctx, "INSERT INTO bot_sent (event_id, room_id, kind, sent_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING", evt, room, kind, now())
	if err != nil {
		return fmt.Errorf("failed to record sent message: %w", err)
	}
	return nil
}

// isSent reports whether evt is one of the bot's own messages.
func (d *botDB) isSent(ctx context.Context, evt id.EventID) (bool, error) {
	var n int
	if err := d.db.QueryRow(ctx, "SELECT COUNT(*) FROM bot_sent WHERE event_id=$1", evt).Scan(&n); err != nil {
		return false, fmt.Errorf("failed to look up sent message: %w", err)
	}
	return n > 0, nil
}

// prune drops finished records older than before. Inbox rows are kept
// this long so that a replayed event is recognised; the homeserver does not
// replay older ones.
func (d *botDB) prune(ctx context.Context, before time.Time) error {
	t := before.UnixNano()
	for _, q := range []string{
		"DELETE FROM bot_inbox WHERE updated_at < $1 AND state NOT IN ('queued', 'working', 'sending')",
		"DELETE FROM bot_prompts WHERE created_at < $1 AND state <> 'pending'",
		"DELETE FROM bot_sent WHERE sent_at < $1",
	} {
		if _, err := d.exec(ctx, q, t); err != nil {
			return fmt.Errorf("failed to prune bot tables: %w", err)
		}
	}
	return nil
}
