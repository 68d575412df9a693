package bot

import (
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"maunium.net/go/mautrix/id"
)

// The bot's commands. Each answers only about the user who sends it.
const (
	cmdHelp    = "help"
	cmdApps    = "apps"
	cmdGrants  = "grants"
	cmdRevoke  = "revoke"
	cmdForget  = "forget"
	cmdReset   = "reset"
	cmdCancel  = "cancel"
	cmdAudit   = "audit"
	cmdUsage   = "usage"
	cmdUnknown = "" // a prefixed word that is no command
)

// commandList is every command with its help line, in the order !help shows.
var commandList = []struct{ Name, Args, Help string }{
	{cmdHelp, "", "this list"},
	{cmdApps, "", "the installed apps: what they do, where they may connect, how they are confined"},
	{cmdGrants, "", "your stored permissions"},
	{cmdRevoke, "APP|all", "remove your stored permissions for an app, or all of them"},
	{cmdForget, "", "erase what I and every app remember about you"},
	{cmdReset, "", "end your session: \"this session\" permissions end and your apps stop"},
	{cmdCancel, "", "stop the request I am working on for you"},
	{cmdAudit, "", "your latest permission decisions"},
	{cmdUsage, "", "what your requests cost today (model tokens, per app), your apps' stored data, and the limits"},
}

func isCommand(word string) bool {
	for _, c := range commandList {
		if c.Name == word {
			return true
		}
	}
	return false
}

// The kinds of inbox rows.
const (
	kindQuery   = "query"
	kindCommand = "command"
	// kindReject is a message the bot answers with a fixed error (too long,
	// not text); the row's body is that error.
	kindReject = "reject"
)

// incoming is what deciding whether a message is for the bot needs.
type incoming struct {
	Body          string // reply fallback already removed
	FormattedBody string
	// MentionsBot: the event's m.mentions names the bot.
	MentionsBot bool
	// RepliesToBot: the message replies to, or is in a thread on, one of
	// the bot's messages.
	RepliesToBot bool
	// Direct: the bot and the sender are the room's only members.
	Direct bool
	Prefix string
}

// addressee is how users name the bot.
type addressee struct {
	ID id.UserID
	// Names are further names a message may start with ("secgpt: ..."):
	// the localpart and the display name.
	Names []string
}

// request is a message for the bot: a query for the hub or a command.
type request struct {
	Kind    string
	Command string // for kindCommand; cmdUnknown with Text = the word
	Text    string // the query, or the command's arguments
}

// classify decides whether a message is for the bot and what it asks. In a
// direct chat every message is; in a shared room only one that mentions the
// bot, replies to it, or starts with the room's prefix. A prefixed word that
// is no command is answered as unknown only where the message is plainly
// for the bot (another bot in the room may own it).
func classify(in incoming, a addressee) (request, bool) {
	text := strings.TrimSpace(in.Body)
	mentioned := in.MentionsBot || strings.Contains(text, a.ID.String()) || linksTo(in.FormattedBody, a.ID)
	if rest, ok := stripLeadingName(text, a); ok {
		text, mentioned = rest, true
	}
	forBot := in.Direct || mentioned || in.RepliesToBot
	if in.Prefix != "" && strings.HasPrefix(text, in.Prefix) {
		rest := text[len(in.Prefix):]
		r, _ := utf8.DecodeRuneInString(rest)
		if rest != "" && !unicode.IsSpace(r) {
			word, args := rest, ""
			if i := strings.IndexFunc(rest, unicode.IsSpace); i >= 0 {
				word, args = rest[:i], strings.TrimSpace(rest[i:])
			}
			word = strings.ToLower(word)
			if isCommand(word) {
				return request{Kind: kindCommand, Command: word, Text: args}, true
			}
			if !forBot {
				return request{}, false
			}
			return request{Kind: kindCommand, Command: cmdUnknown, Text: word}, true
		}
		text, forBot = strings.TrimSpace(rest), true
	}
	if !forBot {
		return request{}, false
	}
	if text == "" {
		// Only the bot's name, or only the prefix: say what it can do.
		return request{Kind: kindCommand, Command: cmdHelp}, true
	}
	return request{Kind: kindQuery, Text: text}, true
}

// stripLeadingName removes the bot's user ID, or one of its names followed
// by ":" or ",", from the start of text.
func stripLeadingName(text string, a addressee) (string, bool) {
	if rest, ok := cutPrefixFold(text, a.ID.String()); ok {
		return trimAddress(rest), true
	}
	for _, n := range a.Names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		rest, ok := cutPrefixFold(text, n)
		if ok && (strings.HasPrefix(rest, ":") || strings.HasPrefix(rest, ",")) {
			return trimAddress(rest), true
		}
	}
	return text, false
}

// cutPrefixFold is strings.CutPrefix ignoring case.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

func trimAddress(s string) string {
	return strings.TrimSpace(strings.TrimLeft(s, ":,"))
}

// linksTo reports whether HTML links to user through a matrix.to pill.
func linksTo(html string, user id.UserID) bool {
	if html == "" {
		return false
	}
	return strings.Contains(html, "matrix.to/#/"+user.String()) ||
		strings.Contains(html, "matrix.to/#/"+url.PathEscape(user.String()))
}

// parseRevoke reads !revoke's argument: an app name, or "" for all.
func parseRevoke(args string) (app string, ok bool) {
	f := strings.Fields(args)
	if len(f) != 1 {
		return "", false
	}
	if strings.EqualFold(f[0], "all") {
		return "", true
	}
	return f[0], true
}
