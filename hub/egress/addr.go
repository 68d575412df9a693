package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// addrRule is one forbidden range and why.
type addrRule struct {
	prefix netip.Prefix
	reason string
}

// forbiddenRanges are the addresses the broker never connects to, checked in
// order (the most specific range first, so the reason names it). They cover
// this machine, private and link-local networks (where cloud metadata
// services live), multicast and broadcast, and the documentation and
// benchmarking ranges: those never carry public web hosts, so a public name
// resolving there is a misconfiguration or a pointer at something local
// (198.18.0.0/15 is what "fake-IP" DNS proxies hand out, for instance).
// IPv6 is further limited to global unicast 2000::/3 by forbiddenAddr.
var forbiddenRanges = []addrRule{
	// IPv4.
	{netip.MustParsePrefix("0.0.0.0/8"), "the unspecified \"this network\" range 0.0.0.0/8"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT (RFC 6598) address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.169.254/32"), "the cloud instance-metadata address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol-assignment address (RFC 6890)"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address (TEST-NET-1)"},
	{netip.MustParsePrefix("192.88.99.0/24"), "a deprecated 6to4 relay anycast address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address (RFC 2544)"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address (TEST-NET-2)"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address (TEST-NET-3)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "the broadcast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved (class E) address"},
	// IPv6.
	{netip.MustParsePrefix("::/128"), "the unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("::/96"), "a deprecated IPv4-compatible IPv6 address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address (RFC 8215)"},
	{netip.MustParsePrefix("100::/64"), "a discard-only address (RFC 6666)"},
	{netip.MustParsePrefix("2001::/23"), "an IETF protocol-assignment address (Teredo, ORCHID, benchmarking)"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("2002::/16"), "a deprecated 6to4 address (RFC 7526)"},
	{netip.MustParsePrefix("3fff::/20"), "a documentation address (RFC 9637)"},
	{netip.MustParsePrefix("fc00::/7"), "a unique local (private) address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a deprecated site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

var (
	// nat64 is the well-known NAT64 prefix (RFC 6052): the address stands for
	// the IPv4 address in its last 32 bits and is judged as that.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	// globalUnicast6 is the only IPv6 space assigned for public hosts.
	globalUnicast6 = netip.MustParsePrefix("2000::/3")
)

// forbiddenAddr reports whether the broker must not connect to a, and why
// (an indefinite noun phrase such as "a loopback address"). IPv4-mapped and
// NAT64 forms are judged by the IPv4 address they carry.
func forbiddenAddr(a netip.Addr) (string, bool) {
	switch {
	case !a.IsValid():
		return "an invalid address", true
	case a.Zone() != "":
		return "an address scoped to a network interface", true
	case a.Is4In6():
		v4 := a.Unmap()
		if reason, bad := forbiddenAddr(v4); bad {
			return "an IPv4-mapped form of " + v4.String() + ", " + reason, true
		}
		return "", false
	case nat64.Contains(a):
		b := a.As16()
		v4 := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		if reason, bad := forbiddenAddr(v4); bad {
			return "a NAT64 form of " + v4.String() + ", " + reason, true
		}
		return "", false
	}
	for _, r := range forbiddenRanges {
		if r.prefix.Contains(a) {
			return r.reason, true
		}
	}
	if a.Is6() && !globalUnicast6.Contains(a) {
		return "outside the IPv6 global unicast range 2000::/3", true
	}
	return "", false
}

// ownAddrReason is why the broker refuses this machine's own addresses,
// whatever range they are in: an app's author controls the DNS of a domain
// the app declares and can point it at the hub's public address, behind
// which the hub's local services (a database, a container API, the
// homeserver) listen on every interface, and the kernel delivers such a
// connection over loopback.
const ownAddrReason = "an address of this machine"

// ownAddrsTTL is how long a listing of the machine's interface addresses
// is used before it is listed again. Listing costs a netlink dump (tens of
// microseconds, more on a host with many interfaces) and a check runs for
// every resolved address and every dial; an address the machine gains is
// refused at most this long after it appears.
const ownAddrsTTL = time.Second

// ownAddrs is the machine's own interface addresses, listed at most once
// per ownAddrsTTL. It is safe for concurrent use.
type ownAddrs struct {
	// list lists the interface addresses: net.InterfaceAddrs, or a fake in
	// tests.
	list func() ([]net.Addr, error)

	mu     sync.Mutex
	listed time.Time // zero until the first listing
	addrs  map[netip.Addr]bool
	err    error
}

func newOwnAddrs(list func() ([]net.Addr, error)) *ownAddrs {
	return &ownAddrs{list: list}
}

// contains reports whether a is one of the machine's addresses. It returns
// the listing's error, if listing failed: the caller refuses then, since it
// cannot tell.
func (o *ownAddrs) contains(a netip.Addr) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.listed.IsZero() || time.Since(o.listed) >= ownAddrsTTL {
		o.addrs, o.err = listOwnAddrs(o.list)
		o.listed = time.Now()
	}
	if o.err != nil {
		return false, o.err
	}
	return o.addrs[a], nil
}

// listOwnAddrs turns the interface addresses into plain addresses: IPv4 in
// its 4-byte form, no zone (a scoped address is refused by forbiddenAddr
// anyway).
func listOwnAddrs(list func() ([]net.Addr, error)) (map[netip.Addr]bool, error) {
	ifAddrs, err := list()
	if err != nil {
		return nil, fmt.Errorf("failed to list this machine's addresses: %w", err)
	}
	addrs := make(map[netip.Addr]bool, len(ifAddrs))
	for _, ia := range ifAddrs {
		var ip net.IP
		switch v := ia.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		default:
			continue
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			addrs[a.Unmap()] = true
		}
	}
	return addrs, nil
}

// refusedAddr reports whether the broker must not connect to a, and why:
// a forbidden range (forbiddenAddr) or one of this machine's own
// addresses, also in an IPv4-mapped or NAT64 form. It fails closed: if the
// machine's addresses cannot be listed, every address is refused.
func (b *Broker) refusedAddr(a netip.Addr) (string, bool) {
	if reason, bad := forbiddenAddr(a); bad {
		return reason, true
	}
	forms := []netip.Addr{a.Unmap()}
	if nat64.Contains(a) {
		v := a.As16()
		forms = append(forms, netip.AddrFrom4([4]byte{v[12], v[13], v[14], v[15]}))
	}
	for _, f := range forms {
		own, err := b.own.contains(f)
		if err != nil {
			return "an address that cannot be told apart from this machine's own (" + err.Error() + ")", true
		}
		if own {
			if f != a {
				return "a form of " + f.String() + ", " + ownAddrReason, true
			}
			return ownAddrReason, true
		}
	}
	return "", false
}

// controlDial is the default dialer's Control hook: it re-checks the address
// the socket is about to connect to, so no path around the resolver's
// vetting (a dialer that resolved after all, a bug here) reaches a
// forbidden address, this machine or a port other than allowedPorts.
func (b *Broker) controlDial(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return refusef("connection to %q refused: not an IP address and port", address)
	}
	if reason, bad := b.refusedAddr(ap.Addr()); bad {
		return refusef("connection to %s refused: %s", ap.Addr(), reason)
	}
	if _, ok := allowedPorts[strconv.Itoa(int(ap.Port()))]; !ok {
		return refusef("connection to %s refused: port %d is not allowed", ap, ap.Port())
	}
	return nil
}
