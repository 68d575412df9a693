package bot

import (
	"strings"
	"testing"
	"time"

	"github.com/secgpt/secgpt/hub"
	"github.com/secgpt/secgpt/store"
)

func TestUsageText(t *testing.T) {
	now := time.Date(2026, 11, 28, 20, 30, 0, 0, time.UTC)
	rep := hub.UsageReport{
		Day: "2026-11-28",
		Apps: []store.Usage{
			{App: "", Calls: 3, PromptTokens: 1200, CompletionTokens: 34},
			{App: "notes", Calls: 2, PromptTokens: 262000, CompletionTokens: 403, Estimated: 1000, HubTime: 1500 * time.Microsecond},
		},
		Tokens:         263637,
		Data:           map[string]store.DataUsage{"notes": {Bytes: 16588800, Docs: 81}},
		Budgets:        hub.Budgets{TokensPerQuery: 250000, TokensPerUserDay: 2000000, TokensPerAppDay: 1000000, DataBytes: 16 << 20, DataDocs: 10000},
		Resets:         time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC),
		HubTimePerStep: 2 * time.Second,
	}
	got := usageText(rep, now)
	for _, want := range []string{
		"Your use today (2026-11-28, UTC)",
		"- the assistant (planning, and answers without apps): 1,234 tokens in 3 model calls\n",
		"- `notes`: 262,403 tokens in 2 model calls (1,000 of them estimated from bytes), of 1,000,000 a day for this app; the hub's time serving it: 2ms\n",
		"In all: 263,637 of your 2,000,000 tokens a day. At most 250,000 tokens for one request.",
		"start again at 00:00 UTC, in 3h30m0s",
		"more than 2s in one step",
		"each may keep 16,777,216 bytes in 10,000 documents for you",
		"- `notes`: 16,588,800 bytes in 81 documents",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("usage text lacks %q:\n%s", want, got)
		}
	}
	if got := usageText(hub.UsageReport{Day: "2026-11-28", Resets: rep.Resets}, now); !strings.Contains(got, "no model calls yet") || !strings.Contains(got, "none.") {
		t.Errorf("empty usage text:\n%s", got)
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}
