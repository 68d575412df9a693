package spoke

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/sandbox"
)

// transparent is an external app's way to the network that asks nothing of
// the app's HTTP client: no proxy variable, no CA. In the spoke's own
// network namespace, where loopback is the only interface, its resolver
// answers every name with loopback (resolver.go), and it accepts TCP on
// ports 80 and 443 of every loopback address:
//
//   - port 80 speaks HTTP: each request goes, by its Host header, to the
//     hub's egress broker as one HTTPRequest (the egress proxy's relay), and
//     a refusal comes back as a 403 response whose body is the broker's
//     reason;
//   - port 443 carries TLS, which the spoke never terminates: it passes the
//     accepted connection itself to the hub (tunnel.go), whose broker reads
//     the server name from the ClientHello, decides, connects and splices.
//     A refusal closes the connection; the reason goes to the spoke's log
//     (which the hub's log shows), to the server's last words in a failure
//     report, and to the audit.
//
// Like the egress proxy it decides nothing, and it carries connections only
// while a tool call runs.
type transparent struct {
	httpLn, tlsLn net.Listener
	dns           []*net.UDPConn
	tunnels       *net.UnixConn
	log           zerolog.Logger

	mu  sync.Mutex // one descriptor, then its request, at a time
	seq uint64
}

// openTransparent takes the tunnel socket and opens the listeners and the
// resolver's sockets, on 127.0.0.1 and on nameservers (see
// systemNameservers), which loopback must have already (UpLoopback). It must run in the spoke's own network namespace
// while the spoke holds CAP_NET_BIND_SERVICE (after UpLoopback, before
// DropCapabilities and Enter).
func openTransparent(nameservers []netip.Addr, log zerolog.Logger) (*transparent, error) {
	syscall.CloseOnExec(TunnelFD)
	f := os.NewFile(TunnelFD, "tunnel")
	if f == nil {
		return nil, errors.New("no tunnel socket on fd 5")
	}
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("failed to open the tunnel socket: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, errors.New("fd 5 is not the tunnel socket")
	}
	t := &transparent{tunnels: uc, log: log}
	lc := net.ListenConfig{KeepAlive: -1}
	ports := sandbox.TransparentTCPPorts
	lns := make([]net.Listener, 0, len(ports))
	for _, port := range ports {
		ln, err := lc.Listen(context.Background(), "tcp4", "0.0.0.0:"+strconv.Itoa(int(port)))
		if err != nil {
			t.close(lns...)
			return nil, fmt.Errorf("failed to listen on port %d of the spoke's network namespace: %w", port, err)
		}
		lns = append(lns, ln)
	}
	t.httpLn, t.tlsLn = lns[0], lns[1]
	for _, a := range append([]netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1})}, nameservers...) {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, sandbox.ResolverPort)))
		if err != nil {
			t.close(lns...)
			return nil, fmt.Errorf("failed to open the spoke's resolver on %s: %w", a, err)
		}
		t.dns = append(t.dns, c)
	}
	return t, nil
}

// maxNameservers is how many of the machine's name servers the spoke's
// resolver stands in for (glibc reads three).
const maxNameservers = 3

// systemNameservers are the IPv4 name servers the machine's resolver
// configuration names, outside loopback: the spoke gives its loopback
// these addresses and its resolver answers there too, so that a server
// that may read the configuration (an app that declares /etc readable)
// asks the spoke all the same. Where the server cannot read it, every
// resolver falls back to 127.0.0.1.
func systemNameservers() []netip.Addr {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil || !a.Is4() || a.IsLoopback() || a.IsUnspecified() || slices.Contains(out, a) {
			continue
		}
		if out = append(out, a); len(out) == maxNameservers {
			break
		}
	}
	return out
}

func (t *transparent) close(lns ...net.Listener) {
	for _, ln := range lns {
		ln.Close()
	}
	t.tunnels.Close()
}

// serve answers DNS, HTTP on port 80 and TLS on port 443 until the spoke
// ends. p relays HTTP requests; carry hands on a TLS connection.
func (t *transparent) serve(p *egressProxy, carry func(*net.TCPConn)) {
	for _, c := range t.dns {
		go serveResolver(c, t.log)
	}
	go func() {
		srv := p.server(http.HandlerFunc(p.handleDirect))
		if err := srv.Serve(t.httpLn); err != nil && !errors.Is(err, net.ErrClosed) {
			t.log.Warn().Err(err).Msg("Transparent HTTP listener stopped")
		}
	}()
	for {
		c, err := t.tlsLn.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				t.log.Warn().Err(err).Msg("Transparent TLS listener stopped")
			}
			return
		}
		go carry(c.(*net.TCPConn))
	}
}

// pass sends conn's descriptor on the tunnel socket, then asks the hub to
// carry it with request, which must send KindTunnel with the sequence
// number it is given. The spoke's copy of conn is the caller's to close.
func (t *transparent) pass(conn *net.TCPConn, request func(seq uint64) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	msg := binary.BigEndian.AppendUint64(nil, t.seq)
	raw, err := conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("failed to pass the connection to the hub: %w", err)
	}
	var sendErr error
	if err := raw.Control(func(fd uintptr) {
		_, _, sendErr = t.tunnels.WriteMsgUnix(msg, syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		return fmt.Errorf("failed to pass the connection to the hub: %w", err)
	}
	if sendErr != nil {
		return fmt.Errorf("failed to pass the connection to the hub: %w", sendErr)
	}
	return request(t.seq)
}

// handleDirect serves one request that reached port 80 of the spoke's
// namespace: it goes to the broker for the host its Host header names.
func (p *egressProxy) handleDirect(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		http.Error(w, "secgpt egress: CONNECT goes to the egress proxy (HTTPS_PROXY), not to port 80", http.StatusBadRequest)
		return
	}
	if r.Host == "" {
		http.Error(w, "secgpt egress: the request has no Host header; the broker reaches names only", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = "http", r.Host
	p.relay(w, out)
}

// carry hands one TLS connection of the server to the hub's broker, only
// during a tool call, and closes the spoke's copy. A refusal is logged and
// kept among the server's last words, for the report of a call that fails.
func (e *externalApp) carry(conn *net.TCPConn) {
	defer conn.Close()
	e.callMu.RLock()
	defer e.callMu.RUnlock()
	err := errNoCall
	var reply TunnelReply
	if e.calling && e.rt != nil {
		err = e.direct.pass(conn, func(seq uint64) error {
			return e.rt.request(KindTunnel, TunnelRequest{Seq: seq}, &reply)
		})
	}
	if err != nil {
		e.log.Warn().Err(err).Msg("Egress refused a TLS connection of the app's server")
		e.note("secgpt egress refused a TLS connection: " + err.Error())
		e.egressMu.Lock()
		if len(e.egressRefused) < maxRefusalsKept {
			e.egressRefused = append(e.egressRefused, bounded(err.Error(), 300))
		}
		e.egressMu.Unlock()
		return
	}
	e.log.Debug().Str("host", reply.Host).Msg("Egress carries a TLS connection of the app's server")
}

// note keeps a line of the spoke's own among the server's last words.
func (e *externalApp) note(line string) {
	e.stderrMu.Lock()
	defer e.stderrMu.Unlock()
	e.tail = append(e.tail, bounded(line, 300))
	if len(e.tail) > stderrTail {
		e.tail = e.tail[1:]
	}
}

// maxRefusalsKept bounds the refusals kept for one call's error.
const maxRefusalsKept = 3

// takeRefusals returns the TLS refusals kept since the last call, and
// forgets them.
func (e *externalApp) takeRefusals() []string {
	e.egressMu.Lock()
	defer e.egressMu.Unlock()
	r := e.egressRefused
	e.egressRefused = nil
	return r
}

// withRefusals adds to a failed call's error why egress refused its TLS
// connections: a client sees only a closed connection, and the tool's
// error seldom says more.
func (e *externalApp) withRefusals(err error) error {
	refused := e.takeRefusals()
	if err == nil || len(refused) == 0 {
		return err
	}
	return fmt.Errorf("%w (secgpt egress refused its TLS connections: %s)", err, strings.Join(refused, "; "))
}
