//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// ownNetworkNamespace reports whether the process looks, from inside, like
// it is in a network namespace of its own: loopback is its only interface.
// Prepare is what puts it there; this is Enter's check that it did.
func ownNetworkNamespace() (bool, string) {
	dev, err := os.ReadFile("/proc/self/net/dev")
	if err != nil {
		return false, fmt.Sprintf("cannot list network interfaces: %v", err)
	}
	// Two header lines, then one line per interface.
	lines := strings.Split(strings.TrimSpace(string(dev)), "\n")
	var names []string
	for _, l := range lines[min(2, len(lines)):] {
		name, _, _ := strings.Cut(strings.TrimSpace(l), ":")
		names = append(names, name)
	}
	if len(names) == 1 && names[0] == "lo" {
		return true, "loopback only"
	}
	return false, fmt.Sprintf("the process shares a network namespace with interfaces %s", strings.Join(names, ", "))
}

// OwnNetworkNamespace reports whether the calling process is in a network
// namespace of its own (loopback is its only interface), and if not, why.
// A ProfileProxy spoke opens its listeners on ports 80, 443 and 53 only
// there: elsewhere (as only AllowWeaker permits) they would be the
// machine's.
func OwnNetworkNamespace() (bool, string) { return ownNetworkNamespace() }

// UpLoopback brings up the loopback interface of the calling process's own
// network namespace, which a new namespace starts with down, gives it the
// IPv4 addresses addrs too (each alone in its /32: the spoke's resolver
// answers there, where the machine's resolver configuration points), and
// then drops CAP_NET_ADMIN from every thread. A ProfileProxy spoke calls it first
// thing, before it opens its listeners and before Enter: Prepare gave it
// CAP_NET_ADMIN over its own namespace for exactly this. It keeps
// CAP_NET_BIND_SERVICE, which Prepare gave it to listen on ports 80, 443
// and 53 of that namespace; the spoke drops it with DropCapabilities once
// it listens (Enter drops it anyway). When loopback is already up (no
// namespace of its own, as only AllowWeaker permits), it changes nothing
// but the capabilities.
func UpLoopback(addrs ...netip.Addr) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("failed to open a socket to configure loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("failed to name the loopback interface: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("failed to read loopback's flags: %w", err)
	}
	if flags := ifr.Uint16(); flags&unix.IFF_UP == 0 {
		ifr.SetUint16(flags | unix.IFF_UP)
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
			return fmt.Errorf("failed to bring up loopback: %w", err)
		}
	}
	for i, a := range addrs {
		if err := addLoopbackAddr(fd, i, a); err != nil {
			return err
		}
	}
	if _, err := clearCapabilities(1 << unix.CAP_NET_ADMIN); err != nil {
		return err
	}
	return nil
}

// addLoopbackAddr gives loopback the IPv4 address a, with a /32 mask, as
// the alias lo:i (fd is an AF_INET socket).
func addLoopbackAddr(fd, i int, a netip.Addr) error {
	if !a.Is4() {
		return fmt.Errorf("failed to add %s to loopback: not an IPv4 address", a)
	}
	ifr, err := unix.NewIfreq(fmt.Sprintf("lo:%d", i))
	if err != nil {
		return fmt.Errorf("failed to name a loopback alias: %w", err)
	}
	ip := a.As4()
	if err := ifr.SetInet4Addr(ip[:]); err != nil {
		return fmt.Errorf("failed to add %s to loopback: %w", a, err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFADDR, ifr); err != nil {
		return fmt.Errorf("failed to add %s to loopback: %w", a, err)
	}
	mask := [4]byte{255, 255, 255, 255}
	if err := ifr.SetInet4Addr(mask[:]); err != nil {
		return fmt.Errorf("failed to set the mask of %s: %w", a, err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFNETMASK, ifr); err != nil {
		return fmt.Errorf("failed to set the mask of %s: %w", a, err)
	}
	return nil
}

// DropCapabilities drops the network capabilities (CAP_NET_ADMIN and
// CAP_NET_BIND_SERVICE) from every thread: a ProfileProxy spoke calls it
// once its listeners are open (see UpLoopback). CAP_SYS_ADMIN over its own
// namespaces stays until Enter, which builds the spoke's view with it and
// then drops every capability.
func DropCapabilities() error {
	_, err := clearCapabilities(1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_NET_BIND_SERVICE)
	return err
}

// dropCapabilities empties the ambient, permitted, effective and
// inheritable capability sets of every thread, if the calling thread holds
// any (threads inherit their creator's, so all hold the same). It reports
// whether there was anything to drop.
func dropCapabilities() (bool, error) { return clearCapabilities(^uint64(0)) }

// clearCapabilities removes the capabilities in mask (bit n for capability
// n) from the permitted, effective and inheritable sets, and so from the
// ambient one, of every thread, if the calling thread holds any of them. It reports whether there
// was anything to remove.
func clearCapabilities(mask uint64) (bool, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false, fmt.Errorf("failed to read capabilities: %w", err)
	}
	held := func() uint64 {
		var h uint64
		for i, d := range data {
			h |= uint64(d.Effective|d.Permitted|d.Inheritable) << (32 * i)
		}
		return h & mask
	}
	if held() == 0 {
		return false, nil
	}
	// One capset on every thread (psx signals each: a round costs about
	// as much as the thread count). The ambient set needs no call of its
	// own: the kernel keeps it within permitted and inheritable, and lowers
	// it with them (cap_capset).
	// On the heap, which does not move, and kept alive across the call:
	// psx takes the addresses as plain integers.
	setHdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	kept := new([2]unix.CapUserData)
	for i, d := range data {
		keep := uint32(^mask >> (32 * i))
		kept[i] = unix.CapUserData{Effective: d.Effective & keep, Permitted: d.Permitted & keep, Inheritable: d.Inheritable & keep}
	}
	_, _, errno := psx.Syscall3(unix.SYS_CAPSET, uintptr(unsafe.Pointer(setHdr)), uintptr(unsafe.Pointer(&kept[0])), 0)
	runtime.KeepAlive(setHdr)
	runtime.KeepAlive(kept)
	if errno != 0 {
		return false, fmt.Errorf("failed to drop capabilities: %w", errno)
	}
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false, fmt.Errorf("failed to read capabilities: %w", err)
	}
	if held() != 0 {
		return false, errors.New("failed to drop capabilities: some remain")
	}
	return true, nil
}
