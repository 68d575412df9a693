// Package bot is secgpt's Matrix front end: it logs in, syncs, accepts or
// declines invites, keeps a durable inbox of the messages addressed to it,
// serves each user's messages in order through the hub, answers commands,
// and turns the hub's consent requests into prompts answered by reaction
// or reply. Encrypted rooms work through mautrix's cryptohelper (goolm), with
// the device's keys in the same SQLite file as everything else.
//
// The bot never calls an app or the model itself and never decides a
// permission: it carries the asking user's answer to the hub, and only
// that user's. Every Matrix user is their own principal to the hub (the
// sender's user ID, never a display name or a room), also in a shared room.
// Handlers never block /sync: they record and hand over.
package bot

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto/cryptohelper"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/store"
)

// Hub is what the bot needs of the hub. Every method acts for one user.
type Hub interface {
	Handle(ctx context.Context, req hub.Request) (*hub.Reply, error)
	Reset(ctx context.Context, user string) error
	Forget(ctx context.Context, user string) error
	Grants(ctx context.Context, user string) ([]store.Grant, error)
	Revoke(ctx context.Context, user, app string) (int, error)
	Audit(ctx context.Context, user string, limit int) ([]store.AuditEntry, error)
	Usage(ctx context.Context, user string) (hub.UsageReport, error)
	Apps() []apps.Spec
}

var _ Hub = (*hub.Hub)(nil)

// Options configure a Bot. Zero values take the defaults noted.
type Options struct {
	// Homeserver is the client-server API base URL.
	Homeserver string
	UserID     id.UserID
	// Exactly one of Password and AccessToken logs in. A password login
	// reuses the device stored in the database; an access token must belong
	// to a device this database created, or to a fresh one.
	Password    string
	AccessToken string
	// DeviceName is the display name of a new device (default "secgpt").
	DeviceName string
	// DisplayName, if set, becomes the bot's display name at start.
	DisplayName string
	// PickleKey encrypts the device's keys at rest. Empty: one is generated
	// on first start and kept in the database. It must never change.
	PickleKey []byte

	// Allow are the user ID patterns (see allowList) of users who may invite
	// the bot and talk to it. Empty allows no one.
	Allow []string
	// Prefix starts a command or addresses the bot in a shared room
	// (default "!"); RoomPrefixes override it per room.
	Prefix       string
	RoomPrefixes map[id.RoomID]string

	// RateMessages per RateWindow is each user's rate (default 10 per
	// minute); MaxQueued is how many of a user's messages may wait behind
	// the one being served (default 3); MaxMessageBytes is the longest
	// message accepted (default 8 KiB).
	RateMessages    int
	RateWindow      time.Duration
	MaxQueued       int
	MaxMessageBytes int
	// ConsentSettle is how long a reaction must stand before it counts, so
	// that one removed at once is no answer (default 2 s).
	ConsentSettle time.Duration
	// AuditEntries is how many decisions !audit shows (default 10).
	AuditEntries int

	// Store is the project's store: the bot keeps its tables, written
	// through the store's group commit, and mautrix's crypto and state
	// stores in its database.
	Store *store.Store
	Hub   Hub
	Log   zerolog.Logger
}

func (o *Options) setDefaults() {
	if o.DeviceName == "" {
		o.DeviceName = "secgpt"
	}
	if o.Prefix == "" {
		o.Prefix = "!"
	}
	if o.RateMessages <= 0 {
		o.RateMessages = 10
	}
	if o.RateWindow <= 0 {
		o.RateWindow = time.Minute
	}
	if o.MaxQueued <= 0 {
		o.MaxQueued = 3
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 8 << 10
	}
	if o.ConsentSettle <= 0 {
		o.ConsentSettle = 2 * time.Second
	}
	if o.AuditEntries <= 0 {
		o.AuditEntries = 10
	}
}

// Bot is a running Matrix front end. Create it with New, run it with Run.
type Bot struct {
	opts    Options
	log     zerolog.Logger
	db      *botDB
	hub     Hub
	allow   allowList
	limiter *rateLimiter
	prompts *prompts

	cli    *mautrix.Client
	crypto *cryptohelper.CryptoHelper
	syncer *syncer
	me     addressee

	// runCtx ends when Run returns; work started by handlers uses it.
	runCtx context.Context
	// bgMu guards stopping, after which no background work starts: Run
	// waits for wg, and a late handler must not add to it meanwhile.
	bgMu     sync.Mutex
	stopping bool
	wg       sync.WaitGroup

	queueMu sync.Mutex
	queues  map[id.UserID]*userQueue

	joinMu  sync.Mutex
	joining map[id.RoomID]bool

	noticeMu    sync.Mutex
	lastRefusal map[id.UserID]time.Time
	lastUTD     map[id.RoomID]time.Time

	// dmMu serialises finding or creating direct chats, so that parallel
	// prompts for one user do not create two; dms remembers them.
	dmMu sync.Mutex
	dms  map[id.UserID]id.RoomID

	// retryWaits are the pauses between attempts to send an answer.
	retryWaits []time.Duration
}

// New checks the options and prepares the bot's tables. It does not touch
// the network.
func New(ctx context.Context, opts Options) (*Bot, error) {
	opts.setDefaults()
	switch {
	case opts.Store == nil || opts.Hub == nil:
		return nil, errors.New("bot needs a database and a hub")
	case opts.Homeserver == "":
		return nil, errors.New("bot needs a homeserver URL")
	case (opts.Password == "") == (opts.AccessToken == ""):
		return nil, errors.New("bot needs exactly one of a password and an access token")
	}
	if _, _, err := opts.UserID.Parse(); err != nil {
		return nil, fmt.Errorf("bad bot user ID: %w", err)
	}
	allow, err := parseAllowList(opts.Allow)
	if err != nil {
		return nil, err
	}
	db, err := openBotDB(ctx, opts.Store, opts.Log)
	if err != nil {
		return nil, err
	}
	names := []string{opts.UserID.Localpart()}
	if opts.DisplayName != "" {
		names = append(names, opts.DisplayName)
	}
	b := &Bot{
		opts: opts, log: opts.Log, db: db, hub: opts.Hub, allow: allow,
		limiter:     newRateLimiter(opts.RateMessages, opts.RateWindow),
		me:          addressee{ID: opts.UserID, Names: names},
		queues:      map[id.UserID]*userQueue{},
		joining:     map[id.RoomID]bool{},
		lastRefusal: map[id.UserID]time.Time{},
		lastUTD:     map[id.RoomID]time.Time{},
		dms:         map[id.UserID]id.RoomID{},
		retryWaits:  []time.Duration{2 * time.Second, 10 * time.Second, 30 * time.Second},
	}
	b.prompts = newPrompts(opts.ConsentSettle, b.log)
	return b, nil
}

// Run logs in, restores what a restart interrupted, and syncs until ctx
// ends. It returns nil when ctx ended, or the error that stopped the sync.
func (b *Bot) Run(ctx context.Context) error {
	ctx = b.log.WithContext(ctx)
	runCtx, cancel := context.WithCancel(ctx)
	defer func() {
		b.bgMu.Lock()
		b.stopping = true
		b.bgMu.Unlock()
		cancel()
		b.wg.Wait()
	}()
	b.runCtx = runCtx
	if err := b.login(runCtx); err != nil {
		return err
	}
	b.register()
	b.setDisplayName(runCtx)
	if err := b.resume(runCtx); err != nil {
		return err
	}
	b.goBackground(b.pruneLoop)
	b.log.Info().Str("user_id", b.cli.UserID.String()).Str("device_id", b.cli.DeviceID.String()).Msg("Bot started")
	err := b.cli.SyncWithContext(runCtx)
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("failed to sync: %w", err)
}

// login authenticates and brings up end-to-end encryption. The crypto
// state, the sync token and the room state live in the shared database.
func (b *Bot) login(ctx context.Context) error {
	key, err := b.db.pickleKey(ctx, b.opts.PickleKey)
	if err != nil {
		return err
	}
	cli, err := mautrix.NewClient(b.opts.Homeserver, b.opts.UserID, b.opts.AccessToken)
	if err != nil {
		return fmt.Errorf("failed to create Matrix client: %w", err)
	}
	cli.Log = b.log.With().Str("component", "matrix").Logger()
	// Sends are PUTs with a transaction ID: retrying one cannot duplicate it.
	cli.DefaultHTTPRetries = 3
	b.syncer = newSyncer(b)
	cli.Syncer = b.syncer
	b.cli = cli
	ch, err := cryptohelper.NewCryptoHelper(cli, key, b.opts.Store.DB())
	if err != nil {
		return fmt.Errorf("failed to set up encryption: %w", err)
	}
	switch {
	case b.opts.Password != "" && b.reuseToken(ctx, cli):
	case b.opts.Password != "":
		ch.LoginAs = &mautrix.ReqLogin{
			Type:                     mautrix.AuthTypePassword,
			Identifier:               mautrix.UserIdentifier{Type: mautrix.IdentifierTypeUser, User: b.opts.UserID.String()},
			Password:                 b.opts.Password,
			InitialDeviceDisplayName: b.opts.DeviceName,
		}
	default:
		if err := b.checkToken(ctx, cli); err != nil {
			return err
		}
	}
	// The syncer holds back the sync token while an event waits for its
	// keys; these two are the ends of that wait.
	ch.CustomPostDecrypt = func(ctx context.Context, evt *event.Event) {
		b.syncer.Dispatch(ctx, evt)
		b.syncer.settle(ctx, evt.ID)
	}
	ch.DecryptErrorCallback = func(evt *event.Event, err error) {
		b.onDecryptError(evt, err)
		b.syncer.settle(b.runCtx, evt.ID)
	}
	if err := ch.Init(ctx); err != nil {
		return fmt.Errorf("failed to log in and start encryption: %w", err)
	}
	if ch.LoginAs != nil {
		if err := b.db.setMeta(ctx, metaAccessToken, cli.AccessToken); err != nil {
			return err
		}
	}
	cli.Crypto = ch
	b.crypto = ch
	// The crypto store holds the sync token. mautrix saves a token before
	// its events are handled; the syncer saves it after, so a crash never
	// skips an event the inbox has not recorded.
	b.syncer.tokens = &deferredTokens{SyncStore: cli.Store, user: cli.UserID}
	cli.Store = b.syncer.tokens
	return nil
}

// reuseToken logs cli in with the access token the last password login
// stored, and reports whether it still works. Transaction IDs are scoped
// to an access token: a reply sent again after a restart is deduplicated
// by the homeserver only under the token it was first sent with.
func (b *Bot) reuseToken(ctx context.Context, cli *mautrix.Client) bool {
	token, err := b.db.meta(ctx, metaAccessToken)
	if err != nil || token == "" {
		return false
	}
	cli.AccessToken = token
	if err := b.checkToken(ctx, cli); err != nil {
		b.log.Info().Err(err).Msg("The stored access token no longer works; logging in with the password")
		cli.AccessToken, cli.DeviceID = "", ""
		return false
	}
	return true
}

// checkToken makes sure cli's access token is the bot's and takes its
// device.
func (b *Bot) checkToken(ctx context.Context, cli *mautrix.Client) error {
	who, err := cli.Whoami(ctx)
	if err != nil {
		return fmt.Errorf("failed to check the access token: %w", err)
	}
	if who.UserID != b.opts.UserID {
		return fmt.Errorf("the access token belongs to %s, not %s", who.UserID, b.opts.UserID)
	}
	if who.DeviceID == "" {
		return errors.New("the homeserver did not say which device the access token belongs to")
	}
	cli.DeviceID = who.DeviceID
	return nil
}

// setDisplayName sets the configured display name, only when it differs:
// a change is a new member event in every room.
func (b *Bot) setDisplayName(ctx context.Context) {
	if b.opts.DisplayName == "" {
		return
	}
	if cur, err := b.cli.GetOwnDisplayName(ctx); err == nil && cur.DisplayName == b.opts.DisplayName {
		return
	}
	if err := b.cli.SetDisplayName(ctx, b.opts.DisplayName); err != nil {
		b.log.Warn().Err(err).Msg("Failed to set display name")
	}
}

// register installs the event handlers, after the crypto machine's, so it
// has read each sync's keys before a handler sees its events.
func (b *Bot) register() {
	s := b.syncer
	s.OnSync(s.beforeDispatch)
	s.OnEventType(event.EventEncrypted, s.afterEncrypted)
	s.OnEventType(event.EventMessage, b.guard(b.onMessage))
	s.OnEventType(event.EventReaction, b.guard(b.onReaction))
	s.OnEventType(event.EventRedaction, b.guard(b.onRedaction))
	s.OnEventType(event.StateMember, b.guard(b.onMember))
}

// guard keeps one bad event from stopping the sync: a panic in a handler is
// logged and the event dropped.
func (b *Bot) guard(h mautrix.EventHandler) mautrix.EventHandler {
	return func(ctx context.Context, evt *event.Event) {
		defer func() {
			if r := recover(); r != nil {
				b.log.Error().Any("panic", r).Str("stack", string(debug.Stack())).Str("event_id", evt.ID.String()).Str("event_type", evt.Type.Type).Msg("Event handler panicked; event dropped")
			}
		}()
		h(ctx, evt)
	}
}

// goBackground runs fn on the bot's run context and waits for it at exit.
// Once the bot is stopping it starts nothing and reports false.
func (b *Bot) goBackground(fn func(ctx context.Context)) bool {
	b.bgMu.Lock()
	defer b.bgMu.Unlock()
	if b.stopping {
		return false
	}
	b.wg.Add(1)
	go b.runGuarded(fn)
	return true
}

// runGuarded runs fn for goBackground: a panic in one piece of background
// work is logged, not the end of the bot.
func (b *Bot) runGuarded(fn func(ctx context.Context)) {
	defer b.wg.Done()
	defer func() {
		if r := recover(); r != nil {
			b.log.Error().Any("panic", r).Str("stack", string(debug.Stack())).Msg("Background work panicked")
		}
	}()
	fn(b.runCtx)
}

// resume handles what the last run left: prompts still open are edited to
// show they expired, messages being served get a notice saying so, replies
// being sent are sent again under their transaction IDs (each reaches the
// room once), and queued messages are served again.
func (b *Bot) resume(ctx context.Context) error {
	pending, err := b.db.pendingPrompts(ctx)
	if err != nil {
		return err
	}
	// A message whose prompt was open hears of the restart in the prompt's
	// edit, not in a notice of its own.
	prompted := map[id.EventID]bool{}
	for _, p := range pending {
		prompted[p.QueryEventID] = true
		o := outcome{kind: outcomeRestart}
		if err := b.db.closePrompt(ctx, p.EventID, promptExpired, outcomeLine(o)); err != nil {
			return err
		}
		b.closePromptEvent(ctx, p.RoomID, p.EventID, readStoredPrompt(p.Markdown), o)
	}
	// A message found being served gets a notice instead of its answer,
	// stored and sent like one: once, even if the bot stops again.
	err = b.db.interruptWorking(ctx, func(r inboxRow) (reply, bool) {
		if prompted[r.EventID] && r.Kind != kindCommand {
			return reply{}, false // told in its prompt's edit
		}
		msg := "I restarted while I was working on this message, so it was not finished, and any permission request for it has expired. I did not start it again, because an app may already have acted on it: send it again if you still want it."
		if r.Kind == kindCommand {
			msg = "I restarted while I was working on this command; send it again to be sure it was done."
		}
		return reply{Row: r, Txn: b.cli.TxnID(), Text: msg, Kind: kindNotice, Done: stateInterrupted}, true
	})
	if err != nil {
		return err
	}
	// Replies found being sent go out again under their transaction IDs:
	// the homeserver posts each at most once.
	sending, err := b.db.sending(ctx)
	if err != nil {
		return fmt.Errorf("failed to read replies being sent: %w", err)
	}
	for _, r := range sending {
		evt, err := b.findSent(ctx, r)
		if err != nil {
			// Sent again, under its transaction ID: at worst twice, never lost.
			b.log.Warn().Err(err).Str("event_id", r.Row.EventID.String()).Msg("Failed to check whether a reply was already posted; sending it again")
		} else if evt != "" {
			if err := b.db.addSent(ctx, evt, r.Row.RoomID, r.Kind); err != nil {
				b.log.Warn().Err(err).Msg("Failed to record a sent message")
			}
			if err := b.db.finishSending(ctx, r.Row.EventID, r.Done, evt); err != nil {
				return err
			}
			continue
		}
		if !b.sendStored(ctx, r) {
			return errors.New("failed to record a reply sent again")
		}
	}
	b.reportUndelivered(ctx, "")
	users, err := b.db.queuedUsers(ctx)
	if err != nil {
		return err
	}
	for _, u := range users {
		b.wake(u)
	}
	if n := len(pending) + len(sending); n > 0 {
		b.log.Info().Int("expired_prompts", len(pending)).Int("replies_sent_again", len(sending)).Int("users_queued", len(users)).Msg("Recovered from the last run")
	}
	return nil
}

// inboxRetention is how long finished inbox rows are kept to recognise
// replayed events.
const inboxRetention = 30 * 24 * time.Hour

func (b *Bot) pruneLoop(ctx context.Context) {
	t := time.NewTicker(6 * time.Hour)
	defer t.Stop()
	for {
		if err := b.db.prune(ctx, time.Now().Add(-inboxRetention)); err != nil && ctx.Err() == nil {
			b.log.Warn().Err(err).Msg("Failed to prune bot tables")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// prefixFor is the command prefix of a room.
func (b *Bot) prefixFor(room id.RoomID) string {
	if p, ok := b.opts.RoomPrefixes[room]; ok && p != "" {
		return p
	}
	return b.opts.Prefix
}

// userFacing is what the user is told about a failed query.
func userFacing(err error) string {
	var he *hub.Error
	if errors.As(err, &he) {
		return strings.TrimSpace(he.Message)
	}
	if errors.Is(err, context.Canceled) {
		return "stopped"
	}
	return "something went wrong on my side"
}
