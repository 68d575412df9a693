package bot

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/secgpt/secgpt/apps"
)

// command answers one command, always about the user who sent it.
func (b *Bot) command(ctx context.Context, row inboxRow, name, args string) string {
	user := row.UserID.String()
	prefix := b.prefixFor(row.RoomID)
	fail := func(what string, err error) string {
		b.log.Error().Err(err).Str("command", name).Str("user", user).Msg("Command failed")
		return fmt.Sprintf("Sorry, I could not %s.", what)
	}
	switch name {
	case cmdHelp:
		return helpText(prefix)
	case cmdApps:
		return appsText(b.hub.Apps())
	case cmdGrants:
		grants, err := b.hub.Grants(ctx, user)
		if err != nil {
			return fail("read your permissions", err)
		}
		if len(grants) == 0 {
			return "You have no stored permissions: I will ask before any app runs or sees your data."
		}
		var s strings.Builder
		s.WriteString("Your stored permissions:\n\n")
		for _, g := range grants {
			fmt.Fprintf(&s, "- %s %s: %s (since %s)\n", g.Category, code(g.Subject), g.Duration, g.Created.UTC().Format(time.DateTime+" MST"))
		}
		fmt.Fprintf(&s, "\nRemove them with %s.", code(prefix+cmdRevoke+" APP|all"))
		return s.String()
	case cmdRevoke:
		app, ok := parseRevoke(args)
		if !ok {
			return fmt.Sprintf("Usage: %s", code(prefix+cmdRevoke+" APP|all"))
		}
		n, err := b.hub.Revoke(ctx, user, app)
		if err != nil {
			return fail("remove your permissions", err)
		}
		return revokedWords(n, app)
	case cmdForget:
		// The bot's rows first: the hub's erasure ends by clearing the
		// database's write-ahead log, which then holds neither.
		if err := b.db.forget(ctx, row.UserID); err != nil {
			return fail("erase your messages", err)
		}
		if err := b.hub.Forget(ctx, user); err != nil {
			return fail("erase your memory", err)
		}
		return "I have forgotten our conversations, and every app has forgotten what it kept about you."
	case cmdReset:
		if err := b.hub.Reset(ctx, user); err != nil {
			return fail("end your session", err)
		}
		return "Your session has ended: \"this session\" permissions are gone and your apps have stopped."
	case cmdAudit:
		entries, err := b.hub.Audit(ctx, user, b.opts.AuditEntries)
		if err != nil {
			return fail("read your decisions", err)
		}
		if len(entries) == 0 {
			return "No permission decisions yet."
		}
		var s strings.Builder
		s.WriteString("Your latest permission decisions, newest first:\n\n")
		for _, e := range entries {
			fmt.Fprintf(&s, "- %s %s %s: %s (%s)\n", e.Time.UTC().Format(time.DateTime+" MST"), e.Category, code(e.Subject), e.Decision, e.Source)
		}
		return s.String()
	case cmdUsage:
		rep, err := b.hub.Usage(ctx, user)
		if err != nil {
			return fail("read your usage", err)
		}
		return usageText(rep, time.Now())
	}
	return helpText(prefix)
}

// appsText lists the installed apps. Descriptions are the vendors' words,
// untrusted: they are shown as code.
func appsText(specs []apps.Spec) string {
	if len(specs) == 0 {
		return "No apps are installed."
	}
	var s strings.Builder
	s.WriteString("Installed apps, each run in its own sandboxed process:\n")
	for _, a := range specs {
		egress := "none"
		if len(a.Egress) > 0 {
			egress = strings.Join(a.Egress, ", ")
		}
		var fns []string
		for _, f := range a.Functions {
			fns = append(fns, f.Name)
		}
		fmt.Fprintf(&s, "\n**%s** %s: sandbox profile %s, network: %s, functions: %s\n",
			code(a.Name), code(a.Version), code(string(a.Profile)), code(egress), code(strings.Join(fns, ", ")))
		s.WriteString(codeBlock(oneLine(a.Description, 600)))
	}
	return s.String()
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

// revokedWords says what !revoke removed: n permissions for app, or of
// all apps for "".
func revokedWords(n int, app string) string {
	switch {
	case n == 0 && app == "":
		return "You had no stored permissions, so there was nothing to remove."
	case n == 0:
		return fmt.Sprintf("You had no stored permissions for %s, so there was nothing to remove.", code(app))
	case app == "" && n == 1:
		return "Removed your one stored permission. I will ask again next time."
	case app == "":
		return fmt.Sprintf("Removed all %d of your stored permissions. I will ask again next time.", n)
	}
	return fmt.Sprintf("Removed %d stored permission%s for %s. I will ask again next time.", n, plural(n), code(app))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
