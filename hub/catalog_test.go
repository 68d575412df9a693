package hub

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/apps"
	_ "github.com/secgpt/secgpt/apps/annotation"
	"github.com/secgpt/secgpt/apps/benchapps"
	_ "github.com/secgpt/secgpt/apps/ride"
)

// benchCatalog is the catalogue of the 23 apps `secgpt bench` installs.
func benchCatalog(t *testing.T) *catalog {
	t.Helper()
	benchapps.Register()
	names := []string{benchapps.Typewriter}
	for i := range len(benchapps.Keys) {
		names = append(names, benchapps.KeyApp(benchapps.Keys[i]))
	}
	names = append(append(names, benchapps.Chain...), "metro_hail", "quick_ride", "creative_muse", "symptom_solver")
	var specs []apps.Spec
	for _, n := range names {
		a, ok := apps.Lookup(n)
		if !ok {
			t.Fatalf("app %s is not built in", n)
		}
		specs = append(specs, a.Spec())
	}
	c, err := newCatalog(specs)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPlanSchemaEachSchemaOnce: with the 23 apps of `secgpt bench`, the
// plan's response schema writes each schema once (no subschema larger
// than a reference twice), every reference resolves, and every function
// of every app can be planned from it. Before, 10,386 bytes, with the
// step's boilerplate and the same arguments repeated in 26 branches.
func TestPlanSchemaEachSchemaOnce(t *testing.T) {
	c := benchCatalog(t)
	pc, err := c.planCatalogue(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan schema: %d bytes", len(pc.schema))
	if len(pc.schema) > 4500 {
		t.Errorf("plan schema of %d bytes, want at most 4,500", len(pc.schema))
	}
	var root map[string]any
	if err := json.Unmarshal(pc.schema, &root); err != nil {
		t.Fatal(err)
	}
	defs, _ := root["$defs"].(map[string]any)
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				if _, ok := defs[strings.TrimPrefix(ref, "#/$defs/")]; !ok || !strings.HasPrefix(ref, "#/$defs/") {
					t.Errorf("dangling reference %s", ref)
				}
			}
			for _, sub := range x {
				walk(sub)
			}
		case []any:
			for _, sub := range x {
				walk(sub)
			}
		}
	}
	walk(root)
	// A step's arguments and its boilerplate are written once each.
	items := root["properties"].(map[string]any)["steps"].(map[string]any)["items"].(map[string]any)
	seen := map[string]int{}
	for _, b := range items["anyOf"].([]any) {
		props := b.(map[string]any)["properties"].(map[string]any)
		for _, p := range []string{"args", "depends_on", "inputs_from"} {
			if _, ref := props[p].(map[string]any)["$ref"]; !ref {
				b, _ := json.Marshal(props[p])
				seen[string(b)]++
			}
		}
	}
	for s, n := range seen {
		if n > 1 {
			t.Errorf("written %d times: %s", n, s)
		}
	}
	// Every function of every app is a step the schema allows.
	plannable := map[string]bool{}
	for _, b := range items["anyOf"].([]any) {
		props := b.(map[string]any)["properties"].(map[string]any)
		fn := props["function"].(map[string]any)["const"].(string)
		app := props["app"].(map[string]any)
		names, _ := app["enum"].([]any)
		if c, ok := app["const"]; ok {
			names = []any{c}
		}
		for _, n := range names {
			plannable[n.(string)+"."+fn] = true
		}
	}
	for _, name := range c.names {
		for _, f := range c.specs[name].Functions {
			if !plannable[name+"."+f.Name] {
				t.Errorf("%s.%s cannot be planned", name, f.Name)
			}
		}
	}
}

// TestPlanSchemaHoistsDefinitions: a signature's own definitions move to
// the plan's root, renamed per function, so its references resolve there;
// a reference to nothing makes the arguments an open object.
func TestPlanSchemaHoistsDefinitions(t *testing.T) {
	tests := []struct {
		name, request, wantArgs, wantDefs string
	}{
		{
			name:     "definitions move, references follow",
			request:  `{"type":"object","properties":{"to":{"$ref":"#/$defs/place"},"from":{"$ref":"#/definitions/place"}},"$defs":{"place":{"type":"string","description":"where"}},"definitions":{"place":{"type":"string","maxLength":9}}}`,
			wantArgs: `{"type":"object","properties":{"to":{"$ref":"#/$defs/trip.go.place"},"from":{"$ref":"#/$defs/trip.go.place"}}}`,
		},
		{
			name:     "a reference to nothing",
			request:  `{"type":"object","properties":{"to":{"$ref":"#/$defs/nowhere"}}}`,
			wantArgs: `{"type":"object"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defs := &ordered{}
			got := hoistDefs(signature(json.RawMessage(tt.request)), "trip.go", defs)
			if tt.name == "definitions move, references follow" {
				// Both keywords name "place": the second one moved wins; both are strings.
				if _, ok := defs.vals["trip.go.place"]; !ok || len(defs.keys) != 1 {
					t.Fatalf("defs = %v, want trip.go.place", defs.keys)
				}
			}
			if string(got) != tt.wantArgs {
				t.Fatalf("args = %s, want %s", got, tt.wantArgs)
			}
		})
	}
}
