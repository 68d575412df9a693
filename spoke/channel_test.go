package spoke

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// channelPair is a connected pair of non-blocking stream sockets, each
// end a rawChannel, as a spoke's ISC socket is.
func channelPair(t *testing.T) (a, b *rawChannel, files [2]*os.File) {
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
		files[i] = f
	}
	return ends[0], ends[1], files
}

// TestRawChannelCarriesFrames: frames far larger than the socket's buffer
// cross whole in both directions (the writer waits in the poller while
// the socket is full), and the peer's close reads as io.EOF.
func TestRawChannelCarriesFrames(t *testing.T) {
	hubEnd, spokeEnd, files := channelPair(t)
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
		errc <- files[0].Close()
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

// TestHubSocketRaw: the hub's end of a channel, a Unix socket of the net
// package, is read and written raw, and its deadlines and Close still end
// a read or write that waits, as the hub's reader and writer rely on.
func TestHubSocketRaw(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "hub end")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer := os.NewFile(uintptr(fds[1]), "spoke end")
	defer peer.Close()
	if _, ok := rawSocket(io.Reader(c)).(*rawChannel); !ok {
		t.Fatalf("rawSocket(%T) is not raw", c)
	}
	if _, ok := rawSocket(io.Reader(peer)).(*rawChannel); ok {
		t.Fatal("rawSocket made an os.File raw: a blocking one would hold its thread")
	}
	dec := NewHubDecoder(c, DefaultMaxFrame)
	if _, err := peer.Write(frameBytes(`{"v":1,"kind":"result","id":3}`)); err != nil {
		t.Fatal(err)
	}
	if f, err := dec.Decode(); err != nil || f.Kind != KindResult || f.ID != 3 {
		t.Fatalf("Decode() = %+v, %v", f, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := dec.Decode(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	// A write into a full socket waits, until its deadline.
	_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	enc := NewEncoder(c, 64<<20)
	if err := enc.Encode(Frame{Kind: KindReply, ID: 1, Body: json.RawMessage(`"` + strings.Repeat("x", 16<<20) + `"`)}); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("writing to a full socket past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := dec.Decode()
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a waiting read")
	}
}
