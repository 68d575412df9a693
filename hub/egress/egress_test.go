package egress

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/secgpt/secgpt/spoke"
)

// Public addresses the fake resolver hands out; the routing dialer sends
// connections to them to the local test servers.
const (
	publicV4 = "93.184.216.34"
	publicV6 = "2606:2800:220:1:248:1893:25c8:1946"
)

// fakeResolver answers from a table; unknown names do not exist.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][]string
	asked   []string
}

func (r *fakeResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	ips, ok := r.answers[strings.TrimSuffix(host, ".")]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]net.IPAddr, 0, len(ips))
	for _, s := range ips {
		out = append(out, net.IPAddr{IP: net.ParseIP(s)})
	}
	return out, nil
}

// routingDialer stands in for the internet: it connects vetted addresses to
// the local test servers by port and records what it was asked to dial.
type routingDialer struct {
	mu     sync.Mutex
	routes map[string]string // port → local server address
	dialed []string
}

func (d *routingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, addr)
	d.mu.Unlock()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	to, ok := d.routes[port]
	if !ok {
		return nil, fmt.Errorf("no route to %s", addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, to)
}

func (d *routingDialer) calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.dialed)
}

// harness is a broker wired to a plain server (port 80) and a TLS server
// (port 443) that share one handler.
type harness struct {
	broker   *Broker
	resolver *fakeResolver
	dialer   *routingDialer
	hits     atomic.Int64
}

func newHarness(t *testing.T, opts Options, handler http.Handler) *harness {
	t.Helper()
	h := &harness{
		resolver: &fakeResolver{answers: map[string][]string{
			"example.com":     {publicV4},
			"www.example.com": {publicV4},
			"api.example.com": {publicV6},
			"cdn.example.org": {publicV4},
		}},
	}
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.hits.Add(1)
		handler.ServeHTTP(w, r)
	})
	plain := httptest.NewServer(counted)
	t.Cleanup(plain.Close)
	secure := httptest.NewUnstartedServer(counted)
	secure.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	secure.StartTLS()
	t.Cleanup(secure.Close)
	h.dialer = &routingDialer{routes: map[string]string{
		"80":  plain.Listener.Addr().String(),
		"443": secure.Listener.Addr().String(),
	}}
	opts.Resolver = h.resolver
	opts.DialContext = h.dialer.DialContext
	if opts.RootCAs == nil {
		pool := secure.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
		opts.RootCAs = pool
	}
	h.broker = New(opts)
	return h
}

var declared = []string{"example.com", "example.org"}

// wantRefusal fails unless err is a *Refusal whose reason contains want.
func wantRefusal(t *testing.T, err error, want string) {
	t.Helper()
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("err = %v (%T), want a *Refusal containing %q", err, err, want)
	}
	if !strings.Contains(r.Reason, want) {
		t.Fatalf("refusal = %q, want it to contain %q", r.Reason, want)
	}
}

func TestDoAllowed(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sni := ""
		if r.TLS != nil {
			sni = r.TLS.ServerName
		}
		w.Header().Set("X-Seen", fmt.Sprintf("%s %s %s sni=%s", r.Method, r.Host, r.URL.RequestURI(), sni))
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	})
	tests := []struct {
		name       string
		req        spoke.HTTPRequest
		wantSeen   string
		wantBody   string
		wantDialed string
	}{
		{
			name:       "GET over http",
			req:        spoke.HTTPRequest{Method: "GET", URL: "http://example.com/hello?q=1#frag"},
			wantSeen:   "GET example.com /hello?q=1 sni=",
			wantDialed: publicV4 + ":80",
		},
		{
			name:       "empty method is GET",
			req:        spoke.HTTPRequest{URL: "http://www.example.com/"},
			wantSeen:   "GET www.example.com / sni=",
			wantDialed: publicV4 + ":80",
		},
		{
			name:       "POST with body over https to an IPv6 host",
			req:        spoke.HTTPRequest{Method: "POST", URL: "https://api.example.com/v1/items", Body: []byte(`{"a":1}`)},
			wantSeen:   "POST api.example.com /v1/items sni=api.example.com",
			wantBody:   `{"a":1}`,
			wantDialed: "[" + publicV6 + "]:443",
		},
		{
			name:       "canonicalised host: upper case, trailing dot, full-width",
			req:        spoke.HTTPRequest{Method: "PUT", URL: "HTTPS://ＥＸＡＭＰＬＥ.COM./x", Body: []byte("b")},
			wantSeen:   "PUT example.com /x sni=example.com",
			wantBody:   "b",
			wantDialed: publicV4 + ":443",
		},
		{
			name:       "raw bytes in the query are percent-encoded",
			req:        spoke.HTTPRequest{Method: "GET", URL: "http://example.com/s?q=a b HTTP/1.0&t=é|x&ok=a%20b"},
			wantSeen:   "GET example.com /s?q=a%20b%20HTTP/1.0&t=%C3%A9%7Cx&ok=a%20b sni=",
			wantDialed: publicV4 + ":80",
		},
		{
			name:       "explicit default port is dropped",
			req:        spoke.HTTPRequest{Method: "GET", URL: "https://example.com:443/p"},
			wantSeen:   "GET example.com /p sni=example.com",
			wantDialed: publicV4 + ":443",
		},
		{
			name:       "second declared domain",
			req:        spoke.HTTPRequest{Method: "GET", URL: "http://cdn.example.org/a.js"},
			wantSeen:   "GET cdn.example.org /a.js sni=",
			wantDialed: publicV4 + ":80",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{}, handler)
			resp, _, err := h.broker.Do(t.Context(), "app", declared, tt.req)
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if resp.Status != http.StatusCreated {
				t.Errorf("status = %d, want 201", resp.Status)
			}
			if got := http.Header(resp.Header).Get("X-Seen"); got != tt.wantSeen {
				t.Errorf("server saw %q, want %q", got, tt.wantSeen)
			}
			if string(resp.Body) != tt.wantBody {
				t.Errorf("body = %q, want %q", resp.Body, tt.wantBody)
			}
			if got := h.dialer.calls(); !slices.Equal(got, []string{tt.wantDialed}) {
				t.Errorf("dialed %v, want only the vetted address %s", got, tt.wantDialed)
			}
			for _, q := range h.resolver.asked {
				if !strings.HasSuffix(q, ".") {
					t.Errorf("resolver asked %q, want a fully-qualified name", q)
				}
			}
		})
	}
}

func TestDoTLSVerification(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	// The test server's certificate names example.com and *.example.com
	// only, so a name outside it fails verification.
	h := newHarness(t, Options{}, handler)
	h.resolver.answers["other.example.org"] = []string{publicV4}
	_, _, err := h.broker.Do(t.Context(), "app", declared, spoke.HTTPRequest{URL: "https://other.example.org/"})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Do to a host outside the certificate: err = %v, want a certificate error", err)
	}
	// Roots without the test CA do not trust the server.
	untrusted := newHarness(t, Options{RootCAs: x509.NewCertPool()}, handler)
	_, _, err = untrusted.broker.Do(t.Context(), "app", declared, spoke.HTTPRequest{URL: "https://example.com/"})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Do with untrusted roots: err = %v, want a certificate error", err)
	}
	if h.hits.Load()+untrusted.hits.Load() != 0 {
		t.Errorf("server handled %d requests, want none", h.hits.Load()+untrusted.hits.Load())
	}
}

func TestDoRequestBodyLimit(t *testing.T) {
	h := newHarness(t, Options{MaxRequestBytes: 1024}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	tests := []struct {
		size int
		ok   bool
	}{{1024, true}, {1025, false}}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.size), func(t *testing.T) {
			before := h.hits.Load()
			secret := bytes.Repeat([]byte("s"), tt.size)
			_, _, err := h.broker.Do(t.Context(), "app", declared, spoke.HTTPRequest{Method: "POST", URL: "http://example.com/", Body: secret})
			if tt.ok {
				if err != nil {
					t.Fatalf("Do: %v", err)
				}
				return
			}
			wantRefusal(t, err, "request body of 1025 bytes is over the 1024-byte limit")
			if strings.Contains(err.Error(), "sss") {
				t.Errorf("refusal %q contains the request body", err)
			}
			if h.hits.Load() != before {
				t.Errorf("server was contacted for a refused request")
			}
		})
	}
}

func TestDoResponseBodyLimit(t *testing.T) {
	const limit = 1024
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscan(r.URL.Query().Get("n"), &n)
		if r.URL.Query().Get("gzip") != "" {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			zw.Write(bytes.Repeat([]byte("a"), n))
			zw.Close()
			return
		}
		if r.URL.Query().Get("chunked") != "" {
			w.Write(bytes.Repeat([]byte("a"), n/2))
			w.(http.Flusher).Flush()
			w.Write(bytes.Repeat([]byte("a"), n-n/2))
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(n))
		w.Write(bytes.Repeat([]byte("a"), n))
	})
	h := newHarness(t, Options{MaxResponseBytes: limit}, handler)
	tests := []struct {
		query string
		want  string // refusal; empty when allowed
	}{
		{"n=1024", ""},
		{"n=1024&chunked=1", ""},
		{"n=1025", "response from http://example.com of 1025 bytes is over the 1024-byte limit"},
		{"n=1025&chunked=1", "response from http://example.com is over the 1024-byte limit"},
		{"n=5000000&chunked=1", "is over the 1024-byte limit"},
		{"n=1024&gzip=1", ""},
		{"n=1000000&gzip=1", "is over the 1024-byte limit"}, // about 1 KiB on the wire
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			resp, _, err := h.broker.Do(t.Context(), "app", declared, spoke.HTTPRequest{URL: "http://example.com/?" + tt.query})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Do: %v", err)
				}
				if len(resp.Body) != limit {
					t.Errorf("body is %d bytes, want %d", len(resp.Body), limit)
				}
				return
			}
			wantRefusal(t, err, tt.want)
		})
	}
}

func TestDoTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow-body" {
			w.Write([]byte("start"))
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	h := newHarness(t, Options{Timeout: 200 * time.Millisecond}, handler)
	for _, path := range []string{"/slow-headers", "/slow-body"} {
		t.Run(path, func(t *testing.T) {
			start := time.Now()
			_, _, err := h.broker.Do(t.Context(), "app", declared, spoke.HTTPRequest{URL: "http://example.com" + path})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want a deadline error", err)
			}
			if elapsed := time.Since(start); elapsed > 2*time.Second {
				t.Errorf("Do took %s with a 200ms timeout", elapsed)
			}
		})
	}
}

func TestDoConcurrencyLimit(t *testing.T) {
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	})
	h := newHarness(t, Options{MaxConcurrent: 1}, handler)
	first := make(chan error, 1)
	go func() {
		_, _, err := h.broker.Do(context.Background(), "app", declared, spoke.HTTPRequest{URL: "http://example.com/"})
		first <- err
	}()
	<-entered
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, _, err := h.broker.Do(ctx, "app", declared, spoke.HTTPRequest{URL: "http://example.com/"})
	if err == nil || !strings.Contains(err.Error(), "egress slot") {
		t.Errorf("second Do while the only slot is taken: err = %v, want a slot error", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Errorf("first Do: %v", err)
	}
	// The slot is free again.
	if _, _, err := h.broker.Do(t.Context(), "app", declared, spoke.HTTPRequest{URL: "http://example.com/"}); err != nil {
		t.Errorf("Do after the slot was freed: %v", err)
	}
}

func TestDoRedirects(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch r.URL.Path {
		case "/chain":
			var n int
			fmt.Sscan(q.Get("n"), &n)
			if n > 0 {
				http.Redirect(w, r, fmt.Sprintf("/chain?n=%d", n-1), http.StatusFound)
				return
			}
			fmt.Fprint(w, "end of chain")
		case "/to":
			code := http.StatusFound
			fmt.Sscan(q.Get("code"), &code)
			w.Header().Set("Location", q.Get("url"))
			w.WriteHeader(code)
		case "/headers":
			var names []string
			for k := range r.Header {
				names = append(names, k)
			}
			slices.Sort(names)
			fmt.Fprint(w, strings.Join(names, ","))
		case "/echo":
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s auth=%q cookie=%q ctype=%q body=%q", r.Method, r.Host, r.Header.Get("Authorization"),
				r.Header.Get("Cookie"), r.Header.Get("Content-Type"), body)
		default:
			http.NotFound(w, r)
		}
	})
	h := newHarness(t, Options{}, handler)
	h.resolver.answers["internal.example.com"] = []string{"10.0.0.5"}
	h.resolver.answers["rebind.example.com"] = []string{publicV4, "127.0.0.1"}

	to := func(code int, target string) string {
		return fmt.Sprintf("http://example.com/to?code=%d&url=%s", code, target)
	}
	tests := []struct {
		name       string
		req        spoke.HTTPRequest
		wantBody   string
		wantRefuse string
	}{
		{name: "chain within the limit", req: spoke.HTTPRequest{URL: "http://example.com/chain?n=5"}, wantBody: "end of chain"},
		{name: "chain over the limit", req: spoke.HTTPRequest{URL: "http://example.com/chain?n=6"},
			wantRefuse: "more than 5 redirects; the last was from http://example.com"},
		{name: "to another declared host over https", req: spoke.HTTPRequest{URL: to(301, "https://www.example.com/echo")},
			wantBody: `GET www.example.com auth="" cookie="" ctype="" body=""`},
		{name: "to a forbidden address", req: spoke.HTTPRequest{URL: to(302, "http://internal.example.com/")},
			wantRefuse: "redirect 1 to http://internal.example.com refused: internal.example.com resolves to 10.0.0.5, a private (RFC 1918) address"},
		{name: "to a name with one forbidden answer", req: spoke.HTTPRequest{URL: to(302, "http://rebind.example.com/")},
			wantRefuse: "redirect 1 to http://rebind.example.com refused: rebind.example.com resolves to 127.0.0.1, a loopback address"},
		{name: "to the metadata IP literal", req: spoke.HTTPRequest{URL: to(307, "http://169.254.169.254/latest/meta-data/")},
			wantRefuse: `redirect 1 to http://169.254.169.254 refused: host "169.254.169.254" is an IP literal`},
		{name: "to an undeclared domain", req: spoke.HTTPRequest{URL: to(308, "https://evil.net/steal")},
			wantRefuse: "redirect 1 to https://evil.net refused: domain evil.net is not declared by the app"},
		{name: "to a file URL", req: spoke.HTTPRequest{URL: to(302, "file:///etc/passwd")},
			wantRefuse: `redirect 1 to file: refused: scheme "file" is not allowed`},
		{name: "to localhost", req: spoke.HTTPRequest{URL: to(302, "http://localhost:8080/")},
			wantRefuse: "redirect 1 to http://localhost:8080 refused: host localhost is refused"},
		{name: "to another port of a declared host", req: spoke.HTTPRequest{URL: to(302, "http://www.example.com:6379/")},
			wantRefuse: "redirect 1 to http://www.example.com:6379 refused: port 6379 is refused"},
		{name: "303 turns POST into GET without body",
			req:      spoke.HTTPRequest{Method: "POST", URL: to(303, "/echo"), Header: map[string][]string{"Content-Type": {"text/plain"}}, Body: []byte("secret")},
			wantBody: `GET example.com auth="" cookie="" ctype="" body=""`},
		{name: "307 repeats POST with body",
			req:      spoke.HTTPRequest{Method: "POST", URL: to(307, "/echo"), Header: map[string][]string{"Content-Type": {"text/plain"}}, Body: []byte("data")},
			wantBody: `POST example.com auth="" cookie="" ctype="text/plain" body="data"`},
		{name: "302 drops a GET's body",
			req:      spoke.HTTPRequest{URL: to(302, "/echo"), Header: map[string][]string{"Content-Type": {"text/plain"}}, Body: []byte("x")},
			wantBody: `GET example.com auth="" cookie="" ctype="" body=""`},
		{name: "308 repeats PUT with body",
			req:      spoke.HTTPRequest{Method: "PUT", URL: to(308, "/echo"), Header: map[string][]string{"Content-Type": {"text/plain"}}, Body: []byte("d")},
			wantBody: `PUT example.com auth="" cookie="" ctype="text/plain" body="d"`},
		{name: "same origin keeps credentials",
			req:      spoke.HTTPRequest{URL: to(302, "/echo"), Header: map[string][]string{"Authorization": {"Bearer t"}, "Cookie": {"s=1"}}},
			wantBody: `GET example.com auth="Bearer t" cookie="s=1" ctype="" body=""`},
		{name: "other origin drops credentials",
			req:      spoke.HTTPRequest{URL: to(302, "http://www.example.com/echo"), Header: map[string][]string{"Authorization": {"Bearer t"}, "Cookie": {"s=1"}}},
			wantBody: `GET www.example.com auth="" cookie="" ctype="" body=""`},
		{name: "other origin gets only harmless headers",
			req: spoke.HTTPRequest{URL: to(302, "http://www.example.com/headers"), Header: map[string][]string{
				"X-Api-Key": {"k"}, "X-Auth-Token": {"t"}, "Accept": {"application/json"}, "Accept-Language": {"fr"},
				"User-Agent": {"app/1"}, "Content-Type": {"text/plain"}}},
			wantBody: "Accept,Accept-Encoding,Accept-Language,User-Agent"},
		{name: "scheme change is another origin",
			req:      spoke.HTTPRequest{URL: to(302, "https://example.com/headers"), Header: map[string][]string{"X-Api-Key": {"k"}}},
			wantBody: "Accept-Encoding,User-Agent"},
		{name: "307 to another origin keeps the body's type",
			req: spoke.HTTPRequest{Method: "POST", URL: to(307, "http://www.example.com/headers"), Body: []byte("b"), Header: map[string][]string{
				"X-Api-Key": {"k"}, "Content-Type": {"text/plain"}}},
			wantBody: "Accept-Encoding,Content-Length,Content-Type,User-Agent"},
		{name: "same origin keeps custom headers",
			req:      spoke.HTTPRequest{URL: to(302, "/headers"), Header: map[string][]string{"X-Api-Key": {"k"}}},
			wantBody: "Accept-Encoding,User-Agent,X-Api-Key"},
		{name: "3xx without Location is final", req: spoke.HTTPRequest{URL: to(302, "")}, wantBody: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, _, err := h.broker.Do(t.Context(), "app", declared, tt.req)
			if tt.wantRefuse != "" {
				wantRefusal(t, err, tt.wantRefuse)
				return
			}
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if string(resp.Body) != tt.wantBody {
				t.Errorf("body = %q, want %q", resp.Body, tt.wantBody)
			}
		})
	}
	for _, d := range h.dialer.calls() {
		if ap, err := netip.ParseAddrPort(d); err != nil || !slices.Contains([]string{publicV4, publicV6}, ap.Addr().String()) {
			t.Errorf("dialed %s, which is not a vetted public address", d)
		}
	}
}

func TestDoRefusesURL(t *testing.T) {
	tests := []struct {
		name string
		url  string
		want string
	}{
		{"undeclared domain", "https://evil.net/", "domain evil.net is not declared by the app"},
		{"sibling with a hyphen", "https://evil-example.com/", "domain evil-example.com is not declared by the app"},
		{"declared name as a subdomain", "https://example.com.evil.net/", "domain evil.net is not declared by the app"},
		{"declared name as a prefix", "https://example.comevil.net/", "domain comevil.net is not declared by the app"},
		{"homoglyph (Cyrillic a)", "https://exаmple.com/", "domain xn--exmple-4nf.com is not declared by the app"},
		{"IPv4 literal", "http://127.0.0.1/", `host "127.0.0.1" is an IP literal`},
		{"IPv4 literal of a public host", "http://93.184.216.34/", "is an IP literal"},
		{"IPv6 literal", "http://[::1]/", `host "::1" is an IP literal`},
		{"IPv6 literal with zone", "http://[fe80::1%25eth0]/", "is an IP literal"},
		{"IPv4-mapped IPv6 literal", "http://[::ffff:127.0.0.1]/", "is an IP literal"},
		{"decimal integer", "http://2130706433/", "is an IP literal"},
		{"hex and short form", "http://0x7f.1/", "is an IP literal"},
		{"short form", "http://127.1/", "is an IP literal"},
		{"octal", "http://0177.0.0.1/", "is an IP literal"},
		{"hex integer", "http://0x7f000001/", "is an IP literal"},
		{"trailing dot IP", "http://127.0.0.1./", "is an IP literal"},
		{"full-width digits", "http://１２７.０.０.１/", "is an IP literal"},
		{"ideographic dots", "http://127。0。0。1/", "is an IP literal"},
		{"localhost", "http://localhost/", "host localhost is refused"},
		{"localhost upper case with dot", "http://LOCALHOST./", "host localhost is refused"},
		{"localhost subdomain", "http://app.localhost/", "host app.localhost is refused"},
		{"single label", "http://intranet/", "host intranet is a single-label name"},
		{"metadata name", "http://metadata.google.internal/computeMetadata/v1/", "host metadata.google.internal is the Google Cloud metadata service"},
		{"metadata name under an ICANN TLD", "http://metadata.goog/", "host metadata.goog is the Google Cloud metadata service"},
		{"file scheme", "file:///etc/passwd", `scheme "file" is not allowed`},
		{"gopher scheme", "gopher://example.com/", `scheme "gopher" is not allowed`},
		{"ftp scheme", "ftp://example.com/", `scheme "ftp" is not allowed`},
		{"websocket scheme", "ws://example.com/", `scheme "ws" is not allowed`},
		{"no scheme", "//example.com/", "URL has no scheme"},
		{"opaque", "http:example.com", "URL has no host"},
		{"userinfo", "http://user:hunter2@example.com/", "URL carries user information"},
		{"userinfo as a host trick", "http://example.com%2f@evil.net/", "URL carries user information"},
		{"empty userinfo", "http://@example.com/", "URL carries user information"},
		{"smtp port", "http://example.com:25/", "port 25 is refused: apps may reach only ports 80"},
		{"alternative web port", "http://example.com:8080/", "port 8080 is refused"},
		{"PostgreSQL port", "https://example.com:5432/", "port 5432 is refused"},
		{"homeserver port", "http://example.com:8008/_matrix/client/versions", "port 8008 is refused"},
		{"port zero", "http://example.com:0/", `port "0" is not a TCP port`},
		{"port out of range", "http://example.com:65536/", `port "65536" is not a TCP port`},
		{"double trailing dot", "http://example.com../", "empty or over-long label"},
		{"underscore", "http://a_b.example.com/", "is not a valid domain name"},
		{"unlisted TLD", "http://printer.lan/", "host printer.lan is not under a public top-level domain"},
		{"malformed", "http://exa mple.com/", "URL cannot be parsed"},
		{"too long", "http://example.com/" + strings.Repeat("a", maxURLBytes), "URL is longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			_, _, err := h.broker.Do(t.Context(), "app", declared, spoke.HTTPRequest{Method: "GET", URL: tt.url})
			wantRefusal(t, err, tt.want)
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("refusal %q contains the URL's password", err)
			}
			if len(h.resolver.asked) != 0 || len(h.dialer.calls()) != 0 || h.hits.Load() != 0 {
				t.Errorf("refused URL was resolved %v, dialled %v or sent", h.resolver.asked, h.dialer.calls())
			}
		})
	}
}

func TestDoRefusesResolvedAddress(t *testing.T) {
	tests := []struct {
		name    string
		answers []string
		want    string
	}{
		{"IPv4 loopback", []string{"127.0.0.1"}, "evil.example.com resolves to 127.0.0.1, a loopback address"},
		{"IPv6 loopback", []string{"::1"}, "resolves to ::1, a loopback address"},
		{"10/8", []string{"10.1.2.3"}, "resolves to 10.1.2.3, a private (RFC 1918) address"},
		{"172.16/12", []string{"172.16.0.1"}, "resolves to 172.16.0.1, a private (RFC 1918) address"},
		{"192.168/16", []string{"192.168.1.1"}, "resolves to 192.168.1.1, a private (RFC 1918) address"},
		{"metadata", []string{"169.254.169.254"}, "resolves to 169.254.169.254, the cloud instance-metadata address"},
		{"link-local", []string{"169.254.1.1"}, "resolves to 169.254.1.1, a link-local address"},
		{"CGNAT", []string{"100.64.0.1"}, "resolves to 100.64.0.1, a carrier-grade NAT (RFC 6598) address"},
		{"Alibaba metadata in CGNAT", []string{"100.100.100.200"}, "a carrier-grade NAT (RFC 6598) address"},
		{"ULA", []string{"fc00::1"}, "resolves to fc00::1, a unique local (private) address"},
		{"AWS IPv6 metadata", []string{"fd00:ec2::254"}, "a unique local (private) address"},
		{"IPv6 link-local", []string{"fe80::1"}, "a link-local address"},
		{"IPv4-mapped loopback", []string{"::ffff:127.0.0.1"}, "resolves to 127.0.0.1, a loopback address"},
		{"NAT64 loopback", []string{"64:ff9b::7f00:1"}, "resolves to 64:ff9b::7f00:1, a NAT64 form of 127.0.0.1, a loopback address"},
		{"unspecified IPv4", []string{"0.0.0.0"}, `resolves to 0.0.0.0, the unspecified "this network" range`},
		{"unspecified IPv6", []string{"::"}, "resolves to ::, the unspecified address"},
		{"multicast", []string{"224.0.0.1"}, "a multicast address"},
		{"broadcast", []string{"255.255.255.255"}, "the broadcast address"},
		{"benchmarking", []string{"198.18.0.1"}, "a benchmarking address"},
		{"documentation", []string{"192.0.2.1"}, "a documentation address"},
		{"mixed: public then private", []string{publicV4, "10.0.0.1"}, "resolves to 10.0.0.1, a private (RFC 1918) address"},
		{"mixed: private then public", []string{"192.168.0.1", publicV4}, "resolves to 192.168.0.1"},
		{"mixed: public v6 then loopback v6", []string{publicV6, "::1"}, "resolves to ::1, a loopback address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			h.resolver.answers["evil.example.com"] = tt.answers
			_, _, err := h.broker.Do(t.Context(), "app", declared, spoke.HTTPRequest{URL: "http://evil.example.com/"})
			wantRefusal(t, err, tt.want)
			if calls := h.dialer.calls(); len(calls) != 0 {
				t.Errorf("dialled %v after a forbidden answer", calls)
			}
		})
	}
}

func TestDoResolverFailure(t *testing.T) {
	h := newHarness(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	h.resolver.answers["empty.example.com"] = nil
	for _, host := range []string{"missing.example.com", "empty.example.com"} {
		_, _, err := h.broker.Do(t.Context(), "app", declared, spoke.HTTPRequest{URL: "http://" + host + "/"})
		if err == nil || !strings.Contains(err.Error(), "failed to resolve "+host) {
			t.Errorf("Do to %s: err = %v, want a resolution failure", host, err)
		}
	}
	if calls := h.dialer.calls(); len(calls) != 0 {
		t.Errorf("dialled %v without a vetted address", calls)
	}
}

func TestDoDeclaredDomains(t *testing.T) {
	h := newHarness(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	h.resolver.answers["user.github.io"] = []string{publicV4}
	tests := []struct {
		name    string
		domains []string
		url     string
		want    string // refusal; empty when allowed
	}{
		{"no domains refuses everything", nil, "http://example.com/", "the app declares no egress domains"},
		{"public suffix matches nothing", []string{"github.io"}, "http://user.github.io/", "none of the app's declared egress domains is a registrable domain"},
		{"subdomain entry matches nothing", []string{"www.example.com"}, "http://www.example.com/", "none of the app's declared egress domains"},
		{"IP entry matches nothing", []string{"93.184.216.34", "github.io"}, "http://example.com/", "none of the app's declared egress domains"},
		{"private-suffix registrable domain", []string{"user.github.io"}, "http://user.github.io/", ""},
		{"declared entries are canonicalised", []string{"EXAMPLE.COM."}, "http://www.example.com/", ""},
		{"invalid entries are ignored, valid ones apply", []string{"github.io", "example.org"}, "http://example.com/", "domain example.com is not declared by the app"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := h.broker.Do(t.Context(), "app", tt.domains, spoke.HTTPRequest{URL: tt.url})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Do: %v", err)
				}
				return
			}
			wantRefusal(t, err, tt.want)
		})
	}
}

func TestDoHeaders(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var got []string
		for k := range r.Header {
			got = append(got, k)
		}
		slices.Sort(got)
		w.Header().Set("X-Got", strings.Join(got, ","))
		w.Header().Set("X-Host", r.Host)
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Proxy-Authenticate", "Basic")
		w.Header().Set("Connection", "X-Secret-Hop")
		w.Header().Set("X-Secret-Hop", "1")
		w.Header().Add("Set-Cookie", "session=1; Secure")
	})
	h := newHarness(t, Options{}, handler)
	resp, _, err := h.broker.Do(t.Context(), "app", declared, spoke.HTTPRequest{URL: "https://example.com/", Header: map[string][]string{
		"Host":                {"evil.net"},
		"Connection":          {"X-Hop"},
		"X-Hop":               {"1"},
		"Proxy-Authorization": {"Basic Zm9vOmJhcg=="},
		"Transfer-Encoding":   {"chunked"},
		"X-Forwarded-For":     {"127.0.0.1"},
		"Upgrade":             {"websocket"},
		"Authorization":       {"Bearer app-token"},
		"x-custom":            {"kept"},
	}})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	rh := http.Header(resp.Header)
	if got, want := rh.Get("X-Got"), "Accept-Encoding,Authorization,User-Agent,X-Custom"; got != want {
		t.Errorf("server got headers %s, want %s", got, want)
	}
	if got := rh.Get("X-Host"); got != "example.com" {
		t.Errorf("server got Host %q, want example.com", got)
	}
	for _, k := range []string{"Keep-Alive", "Proxy-Authenticate", "Connection", "X-Secret-Hop"} {
		if _, ok := rh[k]; ok {
			t.Errorf("response header %s was passed on", k)
		}
	}
	if got := rh.Get("Set-Cookie"); got != "session=1; Secure" {
		t.Errorf("Set-Cookie = %q, want it passed on", got)
	}
}

// TestDoNewRequestRoundTrip builds the request the way the spoke's transport
// does, from an *http.Request.
func TestDoNewRequestRoundTrip(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"method":%q,"uri":%q,"ctype":%q,"token":%q,"body":%q}`,
			r.Method, r.URL.RequestURI(), r.Header.Get("Content-Type"), r.Header.Get("X-Token"), body)
	})
	h := newHarness(t, Options{}, handler)
	hreq, err := http.NewRequest(http.MethodPost, "https://api.example.com/v1/search?q=a%20b&lang=en", strings.NewReader(`{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("X-Token", "t0k")
	body, _ := io.ReadAll(hreq.Body)
	resp, _, err := h.broker.Do(t.Context(), "app", []string{"example.com"}, spoke.HTTPRequest{
		Method: hreq.Method, URL: hreq.URL.String(), Header: hreq.Header, Body: body,
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	want := `{"method":"POST","uri":"/v1/search?q=a%20b&lang=en","ctype":"application/json","token":"t0k","body":"{\"x\":1}"}`
	if resp.Status != 200 || string(resp.Body) != want {
		t.Errorf("response = %d %s, want 200 %s", resp.Status, resp.Body, want)
	}
	if got := http.Header(resp.Header).Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
}

func TestDefaultDialerRefusesForbiddenPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	b := New(Options{})
	conn, err := b.opts.DialContext(t.Context(), "tcp", ln.Addr().String())
	if err == nil {
		conn.Close()
	}
	wantRefusal(t, err, "connection to 127.0.0.1 refused: a loopback address")
	select {
	case <-accepted:
		t.Error("the listener accepted a connection the dialer refused")
	case <-time.After(50 * time.Millisecond):
	}
}

func TestDialVettedRefusesUnvetted(t *testing.T) {
	h := newHarness(t, Options{}, http.NotFoundHandler())
	x := &exchange{broker: h.broker, vetted: map[string][]netip.Addr{
		"example.com:80":    {netip.MustParseAddr(publicV4)},
		"poison.example:80": {netip.MustParseAddr("127.0.0.1")},
	}}
	_, err := x.dialVetted(t.Context(), "tcp", "other.example.com:80")
	wantRefusal(t, err, "connection to other.example.com:80 refused: not vetted in this exchange")
	_, err = x.dialVetted(t.Context(), "tcp", "poison.example:80")
	wantRefusal(t, err, "connection to 127.0.0.1 refused: a loopback address")
	if calls := h.dialer.calls(); len(calls) != 0 {
		t.Errorf("dialled %v", calls)
	}
}

// TestDoRefusesOwnAddress: a declared name the app's author points at the
// hub's own public address is refused before anything is dialled, as is a
// redirect there.
func TestDoRefusesOwnAddress(t *testing.T) {
	h := newHarness(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://hub.example.com/", http.StatusFound)
	}))
	const hubIP = "203.0.114.7"
	withOwnAddrs(h.broker, "127.0.0.1/8", hubIP+"/24", "2606:2800:220:1::7/64")
	h.resolver.answers["hub.example.com"] = []string{hubIP}
	h.resolver.answers["hub6.example.com"] = []string{"2606:2800:220:1::7"}
	h.resolver.answers["mapped.example.com"] = []string{publicV4, "::ffff:" + hubIP}
	tests := []struct{ url, want string }{
		{"http://hub.example.com/", "hub.example.com resolves to " + hubIP + ", an address of this machine"},
		{"https://hub6.example.com/", "hub6.example.com resolves to 2606:2800:220:1::7, an address of this machine"},
		{"http://mapped.example.com/", "resolves to " + hubIP + ", an address of this machine"},
		{"http://www.example.com/", "redirect 1 to http://hub.example.com refused: hub.example.com resolves to " + hubIP + ", an address of this machine"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			_, _, err := h.broker.Do(t.Context(), "app", declared, spoke.HTTPRequest{URL: tt.url})
			wantRefusal(t, err, tt.want)
		})
	}
	for _, d := range h.dialer.calls() {
		if d != publicV4+":80" {
			t.Errorf("dialled %s", d)
		}
	}
}

// TestDoHead: the response to HEAD has no body, so a Content-Length over
// the limit (the size a GET would get) is passed on, not refused.
func TestDoHead(t *testing.T) {
	const limit = 1024
	h := newHarness(t, Options{MaxResponseBytes: limit}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5000000")
		if r.Method != http.MethodHead {
			w.Write(bytes.Repeat([]byte("a"), 5000000))
		}
	}))
	for _, url := range []string{"http://example.com/big.iso", "https://example.com/big.iso"} {
		resp, _, err := h.broker.Do(t.Context(), "app", declared, spoke.HTTPRequest{Method: "HEAD", URL: url})
		if err != nil {
			t.Fatalf("HEAD %s: %v", url, err)
		}
		if resp.Status != http.StatusOK || len(resp.Body) != 0 || http.Header(resp.Header).Get("Content-Length") != "5000000" {
			t.Errorf("HEAD %s = %d, %d body bytes, Content-Length %q; want 200, none, 5000000",
				url, resp.Status, len(resp.Body), http.Header(resp.Header).Get("Content-Length"))
		}
	}
	_, _, err := h.broker.Do(t.Context(), "app", declared, spoke.HTTPRequest{Method: "GET", URL: "http://example.com/big.iso"})
	wantRefusal(t, err, "of 5000000 bytes is over the 1024-byte limit")
}

// TestDoFairShare: one app whose server stalls, called by as many users as
// the broker has slots, holds only its share; another app's request goes
// through at once, and the stalled app's queued requests are served when
// its slots free up.
func TestDoFairShare(t *testing.T) {
	entered := make(chan struct{}, 8)
	release := make(chan struct{})
	var once sync.Once
	unstall := func() { once.Do(func() { close(release) }) }
	defer unstall() // also when the test fails early
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host == "example.com" {
			entered <- struct{}{}
			<-release
		}
		fmt.Fprint(w, "ok")
	})
	h := newHarness(t, Options{MaxConcurrent: 4}, handler)
	slow := []string{"example.com"}
	results := make(chan error, 4)
	for range 4 { // four users of the slow app
		go func() {
			_, _, err := h.broker.Do(context.Background(), "slow_app", slow, spoke.HTTPRequest{URL: "http://example.com/"})
			results <- err
		}()
	}
	<-entered
	// Let the other three reach the slot queue.
	deadline := time.Now().Add(2 * time.Second)
	for {
		h.broker.slots.mu.Lock()
		n := h.broker.slots.waiting.Len()
		h.broker.slots.mu.Unlock()
		if n == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	// Another app, even one declaring the same domains, has its own share.
	resp, _, err := h.broker.Do(ctx, "other_app", []string{"example.com", "example.org"}, spoke.HTTPRequest{URL: "http://cdn.example.org/"})
	if err != nil || string(resp.Body) != "ok" {
		t.Fatalf("another app's request while one app stalls: %q, %v", resp.Body, err)
	}
	if all, mine := h.broker.slots.inFlight("slow_app"); all != 1 || mine != 1 {
		t.Errorf("in flight: %d, %d of the stalled app; want 1 (its share)", all, mine)
	}
	unstall()
	for range 4 {
		if err := <-results; err != nil {
			t.Errorf("stalled app's request: %v", err)
		}
	}
	if len(h.broker.slots.held) != 0 || h.broker.slots.waiting.Len() != 0 || h.broker.slots.inUse != 0 {
		t.Errorf("slots keep state after every exchange ended: %v, %d waiting, %d in use",
			h.broker.slots.held, h.broker.slots.waiting.Len(), h.broker.slots.inUse)
	}
}

// TestDoReportsWhereTheRequestWent: Do says which origins a request was
// written to, whatever the outcome: none when it was refused before it
// left, each hop it went to even when a refusal followed (its data left).
func TestDoReportsWhereTheRequestWent(t *testing.T) {
	const limit = 1024
	h := newHarness(t, Options{MaxResponseBytes: limit}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Write(bytes.Repeat([]byte("a"), 2*limit))
		case "/to-www":
			http.Redirect(w, r, "http://www.example.com/page", http.StatusFound)
		case "/to-private":
			http.Redirect(w, r, "http://10.0.0.1/", http.StatusFound)
		default:
			io.WriteString(w, "ok")
		}
	}))
	tests := []struct {
		name    string
		url     string
		refused bool
		sent    []string
	}{
		{"refused before it left", "http://undeclared.example.net/", true, nil},
		{"sent and answered", "http://example.com/", false, []string{"http://example.com"}},
		{"sent, its response refused", "http://example.com/big", true, []string{"http://example.com"}},
		{"sent, its redirect refused", "http://example.com/to-private", true, []string{"http://example.com"}},
		{"sent and redirected", "http://example.com/to-www", false, []string{"http://example.com", "http://www.example.com"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, sent, err := h.broker.Do(t.Context(), "app", declared, spoke.HTTPRequest{URL: tt.url})
			var r *Refusal
			if errors.As(err, &r) != tt.refused || (!tt.refused && err != nil) {
				t.Fatalf("err = %v, want refused %v", err, tt.refused)
			}
			if !slices.Equal(sent, tt.sent) {
				t.Fatalf("sent to %q, want %q", sent, tt.sent)
			}
		})
	}
}
