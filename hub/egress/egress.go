// Package egress is the hub's egress broker: it performs the HTTP exchanges
// apps ask for over ISC, since spokes have no network of their own, and only
// to the registrable domains (eTLD+1) an app declared.
//
// It owns the whole network policy for apps: the URL check (http and https
// only, no credentials in URLs, no IP literals or local names, ports 80 and
// 443 only), DNS resolution in the hub with every answer vetted against
// forbidden address ranges and the machine's own addresses, dialling only
// the vetted addresses, request and response header hygiene, redirects
// re-checked hop by hop, and bounds on size, time and concurrency, with a
// fair share of the concurrency for each app. It also carries an external
// app's TLS connections whole (Tunnel): the same rules applied to the
// server name of the ClientHello, and bytes copied without terminating TLS.
//
// It must never connect to an address it did not vet, never follow the
// environment's proxy settings, never fail open (an error while deciding is a
// refusal), and never put a request body or URL credentials in an error or a
// log.
package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/spoke"
)

// Resolver looks up a host's addresses. The broker always passes a
// fully-qualified name (with a trailing dot), so no search domain applies.
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

var _ Resolver = (*net.Resolver)(nil)

// Options configure a Broker. Zero values take the defaults.
type Options struct {
	// Timeout bounds the whole exchange, redirects and body included;
	// default 30 s.
	Timeout time.Duration
	// MaxRequestBytes bounds the request body; default 512 KiB.
	MaxRequestBytes int64
	// MaxResponseBytes bounds the (decoded) response body; default 4 MiB.
	// A larger body is refused, never truncated.
	MaxResponseBytes int64
	// MaxRedirects is how many redirects one exchange follows, each checked
	// like the first request; default 5. One more is refused.
	MaxRedirects int
	// MaxConcurrent bounds the exchanges in flight at once across all apps;
	// default 16. A request waits for a slot within its Timeout.
	MaxConcurrent int
	// MaxConcurrentPerApp bounds one app's share of MaxConcurrent, over all
	// its users; default a quarter of MaxConcurrent (at least 1), so that
	// it takes four stalled apps, not one app with four users, to fill the
	// broker. An app is known by its declared domains (see Do).
	MaxConcurrentPerApp int
	// Resolver resolves host names; default net.DefaultResolver.
	Resolver Resolver
	// DialContext dials an already-vetted "IP:port"; default a net.Dialer
	// whose Control hook checks the address again before connecting. Tests
	// and the offline sandbox check inject one that routes vetted public IPs
	// to a local server; the check of resolved addresses is never bypassed.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// RootCAs verify servers' certificates; default the system roots.
	RootCAs *x509.CertPool
}

// Defaults for Options.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultMaxRequestBytes  = 512 << 10
	DefaultMaxResponseBytes = 4 << 20
	DefaultMaxRedirects     = 5
	DefaultMaxConcurrent    = 16
)

// dialTimeout bounds one connection attempt by the default dialer, so one
// unresponsive address leaves time for the next.
const dialTimeout = 10 * time.Second

// Refusal is the error for a request the policy does not allow. Reason names
// the rule and the host, domain or address at fault; it never holds a request
// body, a header value or URL credentials.
type Refusal struct {
	Reason string
}

func (r *Refusal) Error() string { return r.Reason }

// Broker performs apps' HTTP exchanges under the egress policy. It is safe for
// concurrent use.
type Broker struct {
	opts  Options
	slots *slots
	own   *ownAddrs
}

var (
	_ hub.Egress       = (*Broker)(nil)
	_ hub.EgressTunnel = (*Broker)(nil)
)

// New returns a broker with opts, defaults filled in.
func New(opts Options) *Broker {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if opts.MaxRedirects <= 0 {
		opts.MaxRedirects = DefaultMaxRedirects
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = DefaultMaxConcurrent
	}
	if opts.MaxConcurrentPerApp <= 0 {
		opts.MaxConcurrentPerApp = max(1, opts.MaxConcurrent/4)
	}
	opts.MaxConcurrentPerApp = min(opts.MaxConcurrentPerApp, opts.MaxConcurrent)
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	b := &Broker{
		slots: newSlots(opts.MaxConcurrent, opts.MaxConcurrentPerApp),
		own:   newOwnAddrs(net.InterfaceAddrs),
	}
	if opts.DialContext == nil {
		d := &net.Dialer{Timeout: dialTimeout, Control: b.controlDial}
		opts.DialContext = d.DialContext
	}
	b.opts = opts
	return b
}

// Do performs one HTTP exchange for an app that declared domains (registrable
// domains; entries that are not are ignored), following redirects. A request
// the policy does not allow is refused with a *Refusal; a failure on the way
// (DNS, connection, TLS, timeout) is another error. A non-2xx status is not
// an error. The calls of one app share its part of the concurrency
// (Options.MaxConcurrentPerApp); app is its name, which the hub knows.
//
// Whatever the outcome, sent lists the origins the request went to, in
// order (the first URL's, then each redirect's): those whose request
// headers were written to a connection, so that data left the machine even
// when a refusal followed (a response over the limit, a redirect refused).
func (b *Broker) Do(ctx context.Context, app string, domains []string, req spoke.HTTPRequest) (resp spoke.HTTPResponse, sent []string, err error) {
	if len(domains) == 0 {
		return spoke.HTTPResponse{}, nil, refusef("the app declares no egress domains")
	}
	declared := declaredDomains(domains)
	if len(declared) == 0 {
		return spoke.HTTPResponse{}, nil, refusef("none of the app's declared egress domains is a registrable domain")
	}
	first, err := checkURL(req.URL, declared)
	if err != nil {
		return spoke.HTTPResponse{}, nil, err
	}
	method, err := checkMethod(req.Method)
	if err != nil {
		return spoke.HTTPResponse{}, nil, err
	}
	if n := int64(len(req.Body)); n > b.opts.MaxRequestBytes {
		return spoke.HTTPResponse{}, nil, refusef("request body of %d bytes is over the %d-byte limit", n, b.opts.MaxRequestBytes)
	}
	header, err := requestHeader(req.Header)
	if err != nil {
		return spoke.HTTPResponse{}, nil, err
	}

	ctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
	defer cancel()
	if err := b.slots.acquire(ctx, app); err != nil {
		all, mine := b.slots.inFlight(app)
		return spoke.HTTPResponse{}, nil, fmt.Errorf("failed to get an egress slot (%d of %d exchanges in flight, %d of this app's %d): %w",
			all, b.opts.MaxConcurrent, mine, b.opts.MaxConcurrentPerApp, err)
	}
	defer b.slots.release(app)

	x := &exchange{broker: b, vetted: map[string][]netip.Addr{}}
	x.tr = x.transport()
	defer x.tr.CloseIdleConnections()
	resp, err = x.run(ctx, method, first, header, req.Body, declared)
	return resp, x.sentTo(), err
}

// exchange is one call of Do: its transport may dial only what this exchange
// vetted.
type exchange struct {
	broker *Broker
	tr     *http.Transport
	mu     sync.Mutex
	vetted map[string][]netip.Addr // "host:port" → its vetted addresses
	sent   []string                // origins whose request headers were written
}

// sentTo returns the origins the exchange's requests were written to.
func (x *exchange) sentTo() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.sent)
}

// transport returns an HTTP transport for this exchange alone: no proxy from
// the environment, dials through dialVetted, TLS verified against the host
// name (the transport sets SNI and verifies the URL's host).
func (x *exchange) transport() *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            x.dialVetted,
		TLSClientConfig:        &tls.Config{RootCAs: x.broker.opts.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    dialTimeout,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
}

// run sends the request to its first target and follows redirects, checking
// every hop.
func (x *exchange) run(ctx context.Context, method string, t target, header http.Header, body []byte, declared map[string]bool) (spoke.HTTPResponse, error) {
	log := zerolog.Ctx(ctx)
	maxRedirects := x.broker.opts.MaxRedirects
	name := t.origin() // how refusals name the hop: as the server gave it
	for hop := 0; ; hop++ {
		addrs, err := x.vet(ctx, t)
		if err != nil {
			return spoke.HTTPResponse{}, redirected(hop, name, err)
		}
		log.Debug().Int("hop", hop).Str("host", t.host).Str("registrable_domain", t.domain).
			Str("port", t.port).Int("addresses", len(addrs)).Msg("Egress hop vetted")

		resp, err := x.send(ctx, method, t, header, body)
		if err != nil {
			return spoke.HTTPResponse{}, redirected(hop, name, err)
		}
		next, redirect := redirectLocation(resp)
		if !redirect {
			return x.read(ctx, t, method, resp)
		}
		drain(resp)
		if hop >= maxRedirects {
			return spoke.HTTPResponse{}, refusef("more than %d redirects; the last was from %s", maxRedirects, t.origin())
		}
		u, err := t.url.Parse(next)
		if err != nil {
			return spoke.HTTPResponse{}, refusef("redirect %d from %s has a malformed Location", hop+1, t.origin())
		}
		name = redirectName(u)
		nt, err := checkURL(u.String(), declared)
		if err != nil {
			return spoke.HTTPResponse{}, redirected(hop+1, name, err)
		}
		method, body, header = redirectRequest(resp.StatusCode, method, body, header, t, nt)
		t = nt
	}
}

// redirected says which redirect an error of hop n (0 is the request itself)
// belongs to, keeping a refusal a refusal.
func redirected(n int, name string, err error) error {
	if n == 0 {
		return err
	}
	var r *Refusal
	if errors.As(err, &r) {
		return refusef("redirect %d to %s refused: %s", n, name, r.Reason)
	}
	return fmt.Errorf("failed to follow redirect %d to %s: %w", n, name, err)
}

// vet resolves t's host and records its addresses for dialVetted, refusing
// the hop if any answer is forbidden: a name that resolves to a public and a
// private address must not get a second chance at the private one.
func (x *exchange) vet(ctx context.Context, t target) ([]netip.Addr, error) {
	answers, err := x.broker.opts.Resolver.LookupIPAddr(ctx, t.host+".")
	if err != nil {
		return nil, x.failure(ctx, "resolve "+t.host, err)
	}
	if len(answers) == 0 {
		return nil, fmt.Errorf("failed to resolve %s: no addresses", t.host)
	}
	addrs := make([]netip.Addr, 0, len(answers))
	for _, ans := range answers {
		a, ok := ipAddr(ans)
		if !ok {
			return nil, refusef("%s resolves to an address that cannot be parsed", t.host)
		}
		if reason, bad := x.broker.refusedAddr(a); bad {
			return nil, refusef("%s resolves to %s, %s", t.host, a, reason)
		}
		addrs = append(addrs, a)
	}
	x.mu.Lock()
	x.vetted[t.hostPort()] = addrs
	x.mu.Unlock()
	return addrs, nil
}

// ipAddr converts a resolver answer; IPv4 answers (which net returns in their
// 16-byte form) become plain IPv4.
func ipAddr(ans net.IPAddr) (netip.Addr, bool) {
	if v4 := ans.IP.To4(); v4 != nil {
		return netip.AddrFrom4([4]byte(v4)), true
	}
	a, ok := netip.AddrFromSlice(ans.IP)
	if !ok {
		return netip.Addr{}, false
	}
	return a.WithZone(ans.Zone), true
}

// dialVetted is the transport's only way out: it dials the addresses vet
// recorded for hostPort, in order, and refuses anything else. It never
// resolves.
func (x *exchange) dialVetted(ctx context.Context, network, hostPort string) (net.Conn, error) {
	x.mu.Lock()
	addrs := x.vetted[hostPort]
	x.mu.Unlock()
	_, port, err := net.SplitHostPort(hostPort)
	if err != nil || len(addrs) == 0 {
		return nil, refusef("connection to %s refused: not vetted in this exchange", hostPort)
	}
	if _, ok := allowedPorts[port]; !ok {
		return nil, refusef("connection to %s refused: port %s is not allowed", hostPort, port)
	}
	var errs []error
	for _, a := range addrs {
		if reason, bad := x.broker.refusedAddr(a); bad {
			return nil, refusef("connection to %s refused: %s", a, reason)
		}
		conn, err := x.broker.opts.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// send makes one request to a vetted target.
func (x *exchange) send(ctx context.Context, method string, t target, header http.Header, body []byte) (*http.Response, error) {
	var r io.Reader
	if len(body) > 0 {
		r = bytes.NewReader(body)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, t.url.String(), r)
	if err != nil {
		return nil, refusef("request to %s cannot be built: %v", t.origin(), err)
	}
	hreq.Header = header.Clone()
	// Data has left once the headers are written; a dial or TLS failure
	// sends nothing.
	origin := t.origin()
	trace := &httptrace.ClientTrace{WroteHeaders: func() {
		x.mu.Lock()
		x.sent = append(x.sent, origin)
		x.mu.Unlock()
	}}
	hreq = hreq.WithContext(httptrace.WithClientTrace(hreq.Context(), trace))
	resp, err := x.tr.RoundTrip(hreq)
	if err != nil {
		return nil, x.failure(ctx, "send "+method+" to "+t.origin(), err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body.Close()
		return nil, refusef("%s switched protocols; the broker speaks HTTP only", t.origin())
	}
	return resp, nil
}

// read returns the final response, refusing a body over the limit. The
// response to HEAD has no body, whatever its Content-Length says (it is the
// size a GET would get, and passed on as such), so only a body is checked.
func (x *exchange) read(ctx context.Context, t target, method string, resp *http.Response) (spoke.HTTPResponse, error) {
	defer resp.Body.Close()
	limit := x.broker.opts.MaxResponseBytes
	bodyless := method == http.MethodHead || resp.Body == http.NoBody
	if !bodyless && resp.ContentLength > limit {
		return spoke.HTTPResponse{}, refusef("response from %s of %d bytes is over the %d-byte limit", t.origin(), resp.ContentLength, limit)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return spoke.HTTPResponse{}, x.failure(ctx, "read the response from "+t.origin(), err)
	}
	if int64(len(body)) > limit {
		return spoke.HTTPResponse{}, refusef("response from %s is over the %d-byte limit", t.origin(), limit)
	}
	return spoke.HTTPResponse{Status: resp.StatusCode, Header: responseHeader(resp.Header), Body: body}, nil
}

// failure wraps an error on the way, saying so when the exchange ran out of
// time.
func (x *exchange) failure(ctx context.Context, what string, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("failed to %s: out of time (the limit is %s): %w", what, x.broker.opts.Timeout, context.DeadlineExceeded)
	}
	return fmt.Errorf("failed to %s: %w", what, err)
}
