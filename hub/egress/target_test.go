package egress

import (
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/publicsuffix"
)

func TestCanonicalHost(t *testing.T) {
	tests := []struct {
		raw  string
		want string // canonical host; empty when refused
		err  string // refusal substring
	}{
		{raw: "example.com", want: "example.com"},
		{raw: "EXAMPLE.COM", want: "example.com"},
		{raw: "Example.Com.", want: "example.com"},
		{raw: "ＥＸＡＭＰＬＥ．ｃｏｍ", want: "example.com"},
		{raw: "example.com。", want: "example.com"},
		{raw: "bücher.de", want: "xn--bcher-kva.de"},
		{raw: "BÜCHER.DE", want: "xn--bcher-kva.de"},
		{raw: "xn--bcher-kva.de", want: "xn--bcher-kva.de"},
		{raw: "exаmple.com", want: "xn--exmple-4nf.com"},    // Cyrillic а: a different domain
		{raw: "127.0.0.1.nip.io", want: "127.0.0.1.nip.io"}, // a name; its answers are vetted
		{raw: "", err: "URL has no host"},
		{raw: "127.0.0.1", err: "is an IP literal"},
		{raw: "::1", err: "is an IP literal"},
		{raw: "fe80::1%eth0", err: "is an IP literal"},
		{raw: "2130706433", err: "is an IP literal"},
		{raw: "0x7f.1", err: "is an IP literal"},
		{raw: "0X7F.1", err: "is an IP literal"},
		{raw: "127.1", err: "is an IP literal"},
		{raw: "0177.0.0.01", err: "is an IP literal"},
		{raw: "1.2.3.4.5", err: "is an IP literal"},
		{raw: "example.0x", err: "is an IP literal"},
		{raw: "１２７.０.０.１", err: "is an IP literal"},
		{raw: "localhost", err: "host localhost is refused"},
		{raw: "localhost.", err: "host localhost is refused"},
		{raw: "x.localhost", err: "host x.localhost is refused"},
		{raw: "printer.local", err: ".local is multicast DNS"},
		{raw: "db.internal", err: ".internal is reserved for private networks"},
		{raw: "router.home.arpa", err: ".arpa is DNS infrastructure"},
		{raw: "1.0.0.127.in-addr.arpa", err: ".arpa is DNS infrastructure"},
		{raw: "duckduckgogg42xjoc72x3sjasowoarfbgcmvfimaftt6twagswzczad.onion", err: ".onion is a Tor onion service"},
		{raw: "metadata.google.internal", err: "is the Google Cloud metadata service"},
		{raw: "METADATA.GOOGLE.INTERNAL.", err: "is the Google Cloud metadata service"},
		{raw: "instance-data.ec2.internal", err: "is the AWS EC2 metadata service"},
		{raw: "metadata", err: "single-label name"},
		{raw: "com", err: "single-label name"},
		{raw: "example..com", err: "empty or over-long label"},
		{raw: "-example.com", err: "not a valid domain name"},
		{raw: "a_b.example.com", err: "not a valid domain name"},
		{raw: strings.Repeat("a", 64) + ".com", err: "empty or over-long label"},
		{raw: strings.Repeat("a.", 127) + "com", err: "longer than 253 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			got, err := canonicalHost(tt.raw)
			if tt.err != "" {
				wantRefusal(t, err, tt.err)
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("canonicalHost(%q) = %q, %v; want %q", tt.raw, got, err, tt.want)
			}
		})
	}
}

func TestSpecialUseDomainsRefused(t *testing.T) {
	for _, s := range specialUseDomains {
		for _, host := range []string{s.suffix, "www.app." + s.suffix} {
			_, err := canonicalHost(host)
			wantRefusal(t, err, "."+s.suffix+" "+s.reason)
		}
	}
	for host, name := range metadataHosts {
		_, err := canonicalHost(host)
		wantRefusal(t, err, name)
	}
}

// TestPortsRefused checks every TCP port but allowedPorts is refused, the
// services a name pointed at the hub would reach among them.
func TestPortsRefused(t *testing.T) {
	for n := 1; n <= 65535; n++ {
		p := strconv.Itoa(n)
		got, err := checkPort(p)
		if _, ok := allowedPorts[p]; ok {
			if err != nil || got != p {
				t.Errorf("checkPort(%s) = %q, %v; want allowed", p, got, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("port %d is allowed", n)
		}
	}
	d := map[string]bool{"example.com": true}
	for _, tt := range []struct{ port, service string }{
		{"22", "ssh"}, {"25", "smtp"}, {"2375", "the Docker API"}, {"5432", "PostgreSQL"},
		{"6379", "Redis"}, {"8008", "a homeserver's client API"}, {"8448", "Matrix federation"},
		{"8080", "an alternative web port"}, {"8443", "an alternative web port"}, {"65535", "the last port"},
	} {
		for _, scheme := range []string{"http", "https"} {
			_, err := checkURL(scheme+"://example.com:"+tt.port+"/", d)
			wantRefusal(t, err, "port "+tt.port+" is refused: apps may reach only ports 80 (the default port of http) and 443 (the default port of https)")
		}
	}
	for _, raw := range []string{"http://example.com:80/", "https://example.com:443/", "http://example.com:443/", "https://example.com:80/"} {
		if _, err := checkURL(raw, d); err != nil {
			t.Errorf("%s: %v", raw, err)
		}
	}
	for _, p := range []string{"0", "65536", "-1", "99999999999999999999"} {
		_, err := checkPort(p)
		wantRefusal(t, err, "is not a TCP port")
	}
}

func TestEscapeQuery(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"q=1&lang=en", "q=1&lang=en"},
		{"q=a%20b&c=%2f%2F", "q=a%20b&c=%2f%2F"},
		{"a=-._~!$&'()*+,;=:@/?", "a=-._~!$&'()*+,;=:@/?"},
		{"q=a b", "q=a%20b"},
		{"q=a b HTTP/1.1", "q=a%20b%20HTTP/1.1"},
		{"q=é", "q=%C3%A9"},
		{"q=\"<>\\^`{|}[]#", "q=%22%3C%3E%5C%5E%60%7B%7C%7D%5B%5D%23"},
		{"q=100%", "q=100%25"},
		{"q=%zz&r=%4", "q=%25zz&r=%254"},
		{"\x00\x7f\xff", "%00%7F%FF"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := escapeQuery(tt.in)
			if got != tt.want {
				t.Errorf("escapeQuery(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if again := escapeQuery(got); again != got {
				t.Errorf("escapeQuery is not idempotent: %q → %q", got, again)
			}
		})
	}
}

func TestCheckURLCanonicalForm(t *testing.T) {
	d := map[string]bool{"example.com": true, "xn--bcher-kva.de": true}
	tests := []struct {
		raw, want, domain string
	}{
		{"http://example.com", "http://example.com", "example.com"},
		{"HTTPS://WWW.Example.COM.:443/a/b?c=d#frag", "https://www.example.com/a/b?c=d", "example.com"},
		{"http://example.com:080/", "http://example.com/", "example.com"},
		{"https://example.com/x%2Fy", "https://example.com/x%2Fy", "example.com"},
		{"http://example.com:443/", "http://example.com:443/", "example.com"},
		{"https://example.com/s?q=a b&t=é|x", "https://example.com/s?q=a%20b&t=%C3%A9%7Cx", "example.com"},
		{"https://example.com/s?q=a%20b", "https://example.com/s?q=a%20b", "example.com"},
		{"https://shop.bücher.de/", "https://shop.xn--bcher-kva.de/", "xn--bcher-kva.de"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			got, err := checkURL(tt.raw, d)
			if err != nil {
				t.Fatalf("checkURL: %v", err)
			}
			if got.url.String() != tt.want || got.domain != tt.domain {
				t.Errorf("checkURL = %s (%s), want %s (%s)", got.url, got.domain, tt.want, tt.domain)
			}
		})
	}
}

func TestRegistrableDomain(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "example.com", want: "example.com"},
		{in: "EXAMPLE.COM.", want: "example.com"},
		{in: "example.co.uk", want: "example.co.uk"},
		{in: "bücher.de", want: "xn--bcher-kva.de"},
		{in: "user.github.io", want: "user.github.io"},
		{in: "github.io", err: "is a public suffix"},
		{in: "co.uk", err: "is a public suffix"},
		{in: "api.example.com", err: "api.example.com is not a registrable domain; declare example.com"},
		{in: "corp.lan", err: "not under a public top-level domain"},
		{in: "localhost", err: "host localhost is refused"},
		{in: "10.0.0.1", err: "is an IP literal"},
		{in: "com", err: "single-label name"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := RegistrableDomain(tt.in)
			if tt.err != "" {
				wantRefusal(t, err, tt.err)
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("RegistrableDomain(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

// FuzzCheckURL checks the URL policy never panics and that anything it allows
// is an http(s) URL without credentials whose host is a domain name (not an
// IP literal in any notation) under a declared registrable domain, and
// re-parses to the same host, so what is sent is what was checked.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{
		"http://example.com/", "https://WWW.EXAMPLE.COM.:8443/a?b", "http://127.0.0.1/", "http://0x7f.1/",
		"http://[::ffff:127.0.0.1]/", "http://user@example.com/", "file:///etc/passwd", "http://ｅｘａｍｐｌｅ.com/",
		"http://exаmple.com/", "http://example.com.evil.net/", "http://localhost/", "http://2130706433/",
		"http://１２７.０.０.１/", "http://example.com%2f@evil/", "http://a.example.com:0/", "http:example.com",
	} {
		f.Add(s, "example.com")
	}
	f.Fuzz(func(t *testing.T, raw, declaredDomain string) {
		declared := declaredDomains([]string{declaredDomain, "example.com"})
		got, err := checkURL(raw, declared)
		if err != nil {
			return
		}
		if got.url.Scheme != "http" && got.url.Scheme != "https" {
			t.Fatalf("allowed scheme %q", got.url.Scheme)
		}
		if got.url.User != nil || got.url.Fragment != "" || got.url.Opaque != "" {
			t.Fatalf("allowed URL %q has user information, a fragment or is opaque", got.url)
		}
		if _, err := netip.ParseAddr(got.host); err == nil || strings.ContainsAny(got.host, ":[]%") || endsInNumber(got.host) {
			t.Fatalf("allowed IP literal host %q from %q", got.host, raw)
		}
		domain, err := publicsuffix.EffectiveTLDPlusOne(got.host)
		if err != nil || domain != got.domain || !declared[domain] {
			t.Fatalf("allowed host %q with eTLD+1 %q (%v); declared %v", got.host, domain, err, declared)
		}
		again, err := url.Parse(got.url.String())
		if err != nil || again.Hostname() != got.host || again.User != nil {
			t.Fatalf("canonical URL %q re-parses to host %q (%v)", got.url, again.Hostname(), err)
		}
		if _, err := checkURL(got.url.String(), declared); err != nil {
			t.Fatalf("canonical URL %q is refused: %v", got.url, err)
		}
	})
}
