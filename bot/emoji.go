package bot

import (
	"slices"
	"strings"
	"unicode"

	"github.com/secgpt/secgpt/hub"
)

// choice is one answer a consent prompt offers: the reaction the bot seeds,
// the words it accepts in a reply, and how the outcome is told.
type choice struct {
	Decision hub.Decision
	// Emoji is seeded as a reaction on the prompt; empty for answers that are
	// accepted but not seeded.
	Emoji string
	Word  string
	// Legend is how the prompt names the choice; Outcome how the edited
	// prompt tells the decision.
	Legend  string
	Outcome string
}

// choices lists every answer in the order prompts show them. The issue
// fixes the four seeded reactions; "never" (a stored denial, which the hub
// offers for requests in the plan) is accepted by reply or 🚫 but not seeded.
var choices = []choice{
	{hub.DecisionOnce, "✅", "once", "once", "✅ Allowed once"},
	{hub.DecisionSession, "🔁", "session", "this session", "🔁 Allowed for this session"},
	{hub.DecisionAlways, "♾️", "always", "always", "♾️ Always allowed"},
	{hub.DecisionDeny, "❌", "deny", "deny", "❌ Denied"},
	{hub.DecisionNever, "", "never", "never", "🚫 Denied, and not to be asked again"},
}

// reactionAliases are further reaction keys accepted as answers, normalised.
var reactionAliases = map[string]hub.Decision{
	"👍": hub.DecisionOnce,
	"👎": hub.DecisionDeny,
	"🚫": hub.DecisionNever,
}

// normaliseKey strips what clients add to an emoji without changing its
// meaning: the variation selectors U+FE0E and U+FE0F and the skin-tone
// modifiers U+1F3FB to U+1F3FF. Surrounding white space goes too.
func normaliseKey(key string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\uFE0E', r == '\uFE0F', r >= 0x1F3FB && r <= 0x1F3FF:
			return -1
		}
		return r
	}, strings.TrimSpace(key))
}

// reactionDecision maps a reaction key to the answer it gives, if any.
func reactionDecision(key string) (hub.Decision, bool) {
	k := normaliseKey(key)
	if k == "" {
		return "", false
	}
	for _, c := range choices {
		if c.Emoji != "" && normaliseKey(c.Emoji) == k {
			return c.Decision, true
		}
	}
	d, ok := reactionAliases[k]
	return d, ok
}

// wordDecision maps a reply's text to the answer it gives, if the whole
// text is one answer word (any case, surrounding white space and a final
// full stop or exclamation mark ignored).
func wordDecision(text string) (hub.Decision, bool) {
	w := strings.ToLower(strings.TrimSpace(text))
	w = strings.TrimRight(w, ".!")
	for _, c := range choices {
		if w == c.Word {
			return c.Decision, true
		}
	}
	return "", false
}

func choiceFor(d hub.Decision) (choice, bool) {
	for _, c := range choices {
		if c.Decision == d {
			return c, true
		}
	}
	return choice{}, false
}

// refusalWords may start a reply refusing apps by name ("no quick_ride").
var refusalWords = []string{"deny", "no", "not", "refuse", "except", "without", "skip"}

// refusalApps reads a reply that names apps to refuse: app names,
// separated by white space, commas or "and", optionally after a word of
// refusal. It returns nil for a text that names nothing; whether the names
// are apps of the prompt is the prompt's to say.
func refusalApps(text string) []string {
	words := strings.FieldsFunc(strings.TrimRight(strings.TrimSpace(text), ".!"), func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	if len(words) > 0 && slices.Contains(refusalWords, strings.ToLower(words[0])) {
		words = words[1:]
	}
	var apps []string
	for _, w := range words {
		if strings.EqualFold(w, "and") {
			continue
		}
		apps = append(apps, w)
	}
	return apps
}
