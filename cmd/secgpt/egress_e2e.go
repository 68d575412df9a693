//go:build e2e

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/secgpt/secgpt/hub/egress"
)

// Only in a binary built with the e2e tag (the end-to-end tests' own; never
// `make build`'s): SECGPT_E2E_EGRESS=HOST=ADDR makes the egress broker
// resolve HOST to e2ePublicIP, and only that name, and dial ADDR (a
// loopback test server) for e2ePublicIP:80. The broker still vets every
// name, answer and dial as in production: its address rules are not
// bypassed, the test's server just stands in for the internet.
const e2ePublicIP = "93.184.215.14"

func init() {
	v, ok := os.LookupEnv("SECGPT_E2E_EGRESS")
	if !ok {
		return
	}
	host, addr, _ := strings.Cut(v, "=")
	egressForTests = func(o *egress.Options) {
		o.Resolver = e2eResolver(host)
		o.DialContext = func(ctx context.Context, network, to string) (net.Conn, error) {
			if to != net.JoinHostPort(e2ePublicIP, "80") {
				return nil, fmt.Errorf("e2e: no route to %s (the test's internet is one server)", to)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	}
}

type e2eResolver string

func (r e2eResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	if strings.TrimSuffix(host, ".") != string(r) {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []net.IPAddr{{IP: net.ParseIP(e2ePublicIP)}}, nil
}
