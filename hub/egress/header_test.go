package egress

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestRequestHeaderDrops(t *testing.T) {
	in := map[string][]string{
		"Authorization": {"Bearer t"},
		"Content-Type":  {"application/json"},
		"User-Agent":    {"app/1"},
		"cookie":        {"a=1"},
		"x-listed":      {"1"},
	}
	for name := range droppedRequestHeaders {
		in[name] = []string{"v"}
	}
	in["Connection"] = []string{"keep-alive, X-Listed"}
	for _, p := range droppedRequestPrefixes {
		in[p.prefix+"Anything"] = []string{"v"}
		in[strings.ToLower(p.prefix)+"lower"] = []string{"v"}
	}
	out, err := requestHeader(in)
	if err != nil {
		t.Fatalf("requestHeader: %v", err)
	}
	var got []string
	for k := range out {
		got = append(got, k)
	}
	slices.Sort(got)
	if want := []string{"Authorization", "Content-Type", "Cookie", "User-Agent"}; !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
}

func TestRequestHeaderRefuses(t *testing.T) {
	many := map[string][]string{}
	for i := range maxHeaderFields + 1 {
		many["X-H"+strings.Repeat("a", i)] = []string{"v"}
	}
	tests := []struct {
		name string
		in   map[string][]string
		want string
	}{
		{"too many fields", many, "65 header fields"},
		{"too many bytes", map[string][]string{"X-Big": {strings.Repeat("x", maxHeaderBytes)}}, "request headers total"},
		{"invalid name", map[string][]string{"Bad Name": {"v"}}, `header name "Bad Name" is not an HTTP token`},
		{"CRLF in value", map[string][]string{"X-Inject": {"secret-value\r\nHost: evil.net"}}, "header X-Inject has a value with invalid characters"},
		{"NUL in value", map[string][]string{"X-Nul": {"secret-value\x00"}}, "has a value with invalid characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := requestHeader(tt.in)
			wantRefusal(t, err, tt.want)
			if strings.Contains(err.Error(), "secret-value") {
				t.Errorf("refusal %q contains a header value", err)
			}
		})
	}
}

func TestCheckMethod(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "", want: "GET"},
		{in: "GET", want: "GET"},
		{in: "PATCH", want: "PATCH"},
		{in: "PROPFIND", want: "PROPFIND"},
		{in: "GET /evil HTTP/1.1\r\n", err: "is not an HTTP token"},
		{in: "G E T", err: "is not an HTTP token"},
		{in: strings.Repeat("A", 33), err: "is not an HTTP token"},
		{in: "connect", err: "method connect is refused: it opens a tunnel"},
	}
	for m := range refusedMethods {
		tests = append(tests, struct{ in, want, err string }{in: m, err: "method " + m + " is refused"})
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := checkMethod(tt.in)
			if tt.err != "" {
				wantRefusal(t, err, tt.err)
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("checkMethod(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestResponseHeader(t *testing.T) {
	in := http.Header{
		"Content-Type": {"text/plain"},
		"Set-Cookie":   {"a=1", "b=2"},
		"Connection":   {"X-Private"},
		"X-Private":    {"1"},
	}
	for k := range droppedResponseHeaders {
		if k != "Connection" {
			in[k] = []string{"v"}
		}
	}
	out := responseHeader(in)
	var got []string
	for k := range out {
		got = append(got, k)
	}
	slices.Sort(got)
	if want := []string{"Content-Type", "Set-Cookie"}; !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
	if len(out["Set-Cookie"]) != 2 {
		t.Errorf("Set-Cookie = %v, want both cookies", out["Set-Cookie"])
	}
}
