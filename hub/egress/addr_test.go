package egress

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestForbiddenAddr(t *testing.T) {
	tests := []struct {
		addr string
		want string // reason substring; empty when allowed
	}{
		{"93.184.216.34", ""},
		{"8.8.8.8", ""},
		{"2606:2800:220:1:248:1893:25c8:1946", ""},
		{"64:ff9b::808:808", ""}, // NAT64 of a public address
		{"::ffff:8.8.8.8", ""},   // IPv4-mapped public address
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"10.255.255.255", "private (RFC 1918)"},
		{"100.127.255.255", "carrier-grade NAT"},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"169.254.169.254", "cloud instance-metadata"},
		{"169.254.0.1", "link-local"},
		{"172.31.255.255", "private (RFC 1918)"},
		{"192.0.0.170", "IETF protocol-assignment"},
		{"192.0.2.1", "documentation"},
		{"192.88.99.1", "6to4 relay"},
		{"192.168.0.1", "private (RFC 1918)"},
		{"198.19.255.255", "benchmarking"},
		{"198.51.100.1", "documentation"},
		{"203.0.113.1", "documentation"},
		{"224.0.0.251", "multicast"},
		{"239.255.255.250", "multicast"},
		{"255.255.255.255", "broadcast"},
		{"240.0.0.1", "reserved (class E)"},
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"::7f00:1", "IPv4-compatible"},
		{"::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1, a loopback address"},
		{"::ffff:169.254.169.254", "IPv4-mapped form of 169.254.169.254, the cloud instance-metadata address"},
		{"::ffff:10.0.0.1", "IPv4-mapped form of 10.0.0.1"},
		{"64:ff9b::7f00:1", "NAT64 form of 127.0.0.1, a loopback address"},
		{"64:ff9b::a9fe:a9fe", "NAT64 form of 169.254.169.254"},
		{"64:ff9b::c0a8:1", "NAT64 form of 192.168.0.1"},
		{"64:ff9b:1::1", "local-use NAT64"},
		{"100::1", "discard-only"},
		{"2001::1", "IETF protocol-assignment"},
		{"2001:db8::1", "documentation"},
		{"2002:7f00:1::1", "6to4"},
		{"3fff::1", "documentation"},
		{"fc00::1", "unique local"},
		{"fd00:ec2::254", "unique local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "scoped to a network interface"},
		{"fec0::1", "site-local"},
		{"ff02::1", "multicast"},
		{"4000::1", "outside the IPv6 global unicast range"},
		{"5f00::1", "outside the IPv6 global unicast range"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			reason, bad := forbiddenAddr(netip.MustParseAddr(tt.addr))
			if tt.want == "" {
				if bad {
					t.Errorf("forbiddenAddr(%s) = %q, want allowed", tt.addr, reason)
				}
				return
			}
			if !bad || !strings.Contains(reason, tt.want) {
				t.Errorf("forbiddenAddr(%s) = %q, %v; want forbidden as %q", tt.addr, reason, bad, tt.want)
			}
		})
	}
	if _, bad := forbiddenAddr(netip.Addr{}); !bad {
		t.Error("the zero address is allowed")
	}
}

// TestForbiddenRangesEachDeny checks every rule denies its first and last
// address, also in IPv4-mapped and NAT64 form.
func TestForbiddenRangesEachDeny(t *testing.T) {
	for _, r := range forbiddenRanges {
		first := r.prefix.Masked().Addr()
		last := lastAddr(r.prefix)
		for _, a := range []netip.Addr{first, last} {
			if _, bad := forbiddenAddr(a); !bad {
				t.Errorf("%s (in %s, %s) is allowed", a, r.prefix, r.reason)
			}
			if a.Is4() {
				mapped := netip.AddrFrom16(a.As16())
				b := a.As4()
				nat := netip.AddrFrom16([16]byte{0, 0x64, 0xff, 0x9b, 10: 0, 11: 0, 12: b[0], 13: b[1], 14: b[2], 15: b[3]})
				for _, f := range []netip.Addr{mapped, nat} {
					if _, bad := forbiddenAddr(f); !bad {
						t.Errorf("%s (form of %s, %s) is allowed", f, a, r.reason)
					}
				}
			}
		}
	}
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// fakeOwnAddrs lists the given interface addresses and counts the calls.
type fakeOwnAddrs struct {
	mu    sync.Mutex
	addrs []string // CIDR, as net.InterfaceAddrs gives them
	err   error
	calls int
}

func (f *fakeOwnAddrs) list() ([]net.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	var out []net.Addr
	for _, s := range f.addrs {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			panic(err)
		}
		n.IP = ip
		out = append(out, n)
	}
	return out, nil
}

// withOwnAddrs makes b see addrs as the machine's interface addresses.
func withOwnAddrs(b *Broker, addrs ...string) *fakeOwnAddrs {
	f := &fakeOwnAddrs{addrs: addrs}
	b.own = newOwnAddrs(f.list)
	return f
}

func TestRefusedAddrOwn(t *testing.T) {
	b := New(Options{})
	withOwnAddrs(b, "127.0.0.1/8", "93.184.216.34/24", "2606:2800:220:1:248:1893:25c8:1946/64", "fe80::1/64")
	tests := []struct {
		addr string
		want string // reason substring; empty when allowed
	}{
		{"93.184.216.34", "an address of this machine"},
		{"::ffff:93.184.216.34", "a form of 93.184.216.34, an address of this machine"},
		{"64:ff9b::5db8:d822", "a form of 93.184.216.34, an address of this machine"},
		{"2606:2800:220:1:248:1893:25c8:1946", "an address of this machine"},
		// Fixed ranges keep their own reason.
		{"127.0.0.1", "a loopback address"},
		// Only the machine's addresses, not its neighbours'.
		{"93.184.216.35", ""},
		{"2606:2800:220:1::1", ""},
		{"8.8.8.8", ""},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			reason, bad := b.refusedAddr(netip.MustParseAddr(tt.addr))
			if tt.want == "" {
				if bad {
					t.Errorf("refusedAddr(%s) = %q, want allowed", tt.addr, reason)
				}
				return
			}
			if !bad || !strings.Contains(reason, tt.want) {
				t.Errorf("refusedAddr(%s) = %q, %v; want refused as %q", tt.addr, reason, bad, tt.want)
			}
		})
	}
}

// TestRefusedAddrRealInterfaces checks that the default broker refuses every
// address this machine's interfaces have.
func TestRefusedAddrRealInterfaces(t *testing.T) {
	ifAddrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("cannot list interface addresses: %v", err)
	}
	b := New(Options{})
	for _, ia := range ifAddrs {
		a, ok := netip.AddrFromSlice(ia.(*net.IPNet).IP)
		if !ok {
			t.Fatalf("interface address %v", ia)
		}
		if reason, bad := b.refusedAddr(a.Unmap()); !bad {
			t.Errorf("this machine's address %s is allowed", a)
		} else {
			t.Logf("%s: %s", a, reason)
		}
	}
}

func TestOwnAddrsListing(t *testing.T) {
	b := New(Options{})
	f := withOwnAddrs(b, "93.184.216.34/24")
	public := netip.MustParseAddr("8.8.8.8")
	for range 100 {
		if reason, bad := b.refusedAddr(public); bad {
			t.Fatalf("refusedAddr(%s) = %q", public, reason)
		}
	}
	if f.calls != 1 {
		t.Errorf("listed the interfaces %d times for 100 checks within %s, want once", f.calls, ownAddrsTTL)
	}
	// An address the machine gains is refused once the listing is stale.
	f.mu.Lock()
	f.addrs = append(f.addrs, "8.8.8.8/32")
	f.mu.Unlock()
	b.own.mu.Lock()
	b.own.listed = time.Now().Add(-ownAddrsTTL)
	b.own.mu.Unlock()
	if _, bad := b.refusedAddr(public); !bad {
		t.Errorf("%s is allowed after the machine gained it", public)
	}
	// A failed listing refuses every address: the broker cannot tell.
	f.mu.Lock()
	f.err = errors.New("netlink: operation not permitted")
	f.mu.Unlock()
	b.own.mu.Lock()
	b.own.listed = time.Time{}
	b.own.mu.Unlock()
	reason, bad := b.refusedAddr(netip.MustParseAddr("1.1.1.1"))
	if !bad || !strings.Contains(reason, "netlink: operation not permitted") {
		t.Errorf("refusedAddr with a failed listing = %q, %v; want refused with the error", reason, bad)
	}
}

func TestControlDial(t *testing.T) {
	b := New(Options{})
	withOwnAddrs(b, "127.0.0.1/8", "203.0.114.7/24")
	tests := []struct {
		address string
		want    string // refusal substring; empty when allowed
	}{
		{"93.184.216.34:443", ""},
		{"93.184.216.34:80", ""},
		{"[2606:2800:220:1:248:1893:25c8:1946]:443", ""},
		{"127.0.0.1:80", "connection to 127.0.0.1 refused: a loopback address"},
		{"[::1]:80", "connection to ::1 refused: a loopback address"},
		{"[::ffff:10.0.0.1]:80", "IPv4-mapped form of 10.0.0.1"},
		{"169.254.169.254:80", "the cloud instance-metadata address"},
		{"203.0.114.7:443", "connection to 203.0.114.7 refused: an address of this machine"},
		{"[::ffff:203.0.114.7]:443", "a form of 203.0.114.7, an address of this machine"},
		{"93.184.216.34:5432", "connection to 93.184.216.34:5432 refused: port 5432 is not allowed"},
		{"example.com:80", "not an IP address and port"},
	}
	for _, tt := range tests {
		t.Run(tt.address, func(t *testing.T) {
			err := b.controlDial("tcp", tt.address, nil)
			if tt.want == "" {
				if err != nil {
					t.Errorf("controlDial(%s) = %v, want allowed", tt.address, err)
				}
				return
			}
			wantRefusal(t, err, tt.want)
		})
	}
}
