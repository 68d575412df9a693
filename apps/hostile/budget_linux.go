package hostile

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/secgpt/secgpt/apps"
)

// The attacks on what the hub spends for an app: its own time, the model
// bill, and the store's disk.

// grind sends frames model requests of size bytes each straight onto the
// channel, as fast as the hub reads them, while draining the replies: with
// a prompt over the hub's limit each is decoded and refused, which costs
// the hub time and the app's spoke almost none.
func grind(frames int, size int64) Result {
	attack := fmt.Sprintf("%s %d×%d", Grind, frames, size)
	if res, ok := rawChannel(attack); !ok {
		return res
	}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := unix.Read(iscFD, buf); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	for i := range frames {
		if err := writeFrame(llmFrame(1<<41+i, size)); err != nil {
			return judge(attack, fmt.Errorf("after %d frames in %v: %w", i, time.Since(start).Round(time.Millisecond), err), "", unix.EPIPE, unix.ECONNRESET)
		}
	}
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("the hub took %d frames in %v", frames, time.Since(start).Round(time.Millisecond))}
}

// burnTokens makes calls model calls with a prompt of size bytes each, one after
// another, straight on the channel: a spoke's model budget spent on
// nothing. It stops at the first refusal.
func burnTokens(calls int, size int64) Result {
	attack := fmt.Sprintf("%s %d×%d", Burn, calls, size)
	if res, ok := rawChannel(attack); !ok {
		return res
	}
	for i := range calls {
		id := 1<<42 + i
		if err := writeFrame(llmFrame(id, size)); err != nil {
			return judge(attack, fmt.Errorf("after %d calls: %w", i, err), "", unix.EPIPE, unix.ECONNRESET)
		}
		reply, err := readReply(id)
		if err != nil {
			return judge(attack, fmt.Errorf("after %d calls: %w", i, err), "", unix.EPIPE, unix.ECONNRESET)
		}
		if reply != "" {
			return Result{Attack: attack, Outcome: Blocked, Detail: fmt.Sprintf("answered %d calls, then refused: %s", i, reply)}
		}
	}
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("answered all %d calls", calls)}
}

// fill stores count documents of size bytes each in the app's own data,
// through the hub, until it is refused.
func fill(ctx context.Context, env apps.Env, count int, size int64) Result {
	attack := fmt.Sprintf("%s %d×%d", Fill, count, size)
	body := json.RawMessage(`"` + strings.Repeat("x", int(max(size-2, 0))) + `"`)
	stored := int64(0)
	for i := range count {
		if err := env.Data().Put(ctx, "fill", fmt.Sprint(i), body); err != nil {
			// Only the hub answers: an error is its refusal.
			return Result{Attack: attack, Outcome: Blocked, Detail: fmt.Sprintf("stored %d bytes in %d documents, then: %v", stored, i, err)}
		}
		stored += int64(len(body))
	}
	return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("stored %d bytes in %d documents", stored, count)}
}

// llmFrame is a model request frame whose one user message is size bytes.
func llmFrame(id int, size int64) []byte {
	prompt := strings.Repeat("a", int(max(size, 1)))
	return fmt.Appendf(nil, `{"v":1,"kind":"llm","id":%d,"body":{"messages":[{"role":"user","content":%q}]}}`, id, prompt)
}

// writeFrame writes one length-prefixed frame onto the channel.
func writeFrame(body []byte) error {
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	frame = append(frame, body...)
	for len(frame) > 0 {
		n, err := unix.Write(iscFD, frame)
		if err != nil {
			return os.NewSyscallError("write", err)
		}
		frame = frame[n:]
	}
	return nil
}

// readReply reads the hub's reply to request id and returns its error
// text, "" when it answered.
func readReply(id int) (string, error) {
	var hdr [4]byte
	if err := readFull(hdr[:]); err != nil {
		return "", err
	}
	buf := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if err := readFull(buf); err != nil {
		return "", err
	}
	var f struct {
		Kind  string `json:"kind"`
		ID    int    `json:"id"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(buf, &f); err != nil {
		return "", err
	}
	if f.Kind != "reply" || f.ID != id {
		return "", errors.New("the hub sent something other than the reply")
	}
	return f.Error, nil
}

// readFull fills b from the channel. It reads the descriptor itself: an
// *os.File for it would close it when collected.
func readFull(b []byte) error {
	for len(b) > 0 {
		n, err := unix.Read(iscFD, b)
		switch {
		case err != nil:
			return os.NewSyscallError("read", err)
		case n == 0:
			return io.ErrUnexpectedEOF
		}
		b = b[n:]
	}
	return nil
}
