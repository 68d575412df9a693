package bot

import (
	"fmt"
	"path"
	"strings"

	"maunium.net/go/mautrix/id"
)

// allowList decides who may invite the bot and talk to it. A pattern is a
// user ID whose localpart and server name may each contain the wildcards *
// (any run of characters) and ? (one character): "@*:example.org",
// "@alice:example.org", "@ops-*:*.example.org". The localpart and server are
// matched separately, so a wildcard in the localpart never reaches across
// the ":" into the server name.
type allowList struct {
	patterns []allowPattern
}

type allowPattern struct {
	local, server string
}

// parseAllowList checks every pattern; an empty list allows no one.
func parseAllowList(patterns []string) (allowList, error) {
	var l allowList
	for i, p := range patterns {
		rest, ok := strings.CutPrefix(p, "@")
		local, server, found := strings.Cut(rest, ":")
		if !ok || !found || local == "" || server == "" {
			return allowList{}, fmt.Errorf("allow pattern %d (%q) must look like @LOCALPART:SERVER, with * or ? as wildcards", i, p)
		}
		for _, part := range []string{local, server} {
			if _, err := path.Match(part, ""); err != nil || strings.ContainsAny(part, `[]\/`) {
				return allowList{}, fmt.Errorf("allow pattern %d (%q) may use only * and ? as wildcards", i, p)
			}
		}
		l.patterns = append(l.patterns, allowPattern{local: strings.ToLower(local), server: strings.ToLower(server)})
	}
	return l, nil
}

// allows reports whether user matches a pattern. A user ID that does not
// parse never matches.
func (l allowList) allows(user id.UserID) bool {
	local, server, err := user.Parse()
	if err != nil || local == "" || server == "" || strings.ContainsAny(local, "/") {
		return false
	}
	local, server = strings.ToLower(local), strings.ToLower(server)
	for _, p := range l.patterns {
		if globMatch(p.local, local) && globMatch(p.server, server) {
			return true
		}
	}
	return false
}

// globMatch matches s against a pattern of literal characters, * and ?.
// path.Match does exactly that for strings without "/", which neither
// localparts nor server names contain (checked above for the user ID, and
// rejected in patterns).
func globMatch(pattern, s string) bool {
	if strings.Contains(s, "/") {
		return false
	}
	ok, err := path.Match(pattern, s)
	return err == nil && ok
}

// CheckAllow reports the first malformed allow pattern, for config
// validation.
func CheckAllow(patterns []string) error {
	_, err := parseAllowList(patterns)
	return err
}
