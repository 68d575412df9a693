package egress

import (
	"maps"
	"net/http"
	"slices"
	"testing"
)

// TestRedirectRequestHeaders checks which fields a redirect carries on: to
// the same origin all of them; to another origin (host, scheme or port) only
// crossOriginHeaders, and crossOriginBodyHeaders where the body follows.
func TestRedirectRequestHeaders(t *testing.T) {
	d := map[string]bool{"example.com": true}
	mustTarget := func(raw string) target {
		tg, err := checkURL(raw, d)
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	from := mustTarget("https://api.example.com/")
	header := http.Header{
		// Fields that may carry a credential, whatever their name.
		"Authorization": {"Bearer t"}, "Cookie": {"s=1"}, "Cookie2": {"s=2"}, "X-Api-Key": {"k"},
		"X-Auth-Token": {"t"}, "Api-Key": {"k"}, "X-Amz-Security-Token": {"t"}, "X-Custom": {"c"},
		"Content-Md5": {"x"},
	}
	for _, m := range []map[string]string{crossOriginHeaders, crossOriginBodyHeaders} {
		for k := range m {
			header[k] = []string{"v"}
		}
	}
	all := slices.Sorted(maps.Keys(header))
	harmless := slices.Sorted(maps.Keys(crossOriginHeaders))
	withBody := slices.Sorted(func(yield func(string) bool) {
		for _, m := range []map[string]string{crossOriginHeaders, crossOriginBodyHeaders} {
			for k := range m {
				if !yield(k) {
					return
				}
			}
		}
	})
	tests := []struct {
		name   string
		status int
		to     string
		want   []string
	}{
		{"same origin keeps every field", http.StatusTemporaryRedirect, "https://api.example.com/other", all},
		{"another host", http.StatusFound, "https://www.example.com/", harmless},
		{"another scheme", http.StatusFound, "http://api.example.com/", harmless},
		{"another port", http.StatusFound, "https://api.example.com:80/", harmless},
		{"another host, body follows", http.StatusTemporaryRedirect, "https://www.example.com/", withBody},
		{"another host, 308", http.StatusPermanentRedirect, "https://www.example.com/", withBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, got := redirectRequest(tt.status, http.MethodPost, []byte("b"), header, from, mustTarget(tt.to))
			if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, tt.want) {
				t.Errorf("carried %v, want %v", keys, tt.want)
			}
		})
	}
	if len(header) != len(all) {
		t.Error("redirectRequest changed the caller's header")
	}
}
