package mcptest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/secgpt/secgpt/hub/egress"
)

// The lab's simulated internet, offline. Names under the declared domain
// example.com resolve to a public address that the lab's dialer routes to
// its web servers, or to addresses the broker must never dial.
const (
	// Domain is the egress domain the lab's apps declare.
	Domain       = "example.com"
	PublicIP     = "93.184.215.14"
	PublicHost   = "www." + Domain
	LoopbackHost = "loopback." + Domain
	MetadataHost = "metadata." + Domain
	MetadataIP   = "169.254.169.254"
	// UndeclaredHost resolves to PublicIP but is outside Domain.
	UndeclaredHost = "exfil.example.org"
	// PagePath is the web servers' page; ToLoopback and ToMetadata redirect
	// to addresses the broker must refuse.
	PagePath   = "/"
	ToLoopback = "/to-loopback"
	ToMetadata = "/to-metadata"
	// PageText is the page's body.
	PageText = "the lab's public page"
)

// Lab is the targets of the tests of external apps' egress: an offline
// stand-in for DNS and the internet (an HTTP and an HTTPS server behind a
// public address), and listeners on the machine's own loopback that count
// every connection, so that an attempt to reach them is seen from outside.
type Lab struct {
	// TCP and UDP listen on 127.0.0.1 of the machine.
	TCP *TCPTrap
	UDP *UDPTrap

	web, tlsWeb *httptest.Server
	roots       *x509.CertPool
	caPEM       []byte
	hits        sync.Map // path → *atomic.Int64

	mu      sync.Mutex
	lookups []string
	dials   []string
}

// NewLab starts the lab; it stops when the test ends.
func NewLab(tb testing.TB) *Lab {
	tb.Helper()
	l := &Lab{}
	var err error
	if l.TCP, err = listenTCP(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.TCP.ln.Close() })
	if l.UDP, err = listenUDP(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.UDP.conn.Close() })
	l.web = httptest.NewServer(http.HandlerFunc(l.serve))
	tb.Cleanup(l.web.Close)
	l.tlsWeb, l.roots, l.caPEM = tlsServer(tb, http.HandlerFunc(l.serve), PublicHost)
	return l
}

// Egress is the hub's real egress broker with the lab's resolver and
// dialer in place of DNS and the internet; it still vets every answer and
// every dial.
func (l *Lab) Egress() *egress.Broker {
	return egress.New(egress.Options{Resolver: (*labResolver)(l), DialContext: l.dial, RootCAs: l.roots, Timeout: 10 * time.Second})
}

// Hits is how many requests the web servers got for path.
func (l *Lab) Hits(path string) int64 {
	if n, ok := l.hits.Load(path); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// Network returns the names the broker resolved and the addresses it
// dialled so far.
func (l *Lab) Network() (lookups, dials []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lookups...), append([]string(nil), l.dials...)
}

// LoopbackURL is a URL of the declared domain that resolves to 127.0.0.1,
// on the default port: an explicit port would be refused for itself, and
// the address check would go untested. The lab records every dial, so a
// broker that let it through shows.
func (l *Lab) LoopbackURL() string {
	return "http://" + LoopbackHost + "/"
}

func (l *Lab) serve(w http.ResponseWriter, r *http.Request) {
	n, _ := l.hits.LoadOrStore(r.URL.Path, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	switch r.URL.Path {
	case ToLoopback:
		http.Redirect(w, r, l.LoopbackURL(), http.StatusFound)
	case ToMetadata:
		http.Redirect(w, r, "http://"+MetadataIP+"/latest/meta-data/", http.StatusFound)
	case PagePath:
		io.WriteString(w, PageText)
	default:
		http.NotFound(w, r)
	}
}

type labResolver Lab

func (r *labResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	l := (*Lab)(r)
	name := strings.TrimSuffix(host, ".")
	l.mu.Lock()
	l.lookups = append(l.lookups, name)
	l.mu.Unlock()
	ip, ok := map[string]string{
		PublicHost: PublicIP, UndeclaredHost: PublicIP, LoopbackHost: "127.0.0.1", MetadataHost: MetadataIP,
	}[name]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []net.IPAddr{{IP: net.ParseIP(ip)}}, nil
}

func (l *Lab) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	l.mu.Lock()
	l.dials = append(l.dials, addr)
	l.mu.Unlock()
	var to string
	switch addr {
	case net.JoinHostPort(PublicIP, "80"):
		to = l.web.Listener.Addr().String()
	case net.JoinHostPort(PublicIP, "443"):
		to = l.tlsWeb.Listener.Addr().String()
	default:
		return nil, fmt.Errorf("lab: no route to %s (the lab is offline)", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, to)
}

// tlsServer serves h over TLS with a certificate for names.
func tlsServer(tb testing.TB, h http.Handler, names ...string) (*httptest.Server, *x509.CertPool, []byte) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	tb.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return srv, pool, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// CAFile writes the certificate that the lab's HTTPS server presents (its
// own CA) into dir, readable by all, and returns its path: a client that
// reaches the server end to end verifies it with this.
func (l *Lab) CAFile(tb testing.TB, dir string) string {
	tb.Helper()
	path := filepath.Join(dir, "lab-ca.pem")
	if err := os.WriteFile(path, l.caPEM, 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// TCPTrap is a listener on 127.0.0.1 that counts what it accepts.
type TCPTrap struct {
	ln       net.Listener
	Accepted atomic.Int64
}

// Addr is the trap's address.
func (t *TCPTrap) Addr() string { return t.ln.Addr().String() }

func listenTCP() (*TCPTrap, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("failed to listen on loopback: %w", err)
	}
	t := &TCPTrap{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Accepted.Add(1)
			c.Close()
		}
	}()
	return t, nil
}

// UDPTrap is a UDP socket on 127.0.0.1 that counts what it receives.
type UDPTrap struct {
	conn     net.PacketConn
	Received atomic.Int64
}

// Addr is the trap's address.
func (t *UDPTrap) Addr() string { return t.conn.LocalAddr().String() }

func listenUDP() (*UDPTrap, error) {
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("failed to listen on loopback: %w", err)
	}
	t := &UDPTrap{conn: conn}
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := conn.ReadFrom(buf); err != nil {
				return
			}
			t.Received.Add(1)
		}
	}()
	return t, nil
}
