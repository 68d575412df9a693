//go:build e2e

package bot_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// crashProxy stands between the bot and Dendrite and kills the bot at one
// point of its send path, once armed: the bot's requests pass through
// unchanged otherwise.
type crashProxy struct {
	t     *testing.T
	srv   *httptest.Server
	proxy *httputil.ReverseProxy

	mu     sync.Mutex
	at     string
	bot    *botProc
	killed chan struct{}
}

// Points of the send path where crashProxy kills the bot.
const (
	// The answer was computed (typing stops), before it was stored.
	crashComputed = "computed"
	// The answer's send request reached the proxy, not the homeserver.
	crashRequest = "request"
	// The homeserver took the answer; the response never reached the bot.
	crashResponse = "response"
	// The homeserver took the answer but not its transaction ID: the
	// request reaches it under another, as if the homeserver had
	// persisted a send cut off by the kill without recording its
	// transaction as done (Dendrite, when the client goes away in
	// flight); the response never reached the bot.
	crashForgotten = "forgotten"
	// The bot got the response, before it could record the answer.
	crashResponded = "responded"
	// A moment after the answer was recorded.
	crashLater = "later"
)

func newCrashProxy(t *testing.T) *crashProxy {
	target, err := url.Parse(hs.url)
	if err != nil {
		t.Fatal(err)
	}
	p := &crashProxy{t: t, proxy: httputil.NewSingleHostReverseProxy(target)}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// arm kills b at the point at, once; killed is closed after.
func (p *crashProxy) arm(b *botProc, at string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.at, p.bot, p.killed = at, b, make(chan struct{})
	return p.killed
}

// take disarms the proxy if r is the request armed for, and returns the
// point.
func (p *crashProxy) take(r *http.Request, body []byte) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	path := r.URL.Path
	var hit bool
	switch p.at {
	case "":
		return ""
	case crashComputed:
		hit = r.Method == http.MethodPut && strings.Contains(path, "/typing/") && bytes.Contains(body, []byte(`"typing":false`))
	default:
		hit = r.Method == http.MethodPut && (strings.Contains(path, "/send/m.room.message/") || strings.Contains(path, "/send/m.room.encrypted/"))
	}
	if !hit {
		return ""
	}
	at := p.at
	p.at = ""
	return at
}

func (p *crashProxy) kill() {
	p.mu.Lock()
	b, killed := p.bot, p.killed
	p.mu.Unlock()
	b.kill()
	close(killed)
}

func (p *crashProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	switch p.take(r, body) {
	case "":
		p.proxy.ServeHTTP(w, r)
	case crashComputed, crashRequest:
		p.kill()
	case crashForgotten:
		// .../send/{eventType}/{txnId}: another transaction ID.
		r.URL.Path = r.URL.Path[:strings.LastIndex(r.URL.Path, "/")+1] + "forgotten-" + strconv.FormatInt(time.Now().UnixNano(), 10)
		r.URL.RawPath = ""
		fallthrough
	case crashResponse:
		rec := httptest.NewRecorder()
		p.proxy.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			p.t.Errorf("the homeserver refused the answer: %d %s", rec.Code, rec.Body)
		}
		p.kill()
	case crashResponded:
		p.proxy.ServeHTTP(w, r)
		go p.kill()
	case crashLater:
		p.proxy.ServeHTTP(w, r)
		go func() {
			time.Sleep(300 * time.Millisecond)
			p.kill()
		}()
	}
}

// crashChat starts a bot behind a crash proxy, and an encrypted direct
// chat with a new user, who allows the fare app always in answer to a
// first query, then answered.
func crashChat(t *testing.T, user string) (*crashProxy, *botProc, *human, id.RoomID) {
	p := newCrashProxy(t)
	b := startBot(t, botOptions{homeserver: p.srv.URL})
	alice := newHuman(t, user)
	room := alice.dm(b, true)
	q0 := alice.say(room, fareQuery)
	alice.react(room, alice.waitFor("prompt", botMessage(b, room, q0, "prompt")).ID, "♾️", true)
	alice.waitFor("answer", botMessage(b, room, q0, "answer"))
	return p, b, alice, room
}

// TestExactlyOnceAcrossSIGKILL: the bot is SIGKILLed at each point of an
// answer's send path, in an encrypted direct chat, and started again. Each
// query gets exactly one reply: the answer when the bot may have sent it
// (found in the room, or sent again under its stored transaction ID, which
// Dendrite deduplicates), the restart notice when it cannot have; never
// both, never neither.
func TestExactlyOnceAcrossSIGKILL(t *testing.T) {
	p, b, alice, room := crashChat(t, "u-alice")

	for _, c := range []struct {
		at   string
		want string
	}{
		{crashComputed, "notice"},
		{crashRequest, "answer"},
		{crashResponse, "answer"},
		{crashForgotten, "answer"},
		{crashResponded, "answer"},
		{crashLater, "answer"},
	} {
		killed := p.arm(b, c.at)
		q := alice.say(room, fareQuery)
		select {
		case <-killed:
		case <-time.After(waitTimeout):
			t.Fatalf("%s: the bot never reached the point", c.at)
		}
		b.start()
		alice.waitFor(c.at+": reply", botMessage(b, room, q, c.want))
		// What a start sends again goes out before the bot reads new
		// messages: once this command is answered, nothing more is due.
		alice.command(b, room, "!help")
		answers, notices := len(alice.all(botMessage(b, room, q, "answer"))), len(alice.all(botMessage(b, room, q, "notice")))
		t.Logf("killed at %s: %d answers, %d restart notices", c.at, answers, notices)
		if answers+notices != 1 {
			t.Errorf("killed at %s: %d answers and %d restart notices, want one reply (%s)", c.at, answers, notices, c.want)
		}
		if c.want == "answer" {
			if got := msg(alice.all(botMessage(b, room, q, "answer"))[0]).Body; !strings.Contains(got, "51.80") {
				t.Errorf("killed at %s: answer %q", c.at, got)
			}
		}
	}
}

// TestExactlyOnceAcrossSIGKILLInABurst: with the inbox's writes in the
// store's group commit, a burst of messages, queued behind each other, is
// cut by a SIGKILL a moment after the first answer went out, its end only
// queued; started again, the bot gives each message exactly one reply:
// nothing it acknowledged is lost, nothing is answered twice.
func TestExactlyOnceAcrossSIGKILLInABurst(t *testing.T) {
	p, b, alice, room := crashChat(t, "u-burst")

	killed := p.arm(b, crashLater)
	var burst []id.EventID
	for range 4 {
		burst = append(burst, alice.say(room, fareQuery))
	}
	select {
	case <-killed:
	case <-time.After(waitTimeout):
		t.Fatal("the bot never reached the point")
	}
	b.start()
	for i, q := range burst {
		alice.waitFor(fmt.Sprintf("reply %d", i), func(evt *event.Event) bool {
			return botMessage(b, room, q, "answer")(evt) || botMessage(b, room, q, "notice")(evt)
		})
	}
	alice.command(b, room, "!help")
	for i, q := range burst {
		answers, notices := len(alice.all(botMessage(b, room, q, "answer"))), len(alice.all(botMessage(b, room, q, "notice")))
		t.Logf("message %d: %d answers, %d restart notices", i, answers, notices)
		if answers+notices != 1 {
			t.Errorf("message %d: %d answers and %d restart notices, want one reply", i, answers, notices)
		}
	}
	if answers := len(alice.all(botMessage(b, room, burst[0], "answer"))); answers != 1 {
		t.Errorf("the first message of the burst, answered before the kill, has %d answers, want 1", answers)
	}
}
