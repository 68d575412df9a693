package spoke

import (
	"errors"
	"net"

	"github.com/rs/zerolog"
	"golang.org/x/net/dns/dnsmessage"
)

// The resolver of an external app's spoke answers, on 127.0.0.1:53 of the
// spoke's own network namespace, every A query with 127.0.0.1, where the
// spoke's listeners for ports 80 and 443 wait (see transparent), and every
// other query with no answer: no IPv6, no other record. The server cannot
// read the machine's resolver configuration (Landlock), so every resolver
// (glibc's, Go's, c-ares') falls back to its default, 127.0.0.1:53; should
// it read it, the machine's name servers are loopback addresses of the
// namespace where the resolver answers too (systemNameservers). It
// answers a name it has never seen as readily as any: which names may be
// reached is the broker's decision, by the Host header or the TLS server
// name, never by what an address stands for, so no answer here can rebind
// anything.

// resolverTTL is the time to live of the resolver's answers, in seconds.
const resolverTTL = 60

// maxDNSMessage bounds one query.
const maxDNSMessage = 4096

// serveResolver answers queries on conn until it is closed.
func serveResolver(conn *net.UDPConn, log zerolog.Logger) {
	buf := make([]byte, maxDNSMessage)
	for {
		n, from, err := conn.ReadFromUDP(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				log.Warn().Err(err).Msg("The spoke's resolver stopped")
			}
			return
		}
		if resp, ok := answerDNS(buf[:n]); ok {
			_, _ = conn.WriteToUDP(resp, from)
		}
	}
}

// loopbackAnswer is the one address the resolver gives.
var loopbackAnswer = [4]byte{127, 0, 0, 1}

// answerDNS answers one query; false drops it (not a query at all).
func answerDNS(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil, false
	}
	resp := dnsmessage.Message{Header: dnsmessage.Header{
		ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true,
	}}
	qs, err := p.AllQuestions()
	switch {
	case err != nil:
		resp.RCode = dnsmessage.RCodeFormatError
	case h.OpCode != 0 || len(qs) != 1:
		resp.RCode = dnsmessage.RCodeNotImplemented
		resp.Questions = qs
	default:
		q := qs[0]
		resp.Questions = qs
		if q.Type == dnsmessage.TypeA && q.Class == dnsmessage.ClassINET {
			resp.Answers = []dnsmessage.Resource{{
				Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: resolverTTL},
				Body:   &dnsmessage.AResource{A: loopbackAnswer},
			}}
		}
	}
	b, err := resp.Pack()
	if err != nil {
		return nil, false
	}
	return b, true
}
