package spoke

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
)

// An external app's TLS connections reach the hub's egress broker whole:
// the spoke accepts them in its network namespace and passes each, as a
// descriptor (SCM_RIGHTS), over a unix socket of its own, the tunnel
// socket, and then asks the hub over ISC to carry it (KindTunnel). The hub
// reads the ClientHello itself and decides; the spoke decides nothing.

// TunnelFD is the tunnel socket of a ProfileProxy spoke.
const TunnelFD = 5

// tunnelWait bounds the hub's wait for a tunnel's descriptor, which the
// spoke sends before its request.
const tunnelWait = 2 * time.Second

var errNoTunnels = errors.New("this step carries no TLS connections")

// tunnelPair makes a tunnel socket: the hub's end, and the spoke's to pass
// as TunnelFD.
func tunnelPair() (*net.UnixConn, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create the tunnel socket pair: %w", err)
	}
	hubFile := os.NewFile(uintptr(fds[0]), "tunnel-hub")
	spokeFile := os.NewFile(uintptr(fds[1]), "tunnel-spoke")
	c, err := net.FileConn(hubFile)
	hubFile.Close()
	if err != nil {
		spokeFile.Close()
		return nil, nil, fmt.Errorf("failed to open the tunnel socket: %w", err)
	}
	return c.(*net.UnixConn), spokeFile, nil
}

// receiveTunnel reads the next descriptor from the spoke's tunnel socket,
// which must be the TCP connection of tunnel request seq. Anything else is
// a protocol error: the spoke is stopped.
func (p *process) receiveTunnel(seq uint64) (net.Conn, error) {
	if p.tunnels == nil {
		return nil, fmt.Errorf("%w: a tunnel request from a spoke without a tunnel socket", ErrProtocol)
	}
	buf := make([]byte, 8)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	_ = p.tunnels.SetReadDeadline(time.Now().Add(tunnelWait))
	n, oobn, flags, _, err := p.tunnels.ReadMsgUnix(buf, oob)
	_ = p.tunnels.SetReadDeadline(time.Time{})
	if err != nil {
		return nil, fmt.Errorf("%w: no connection for tunnel request %d: %v", ErrProtocol, seq, err)
	}
	var fds []int
	if msgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if rights, err := syscall.ParseUnixRights(&m); err == nil {
				fds = append(fds, rights...)
			}
		}
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "tunnel")
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if n != 8 || binary.BigEndian.Uint64(buf) != seq || len(files) != 1 || flags&(syscall.MSG_CTRUNC|syscall.MSG_TRUNC) != 0 {
		return nil, fmt.Errorf("%w: tunnel request %d came without its one connection", ErrProtocol, seq)
	}
	conn, err := net.FileConn(files[0])
	if err != nil {
		return nil, fmt.Errorf("%w: tunnel request %d: %v", ErrProtocol, seq, err)
	}
	if _, ok := conn.(*net.TCPConn); !ok {
		conn.Close()
		return nil, fmt.Errorf("%w: tunnel request %d passed a descriptor that is not a TCP connection", ErrProtocol, seq)
	}
	return conn, nil
}
