package hub

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/secgpt/secgpt/apps"
)

// namedApps returns the installed apps the query names. A name counts as a
// whole word, compared case-insensitively, where a word is a run of
// letters, digits and underscores, the characters app names are made of:
// "metro_hail's" and "Use EMAIL." name metro_hail and email; "emails" and
// "metro_hailing" name nothing.
func (c *catalog) namedApps(query string) map[string]bool {
	named := map[string]bool{}
	words := strings.FieldsFunc(strings.ToLower(query), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_'
	})
	for _, w := range words {
		if _, ok := c.specs[w]; ok {
			named[w] = true
		}
	}
	return named
}

// soleAnnotation returns the app of a request that names exactly one
// installed app, an annotation app.
func (c *catalog) soleAnnotation(named map[string]bool) (string, bool) {
	if len(named) != 1 {
		return "", false
	}
	for app := range named {
		if spec, ok := c.spec(app); ok && spec.IsAnnotation() {
			return app, true
		}
	}
	return "", false
}

// notNamed is why a step of an app the user did not name was dropped.
const notNamed = "your message named other apps"

// followNamedApps enforces the user's explicit choice of apps (DESIGN §9):
// when the query names installed apps, steps of any other app are dropped,
// and so is every step that waits on a dropped one. The planner is shown
// only the named apps, so such a step is a planner's error; this check
// does not depend on that.
func followNamedApps(p Plan, named map[string]bool) (Plan, []DroppedStep) {
	if len(named) == 0 {
		return p, nil
	}
	gone := map[string]string{}
	for changed := true; changed; {
		changed = false
		for _, s := range p.Steps {
			if gone[s.ID] != "" {
				continue
			}
			if !named[s.App] {
				gone[s.ID], changed = notNamed, true
				continue
			}
			for _, d := range s.deps() {
				if gone[d] != "" {
					gone[s.ID], changed = "it waits for a step that does not run", true
					break
				}
			}
		}
	}
	kept := Plan{Steps: []PlanStep{}}
	var dropped []DroppedStep
	for _, s := range p.Steps {
		if gone[s.ID] != "" {
			dropped = append(dropped, DroppedStep{PlanStep: s, Reason: gone[s.ID]})
		} else {
			kept.Steps = append(kept.Steps, s)
		}
	}
	return kept, dropped
}

// planNotes are the hub's notes on the plan: each step that did not run
// and why, and each app the user named that the plan does not use (the
// user must never get a no-app answer in silence after naming an app).
// They name apps and functions only by installed names.
func planNotes(p Plan, dropped []DroppedStep, named map[string]bool) []Note {
	var notes []Note
	for _, d := range dropped {
		notes = append(notes, Note{Text: fmt.Sprintf("%s was not run: %s", stepLabel(d.PlanStep), d.Reason)})
	}
	planned := map[string]bool{} // or explained by a note above
	for _, s := range p.Steps {
		planned[s.App] = true
	}
	for _, d := range dropped {
		planned[d.App] = true
	}
	for _, app := range sortedKeys(named) {
		if !planned[app] {
			notes = append(notes, Note{Text: fmt.Sprintf("you named %s, but the plan for your request does not use it", app)})
		}
	}
	return notes
}

// stepLabel names a step by its app and function when both are installed
// names, and vaguely otherwise: the planner wrote them.
func stepLabel(s PlanStep) string {
	if apps.ValidName(s.App) && apps.ValidName(s.Function) {
		return fmt.Sprintf("a step of %s (%s)", s.App, s.Function)
	}
	return "a step for an app that is not installed"
}
