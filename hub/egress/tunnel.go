package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Bounds of a tunnel, beyond the broker's Options.
const (
	// maxClientHello bounds what the broker reads to find the server name:
	// a ClientHello with post-quantum key shares is about 2 KiB.
	maxClientHello = 64 << 10
	// helloTimeout bounds the wait for the ClientHello.
	helloTimeout = 10 * time.Second
	// tunnelOverhead is added to the request and response limits of a
	// tunnel: TLS handshakes (certificate chains) and record framing.
	tunnelOverhead = 64 << 10
)

// Tunnel carries one TLS connection that an app's server opened to port 443
// of a name its spoke resolved to a local address. It reads the
// ClientHello from conn and takes the server name (SNI) from it; applies
// the rules of Do to https://SNI/ (a declared registrable domain, no IP
// literal or local name, every resolved address vetted); dials a vetted
// address on port 443; replays the ClientHello there and then copies bytes
// both ways. It never terminates TLS: the app's TLS session is with the
// server it named, and the app verifies that server's certificate itself.
//
// It returns host, the server name (as checked once it passed; as given
// if it was refused; "" when none could be read), and sent, true once the ClientHello was written to the server
// (data left the machine, whatever followed). It returns once the connection to the server is made, or with why not;
// the copying goes on until either side closes, the broker's Timeout
// passes, a direction exceeds its limit (the request or response limit plus
// tunnelOverhead), or ctx ends. Tunnel owns conn: it closes it on every
// path. A tunnel holds one of the app's egress slots while it lasts.
func (b *Broker) Tunnel(ctx context.Context, app string, domains []string, conn net.Conn) (host string, sent bool, err error) {
	fail := func(err error) (string, bool, error) {
		conn.Close()
		return host, sent, err
	}
	if len(domains) == 0 {
		return fail(refusef("the app declares no egress domains"))
	}
	declared := declaredDomains(domains)
	if len(declared) == 0 {
		return fail(refusef("none of the app's declared egress domains is a registrable domain"))
	}
	sni, hello, err := readClientHello(conn)
	if err != nil {
		return fail(err)
	}
	host = truncate(sni, 253) // as given, for a refusal's record
	t, err := checkServerName(sni, declared)
	if err != nil {
		return fail(err)
	}
	host = t.host

	dialCtx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
	defer cancel()
	if err := b.slots.acquire(dialCtx, app); err != nil {
		all, mine := b.slots.inFlight(app)
		return fail(fmt.Errorf("failed to get an egress slot (%d of %d exchanges in flight, %d of this app's %d): %w",
			all, b.opts.MaxConcurrent, mine, b.opts.MaxConcurrentPerApp, err))
	}
	x := &exchange{broker: b, vetted: map[string][]netip.Addr{}}
	if _, err = x.vet(dialCtx, t); err != nil {
		b.slots.release(app)
		return fail(err)
	}
	up, err := x.dialVetted(dialCtx, "tcp", t.hostPort())
	if err != nil {
		b.slots.release(app)
		return fail(x.failure(dialCtx, "connect to "+t.origin(), err))
	}
	deadline := time.Now().Add(b.opts.Timeout)
	_ = up.SetDeadline(deadline)
	_ = conn.SetDeadline(deadline)
	sent = true
	if _, err := up.Write(hello); err != nil {
		up.Close()
		b.slots.release(app)
		return fail(fmt.Errorf("failed to send the ClientHello to %s: %w", t.origin(), err))
	}
	zerolog.Ctx(ctx).Debug().Str("host", t.host).Str("registrable_domain", t.domain).Msg("Egress tunnel open")
	go func() {
		defer b.slots.release(app)
		splice(ctx, conn, up, b.opts.MaxRequestBytes+tunnelOverhead, b.opts.MaxResponseBytes+tunnelOverhead)
	}()
	return host, sent, nil
}

// checkServerName applies the URL policy to a TLS server name, which must
// be a plain host name: the name checked is then the name dialled and the
// name the server sees.
func checkServerName(sni string, declared map[string]bool) (target, error) {
	if sni == "" {
		return target{}, refusef("the TLS ClientHello names no server (SNI); the broker reaches names, never bare addresses")
	}
	if strings.ContainsAny(sni, "/:@?#%[] \\") {
		return target{}, refusef("the TLS server name %q is not a plain host name", truncate(sni, 100))
	}
	t, err := checkURL("https://"+sni+"/", declared)
	if err != nil {
		return target{}, err
	}
	if t.host != strings.ToLower(strings.TrimSuffix(sni, ".")) {
		return target{}, refusef("the TLS server name %q is not a plain host name", truncate(sni, 100))
	}
	return t, nil
}

// errHelloRead stops the TLS server once it has the ClientHello.
var errHelloRead = errors.New("ClientHello read")

// readClientHello reads conn up to the end of the TLS ClientHello and
// returns the server name it gives and the bytes read, to be replayed to
// the server. crypto/tls parses it; the handshake stops there, so nothing
// is ever written to conn.
func readClientHello(conn net.Conn) (string, []byte, error) {
	_ = conn.SetReadDeadline(time.Now().Add(helloTimeout))
	defer conn.SetReadDeadline(time.Time{})
	var rec bytes.Buffer
	r := io.TeeReader(io.LimitReader(conn, maxClientHello), &rec)
	var sni string
	seen := false
	err := tls.Server(readOnly{r: r}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			sni, seen = h.ServerName, true
			return nil, errHelloRead
		},
	}).Handshake()
	if !seen {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return "", nil, refusef("no TLS ClientHello within %s on port 443", helloTimeout)
		}
		return "", nil, refusef("port 443 carries TLS only, and what came was not a TLS ClientHello")
	}
	return sni, rec.Bytes(), nil
}

// readOnly is a net.Conn that reads from r and refuses to write, so that a
// TLS server run on it to parse a ClientHello cannot answer.
type readOnly struct{ r io.Reader }

func (c readOnly) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (readOnly) Write([]byte) (int, error)        { return 0, errors.New("read-only") }
func (readOnly) Close() error                     { return nil }
func (readOnly) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (readOnly) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (readOnly) SetDeadline(time.Time) error      { return nil }
func (readOnly) SetReadDeadline(time.Time) error  { return nil }
func (readOnly) SetWriteDeadline(time.Time) error { return nil }

// splice copies app→up (at most upLimit bytes) and up→app (at most
// downLimit) until both directions end, passing a half-close on; a
// direction over its limit, an error, or ctx ending closes both.
func splice(ctx context.Context, app, up net.Conn, upLimit, downLimit int64) {
	var once sync.Once
	closeBoth := func() { once.Do(func() { app.Close(); up.Close() }) }
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()
	defer closeBoth()
	var wg sync.WaitGroup
	copyDir := func(dst, src net.Conn, limit int64) {
		defer wg.Done()
		n, err := io.Copy(dst, io.LimitReader(src, limit+1))
		if err != nil || n > limit {
			closeBoth()
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			closeBoth()
		}
	}
	wg.Add(2)
	go copyDir(up, app, upLimit)
	go copyDir(app, up, downLimit)
	wg.Wait()
}
