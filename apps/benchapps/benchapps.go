// Package benchapps holds the apps of `secgpt bench`, each named bench_…:
// stand-ins for the apps of the paper's performance benchmarks (IsolateGPT,
// NDSS 2025, Table IV), which came from LangChain's:
//
//   - bench_typewriter types a text (Typewriter, single tool);
//   - bench_key_a … bench_key_m each type their letter of a text
//     (Typewriter, one tool per letter: a query uses up to 13);
//   - bench_people, bench_accounts, bench_orders, bench_shipping and
//     bench_carriers answer over a small relational database, each from a
//     key the one before it returns (Relational Data: chains of 2 to 5).
//
// Their results are typed and computed from their arguments, with no
// storage and no network, so that a benchmark measures the system around
// them. They register only when Register is called, which only the
// benchmark does (and a spoke child, which hosts only the app its hub
// names): no configuration can install them.
package benchapps

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"

	"github.com/secgpt/secgpt/apps"
)

// Keys are the letters that have a key app, bench_key_a to bench_key_m.
const Keys = "abcdefghijklm"

// Chain is the relational apps in the order each takes the key the one
// before returns: a chain of n links uses the first n.
var Chain = []string{"bench_people", "bench_accounts", "bench_orders", "bench_shipping", "bench_carriers"}

// Carriers are the shipping carriers, a small enum: a carrier crosses from
// bench_shipping to bench_carriers as a typed value.
var Carriers = []string{"northwind", "harbor", "summit", "lakeside"}

// Typewriter and the others name the apps.
const Typewriter = "bench_typewriter"

// KeyApp names the key app of a letter in Keys.
func KeyApp(letter byte) string { return "bench_key_" + string(letter) }

var register sync.Once

// Register adds the benchmark apps to the built-in apps, once. Their specs
// are made when one of them is first looked up: every spoke process
// registers them, and only the benchmark's spokes host them.
func Register() {
	register.Do(func() {
		made := sync.OnceValue(makeApps)
		for _, name := range names() {
			apps.RegisterLazy(name, func() apps.App { return made()[name] })
		}
	})
}

// names are the benchmark apps' names.
func names() []string {
	names := []string{Typewriter}
	for i := range len(Keys) {
		names = append(names, KeyApp(Keys[i]))
	}
	return append(names, Chain...)
}

// makeApps makes every benchmark app, by name.
func makeApps() map[string]apps.App {
	out := map[string]apps.App{}
	add := func(a *app) { out[a.spec.Name] = a }
	add(newApp(Typewriter, "bench_typewriter types a text and counts what it typed.", function{
		name: "type_text", doc: "Types the text.",
		request:  object(prop("text", `{"type":"string","minLength":1,"maxLength":500}`)),
		response: object(prop("characters", count), prop("words", count)),
		run: func(in map[string]any) map[string]any {
			text := in["text"].(string)
			return map[string]any{"characters": len([]rune(text)), "words": len(strings.Fields(text))}
		},
	}))
	for i := range len(Keys) {
		letter := Keys[i]
		add(newApp(KeyApp(letter), fmt.Sprintf("%s types the letter %q wherever a text has it.", KeyApp(letter), letter), function{
			name: "press", doc: fmt.Sprintf("Types every %q of the text.", letter),
			request:  object(prop("text", `{"type":"string","minLength":1,"maxLength":500}`)),
			response: object(prop("pressed", count)),
			run: func(in map[string]any) map[string]any {
				return map[string]any{"pressed": strings.Count(strings.ToLower(in["text"].(string)), string(letter))}
			},
		}))
	}
	carrier := fmt.Sprintf(`{"type":"string","enum":%s}`, mustJSON(Carriers))
	chain := []struct {
		app, doc, fn string
		request      string
		response     []string
		run          func(map[string]any) map[string]any
	}{
		{Chain[0], "bench_people finds a person in the directory.", "find_person",
			object(prop("name", `{"type":"string","minLength":1,"maxLength":100}`)),
			[]string{prop("person_id", id), prop("age", `{"type":"integer","minimum":18,"maximum":99}`)},
			func(in map[string]any) map[string]any {
				n := digest(in["name"])
				return map[string]any{"person_id": n % 100000, "age": 18 + n%80}
			}},
		{Chain[1], "bench_accounts holds each person's account.", "account_of",
			object(prop("person_id", id)),
			[]string{prop("account_id", id), prop("balance", `{"type":"number","minimum":0,"maximum":1000000}`)},
			func(in map[string]any) map[string]any {
				n := digest(in["person_id"])
				return map[string]any{"account_id": n % 100000, "balance": float64(n%100000) / 10}
			}},
		{Chain[2], "bench_orders lists an account's orders.", "last_order",
			object(prop("account_id", id)),
			[]string{prop("order_id", id), prop("total", `{"type":"number","minimum":0,"maximum":100000}`)},
			func(in map[string]any) map[string]any {
				n := digest(in["account_id"])
				return map[string]any{"order_id": n % 100000, "total": float64(n%50000) / 10}
			}},
		{Chain[3], "bench_shipping tracks an order's shipment.", "shipment_of",
			object(prop("order_id", id)),
			[]string{prop("carrier", carrier), prop("days", `{"type":"integer","minimum":1,"maximum":30}`)},
			func(in map[string]any) map[string]any {
				n := digest(in["order_id"])
				return map[string]any{"carrier": Carriers[n%uint32(len(Carriers))], "days": 1 + n%30}
			}},
		{Chain[4], "bench_carriers rates shipping carriers.", "carrier_rating",
			object(prop("carrier", carrier)),
			[]string{prop("rating", `{"type":"number","minimum":0,"maximum":5}`), prop("on_time_percent", `{"type":"integer","minimum":0,"maximum":100}`)},
			func(in map[string]any) map[string]any {
				n := digest(in["carrier"])
				return map[string]any{"rating": float64(n%50) / 10, "on_time_percent": n % 101}
			}},
	}
	for _, c := range chain {
		add(newApp(c.app, c.doc, function{name: c.fn, doc: c.doc, request: c.request, response: object(c.response...), run: c.run}))
	}
	return out
}

// Schema pieces.
const (
	count = `{"type":"integer","minimum":0,"maximum":100000}`
	id    = `{"type":"integer","minimum":0,"maximum":99999}`
)

func prop(name, schema string) string { return fmt.Sprintf("%q:%s", name, schema) }

// object is a closed object schema of the properties, all required.
func object(props ...string) string {
	names := make([]string, len(props))
	for i, p := range props {
		names[i] = p[:strings.Index(p, ":")]
	}
	return fmt.Sprintf(`{"type":"object","properties":{%s},"required":[%s],"additionalProperties":false}`,
		strings.Join(props, ","), strings.Join(names, ","))
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("benchapps: %v", err))
	}
	return string(b)
}

// digest is a stable number from a value, so that results are the same
// in every run and in both modes.
func digest(v any) uint32 {
	h := fnv.New32a()
	fmt.Fprint(h, v)
	return h.Sum32()
}

// function is one function of a benchmark app.
type function struct {
	name, doc         string
	request, response string
	run               func(args map[string]any) map[string]any
}

type app struct {
	spec apps.Spec
	fn   function
}

var _ apps.App = (*app)(nil)

func newApp(name, description string, fn function) *app {
	return &app{fn: fn, spec: apps.Spec{
		Name: name, Version: "1.0.0", Description: description, Profile: apps.ProfileStrict,
		Functions: []apps.Function{{Name: fn.name, Description: fn.doc, Request: json.RawMessage(fn.request), Response: json.RawMessage(fn.response)}},
	}}
}

func (a *app) Spec() apps.Spec { return a.spec }

// Call runs the app's function on arguments its schema accepts.
func (a *app) Call(_ context.Context, _ apps.Env, function string, args json.RawMessage) (json.RawMessage, error) {
	if function != a.fn.name {
		return nil, fmt.Errorf("%s has no function %q", a.spec.Name, function)
	}
	if err := apps.ValidateDocument(a.spec.Functions[0].Request, args); err != nil {
		return nil, fmt.Errorf("invalid arguments: %w", err)
	}
	var in map[string]any
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, fmt.Errorf("invalid arguments: %w", err)
	}
	out, err := json.Marshal(a.fn.run(in))
	if err != nil {
		return nil, fmt.Errorf("failed to encode the result: %w", err)
	}
	return out, nil
}
