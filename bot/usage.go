package bot

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/secgpt/secgpt/hub"
)

// usageText is !usage's answer: today's model tokens per app, the apps'
// stored data, and the limits with when the daily ones reset.
func usageText(rep hub.UsageReport, now time.Time) string {
	var s strings.Builder
	b := rep.Budgets
	fmt.Fprintf(&s, "Your use today (%s, UTC):\n\n", rep.Day)
	if len(rep.Apps) == 0 {
		s.WriteString("- no model calls yet\n")
	}
	for _, u := range rep.Apps {
		who := "the assistant (planning, and answers without apps)"
		if u.App != "" {
			who = code(u.App)
		}
		fmt.Fprintf(&s, "- %s: %s tokens in %d model call%s", who, count(u.Tokens()), u.Calls, plural(int(u.Calls)))
		if u.Estimated > 0 {
			fmt.Fprintf(&s, " (%s of them estimated from bytes)", count(u.Estimated))
		}
		if u.App != "" {
			fmt.Fprintf(&s, ", of %s a day for this app", count(b.TokensPerAppDay))
		}
		if u.HubTime > 0 {
			fmt.Fprintf(&s, "; the hub's time serving it: %v", u.HubTime.Round(time.Millisecond))
		}
		s.WriteString("\n")
	}
	fmt.Fprintf(&s, "\nIn all: %s of your %s tokens a day. At most %s tokens for one request.",
		count(rep.Tokens), count(b.TokensPerUserDay), count(b.TokensPerQuery))
	fmt.Fprintf(&s, " The daily budgets start again at %s, in %s.", rep.Resets.UTC().Format("15:04 MST"), rep.Resets.Sub(now).Round(time.Minute))
	if rep.HubTimePerStep > 0 {
		fmt.Fprintf(&s, " An app that keeps me busy for more than %v in one step is stopped.", rep.HubTimePerStep)
	}
	s.WriteString("\n\nYour apps' stored data")
	fmt.Fprintf(&s, " (each may keep %s bytes in %s documents for you):", count(b.DataBytes), count(b.DataDocs))
	if len(rep.Data) == 0 {
		s.WriteString(" none.")
	}
	names := make([]string, 0, len(rep.Data))
	for app := range rep.Data {
		names = append(names, app)
	}
	sort.Strings(names)
	for _, app := range names {
		d := rep.Data[app]
		fmt.Fprintf(&s, "\n- %s: %s bytes in %s document%s", code(app), count(d.Bytes), count(d.Docs), plural(int(d.Docs)))
	}
	return s.String()
}

// count writes n with thousands separated: 1,234,567.
func count(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + count(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
