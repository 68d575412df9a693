package bot

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/secgpt/secgpt/hub"
)

// failMessages makes the fake homeserver refuse message sends with code
// while on is set, and records the transactions it refused.
type failMessages struct {
	mu   sync.Mutex
	on   bool
	left int // refuse only this many more, if positive
	code int
	txns []string
}

func (f *failMessages) fail(r *http.Request) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.on || !strings.Contains(r.URL.Path, "/send/m.room.message/") {
		return 0
	}
	if f.left > 0 {
		f.left--
		f.on = f.left > 0
	}
	f.txns = append(f.txns, r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:])
	return f.code
}

func (f *failMessages) set(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.on = on
}

// TestAnswerSentAgainAfterAFailure: a send that fails for a while is tried
// again with the same transaction, so the answer arrives once.
func TestAnswerSentAgainAfterAFailure(t *testing.T) {
	tb := newTestBot(t, Options{})
	room := tb.room("!dm:x", alice)
	f := &failMessages{on: true, left: 2, code: http.StatusBadGateway}
	tb.hs.setFail(f.fail)
	q := tb.say(room, alice, "hello")
	tb.hs.waitFor("answer", replyOfKind(room, q.ID, kindAnswer))
	tb.waitState(t, q.ID, stateAnswered)
	if n := len(tb.hs.all(replyOfKind(room, q.ID, kindAnswer))); n != 1 {
		t.Errorf("%d answers", n)
	}
	ok := tb.hs.all(replyOfKind(room, q.ID, kindAnswer))[0].Txn
	if len(f.txns) != 2 || f.txns[0] != ok || f.txns[1] != ok {
		t.Errorf("refused transactions %q, then %q: retries must reuse the transaction", f.txns, ok)
	}
}

// TestAnswerExactlyOnceAcrossACrash: the bot stops at each point of an
// answer's send path and starts again on the same database. Each message
// gets exactly one reply: its answer, sent again under the stored
// transaction ID when the homeserver may have taken it (the homeserver
// deduplicates), or the notice that the bot restarted when the answer was
// never sent; never both, never neither.
func TestAnswerExactlyOnceAcrossACrash(t *testing.T) {
	for _, c := range []struct {
		name string
		// at stops the bot: "answer" once the answer was computed, before
		// it is sent; "request" when its send request failed; "response"
		// when the homeserver took it but the response was lost.
		at         string
		wantAnswer bool
	}{
		{"while the answer is computed", "answer", false},
		{"while the send is refused", "request", true},
		{"after the homeserver took it", "response", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := newTestBot(t, Options{})
			room := tb.room("!dm:x", alice)
			computed := make(chan struct{})
			tb.hub.handle = func(ctx context.Context, req hub.Request) (*hub.Reply, error) {
				if c.at == "answer" {
					close(computed)
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return &hub.Reply{Answer: "the answer"}, nil
			}
			stopped := make(chan struct{})
			var once sync.Once
			crash := func() { once.Do(func() { go func() { tb.stop(); close(stopped) }() }) }
			switch c.at {
			case "answer":
				go func() { <-computed; crash() }()
			case "request":
				tb.hs.setFail(func(r *http.Request) int {
					if strings.Contains(r.URL.Path, "/send/m.room.message/") {
						crash()
						return http.StatusBadGateway
					}
					return 0
				})
			case "response":
				tb.hs.mu.Lock()
				tb.hs.lost = func(s sent) bool {
					if s.kind() == kindAnswer {
						crash()
						return true
					}
					return false
				}
				tb.hs.mu.Unlock()
			}
			q := tb.say(room, alice, "hello")
			<-stopped
			tb.hs.setFail(nil)
			tb.hs.mu.Lock()
			tb.hs.lost = nil
			tb.hs.mu.Unlock()
			tb.restart(t)
			want, other := kindAnswer, kindNotice
			if !c.wantAnswer {
				want, other = other, want
			}
			tb.hs.waitFor("the reply", replyOfKind(room, q.ID, want))
			tb.waitState(t, q.ID, map[bool]string{true: stateAnswered, false: stateInterrupted}[c.wantAnswer])
			if n := len(tb.hs.all(replyOfKind(room, q.ID, want))); n != 1 {
				t.Errorf("%d %s replies, want 1", n, want)
			}
			if n := len(tb.hs.all(replyOfKind(room, q.ID, other))); n != 0 {
				t.Errorf("%d %s replies besides the %s", n, other, want)
			}
			// Another start sends nothing more.
			tb.restart(t)
			time.Sleep(50 * time.Millisecond)
			if n := len(tb.hs.all(func(s sent) bool { return s.relation("in_reply_to") == q.ID.String() })); n != 1 {
				t.Errorf("%d replies after a second start", n)
			}
		})
	}
}

// TestUndeliveredAnswerIsReported: an answer that cannot be sent leaves
// the row failed; the user is told once, when the bot can reach them again
// (their next message, or the next start), never twice.
func TestUndeliveredAnswerIsReported(t *testing.T) {
	tb := newTestBot(t, Options{})
	room := tb.room("!dm:x", alice)
	f := &failMessages{on: true, code: http.StatusForbidden}
	tb.hs.setFail(f.fail)
	q1 := tb.say(room, alice, "hello")
	tb.waitState(t, q1.ID, stateFailed)
	f.mu.Lock()
	if tries := strings.Count(strings.Join(f.txns, " "), f.txns[0]); tries != 1 {
		t.Errorf("an answer refused with 403 was tried %d times", tries)
	}
	f.mu.Unlock()
	f.set(false)
	q2 := tb.say(room, alice, "!help")
	n := tb.hs.waitFor("notice about the lost answer", replyOfKind(room, q1.ID, kindError))
	if n.body() != undeliveredNotice {
		t.Errorf("notice = %q", n.body())
	}
	tb.hs.waitFor("next answer", replyOfKind(room, q2.ID, kindReply))
	tb.waitState(t, q1.ID, stateReported)

	// The next start tells nobody again.
	if err := tb.resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	tb.say(room, alice, "!help")
	time.Sleep(100 * time.Millisecond)
	if got := len(tb.hs.all(replyOfKind(room, q1.ID, kindError))); got != 1 {
		t.Errorf("told %d times", got)
	}

	// An answer lost while the notice cannot be sent either waits for the
	// next start.
	f.set(true)
	q3 := tb.say(room, alice, "hello again")
	tb.waitState(t, q3.ID, stateFailed)
	f.set(false)
	if err := tb.resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	tb.hs.waitFor("notice at start", replyOfKind(room, q3.ID, kindError))
	tb.waitState(t, q3.ID, stateReported)
}

// TestPanicFailsOnlyItsMessage: a panic while serving a query is the end
// of that query, not of the bot: the user is told, the row is done, and
// the next message is served.
func TestPanicFailsOnlyItsMessage(t *testing.T) {
	tb := newTestBot(t, Options{})
	room := tb.room("!dm:x", alice)
	tb.hub.handle = func(_ context.Context, req hub.Request) (*hub.Reply, error) {
		if req.Query == "boom" {
			panic("a bug")
		}
		return &hub.Reply{Answer: "fine"}, nil
	}
	q1 := tb.say(room, alice, "boom")
	q2 := tb.say(room, alice, "and now?")
	if got := tb.hs.waitFor("failure notice", replyOfKind(room, q1.ID, kindError)); !strings.Contains(got.body(), "went wrong") {
		t.Errorf("notice = %q", got.body())
	}
	tb.hs.waitFor("next answer", replyOfKind(room, q2.ID, kindAnswer))
	tb.waitState(t, q1.ID, stateAnswered)
}

// TestForgetLeavesNothingInTheFile: after !forget, what the user said is
// neither in the database file nor in its write-ahead log.
func TestForgetLeavesNothingInTheFile(t *testing.T) {
	tb := newTestBot(t, Options{})
	tb.hub.forget = tb.store.ForgetUser
	room := tb.room("!dm:x", alice)
	const marker = "SECRETMARKER-asthma"
	q := tb.say(room, alice, "my diagnosis is "+marker)
	tb.waitState(t, q.ID, stateAnswered)
	f := tb.say(room, alice, "!forget")
	tb.waitState(t, f.ID, stateAnswered)
	for _, file := range []string{tb.dbPath, tb.dbPath + "-wal"} {
		b, err := os.ReadFile(file)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(marker)) {
			t.Errorf("%s still holds what the user said", filepath.Base(file))
		}
	}
}
