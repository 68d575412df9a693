package egress

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

// maxURLBytes bounds a request URL and every redirect's Location.
const maxURLBytes = 8 << 10

// schemeDefaultPorts are the only schemes the broker speaks, with the port
// a URL without one uses. Everything else (file, ftp, gopher, data, ws, …)
// is refused: the broker speaks HTTP and nothing else.
var schemeDefaultPorts = map[string]string{
	"http":  "80",
	"https": "443",
}

// allowedPorts are the only ports the broker connects to, with why. A name
// an app's author controls can point at any host, the hub's own included
// when it is reachable at an address the address check cannot know as
// local (a public address behind NAT, a neighbour on the same network);
// every other port there is a service that was never meant for apps: a
// database (5432, 6379), a container API (2375), a homeserver's client or
// federation port (8008, 8448), mail, SSH. So an explicit port other than
// these is refused, whatever the scheme; public web APIs live on them.
var allowedPorts = map[string]string{
	"80":  "the default port of http",
	"443": "the default port of https",
}

// checkPort returns the decimal port of a URL's explicit port p, or a
// refusal if it is not a TCP port or not allowed.
func checkPort(p string) (string, error) {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return "", refusef("port %q is not a TCP port", truncate(p, 16))
	}
	port := strconv.Itoa(n)
	if _, ok := allowedPorts[port]; !ok {
		return "", refusef("port %d is refused: apps may reach only %s", n, allowedPortsText)
	}
	return port, nil
}

// allowedPortsText lists allowedPorts with their reasons, in port order,
// for a refusal: "ports 80 (the default port of http) and 443 (…)".
var allowedPortsText = func() string {
	ports := slices.SortedFunc(maps.Keys(allowedPorts), func(a, b string) int {
		return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
	})
	items := make([]string, len(ports))
	for i, p := range ports {
		items[i] = p + " (" + allowedPorts[p] + ")"
	}
	return "ports " + strings.Join(items, " and ")
}()

// metadataHosts are cloud instance-metadata services, refused by name
// whatever they resolve to: they hand out the machine's credentials.
var metadataHosts = map[string]string{
	"metadata.google.internal":   "the Google Cloud metadata service",
	"metadata.goog":              "the Google Cloud metadata service",
	"instance-data.ec2.internal": "the AWS EC2 metadata service",
}

// specialUseDomains never name a public web host. A host equal to or under
// one is refused by name. Most are also caught by the rule that the
// top-level domain must be in the ICANN section of the public suffix list;
// "arpa" and "onion" are in that section, so only this table stops them.
var specialUseDomains = []struct{ suffix, reason string }{
	{"localhost", "names this machine (RFC 6761)"},
	{"local", "is multicast DNS on the local link (RFC 6762)"},
	{"internal", "is reserved for private networks (ICANN, 2024)"},
	{"arpa", "is DNS infrastructure (reverse zones, home.arpa of RFC 8375)"},
	{"onion", "is a Tor onion service (RFC 7686)"},
	{"test", "is reserved for testing (RFC 6761)"},
	{"invalid", "is reserved as invalid (RFC 6761)"},
	{"example", "is reserved for documentation (RFC 2606)"},
	{"alt", "is reserved for non-DNS name systems (RFC 9476)"},
}

// target is one vetted hop: where to send it and the names that were checked.
type target struct {
	// url is canonical: scheme, ASCII host and a non-default port, path and
	// query; never user information or a fragment.
	url    *url.URL
	host   string // canonical ASCII host name
	port   string // effective port, decimal
	domain string // the host's registrable domain (eTLD+1)
}

// origin names the hop in errors and logs without its path or query, which
// may carry secrets.
func (t target) origin() string { return t.url.Scheme + "://" + t.url.Host }

// hostPort is the address the transport dials for this hop.
func (t target) hostPort() string { return t.host + ":" + t.port }

// checkURL applies the URL policy to raw: scheme, user information, port and
// host, then requires the host's registrable domain to be one of declared
// (canonical names from declaredDomains). It resolves nothing.
func checkURL(raw string, declared map[string]bool) (target, error) {
	if len(raw) > maxURLBytes {
		return target{}, refusef("URL is longer than %d bytes", maxURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // without the URL, which may carry credentials
		}
		return target{}, refusef("URL cannot be parsed: %v", err)
	}
	defaultPort, ok := schemeDefaultPorts[u.Scheme]
	if !ok {
		if u.Scheme == "" {
			return target{}, refusef("URL has no scheme; only http and https are allowed")
		}
		return target{}, refusef("scheme %q is not allowed; only http and https are", truncate(u.Scheme, 32))
	}
	if u.Opaque != "" || u.Host == "" {
		return target{}, refusef("URL has no host")
	}
	if u.User != nil {
		return target{}, refusef("URL carries user information; credentials in URLs are not allowed")
	}
	host, err := canonicalHost(u.Hostname())
	if err != nil {
		return target{}, err
	}
	port := defaultPort
	if p := u.Port(); p != "" {
		if port, err = checkPort(p); err != nil {
			return target{}, err
		}
	}
	domain, err := registrableDomain(host)
	if err != nil {
		return target{}, err
	}
	if !declared[domain] {
		return target{}, refusef("domain %s is not declared by the app", domain)
	}
	hostField := host
	if port != defaultPort {
		hostField = host + ":" + port
	}
	return target{
		url:    &url.URL{Scheme: u.Scheme, Host: hostField, Path: u.Path, RawPath: u.RawPath, RawQuery: escapeQuery(u.RawQuery)},
		host:   host,
		port:   port,
		domain: domain,
	}, nil
}

// escapeQuery percent-encodes every byte of a raw query that RFC 3986 does
// not allow there (§3.4: unreserved, sub-delims, ":", "@", "/", "?" and
// percent-encoded octets), and a "%" that does not start an encoded octet,
// so the request line carries exactly one target. url.Parse keeps a query
// as given, and a raw space would end the target early: the server would
// read the rest of the query as the protocol version, or worse, split it
// differently from the broker. A query that is already valid is unchanged.
func escapeQuery(q string) string {
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '%' && i+2 < len(q) && isHex(q[i+1]) && isHex(q[i+2]),
			c != '%' && queryByte(c):
			b.WriteByte(c)
		default:
			const hex = "0123456789ABCDEF"
			b.Write([]byte{'%', hex[c>>4], hex[c&15]})
		}
	}
	return b.String()
}

// queryByte reports whether c may appear as itself in a query (RFC 3986
// §3.4), apart from "%".
func queryByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/?", c) >= 0
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// canonicalHost turns a URL's host into the one ASCII name the broker checks,
// resolves and sends: lower case, IDNA ToASCII (UTS #46 mapping, so
// full-width and other look-alike forms fold first), one trailing dot
// stripped, letters, digits and hyphens only. It refuses IP literals in every
// notation, localhost, single-label names, special-use domains and cloud
// metadata names.
func canonicalHost(raw string) (string, error) {
	if raw == "" {
		return "", refusef("URL has no host")
	}
	if len(raw) > 1024 {
		return "", refusef("host name is longer than 1024 bytes")
	}
	// IPv6 literals (bracketed in the URL, with or without a zone) and plain
	// IPv4 before any mapping.
	if _, err := netip.ParseAddr(raw); err == nil || strings.ContainsAny(raw, ":[]%") {
		return "", refusef("host %q is an IP literal; only domain names are allowed", truncate(raw, 64))
	}
	host, err := idna.Lookup.ToASCII(strings.ToLower(raw))
	if err != nil {
		return "", refusef("host %q is not a valid domain name: %v", truncate(raw, 64), err)
	}
	host = strings.TrimSuffix(host, ".")
	// After mapping: "１２７.０.０.１" is now "127.0.0.1", and the inet_aton
	// forms ("2130706433", "0x7f.1", "127.1", "0177.0.0.1") all end in a
	// number. No public top-level domain is numeric, so a host whose last
	// label is a number is an address, whatever the notation.
	if endsInNumber(host) {
		return "", refusef("host %q is an IP literal; only domain names are allowed", truncate(raw, 64))
	}
	if err := checkLDH(host); err != nil {
		return "", err
	}
	if name, ok := metadataHosts[host]; ok {
		return "", refusef("host %s is %s", host, name)
	}
	for _, s := range specialUseDomains {
		if host == s.suffix || strings.HasSuffix(host, "."+s.suffix) {
			return "", refusef("host %s is refused: .%s %s", host, s.suffix, s.reason)
		}
	}
	if !strings.Contains(host, ".") {
		return "", refusef("host %s is a single-label name; only public domain names are allowed", host)
	}
	return host, nil
}

// endsInNumber reports whether host's last label is a number in any base
// inet_aton or the WHATWG URL parser accepts (decimal, octal, 0x-hex).
func endsInNumber(host string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	digits := "0123456789"
	if rest, ok := strings.CutPrefix(last, "0x"); ok {
		last, digits = rest, "0123456789abcdef"
		if last == "" {
			return true
		}
	}
	return strings.Trim(last, digits) == ""
}

// checkLDH requires a DNS host name: labels of 1 to 63 letters, digits and
// inner hyphens, 253 bytes in all.
func checkLDH(host string) error {
	if len(host) > 253 {
		return refusef("host name is longer than 253 bytes")
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" || len(label) > 63 {
			return refusef("host %q has an empty or over-long label", truncate(host, 64))
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return refusef("host %q has a label that starts or ends with a hyphen", truncate(host, 64))
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return refusef("host %q contains %q; only letters, digits and hyphens are allowed", truncate(host, 64), c)
			}
		}
	}
	return nil
}

// registrableDomain returns a canonical host's eTLD+1. The top-level domain
// must be in the ICANN section of the public suffix list: an unlisted one
// (.lan, .corp, .home) is a private name the resolver may answer locally.
func registrableDomain(host string) (string, error) {
	tld := host[strings.LastIndexByte(host, '.')+1:]
	if _, icann := publicsuffix.PublicSuffix(tld); !icann {
		return "", refusef("host %s is not under a public top-level domain", host)
	}
	domain, err := publicsuffix.EffectiveTLDPlusOne(host)
	if err != nil {
		return "", refusef("host %s is a public suffix, not a registrable domain", host)
	}
	return domain, nil
}

// RegistrableDomain canonicalises a declared egress domain the way the broker
// canonicalises hosts and returns it, or an error if it is not itself a
// registrable domain (eTLD+1). A public suffix such as "github.io" or
// "co.uk", a subdomain such as "api.example.com", an IP address or a
// special-use name is an error. Do ignores declared entries that fail here,
// so they match nothing; callers that load app manifests can use it to
// reject them early.
func RegistrableDomain(declared string) (string, error) {
	host, err := canonicalHost(declared)
	if err != nil {
		return "", err
	}
	domain, err := registrableDomain(host)
	if err != nil {
		return "", err
	}
	if domain != host {
		return "", refusef("%s is not a registrable domain; declare %s", host, domain)
	}
	return domain, nil
}

// declaredDomains canonicalises an app's declared domains, dropping entries
// that are not registrable domains.
func declaredDomains(domains []string) map[string]bool {
	set := make(map[string]bool, len(domains))
	for _, d := range domains {
		if c, err := RegistrableDomain(d); err == nil {
			set[c] = true
		}
	}
	return set
}

// truncate bounds untrusted text quoted in a refusal.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// refusef builds a Refusal.
func refusef(format string, args ...any) *Refusal {
	return &Refusal{Reason: fmt.Sprintf(format, args...)}
}
