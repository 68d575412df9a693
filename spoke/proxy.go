package spoke

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// egressProxy is an external app's way to the network. It listens on
// loopback in the spoke's own network namespace and hands every request
// the app's server makes to the hub's egress broker over ISC, one
// HTTPRequest per request, exactly as a built-in app's Env.HTTP does.
// HTTPS arrives as CONNECT: the proxy terminates TLS with a certificate
// from a CA it made at start, which only this spoke's server is told to
// trust, and forwards each request inside the tunnel the same way.
//
// Clients that ignore proxy variables reach the broker through the spoke's
// listeners on ports 80 and 443 instead (see transparent).
//
// It decides nothing: the broker allows the app's declared domains only,
// checks every address and redirect, and audits each request. A refusal
// reaches the server as a 403 response carrying the broker's reason.
type egressProxy struct {
	ln     net.Listener
	caPath string
	ca     *x509.Certificate
	caKey  crypto.Signer
	leaf   crypto.Signer
	log    zerolog.Logger
	// forward sends one request to the broker; it refuses requests made
	// outside a tool call (see externalApp.forward).
	forward func(*http.Request) (*http.Response, error)

	mu    sync.Mutex
	certs map[string]*tls.Certificate
}

// proxyCAFile is the proxy's CA certificate in the spoke's scratch
// directory, which the server's environment points its TLS clients at.
const proxyCAFile = "secgpt-egress-ca.pem"

// Bounds of the proxy. The broker bounds bodies and time again.
const (
	proxyMaxHeader   = 64 << 10
	proxyHeaderTime  = 10 * time.Second
	proxyIdleTime    = 60 * time.Second
	proxyMaxLeafs    = 64
	proxyCertExpires = 7 * 24 * time.Hour
)

// newEgressProxy opens the proxy's listener on 127.0.0.1 and makes its CA,
// writing the CA certificate to scratch. It must run before the spoke
// confines itself (which forbids binding a socket), after UpLoopback.
func newEgressProxy(scratch string, log zerolog.Logger) (*egressProxy, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("failed to open the egress proxy's listener: %w", err)
	}
	p := &egressProxy{ln: ln, log: log, certs: map[string]*tls.Certificate{}}
	if err := p.makeCA(scratch); err != nil {
		ln.Close()
		return nil, err
	}
	return p, nil
}

// port is the listener's port.
func (p *egressProxy) port() uint16 { return uint16(p.ln.Addr().(*net.TCPAddr).Port) }

// env is what the server's environment gets so that its HTTP clients use
// the proxy and trust its CA. The names cover curl, Python (urllib,
// requests, httpx), Go and Node.
func (p *egressProxy) env() []string {
	url := "http://" + p.ln.Addr().String()
	var out []string
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		out = append(out, k+"="+url)
	}
	out = append(out, "NO_PROXY=", "no_proxy=")
	for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"} {
		out = append(out, k+"="+p.caPath)
	}
	return out
}

// ProxyEnv are the environment variables the spoke sets for an external
// app with egress; a declaration may not set them itself.
var ProxyEnv = []string{
	"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy",
	"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
}

func (p *egressProxy) makeCA(scratch string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("failed to make the egress proxy's CA key: %w", err)
	}
	leaf, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("failed to make the egress proxy's certificate key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "secgpt egress proxy of one spoke"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(proxyCertExpires),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("failed to make the egress proxy's CA: %w", err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		return fmt.Errorf("failed to read the egress proxy's CA: %w", err)
	}
	p.caKey, p.leaf = key, leaf
	p.caPath = filepath.Join(scratch, proxyCAFile)
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	// The file replaces the system's roots for clients that read it
	// (SSL_CERT_FILE): those that reach port 443 directly, not through
	// the proxy, verify the real server against the system's roots.
	pemBytes = append(pemBytes, systemRoots()...)
	if err := os.WriteFile(p.caPath, pemBytes, 0o644); err != nil {
		return fmt.Errorf("failed to write the egress proxy's CA certificate: %w", err)
	}
	return nil
}

// systemRootFiles are where Linux distributions keep their CA bundle (as
// crypto/x509 looks for it).
var systemRootFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// systemRoots returns the machine's CA bundle, or nothing.
func systemRoots() []byte {
	for _, f := range systemRootFiles {
		if b, err := os.ReadFile(f); err == nil {
			return b
		}
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// certFor returns a certificate for host signed by the proxy's CA.
func (p *egressProxy) certFor(host string) (*tls.Certificate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.certs[host]; ok {
		return c, nil
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(proxyCertExpires),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, p.leaf.Public(), p.caKey)
	if err != nil {
		return nil, fmt.Errorf("failed to make a certificate for %s: %w", host, err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: p.leaf}
	if len(p.certs) >= proxyMaxLeafs {
		clear(p.certs)
	}
	p.certs[host] = c
	return c, nil
}

// serve answers the server's connections until the listener closes. It
// runs after the spoke confined itself, which allows accepting only.
func (p *egressProxy) serve() {
	srv := p.server(http.HandlerFunc(p.handle))
	if err := srv.Serve(p.ln); err != nil && !errors.Is(err, net.ErrClosed) {
		p.log.Warn().Err(err).Msg("Egress proxy stopped")
	}
}

func (p *egressProxy) server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: proxyHeaderTime,
		IdleTimeout:       proxyIdleTime,
		MaxHeaderBytes:    proxyMaxHeader,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
}

// handle serves one request to the proxy: CONNECT opens a tunnel, an
// absolute-form request goes to the broker, anything else is refused.
func (p *egressProxy) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		http.Error(w, "secgpt egress proxy: send absolute http:// URLs, or CONNECT for https", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	p.relay(w, out)
}

// connect terminates a CONNECT tunnel's TLS and relays each request in it.
func (p *egressProxy) connect(w http.ResponseWriter, r *http.Request) {
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil || host == "" {
		http.Error(w, "secgpt egress proxy: CONNECT needs host:port", http.StatusBadRequest)
		return
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		http.Error(w, "secgpt egress proxy: CONNECT needs a numeric port", http.StatusBadRequest)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "secgpt egress proxy: cannot tunnel", http.StatusInternalServerError)
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	if buf.Reader.Buffered() > 0 {
		// The client sent TLS bytes before it heard 200: not a client.
		conn.Close()
		return
	}
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		conn.Close()
		return
	}
	authority := host
	if port != "443" {
		authority = net.JoinHostPort(host, port)
	}
	tlsConn := tls.Server(conn, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.certFor(host)
		},
	})
	_ = tlsConn.SetDeadline(time.Now().Add(proxyHeaderTime))
	if err := tlsConn.Handshake(); err != nil {
		p.log.Debug().Err(err).Str("host", host).Msg("TLS handshake with the app's server failed")
		tlsConn.Close()
		return
	}
	_ = tlsConn.SetDeadline(time.Time{})
	inner := p.server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := r.Clone(r.Context())
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = "https", authority
		out.Host = authority
		p.relay(w, out)
	}))
	_ = inner.Serve(&oneConn{conn: tlsConn})
}

// hopHeaders are the proxy's own headers: never forwarded either way.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// relay sends req to the broker and writes its answer.
func (p *egressProxy) relay(w http.ResponseWriter, req *http.Request) {
	for _, c := range req.Header.Values("Connection") {
		for _, name := range strings.Split(c, ",") {
			req.Header.Del(strings.TrimSpace(name))
		}
	}
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	resp, err := p.forward(req)
	if err != nil {
		var refused *errHub
		status := http.StatusBadGateway
		if errors.As(err, &refused) || errors.Is(err, errNoCall) {
			status = http.StatusForbidden
		}
		p.log.Info().Str("method", req.Method).Str("host", req.URL.Host).Int("status", status).Err(err).Msg("Egress proxy refused a request")
		http.Error(w, "secgpt egress broker: "+err.Error(), status)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	for _, h := range append(hopHeaders, "Content-Length") {
		w.Header().Del(h)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, "secgpt egress proxy: failed to read the response", http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

// oneConn is a listener that yields one connection, for serving the
// requests inside one CONNECT tunnel.
type oneConn struct {
	mu   sync.Mutex
	conn net.Conn
}

var _ net.Listener = (*oneConn)(nil)

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return nil, net.ErrClosed
	}
	c := l.conn
	l.conn = nil
	return c, nil
}

func (l *oneConn) Close() error   { return nil }
func (l *oneConn) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
