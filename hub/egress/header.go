package egress

import (
	"net/http"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

const (
	// maxHeaderFields bounds the header values an app may send.
	maxHeaderFields = 64
	// maxHeaderBytes bounds the total size of their names and values.
	maxHeaderBytes = 16 << 10
	// maxResponseHeaderBytes bounds a response's header block.
	maxResponseHeaderBytes = 64 << 10
	// maxMethodBytes bounds a request method.
	maxMethodBytes = 32
)

// refusedMethods are methods the broker never sends.
var refusedMethods = map[string]string{
	"CONNECT": "opens a tunnel the broker cannot inspect",
	"TRACE":   "echoes the request back (cross-site tracing) and has no use for an app",
	"TRACK":   "is a non-standard TRACE",
}

// droppedRequestHeaders are removed from every request an app sends, with
// why; canonical names. Names starting with droppedRequestPrefixes and names
// listed in the request's own Connection header go too.
var droppedRequestHeaders = map[string]string{
	"Host":              "set from the URL, so the host that was checked is the host that is named",
	"Connection":        "hop-by-hop (RFC 9110 §7.6.1); the broker manages its own connections",
	"Keep-Alive":        "hop-by-hop",
	"Proxy-Connection":  "hop-by-hop (non-standard)",
	"Te":                "hop-by-hop",
	"Trailer":           "hop-by-hop; the broker sends no trailers",
	"Transfer-Encoding": "message framing is the broker's; a forged value invites request smuggling",
	"Content-Length":    "message framing is set from the body the broker sends",
	"Upgrade":           "would switch the connection to a protocol the broker does not inspect (WebSocket, h2c)",
	"Http2-Settings":    "belongs to an h2c upgrade",
	"Expect":            "a 100-continue handshake is the broker's business",
	"Accept-Encoding":   "the broker negotiates compression itself, so the size limit applies to the decoded body",
	"Forwarded":         "proxy metadata that servers trust for client address and routing; an app must not forge it",
	"Via":               "proxy metadata; an app must not forge it",
	"X-Real-Ip":         "proxy metadata that servers trust for the client address; an app must not forge it",
	"X-Original-Url":    "proxy routing override some servers honour ahead of the request line",
	"X-Rewrite-Url":     "proxy routing override some servers honour ahead of the request line",
}

// droppedRequestPrefixes drop whole families of headers.
var droppedRequestPrefixes = []struct{ prefix, reason string }{
	{"Proxy-", "addressed to a proxy, and the broker is not the app's proxy (Proxy-Authorization, …)"},
	{"X-Forwarded-", "proxy metadata that servers trust for client address, host and scheme; an app must not forge it"},
}

// crossOriginHeaders are the only fields a redirect that leaves the origin
// (scheme, host and port) of the request carries on to the next one, with
// why each is harmless. Every other field goes: an app may carry a
// credential in any field it likes (X-Api-Key, X-Auth-Token, a signed
// header), and a token for one host must not reach another, even under the
// same registrable domain, nor an https secret travel over http.
var crossOriginHeaders = map[string]string{
	"Accept":          "content negotiation: which media types the app reads",
	"Accept-Language": "content negotiation: which languages the app wants",
	"User-Agent":      "names the client software, the same for every host",
}

// crossOriginBodyHeaders also go on when the body does (307 and 308): they
// describe the body, which is forwarded as it is, and carry no credential.
var crossOriginBodyHeaders = map[string]string{
	"Content-Type":     "the body's media type, which the body needs to be read",
	"Content-Encoding": "the body's coding (such as gzip), which the body needs to be read",
	"Content-Language": "the body's language",
}

// droppedResponseHeaders describe the broker's connection to the server, not
// the response; the app gets the response alone. Set-Cookie is passed on: the
// hub keeps no cookie jar, and the cookies are the app's own session with a
// domain it declared, so dropping them would break logins without protecting
// anyone.
var droppedResponseHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// checkMethod returns the method to send: the app's, or GET when empty.
func checkMethod(m string) (string, error) {
	if m == "" {
		return http.MethodGet, nil
	}
	if len(m) > maxMethodBytes || !httpguts.ValidHeaderFieldName(m) {
		return "", refusef("method %q is not an HTTP token", truncate(m, maxMethodBytes))
	}
	if reason, bad := refusedMethods[strings.ToUpper(m)]; bad {
		return "", refusef("method %s is refused: it %s", m, reason)
	}
	return m, nil
}

// requestHeader returns the header the broker sends for an app's header:
// bounded, valid, without hop-by-hop or proxy fields. It refuses rather than
// repairs a header that is too large or malformed. Values never appear in a
// refusal: they may hold credentials.
func requestHeader(in map[string][]string) (http.Header, error) {
	fields, size := 0, 0
	for name, values := range in {
		if !httpguts.ValidHeaderFieldName(name) {
			return nil, refusef("header name %q is not an HTTP token", truncate(name, 64))
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, refusef("header %s has a value with invalid characters", truncate(name, 64))
			}
			fields++
			size += len(name) + len(v)
		}
	}
	if fields > maxHeaderFields {
		return nil, refusef("request has %d header fields; at most %d are allowed", fields, maxHeaderFields)
	}
	if size > maxHeaderBytes {
		return nil, refusef("request headers total %d bytes; at most %d are allowed", size, maxHeaderBytes)
	}
	connection := connectionTokens(in)
	out := make(http.Header, len(in))
	for name, values := range in {
		key := textproto.CanonicalMIMEHeaderKey(name)
		if droppedRequestHeader(key) || connection[key] {
			continue
		}
		out[key] = append(out[key], values...)
	}
	return out, nil
}

// droppedRequestHeader reports whether a canonical name is never forwarded.
func droppedRequestHeader(key string) bool {
	if _, ok := droppedRequestHeaders[key]; ok {
		return true
	}
	for _, p := range droppedRequestPrefixes {
		if strings.HasPrefix(key, p.prefix) {
			return true
		}
	}
	return false
}

// responseHeader copies a server's header without the fields about the
// connection.
func responseHeader(in http.Header) map[string][]string {
	connection := connectionTokens(in)
	out := make(map[string][]string, len(in))
	for key, values := range in {
		if droppedResponseHeaders[key] || connection[key] {
			continue
		}
		out[key] = values
	}
	return out
}

// connectionTokens returns the canonical names a Connection header lists:
// hop-by-hop fields by declaration (RFC 9110 §7.6.1).
func connectionTokens(h map[string][]string) map[string]bool {
	tokens := map[string]bool{}
	for name, values := range h {
		if textproto.CanonicalMIMEHeaderKey(name) != "Connection" {
			continue
		}
		for _, v := range values {
			for t := range strings.SplitSeq(v, ",") {
				if t = strings.TrimSpace(t); t != "" {
					tokens[textproto.CanonicalMIMEHeaderKey(t)] = true
				}
			}
		}
	}
	return tokens
}
