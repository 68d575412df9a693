package hub_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/hub/egress"
	"github.com/secgpt/secgpt/hub/hubtest"
	"github.com/secgpt/secgpt/spoke"
)

// tlsServerFor serves handler over TLS with a certificate for names.
func tlsServerFor(t *testing.T, handler http.Handler, names ...string) (*httptest.Server, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(handler)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return srv, pool
}

// publicResolver answers every name with one public address, standing in
// for DNS on a machine without it; the broker still checks that address.
type publicResolver struct{}

func (publicResolver) LookupIPAddr(context.Context, string) ([]net.IPAddr, error) {
	return []net.IPAddr{{IP: net.ParseIP("93.184.216.34")}}, nil
}

func TestAppHTTPGoesThroughTheEgressBroker(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	upstream, pool := tlsServerFor(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host+r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/v1/search":
			_, _ = w.Write([]byte(`{"results":[{"name":"Paris","country":"France","latitude":48.8534,"longitude":2.3488}]}`))
		case "/v1/forecast":
			_, _ = w.Write([]byte(`{"current":{"temperature_2m":17.26,"wind_speed_10m":11.04,"weather_code":61}}`))
		default:
			http.NotFound(w, r)
		}
	}), "*.open-meteo.com")
	broker := egress.New(egress.Options{
		Resolver: publicResolver{},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, upstream.Listener.Addr().String())
		},
		RootCAs: pool,
	})
	sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{"weather"}, Hub: func(o *hub.Options) { o.Egress = broker }})
	reply := ask(t, sys, alice, "Use weather for 'Paris'.", hub.AllowPlanned{})
	if !strings.Contains(reply.Answer, "temperature_c = 17.3") || !strings.Contains(reply.Answer, "conditions = rain") {
		t.Fatalf("answer = %q", reply.Answer)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, " ") != "geocoding-api.open-meteo.com/v1/search api.open-meteo.com/v1/forecast" {
		t.Fatalf("upstream saw %v", seen)
	}
	audit, err := sys.Hub.Audit(context.Background(), alice, 20)
	if err != nil {
		t.Fatal(err)
	}
	allowed := 0
	for _, e := range audit {
		if e.Category == "egress" && e.Decision == "allow" && e.Subject == "weather" {
			allowed++
			if strings.Contains(e.Detail, "latitude") {
				t.Errorf("the audit log keeps a query string: %s", e.Detail)
			}
		}
	}
	if allowed != 2 {
		t.Fatalf("egress audit entries = %d, want 2: %+v", allowed, audit)
	}
}

// fixedEgress answers every request with the same outcome.
type fixedEgress struct {
	sent []string
	err  error
}

var _ hub.Egress = fixedEgress{}

func (f fixedEgress) Do(context.Context, string, []string, spoke.HTTPRequest) (spoke.HTTPResponse, []string, error) {
	return spoke.HTTPResponse{}, f.sent, f.err
}

// TestEgressAuditSaysWhatLeft: a request refused after it was sent (a
// response over the limit, a redirect refused) is audited as what
// happened: allowed to where it went, then denied with why; one that never
// left is a denial alone.
func TestEgressAuditSaysWhatLeft(t *testing.T) {
	tests := []struct {
		name   string
		egress fixedEgress
		want   []string // decisions, oldest first
	}{
		{"refused before it left", fixedEgress{err: errors.New("domain example.net is not declared by the app")}, []string{"request", "deny"}},
		{"sent, then refused", fixedEgress{sent: []string{"https://geocoding-api.open-meteo.com"}, err: errors.New("response over the 1024-byte limit")}, []string{"request", "allow", "deny"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{"weather"}, Hub: func(o *hub.Options) { o.Egress = tt.egress }})
			_, _ = sys.Hub.Handle(context.Background(), hub.Request{User: alice, Query: "Use weather for 'Paris'.", Consenter: hub.AllowPlanned{}})
			audit, err := sys.Hub.Audit(context.Background(), alice, 20)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i := len(audit) - 1; i >= 0; i-- { // newest first
				e := audit[i]
				if e.Category != "egress" {
					continue
				}
				got = append(got, e.Decision)
				switch {
				case e.Decision == "allow" && !strings.Contains(e.Detail, `"sent_to":["https://geocoding-api.open-meteo.com"]`):
					t.Errorf("the allow entry does not say where the request went: %s", e.Detail)
				case e.Decision == "deny" && !strings.Contains(e.Detail, tt.egress.err.Error()):
					t.Errorf("the deny entry does not say why: %s", e.Detail)
				}
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("egress audit %v, want %v", got, tt.want)
			}
		})
	}
}

// countingEgress counts the requests handed to it.
type countingEgress struct{ calls *atomic.Int64 }

func (c countingEgress) Do(context.Context, string, []string, spoke.HTTPRequest) (spoke.HTTPResponse, []string, error) {
	c.calls.Add(1)
	return spoke.HTTPResponse{Status: 200, Body: []byte("{}")}, []string{"https://geocoding-api.open-meteo.com"}, nil
}

// TestEgressOffTheRecordIsRefused: an app's request that the audit log
// cannot take never reaches the egress broker (it fails closed), while the
// decisions before it, recorded, stand. Before, the request left and its
// entry, written after, failed in the log alone.
func TestEgressOffTheRecordIsRefused(t *testing.T) {
	var calls atomic.Int64
	sys := hubtest.NewSystem(t, hubtest.Options{Apps: []string{"weather"}, Hub: func(o *hub.Options) { o.Egress = countingEgress{&calls} }})
	ctx := context.Background()
	// A full disk or a read-only database for the egress entries alone:
	// the consent to run the app is on record.
	if _, err := sys.Store.DB().Exec(ctx, `CREATE TRIGGER no_egress_audit BEFORE INSERT ON audit_log WHEN NEW.category = 'egress'
		BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END`); err != nil {
		t.Fatal(err)
	}
	reply, err := sys.Hub.Handle(ctx, hub.Request{User: alice, Query: "Use weather for 'Paris'.", Consenter: hub.AllowPlanned{}})
	if n := calls.Load(); n != 0 {
		t.Errorf("%d requests reached the egress broker with the audit log failing, want none", n)
	}
	text := fmt.Sprint(err)
	if reply != nil {
		text += reply.Answer
	}
	t.Logf("the user heard: %s", text)
	if !strings.Contains(text, "weather") {
		t.Errorf("the user was not told the app failed: %s", text)
	}
	// With the log back, the request goes out.
	if _, err := sys.Store.DB().Exec(ctx, `DROP TRIGGER no_egress_audit`); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Hub.Handle(ctx, hub.Request{User: alice, Query: "Use weather for 'Paris'.", Consenter: hub.AllowPlanned{}}); err != nil {
		t.Fatal(err)
	}
	if calls.Load() == 0 {
		t.Error("no request reached the egress broker with the audit log working")
	}
}
