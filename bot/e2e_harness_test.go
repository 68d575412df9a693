//go:build e2e

package bot_test

// The end-to-end harness: a real Dendrite on loopback (one per test
// package), the real secgpt binary run as `secgpt bot` (one per test), and
// users driven by mautrix clients with their own devices and crypto stores.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto/cryptohelper"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
	"maunium.net/go/mautrix/synapseadmin"

	"github.com/secgpt/secgpt/bot"
)

// waitTimeout bounds every wait for the bot; the bot answers in well under
// a second on a quiet machine.
const waitTimeout = 45 * time.Second

var (
	secgptBin   string
	hs          *homeserver
	scratchRoot string
	serial      atomic.Int64
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dendriteBin := os.Getenv("SECGPT_DENDRITE_BIN")
	if dendriteBin == "" {
		// The e2e tag is set, so the suite was asked for: a missing
		// homeserver is a failure, not a skip.
		fmt.Fprintln(os.Stderr, "FAIL: the end-to-end tests need Dendrite: export SECGPT_DENDRITE_BIN=$(scripts/build-dendrite.sh) (scripts/test.sh does)")
		return 1
	}
	binDir, err := os.MkdirTemp("", "secgpt-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(binDir)
	// Spokes run as an unprivileged uid: the binary and its directory must
	// be theirs to execute, and the scratch root theirs to pass through.
	if err := os.Chmod(binDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	secgptBin = filepath.Join(binDir, "secgpt")
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	// Not with -race: spokes run under an address-space limit the race
	// detector's reservations exceed (see spoke/spoketest/binary.go).
	build := exec.Command(goTool, "build", "-tags", "goolm", "-o", secgptBin, "github.com/secgpt/secgpt/cmd/secgpt")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: failed to build secgpt: %v\n%s", err, out)
		return 1
	}
	// The spoke binary, beside secgpt, where secgpt finds it.
	build = exec.Command(goTool, "build", "-tags", "goolm", "-o", filepath.Join(binDir, "secgpt-spoke"), "github.com/secgpt/secgpt/cmd/secgpt-spoke")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: failed to build secgpt-spoke: %v\n%s", err, out)
		return 1
	}
	if scratchRoot, err = os.MkdirTemp("", "secgpt-e2e-scratch-"); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(scratchRoot)
	if err := os.Chmod(scratchRoot, 0o711); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	start := time.Now()
	hs, err = startDendrite(filepath.Join(dendriteBin, "dendrite"), dendriteBin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: failed to start Dendrite:", err)
		return 1
	}
	defer hs.stop()
	fmt.Fprintf(os.Stderr, "e2e: Dendrite ready at %s in %s\n", hs.url, time.Since(start).Round(time.Millisecond))
	return m.Run()
}

// homeserver is a Dendrite on loopback with federation off.
type homeserver struct {
	url    string
	dir    string
	secret string
	cmd    *exec.Cmd
	exited chan struct{}
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	return port, err
}

func startDendrite(dendrite, binDir string) (*homeserver, error) {
	dir, err := os.MkdirTemp("", "secgpt-e2e-dendrite-")
	if err != nil {
		return nil, err
	}
	h := &homeserver{dir: dir}
	run := func(name string, args ...string) ([]byte, error) {
		cmd := exec.Command(filepath.Join(binDir, name), args...)
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %s", name, err, stderr.String())
		}
		return out, nil
	}
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o700); err != nil {
		return nil, err
	}
	if _, err := run("generate-keys", "--private-key", "matrix_key.pem"); err != nil {
		return nil, err
	}
	cfg, err := run("generate-config", "-ci", "-dir", filepath.Join(dir, "data"), "-server", "localhost")
	if err != nil {
		return nil, err
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	h.secret = hex.EncodeToString(b[:])
	cfg = regexp.MustCompile(`disable_federation: false`).ReplaceAll(cfg, []byte("disable_federation: true"))
	cfg = regexp.MustCompile(`registration_shared_secret: \S+`).ReplaceAll(cfg, []byte("registration_shared_secret: "+h.secret))
	cfg = regexp.MustCompile(`level: trace`).ReplaceAll(cfg, []byte("level: warn"))
	// Accounts are made with the shared secret only.
	cfg = regexp.MustCompile(`registration_disabled: false`).ReplaceAll(cfg, []byte("registration_disabled: true"))
	if err := os.WriteFile(filepath.Join(dir, "dendrite.yaml"), cfg, 0o600); err != nil {
		return nil, err
	}
	httpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	httpsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "dendrite.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	h.cmd = exec.Command(dendrite, "-config", "dendrite.yaml",
		"-http-bind-address", "127.0.0.1:"+httpPort, "-https-bind-address", "127.0.0.1:"+httpsPort)
	h.cmd.Dir = dir
	h.cmd.Stdout, h.cmd.Stderr = logf, logf
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // if the test binary dies
	if err := h.cmd.Start(); err != nil {
		return nil, err
	}
	h.exited = make(chan struct{})
	go func() { _ = h.cmd.Wait(); close(h.exited) }()
	h.url = "http://127.0.0.1:" + httpPort
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(h.url + "/_matrix/client/versions")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return h, nil
			}
		}
		exited := false
		select {
		case <-h.exited:
			exited = true
		default:
		}
		if exited || time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "dendrite.log"))
			h.stop()
			return nil, fmt.Errorf("not ready after 30 s: %v\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *homeserver) stop() {
	if h.exited != nil {
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-h.exited:
		case <-time.After(10 * time.Second):
			_ = h.cmd.Process.Kill()
			<-h.exited
		}
	}
	os.RemoveAll(h.dir)
}

// register creates an account with the shared secret, as create-account does.
func (h *homeserver) register(t testing.TB, localpart, password string) id.UserID {
	t.Helper()
	cli, err := mautrix.NewClient(h.url, "", "")
	if err != nil {
		t.Fatal(err)
	}
	admin := synapseadmin.Client{Client: cli}
	resp, err := admin.SharedSecretRegister(context.Background(), h.secret, synapseadmin.ReqSharedSecretRegister{
		Username: localpart, Password: password,
	})
	if err != nil {
		t.Fatalf("failed to register %s: %v", localpart, err)
	}
	return resp.UserID
}

// uniqueName gives each account of the run its own localpart.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, serial.Add(1))
}

// human is a user: a mautrix client with its own device and crypto store,
// syncing in the background and keeping every event it sees.
type human struct {
	t   *testing.T
	id  id.UserID
	cli *mautrix.Client
	ch  *cryptohelper.CryptoHelper

	mu      sync.Mutex
	events  []*event.Event
	typists map[id.UserID]bool
	// invites are the rooms h was invited to, by inviter.
	invites map[id.UserID][]id.RoomID
	changed chan struct{}
}

// newHuman registers a user named name-N ("u-" names match the bots'
// allow patterns) and starts their client.
func newHuman(t *testing.T, name string) *human {
	t.Helper()
	ctx := context.Background()
	localpart := uniqueName(name)
	password := "password-" + localpart
	userID := hs.register(t, localpart, password)
	cli, err := mautrix.NewClient(hs.url, userID, "")
	if err != nil {
		t.Fatal(err)
	}
	h := &human{t: t, id: userID, cli: cli, typists: map[id.UserID]bool{}, invites: map[id.UserID][]id.RoomID{}, changed: make(chan struct{})}
	ch, err := cryptohelper.NewCryptoHelper(cli, []byte("e2e pickle key of "+localpart), filepath.Join(t.TempDir(), "crypto.db"))
	if err != nil {
		t.Fatal(err)
	}
	ch.LoginAs = &mautrix.ReqLogin{
		Type:       mautrix.AuthTypePassword,
		Identifier: mautrix.UserIdentifier{Type: mautrix.IdentifierTypeUser, User: localpart},
		Password:   password,
	}
	ch.DecryptErrorCallback = func(evt *event.Event, err error) {
		t.Logf("%s could not decrypt %s: %v", userID, evt.ID, err)
	}
	if err := ch.Init(ctx); err != nil {
		t.Fatalf("failed to log in %s: %v", userID, err)
	}
	cli.Crypto = ch
	h.ch = ch
	syncer := cli.Syncer.(*mautrix.DefaultSyncer)
	syncer.OnEvent(h.record)
	syncer.OnEventType(event.EphemeralEventTyping, func(_ context.Context, evt *event.Event) {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, u := range evt.Content.AsTyping().UserIDs {
			h.typists[u] = true
		}
	})
	syncer.OnEventType(event.StateMember, func(_ context.Context, evt *event.Event) {
		if evt.Mautrix.EventSource&event.SourceInvite == 0 || evt.GetStateKey() != userID.String() || evt.Content.AsMember().Membership != event.MembershipInvite {
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if !slices.Contains(h.invites[evt.Sender], evt.RoomID) {
			h.invites[evt.Sender] = append(h.invites[evt.Sender], evt.RoomID)
			close(h.changed)
			h.changed = make(chan struct{})
		}
	})
	syncCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := cli.SyncWithContext(syncCtx); err != nil && syncCtx.Err() == nil {
			t.Logf("sync of %s stopped: %v", userID, err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return h
}

func (h *human) record(_ context.Context, evt *event.Event) {
	if evt.Type == event.EventEncrypted || evt.Mautrix.EventSource&event.SourceTimeline == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, evt)
	close(h.changed)
	h.changed = make(chan struct{})
}

// waitFor returns the first event (in arrival order) that matches, waiting
// for it until waitTimeout.
func (h *human) waitFor(what string, match func(*event.Event) bool) *event.Event {
	h.t.Helper()
	deadline := time.After(waitTimeout)
	for {
		h.mu.Lock()
		events, changed := h.events, h.changed
		h.mu.Unlock()
		for _, evt := range events {
			if match(evt) {
				return evt
			}
		}
		select {
		case <-changed:
		case <-deadline:
			h.t.Fatalf("%s: no %s within %s", h.id, what, waitTimeout)
		}
	}
}

// waitInvite waits for an invite from inviter and returns its room.
func (h *human) waitInvite(inviter id.UserID) id.RoomID {
	h.t.Helper()
	deadline := time.After(waitTimeout)
	for {
		h.mu.Lock()
		rooms, changed := h.invites[inviter], h.changed
		h.mu.Unlock()
		if len(rooms) > 0 {
			return rooms[0]
		}
		select {
		case <-changed:
		case <-deadline:
			h.t.Fatalf("%s: no invite from %s within %s", h.id, inviter, waitTimeout)
		}
	}
}

// all returns the events seen so far that match.
func (h *human) all(match func(*event.Event) bool) []*event.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*event.Event
	for _, evt := range h.events {
		if match(evt) {
			out = append(out, evt)
		}
	}
	return out
}

// sawTyping reports whether user was seen typing.
func (h *human) sawTyping(user id.UserID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.typists[user]
}

// createRoom creates a room, inviting others; encrypted rooms start so.
func (h *human) createRoom(encrypted, direct bool, invite ...id.UserID) id.RoomID {
	h.t.Helper()
	req := &mautrix.ReqCreateRoom{Preset: "private_chat", IsDirect: direct, Invite: invite}
	if direct {
		req.Preset = "trusted_private_chat"
	}
	if encrypted {
		req.InitialState = []*event.Event{{
			Type: event.StateEncryption, StateKey: ptr(""),
			Content: event.Content{Parsed: &event.EncryptionEventContent{Algorithm: id.AlgorithmMegolmV1}},
		}}
	}
	resp, err := h.cli.CreateRoom(context.Background(), req)
	if err != nil {
		h.t.Fatalf("failed to create room: %v", err)
	}
	return resp.RoomID
}

// waitMember waits until user's membership in room is m, as h sees it.
func (h *human) waitMember(room id.RoomID, user id.UserID, m event.Membership) {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("%s membership %s", user, m), func(evt *event.Event) bool {
		return evt.RoomID == room && evt.Type == event.StateMember && evt.GetStateKey() == user.String() &&
			evt.Content.AsMember().Membership == m
	})
}

func (h *human) join(room id.RoomID) {
	h.t.Helper()
	if _, err := h.cli.JoinRoomByID(context.Background(), room); err != nil {
		h.t.Fatalf("%s failed to join: %v", h.id, err)
	}
}

// dm opens a direct chat with the bot and waits for it to join.
func (h *human) dm(b *botProc, encrypted bool) id.RoomID {
	h.t.Helper()
	room := h.createRoom(encrypted, true, b.id)
	h.waitMember(room, b.id, event.MembershipJoin)
	return room
}

// say sends a text message and returns its event ID.
func (h *human) say(room id.RoomID, text string) id.EventID {
	h.t.Helper()
	return h.sendMessage(room, &event.MessageEventContent{MsgType: event.MsgText, Body: text})
}

func (h *human) sendMessage(room id.RoomID, c *event.MessageEventContent) id.EventID {
	h.t.Helper()
	resp, err := h.cli.SendMessageEvent(context.Background(), room, event.EventMessage, c)
	if err != nil {
		h.t.Fatalf("%s failed to send: %v", h.id, err)
	}
	return resp.EventID
}

// replyTo sends text as a reply to target.
func (h *human) replyTo(room id.RoomID, target id.EventID, text string) id.EventID {
	h.t.Helper()
	c := &event.MessageEventContent{MsgType: event.MsgText, Body: text}
	c.RelatesTo = (&event.RelatesTo{}).SetReplyTo(target)
	return h.sendMessage(room, c)
}

// react reacts to target; encrypted reactions are sent as Element does.
func (h *human) react(room id.RoomID, target id.EventID, key string, encrypted bool) id.EventID {
	h.t.Helper()
	ctx := context.Background()
	c := &event.ReactionEventContent{RelatesTo: event.RelatesTo{Type: event.RelAnnotation, EventID: target, Key: key}}
	var resp *mautrix.RespSendEvent
	var err error
	if encrypted {
		var enc *event.EncryptedEventContent
		if enc, err = h.ch.Encrypt(ctx, room, event.EventReaction, c); err == nil {
			resp, err = h.cli.SendMessageEvent(ctx, room, event.EventEncrypted, enc)
		}
	} else {
		resp, err = h.cli.SendMessageEvent(ctx, room, event.EventReaction, c)
	}
	if err != nil {
		h.t.Fatalf("%s failed to react: %v", h.id, err)
	}
	return resp.EventID
}

func (h *human) redact(room id.RoomID, target id.EventID) {
	h.t.Helper()
	if _, err := h.cli.RedactEvent(context.Background(), room, target); err != nil {
		h.t.Fatalf("%s failed to redact: %v", h.id, err)
	}
}

// Matching the bot's messages.

func kindOf(evt *event.Event) string {
	k, _ := evt.Content.Raw[bot.KindKey].(string)
	return k
}

func msg(evt *event.Event) *event.MessageEventContent {
	c, _ := evt.Content.Parsed.(*event.MessageEventContent)
	if c == nil {
		return &event.MessageEventContent{}
	}
	return c
}

// botMessage matches a new (not edited) message of kind from b in room
// replying to target.
func botMessage(b *botProc, room id.RoomID, target id.EventID, kind string) func(*event.Event) bool {
	return func(evt *event.Event) bool {
		c := msg(evt)
		return evt.Sender == b.id && evt.RoomID == room && evt.Type == event.EventMessage &&
			c.RelatesTo.GetReplaceID() == "" && kindOf(evt) == kind &&
			(target == "" || c.RelatesTo.GetReplyTo() == target)
	}
}

// editOf matches an edit of target whose new text contains every text.
func editOf(target id.EventID, texts ...string) func(*event.Event) bool {
	return func(evt *event.Event) bool {
		c := msg(evt)
		if evt.Type != event.EventMessage || c.RelatesTo.GetReplaceID() != target || c.NewContent == nil {
			return false
		}
		for _, text := range texts {
			if !strings.Contains(c.NewContent.Body, text) {
				return false
			}
		}
		return true
	}
}

// reactionsOn lists the keys of the reactions by sender on target.
func (h *human) reactionsOn(target id.EventID, sender id.UserID) []string {
	var keys []string
	for _, evt := range h.all(func(evt *event.Event) bool {
		return evt.Type == event.EventReaction && evt.Sender == sender && evt.Content.AsReaction().RelatesTo.EventID == target
	}) {
		keys = append(keys, evt.Content.AsReaction().RelatesTo.Key)
	}
	return keys
}

// ask sends a query and waits for the bot's answer to it.
func (h *human) ask(b *botProc, room id.RoomID, text string) *event.Event {
	h.t.Helper()
	evt := h.say(room, text)
	return h.waitFor("answer to "+text, botMessage(b, room, evt, "answer"))
}

// command sends a command and waits for the bot's reply.
func (h *human) command(b *botProc, room id.RoomID, text string) string {
	h.t.Helper()
	evt := h.say(room, text)
	return msg(h.waitFor("reply to "+text, botMessage(b, room, evt, "reply"))).Body
}

// botProc is the secgpt binary running as a bot.
type botProc struct {
	t        *testing.T
	id       id.UserID
	password string
	// secret is what the bot logs in with: its password or a token.
	secret  string
	dir     string
	config  string
	logPath string
	cfg     map[string]any

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// botOptions are what a test changes in the bot's config.
type botOptions struct {
	consentTimeout time.Duration
	settle         time.Duration
	apps           []string
	allow          []string
	rate           int
	maxQueued      int
	maxMessage     int
	// accessToken logs the bot in with a token from a fresh password login
	// made here (a device without keys), instead of its password.
	accessToken bool
	// homeserver is the URL the bot talks to (default: Dendrite's).
	homeserver string
	// external are apps.external entries of the config.
	external []map[string]any
}

// startBot registers a bot account, writes its config and starts it.
func startBot(t *testing.T, o botOptions) *botProc {
	t.Helper()
	if o.consentTimeout == 0 {
		o.consentTimeout = time.Minute
	}
	if o.settle == 0 {
		o.settle = 1500 * time.Millisecond
	}
	if o.apps == nil {
		o.apps = []string{"metro_hail", "quick_ride"}
	}
	if o.allow == nil {
		o.allow = []string{"@u-*:localhost"}
	}
	if o.rate == 0 {
		o.rate = 100
	}
	if o.maxQueued == 0 {
		o.maxQueued = 10
	}
	if o.maxMessage == 0 {
		o.maxMessage = 8192
	}
	if o.homeserver == "" {
		o.homeserver = hs.url
	}
	localpart := uniqueName("bot")
	b := &botProc{t: t, password: "password-" + localpart, dir: t.TempDir()}
	b.id = hs.register(t, localpart, b.password)
	secretEnv, otherEnv := "password_env", "access_token_env"
	b.secret = b.password
	if o.accessToken {
		cli, err := mautrix.NewClient(hs.url, "", "")
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cli.Login(context.Background(), &mautrix.ReqLogin{
			Type:       mautrix.AuthTypePassword,
			Identifier: mautrix.UserIdentifier{Type: mautrix.IdentifierTypeUser, User: localpart},
			Password:   b.password,
		})
		if err != nil {
			t.Fatal(err)
		}
		secretEnv, otherEnv, b.secret = "access_token_env", "password_env", resp.AccessToken
	}
	scratch := filepath.Join(scratchRoot, localpart)
	cfg := map[string]any{
		"llm":      map[string]any{"provider": "simulator"},
		"database": filepath.Join(b.dir, "secgpt.db"),
		"apps":     map[string]any{"installed": o.apps},
		"consent":  map[string]any{"timeout": o.consentTimeout.String()},
		"spokes":   map[string]any{"scratch_dir": scratch},
		"logging":  map[string]any{"level": "info", "format": "json"},
		"bot": map[string]any{
			"homeserver": o.homeserver, "user_id": b.id.String(), secretEnv: "SECGPT_E2E_BOT_SECRET",
			otherEnv: "", "display_name": "secgpt", "allow": o.allow,
			"rate_limit":        map[string]any{"messages": o.rate, "per": "1m"},
			"max_queued":        o.maxQueued,
			"max_message_bytes": o.maxMessage,
			"consent_settle":    o.settle.String(),
		},
	}
	if o.external != nil {
		cfg["apps"].(map[string]any)["external"] = o.external
	}
	b.config = filepath.Join(b.dir, "config.yaml")
	b.logPath = filepath.Join(b.dir, "bot.log")
	b.cfg = cfg
	b.writeConfig()
	t.Cleanup(func() {
		b.stop()
		if t.Failed() {
			log, _ := os.ReadFile(b.logPath)
			t.Logf("bot log:\n%s", log)
		}
	})
	b.start()
	return b
}

// writeConfig writes b.cfg to the bot's config file.
func (b *botProc) writeConfig() {
	b.t.Helper()
	raw, err := yaml.Marshal(b.cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(b.config, raw, 0o600); err != nil {
		b.t.Fatal(err)
	}
}

// setDisplayName configures the display name the bot sets at its next
// start.
func (b *botProc) setDisplayName(name string) {
	b.t.Helper()
	b.cfg["bot"].(map[string]any)["display_name"] = name
	b.writeConfig()
}

// start runs the binary and waits until it syncs.
func (b *botProc) start() {
	b.t.Helper()
	logf, err := os.OpenFile(b.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		b.t.Fatal(err)
	}
	defer logf.Close()
	before, _ := os.ReadFile(b.logPath)
	cmd := exec.Command(secgptBin, "bot", "--config", b.config)
	cmd.Env = append(os.Environ(), "SECGPT_E2E_BOT_SECRET="+b.secret)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // if the test binary dies
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.mu.Lock()
	b.cmd, b.done = cmd, done
	b.mu.Unlock()
	deadline := time.After(waitTimeout)
	for {
		log, _ := os.ReadFile(b.logPath)
		if bytes.Contains(log[len(before):], []byte("Bot started")) {
			return
		}
		select {
		case <-done:
			b.t.Fatalf("bot exited at start:\n%s", log[len(before):])
		case <-deadline:
			b.t.Fatalf("bot not started within %s:\n%s", waitTimeout, log[len(before):])
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends the bot gracefully (SIGTERM), killing it if it hangs.
func (b *botProc) stop() {
	b.signal(syscall.SIGTERM)
}

// kill ends the bot with SIGKILL, as a crash would.
func (b *botProc) kill() {
	b.signal(syscall.SIGKILL)
}

func (b *botProc) signal(sig syscall.Signal) {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.cmd = nil
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		b.t.Errorf("bot did not stop on %s", sig)
	}
}

// log returns the bot's log so far.
func (b *botProc) log() string {
	log, _ := os.ReadFile(b.logPath)
	return string(log)
}

func ptr[T any](v T) *T { return &v }
