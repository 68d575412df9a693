package bench

import (
	"fmt"
	"strings"

	"github.com/secgpt/secgpt/apps/benchapps"
)

// Category is a kind of query, as in the paper's Table IV.
type Category string

// The paper's four categories, and annotation apps beside them.
const (
	Single     Category = "single app"
	Multi      Category = "2-13 apps"
	Chain      Category = "chain of 2-5"
	NoApp      Category = "no app"
	Annotation Category = "annotation"
)

// Categories are the categories in the order they are reported.
var Categories = []Category{Single, Multi, Chain, NoApp, Annotation}

// PaperMix is how many of the paper's 103 queries each category had: the
// weights of the overall figures "weighted to the paper's mix". Annotation
// apps were not among them.
var PaperMix = map[Category]float64{Single: 20, Multi: 20, Chain: 21, NoApp: 42}

// Query is one benchmark query and what a capable model does with it.
type Query struct {
	Category Category `json:"category"`
	Text     string   `json:"query"`
	// Steps are the plan a capable planner writes for it; none when no app
	// is needed. In vanilla mode the model makes the same calls, each as
	// soon as the results it needs are in.
	Steps []Step `json:"steps,omitempty"`
}

// Apps is how many apps the query uses.
func (q Query) Apps() int { return len(q.Steps) }

// Step is one step of a query's plan.
type Step struct {
	ID       string         `json:"id"`
	App      string         `json:"app"`
	Function string         `json:"function"`
	Args     map[string]any `json:"args"`
	// InputsFrom fills arguments from earlier steps' results, as in the
	// hub's plans: argument → "stepID.field".
	InputsFrom map[string]string `json:"inputs_from,omitempty"`
}

// Installed are the apps every benchmark system has, 23 as in the paper's
// runs: the benchmark's own and four built-in apps.
func Installed() []string {
	out := []string{benchapps.Typewriter}
	for i := range len(benchapps.Keys) {
		out = append(out, benchapps.KeyApp(benchapps.Keys[i]))
	}
	out = append(out, benchapps.Chain...)
	return append(out, "metro_hail", "quick_ride", "creative_muse", "symptom_solver")
}

// Queries returns the benchmark's queries, at most perCategory of each
// category (all when perCategory ≤ 0), spread over each category's range.
func Queries(perCategory int) []Query {
	var out []Query
	for _, c := range Categories {
		all := queriesOf(c)
		n := len(all)
		if perCategory > 0 && perCategory < n {
			n = perCategory
		}
		for i := range n {
			// Evenly spread, so a short run still spans the category.
			out = append(out, all[i*len(all)/n])
		}
	}
	return out
}

// Texts the queries type, from LangChain's Typewriter benchmark's kind.
var texts = []string{
	"the quick brown fox", "hello world", "a stitch in time", "jumped over the lazy dog",
	"make hay while the sun shines", "all that glitters", "blackbird singing", "keep calm and carry on",
	"dig deep", "eleven eggs", "many hands make light work", "a bird in the hand",
}

func queriesOf(c Category) []Query {
	var out []Query
	switch c {
	case Single:
		for i := range 10 {
			text := texts[i]
			out = append(out, Query{Category: c, Text: fmt.Sprintf("Use bench_typewriter to type '%s'.", text),
				Steps: []Step{{ID: "s1", App: benchapps.Typewriter, Function: "type_text", Args: map[string]any{"text": text}}}})
		}
	case Multi:
		// As in the paper: few with under 3 apps, most with 3 to 10, some
		// with 10 to 13.
		for i, n := range []int{2, 3, 4, 5, 5, 6, 8, 10, 12, 13} {
			text := texts[i]
			var names []string
			var steps []Step
			for k := range n {
				app := benchapps.KeyApp(benchapps.Keys[k])
				names = append(names, app)
				steps = append(steps, Step{ID: fmt.Sprintf("s%d", k+1), App: app, Function: "press", Args: map[string]any{"text": text}})
			}
			out = append(out, Query{Category: c, Text: fmt.Sprintf("Type '%s' with %s.", text, joinNames(names)), Steps: steps})
		}
	case Chain:
		people := []string{"Alice", "Bob", "Chen", "Dana", "Emeka", "Fatima", "Goran", "Hana", "Ivo", "Jun"}
		for i, n := range []int{2, 2, 2, 2, 3, 3, 4, 4, 5, 5} {
			out = append(out, chainQuery(people[i], n))
		}
	case NoApp:
		for _, e := range emails {
			out = append(out, Query{Category: c, Text: fmt.Sprintf("From this email, extract the sender's name, the date and the %s: \"%s\"", e.field, e.body)})
		}
	case Annotation:
		for _, q := range []struct{ app, text string }{
			{"creative_muse", "Use creative_muse to tell me about a lighthouse keeper who collects storms."},
			{"symptom_solver", "Use symptom_solver: I have a headache that comes every afternoon."},
			{"creative_muse", "Use creative_muse to describe a city built on the back of a whale."},
			{"symptom_solver", "Use symptom_solver: I have had a dry cough for a week."},
		} {
			out = append(out, Query{Category: c, Text: q.text,
				Steps: []Step{{ID: "s1", App: q.app, Function: "respond", Args: map[string]any{}}}})
		}
	}
	return out
}

// chainQuery follows one person through the first n relational apps.
func chainQuery(person string, n int) Query {
	phrases := []string{
		"Find %s in bench_people",
		"then their account in bench_accounts",
		"then the account's last order in bench_orders",
		"then that order's shipment in bench_shipping",
		"then rate its carrier with bench_carriers",
	}
	keys := []string{"", "person_id", "account_id", "order_id", "carrier"}
	functions := []string{"find_person", "account_of", "last_order", "shipment_of", "carrier_rating"}
	var parts []string
	var steps []Step
	for k := range n {
		s := Step{ID: fmt.Sprintf("s%d", k+1), App: benchapps.Chain[k], Function: functions[k], Args: map[string]any{}}
		if k == 0 {
			s.Args["name"] = person
			parts = append(parts, fmt.Sprintf(phrases[0], "'"+person+"'"))
		} else {
			s.InputsFrom = map[string]string{keys[k]: fmt.Sprintf("s%d.%s", k, keys[k])}
			parts = append(parts, phrases[k])
		}
		steps = append(steps, s)
	}
	return Query{Category: Chain, Text: strings.Join(parts, ", ") + ".", Steps: steps}
}

func joinNames(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// emails are the no-app queries' texts, of the kind of LangChain's Email
// Extraction benchmark (structured extraction from an email, no app).
var emails = []struct{ field, body string }{
	{"meeting room", "Hi all, the quarterly review moves to Thursday 14 March, 10:00, in room Ada. Best, Priya Natarajan"},
	{"invoice number", "Dear customer, invoice INV-20931 of 2 April is due in 30 days. Kind regards, Tomasz Wojcik, Billing"},
	{"flight number", "Your booking is confirmed: flight LX 318 on 9 May from Zurich to London. Safe travels, Swiss Air desk (Anna Keller)"},
	{"order total", "Thanks for your order of 21 June! Your total was 48.90 EUR and ships tomorrow. - Lena from the shop"},
	{"venue", "Save the date: our reunion is on 3 August at the Old Mill, Dorset. Cheers, Marcus Hale"},
	{"deadline", "Reminder from Jo Park: the grant report is due Friday 11 October at noon. Please send drafts by Wednesday."},
	{"ticket number", "Support ticket #55812 opened on 1 February has been resolved. Regards, Kwame Mensah, Helpdesk"},
	{"appointment time", "Dr. Elena Rossi's office confirms your appointment on 27 November at 15:30. Bring your insurance card."},
	{"package weight", "Shipment of 15 January: one package, 2.4 kg, tracking 7731-99. Sender: Omar Haddad"},
	{"budget", "Hello team, for the 5 September launch we have a budget of 12,000 USD. Thanks, Sofia Martins"},
}
