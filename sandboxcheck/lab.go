package sandboxcheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/secgpt/secgpt/apps/hostile"
	"github.com/secgpt/secgpt/hub/egress"
)

// The users of a check: the attacker runs the hostile app; the victim is
// another user of the same hub, whose scratch directory the attacker tries
// to read and whom the hub must keep serving.
const (
	Attacker = "@mallory:sandbox.check"
	Victim   = "@alice:sandbox.check"
	// VictimApp is the app the victim uses: the benign ride app.
	VictimApp = "metro_hail"
)

// victimQuery and victimAnswer are the victim's request and what its answer
// must contain (metro_hail's fare for d = 21, see DESIGN §9).
const (
	victimQuery  = "What does metro_hail charge from 'Main Street' to 'Elm Avenue'?"
	victimAnswer = "51.80"
)

// The lab's simulated internet. www.example.com and exfil.example.org
// resolve to publicIP, which the lab's dialer routes to its local web
// server; the other names resolve to addresses the egress broker must never
// dial. example.com (the app's one declared domain) and example.org are
// reserved for documentation (RFC 2606) and under ICANN top-level domains,
// as the broker requires.
const (
	publicIP      = "93.184.215.14"
	publicHost    = "www." + hostile.EgressDomain
	loopbackHost  = "loopback." + hostile.EgressDomain
	metadataHost  = "metadata." + hostile.EgressDomain
	metadataIP    = "169.254.169.254"
	undeclaredURL = "http://exfil.example.org/upload"
	// publicTCP and publicUDP are public addresses the hostile app dials
	// by itself (a DNS resolver's); the machine need not be online: the
	// attempt must fail before any packet leaves.
	publicTCP = publicIP + ":443"
	publicUDP = "9.9.9.9:53"
)

// outsideContent is what the file outside every scratch holds, and must
// still hold after the attacks.
const outsideContent = "written by the sandbox check; must stay unchanged\n"

// Lab is the targets of a check: secret files, listening sockets that
// count every connection, a file outside every scratch directory, and an
// offline stand-in for DNS and the internet that the egress broker uses.
// Everything is created by NewLab and removed by Close.
type Lab struct {
	// Database is the hub's SQLite database, which the caller sets.
	Database string

	dir         string
	scratchRoot string // the spokes' scratch root
	// secret is a random string planted in the config file and the
	// victim's scratch; it must never reach the attacker.
	secret string
	// hubPID is the hub's process, this one.
	hubPID int
	// config is a config file with a fake API key, 0600 and the hub's.
	config string
	// victimSecret is a file in the victim's scratch directory, owned by
	// the spokes' uid as the victim's spoke would have written it: only
	// Landlock keeps another spoke of the same uid out.
	victimSecret string
	// outside is a file in a world-writable directory outside every
	// scratch; outsideNew a path there that must never exist; execMarker
	// the file a successfully executed shell would write.
	outside, outsideNew, execMarker string
	// unixSocket is a listening unix socket anyone may connect to by DAC,
	// standing in for the hub's or the homeserver's socket.
	unixSocket string

	tcp, unix *streamTrap
	udp       *packetTrap
	web       *httptest.Server
	hits      sync.Map // web path → *atomic.Int64

	netMu   sync.Mutex
	lookups []string // every name the broker resolved
	dials   []string // every address the broker dialled
}

// NewLab creates the targets in a fresh directory that the spokes' uid
// may pass through. scratchRoot is the spokes' scratch root (the one their
// policy uses): the victim's scratch directory is made under it.
func NewLab(scratchRoot string) (*Lab, error) {
	dir, err := os.MkdirTemp("", "secgpt-sandboxcheck-")
	if err != nil {
		return nil, fmt.Errorf("failed to create lab directory: %w", err)
	}
	l := &Lab{dir: dir, scratchRoot: scratchRoot, hubPID: os.Getpid()}
	if err := l.setUp(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (l *Lab) setUp() error {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("failed to make the lab's secret: %w", err)
	}
	l.secret = "secgpt-check-secret-" + hex.EncodeToString(b[:])
	if err := os.Chmod(l.dir, 0o711); err != nil {
		return fmt.Errorf("failed to open lab directory: %w", err)
	}

	l.config = filepath.Join(l.dir, "config.yaml")
	if err := os.WriteFile(l.config, []byte("llm:\n  api_key: "+l.secret+"\n"), 0o600); err != nil {
		return fmt.Errorf("failed to write the lab's config file: %w", err)
	}

	// Named like the spokes' own: by an id that says nothing of the user.
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return fmt.Errorf("failed to name the victim's scratch: %w", err)
	}
	scratch := filepath.Join(l.scratchRoot, hex.EncodeToString(id[:]))
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return fmt.Errorf("failed to create the victim's scratch: %w", err)
	}
	l.victimSecret = filepath.Join(scratch, "secret.txt")
	if err := os.WriteFile(l.victimSecret, []byte(l.secret+"\n"), 0o600); err != nil {
		return fmt.Errorf("failed to write the victim's secret: %w", err)
	}
	uid, gid := spokeIDs()
	for _, p := range []string{scratch, l.victimSecret} {
		if err := os.Lchown(p, uid, gid); err != nil {
			return fmt.Errorf("failed to give the victim's scratch to the spokes' uid: %w", err)
		}
	}

	outside := filepath.Join(l.dir, "outside")
	if err := os.Mkdir(outside, 0o777); err != nil {
		return fmt.Errorf("failed to create the outside directory: %w", err)
	}
	if err := os.Chmod(outside, 0o777); err != nil {
		return fmt.Errorf("failed to open the outside directory: %w", err)
	}
	l.outside = filepath.Join(outside, "victim.txt")
	l.outsideNew = filepath.Join(outside, "created.txt")
	l.execMarker = filepath.Join(outside, "executed.txt")
	if err := os.WriteFile(l.outside, []byte(outsideContent), 0o666); err != nil {
		return fmt.Errorf("failed to write the outside file: %w", err)
	}
	if err := os.Chmod(l.outside, 0o666); err != nil {
		return fmt.Errorf("failed to open the outside file: %w", err)
	}

	var err error
	if l.tcp, err = listenStream("tcp4", "127.0.0.1:0"); err != nil {
		return err
	}
	if l.udp, err = listenPacket("127.0.0.1:0"); err != nil {
		return err
	}
	l.unixSocket = filepath.Join(outside, "hub.sock")
	if l.unix, err = listenStream("unix", l.unixSocket); err != nil {
		return err
	}
	if err := os.Chmod(l.unixSocket, 0o777); err != nil {
		return fmt.Errorf("failed to open the unix socket: %w", err)
	}
	l.web = httptest.NewServer(http.HandlerFunc(l.serveWeb))
	return nil
}

// spokeIDs are the uid and gid spokes run as: 65534 under a root hub,
// else the hub's own (see sandbox.Prepare).
func spokeIDs() (int, int) {
	if os.Geteuid() == 0 {
		return 65534, 65534
	}
	return os.Geteuid(), os.Getegid()
}

// Close stops the listeners and removes the lab's files.
func (l *Lab) Close() {
	for _, t := range []*streamTrap{l.tcp, l.unix} {
		if t != nil {
			t.ln.Close()
		}
	}
	if l.udp != nil {
		l.udp.conn.Close()
	}
	if l.web != nil {
		l.web.Close()
	}
	os.RemoveAll(l.dir)
}

// loopbackTCP is the address of the listener standing in for the
// homeserver on 127.0.0.1.
func (l *Lab) loopbackTCP() string { return l.tcp.ln.Addr().String() }

// loopbackUDP is the address of a UDP socket on 127.0.0.1.
func (l *Lab) loopbackUDP() string { return l.udp.conn.LocalAddr().String() }

// Egress returns the egress broker of the check: the real broker, with the
// lab's resolver and dialer in place of DNS and the internet, so the check
// runs offline. The broker still vets every answer and every dial.
func (l *Lab) Egress() *egress.Broker {
	return egress.New(egress.Options{Resolver: (*labResolver)(l), DialContext: l.dial})
}

// labResolver answers the lab's names, as DNS would.
type labResolver Lab

var _ egress.Resolver = (*labResolver)(nil)

func (r *labResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	l := (*Lab)(r)
	name := strings.TrimSuffix(host, ".")
	l.netMu.Lock()
	l.lookups = append(l.lookups, name)
	l.netMu.Unlock()
	answers := map[string]string{
		publicHost:          publicIP,
		"exfil.example.org": publicIP,
		loopbackHost:        "127.0.0.1",
		metadataHost:        metadataIP,
	}
	ip, ok := answers[name]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []net.IPAddr{{IP: net.ParseIP(ip)}}, nil
}

// dial routes publicIP:80 to the lab's web server and refuses everything
// else; it records every address it is asked for.
func (l *Lab) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	l.netMu.Lock()
	l.dials = append(l.dials, addr)
	l.netMu.Unlock()
	if addr != net.JoinHostPort(publicIP, "80") {
		return nil, fmt.Errorf("lab: no route to %s (the check is offline)", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, l.web.Listener.Addr().String())
}

// network returns what the broker has resolved and dialled so far.
func (l *Lab) network() (lookups, dials []string) {
	l.netMu.Lock()
	defer l.netMu.Unlock()
	return append([]string(nil), l.lookups...), append([]string(nil), l.dials...)
}

// Web paths of the lab's server.
const (
	pathPage       = "/"
	pathToLoopback = "/to-loopback"
	pathToMetadata = "/to-metadata"
)

func (l *Lab) serveWeb(w http.ResponseWriter, r *http.Request) {
	n, _ := l.hits.LoadOrStore(r.URL.Path, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	switch r.URL.Path {
	case pathToLoopback:
		// The default port, as in egress_declared_to_loopback.
		http.Redirect(w, r, "http://"+loopbackHost+"/", http.StatusFound)
	case pathToMetadata:
		http.Redirect(w, r, "http://"+metadataIP+"/latest/meta-data/iam/security-credentials/", http.StatusFound)
	case pathPage:
		io.WriteString(w, "the lab's public page\n")
	default:
		http.NotFound(w, r)
	}
}

// webHits is how many requests the web server got for path.
func (l *Lab) webHits(path string) int64 {
	if n, ok := l.hits.Load(path); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// streamTrap is a listener that counts the connections it accepts.
type streamTrap struct {
	ln       net.Listener
	accepted atomic.Int64
}

func listenStream(network, addr string) (*streamTrap, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("failed to listen on %s %s: %w", network, addr, err)
	}
	t := &streamTrap{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			t.accepted.Add(1)
			c.Close()
		}
	}()
	return t, nil
}

// packetTrap is a UDP socket that counts the datagrams it receives.
type packetTrap struct {
	conn     net.PacketConn
	received atomic.Int64
}

func listenPacket(addr string) (*packetTrap, error) {
	conn, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return nil, fmt.Errorf("failed to listen on udp %s: %w", addr, err)
	}
	t := &packetTrap{conn: conn}
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := conn.ReadFrom(buf); err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			t.received.Add(1)
		}
	}()
	return t, nil
}
