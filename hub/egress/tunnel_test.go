package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/secgpt/secgpt/spoke"
)

// tcpPair returns both ends of a loopback TCP connection: what the app
// dialled and what its spoke accepted.
func tcpPair(t *testing.T) (client, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		done <- c
	}()
	client, err = net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	accepted = <-done
	if accepted == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); accepted.Close() })
	return client, accepted
}

// TestTunnelReachesDeclaredServerEndToEnd: a TLS client talks, through the
// tunnel, to the server its SNI names, and verifies that server's own
// certificate: the broker did not terminate TLS.
func TestTunnelReachesDeclaredServerEndToEnd(t *testing.T) {
	h := newHarness(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello "+r.TLS.ServerName)
	}))
	client, accepted := tcpPair(t)
	type result struct {
		host string
		sent bool
		err  error
	}
	res := make(chan result, 1)
	go func() {
		host, sent, err := h.broker.Tunnel(t.Context(), "app", declared, accepted)
		res <- result{host, sent, err}
	}()
	tc := tls.Client(client, &tls.Config{ServerName: "www.example.com", RootCAs: h.broker.opts.RootCAs})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake through the tunnel: %v", err)
	}
	r := <-res
	if r.err != nil || r.host != "www.example.com" || !r.sent {
		t.Fatalf("Tunnel = %+v", r)
	}
	req, _ := http.NewRequest("GET", "https://www.example.com/", nil)
	if err := req.Write(tc); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "hello www.example.com" {
		t.Fatalf("body %q", body)
	}
	if got := h.dialer.calls(); len(got) != 1 || got[0] != publicV4+":443" {
		t.Fatalf("dialled %v", got)
	}
}

// TestTunnelRefusals: each class of connection the tunnel must not carry
// is refused before anything is dialled, with the reason.
func TestTunnelRefusals(t *testing.T) {
	tests := []struct {
		name    string
		domains []string
		// send writes what the app sends on the connection.
		send func(c net.Conn)
		want string
	}{
		{"undeclared domain", declared, hello("www.undeclared.net"), "domain undeclared.net is not declared"},
		{"no SNI", declared, hello(""), "names no server (SNI)"},
		{"IP literal as SNI", declared, hello("93.184.216.34"), "names no server (SNI)"},
		{"local name", declared, hello("printer.local"), "local"},
		{"not a plain host name", declared, hello("example.com:8443"), "not a plain host name"},
		{"plain HTTP on 443", declared, func(c net.Conn) {
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
		}, "TLS only"},
		{"no domains declared", nil, hello("example.com"), "declares no egress domains"},
		{"resolves to loopback (rebinding)", declared, hello("rebind.example.com"), "a loopback address"},
		{"resolves to the metadata service", declared, hello("meta.example.com"), "metadata"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{}, http.NotFoundHandler())
			h.resolver.answers["rebind.example.com"] = []string{"127.0.0.1"}
			h.resolver.answers["meta.example.com"] = []string{"169.254.169.254"}
			client, accepted := tcpPair(t)
			go tt.send(client)
			_, sent, err := h.broker.Tunnel(t.Context(), "app", tt.domains, accepted)
			wantRefusal(t, err, tt.want)
			if got := h.dialer.calls(); len(got) != 0 || sent {
				t.Fatalf("dialled %v for a refused tunnel", got)
			}
			// The app's connection is closed.
			_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadAll(client); err != nil && !strings.Contains(err.Error(), "reset") {
				t.Fatalf("app's connection not closed: %v", err)
			}
		})
	}
}

// hello sends a TLS ClientHello naming sni (none for "") and waits.
func hello(sni string) func(net.Conn) {
	return func(c net.Conn) {
		cfg := &tls.Config{ServerName: sni, InsecureSkipVerify: true}
		if sni == "" || net.ParseIP(sni) != nil {
			// Go sends no SNI for an IP address or an empty name.
			cfg.ServerName = sni
		}
		_ = tls.Client(c, cfg).Handshake()
	}
}

// TestTunnelLimit: a response over the limit (plus the TLS allowance) ends
// the tunnel instead of passing on.
func TestTunnelLimit(t *testing.T) {
	big := strings.Repeat("x", 300<<10)
	h := newHarness(t, Options{MaxResponseBytes: 100 << 10}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, big)
	}))
	client, accepted := tcpPair(t)
	go func() { _, _, _ = h.broker.Tunnel(t.Context(), "app", declared, accepted) }()
	tc := tls.Client(client, &tls.Config{ServerName: "example.com", RootCAs: h.broker.opts.RootCAs})
	req, _ := http.NewRequest("GET", "https://example.com/", nil)
	if err := req.Write(tc); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), req)
	if err == nil {
		var n int64
		n, err = io.Copy(io.Discard, resp.Body)
		if err == nil {
			t.Fatalf("read %d bytes of a %d-byte body over the limit", n, len(big))
		}
	}
}

// TestTunnelEndsWithContext: a tunnel does not outlive its step: when ctx
// ends, both connections close.
func TestTunnelEndsWithContext(t *testing.T) {
	h := newHarness(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	client, accepted := tcpPair(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, _, err := h.broker.Tunnel(ctx, "app", declared, accepted); done <- err }()
	tc := tls.Client(client, &tls.Config{ServerName: "example.com", RootCAs: h.broker.opts.RootCAs})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cancel()
	_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("read after the step ended: %v, want the connection closed", err)
	}
}

// BenchmarkTunnelGet is one HTTPS GET through a tunnel: the client's TLS
// handshake and request end to end, the broker's ClientHello parse, vet
// and dial in between.
func BenchmarkTunnelGet(b *testing.B) {
	h := newHarness(&testing.T{}, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _, _ = h.broker.Tunnel(context.Background(), "app", declared, c) }()
		}
	}()
	client := &http.Client{Transport: &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return net.Dial("tcp4", ln.Addr().String()) },
		TLSClientConfig:   &tls.Config{RootCAs: h.broker.opts.RootCAs},
		DisableKeepAlives: true,
	}}
	for b.Loop() {
		resp, err := client.Get("https://www.example.com/")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkDoGet is the same GET made by the broker itself (as for the
// egress proxy and built-in apps), for comparison.
func BenchmarkDoGet(b *testing.B) {
	h := newHarness(&testing.T{}, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	for b.Loop() {
		if _, _, err := h.broker.Do(context.Background(), "app", declared, spoke.HTTPRequest{Method: "GET", URL: "https://www.example.com/"}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCheckServerName: a server name passes only as a plain host name of a
// declared domain, and the name checked is the name the broker dials.
func TestCheckServerName(t *testing.T) {
	decl := declaredDomains(declared)
	for _, tt := range []struct {
		sni, host, refusal string
	}{
		{"www.example.com", "www.example.com", ""},
		{"WWW.Example.COM", "www.example.com", ""},
		{"example.com.", "example.com", ""},
		{"cdn.example.org", "cdn.example.org", ""},
		{"", "", "names no server"},
		{"evil.net", "", "not declared"},
		{"example.com.evil.net", "", "not declared"},
		{"evil.net#.example.com", "", "not a plain host name"},
		{"evil.net/.example.com", "", "not a plain host name"},
		{"user@example.com", "", "not a plain host name"},
		{"example.com:80", "", "not a plain host name"},
		{"[::1]", "", "not a plain host name"},
		{"exa mple.com", "", "not a plain host name"},
		{"ｅxample.com", "", "not a plain host name"},
		{"localhost", "", ""},
		{"10.0.0.1", "", ""},
	} {
		got, err := checkServerName(tt.sni, decl)
		switch {
		case tt.host != "":
			if err != nil || got.host != tt.host || got.port != "443" {
				t.Errorf("%q: %+v, %v; want %s:443", tt.sni, got, err, tt.host)
			}
		case tt.refusal != "":
			wantRefusal(t, err, tt.refusal)
		default:
			var r *Refusal
			if !errors.As(err, &r) {
				t.Errorf("%q: %v, want a refusal", tt.sni, err)
			}
		}
	}
}
