package spoke

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
)

// channelPair is a connected pair of non-blocking stream sockets, each
// end a rawChannel, as a spoke's ISC socket is.
func channelPair(t *testing.T) (a, b *rawChannel) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ends := make([]*rawChannel, 2)
	for i, fd := range fds {
		if err := syscall.SetNonblock(fd, true); err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "end")
		t.Cleanup(func() { f.Close() })
		if ends[i], err = newRawChannel(f); err != nil {
			t.Fatal(err)
		}
	}
	return ends[0], ends[1]
}

// TestRawChannelCarriesFrames: frames far larger than the socket's buffer
// cross whole in both directions (the writer waits in the poller while
// the socket is full), and the peer's close reads as io.EOF.
func TestRawChannelCarriesFrames(t *testing.T) {
	hubEnd, spokeEnd := channelPair(t)
	big := json.RawMessage(`"` + string(bytes.Repeat([]byte("x"), 900<<10)) + `"`)
	sent := []Frame{{Kind: KindStep, ID: 1, Body: big}, {Kind: KindReply, ID: 2, Body: json.RawMessage(`{}`)}}
	errc := make(chan error, 1)
	go func() {
		enc := NewEncoder(hubEnd, DefaultMaxFrame)
		for _, f := range sent {
			if err := enc.Encode(f); err != nil {
				errc <- err
				return
			}
		}
		errc <- hubEnd.f.Close()
	}()
	dec := NewSpokeDecoder(spokeEnd, DefaultMaxFrame)
	for _, want := range sent {
		got, err := dec.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if got.Kind != want.Kind || got.ID != want.ID || !bytes.Equal(got.Body, want.Body) {
			t.Fatalf("got frame %s %d of %d bytes, want %s %d of %d", got.Kind, got.ID, len(got.Body), want.Kind, want.ID, len(want.Body))
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if _, err := dec.Decode(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the peer closed: %v, want io.EOF", err)
	}
	// Writing to a peer that is gone is an error, not a hang or a signal.
	if _, err := spokeEnd.Write([]byte("late")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write to a closed peer: %v, want EPIPE", err)
	}
}
