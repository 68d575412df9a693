package egress

import (
	"io"
	"net/http"
	"net/url"
	"strings"
)

// maxDrainBytes is how much of a redirect's body is read so its connection
// can be reused; the rest is dropped with the connection.
const maxDrainBytes = 4 << 10

// redirectLocation returns where a redirect response points, or false if the
// response is final. Other 3xx statuses (300, 304, …) are final responses.
func redirectLocation(resp *http.Response) (string, bool) {
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		loc := resp.Header.Get("Location")
		return loc, loc != ""
	}
	return "", false
}

// redirectRequest returns the method, body and header of the request that
// follows a redirect from one target to the next. Like Go's client: 301, 302
// and 303 drop the body (and its Content-* fields) and turn anything but GET
// and HEAD into a GET; 307 and 308 repeat the request. A redirect to another
// origin carries only crossOriginHeaders, and crossOriginBodyHeaders on 307
// and 308, so the app's credentials, in whatever field, stay with the origin
// they were sent to.
func redirectRequest(status int, method string, body []byte, header http.Header, from, to target) (string, []byte, http.Header) {
	header = header.Clone()
	if status != http.StatusTemporaryRedirect && status != http.StatusPermanentRedirect {
		if method != http.MethodGet && method != http.MethodHead {
			method = http.MethodGet
		}
		body = nil
		for key := range header {
			if strings.HasPrefix(key, "Content-") {
				delete(header, key)
			}
		}
	}
	if from.origin() != to.origin() {
		// The Content-* fields are left only where the body follows.
		for key := range header {
			_, harmless := crossOriginHeaders[key]
			_, describesBody := crossOriginBodyHeaders[key]
			if !harmless && !describesBody {
				delete(header, key)
			}
		}
	}
	return method, body, header
}

// drain discards a little of a response body and closes it.
func drain(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, maxDrainBytes)
	_ = resp.Body.Close()
}

// redirectName names a redirect target in a refusal: scheme and host, not the
// path or query.
func redirectName(u *url.URL) string {
	if u.Host == "" {
		return truncate(u.Scheme+":", 32)
	}
	return truncate(u.Scheme+"://"+u.Host, 128)
}
