package all_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/secgpt/secgpt/apps"
	_ "github.com/secgpt/secgpt/apps/all"
	"github.com/secgpt/secgpt/apps/appstest"
	"github.com/secgpt/secgpt/hub/egress"
)

// wantTools is every built-in tool name, as models see them.
var wantTools = []string{
	"creative_muse__respond",
	"drive__search_files",
	"email__read_email",
	"email__search_email",
	"email__send_email",
	"email__delete_email",
	"health_companion__book_appointment",
	"metro_hail__estimate_fare",
	"quick_ride__estimate_fare",
	"symptom_solver__respond",
	"travel_mate__book_flight",
	"weather__current_weather",
}

func TestBuiltinTools(t *testing.T) {
	var got []string
	seen := map[string]bool{}
	for _, a := range apps.Builtin() {
		for _, f := range a.Spec().Functions {
			tool := apps.ToolName(a.Spec().Name, f.Name)
			if seen[tool] {
				t.Errorf("tool %s declared twice", tool)
			}
			seen[tool] = true
			got = append(got, tool)
		}
	}
	if !reflect.DeepEqual(got, wantTools) {
		t.Errorf("tools = %v\nwant    %v", got, wantTools)
	}
}

func TestBuiltinSpecs(t *testing.T) {
	for _, a := range apps.Builtin() {
		spec := a.Spec()
		t.Run(spec.Name, func(t *testing.T) {
			if err := spec.Validate(); err != nil {
				t.Fatal(err)
			}
			if spec.Version != "1.0.0" || spec.Profile != apps.ProfileStrict || spec.Identity != "" {
				t.Errorf("version %q profile %q identity %q; want 1.0.0, strict, none", spec.Version, spec.Profile, spec.Identity)
			}
			// Egress is declared as registrable domains, which is all the
			// broker matches: anything else would silently match nothing.
			for _, d := range spec.Egress {
				if rd, err := egress.RegistrableDomain(d); err != nil || rd != d {
					t.Errorf("egress entry %q is not a registrable domain (%q, %v)", d, rd, err)
				}
			}
			if got, ok := apps.Lookup(spec.Name); !ok || got != a {
				t.Errorf("Lookup(%q) does not return the app", spec.Name)
			}
			for _, f := range spec.Functions {
				for what, schema := range map[string]json.RawMessage{"request": f.Request, "response": f.Response} {
					if err := apps.CheckSchema(schema); err != nil {
						t.Errorf("%s %s schema does not resolve: %v", f.Name, what, err)
					}
					var s map[string]any
					if err := json.Unmarshal(schema, &s); err != nil {
						t.Fatalf("%s %s schema: %v", f.Name, what, err)
					}
					if s["type"] != "object" {
						t.Errorf("%s %s schema is not an object schema", f.Name, what)
					}
					for _, problem := range unbounded(what, s) {
						t.Errorf("%s: %s", f.Name, problem)
					}
				}
			}
		})
	}
}

// unbounded lists the places where schema lets free or unlimited data
// through: an object open to extra properties or with an undeclared required
// property, a string with neither maxLength nor enum, an array without
// maxItems, a number without a range.
func unbounded(path string, schema map[string]any) []string {
	var out []string
	switch schema["type"] {
	case "object":
		if schema["additionalProperties"] != false {
			out = append(out, path+": object does not set additionalProperties false")
		}
		props, _ := schema["properties"].(map[string]any)
		if props == nil {
			out = append(out, path+": object declares no properties")
		}
		if req, ok := schema["required"].([]any); ok {
			for _, r := range req {
				if _, ok := props[fmt.Sprint(r)]; !ok {
					out = append(out, fmt.Sprintf("%s: required %v is not a property", path, r))
				}
			}
		}
		for name, p := range props {
			sub, _ := p.(map[string]any)
			out = append(out, unbounded(path+"."+name, sub)...)
		}
	case "string":
		if schema["maxLength"] == nil && schema["enum"] == nil {
			out = append(out, path+": string without maxLength or enum")
		}
	case "array":
		if schema["maxItems"] == nil {
			out = append(out, path+": array without maxItems")
		}
		items, _ := schema["items"].(map[string]any)
		out = append(out, unbounded(path+"[]", items)...)
	case "number", "integer":
		if schema["minimum"] == nil || schema["maximum"] == nil {
			out = append(out, path+": number without minimum and maximum")
		}
	default:
		out = append(out, fmt.Sprintf("%s: untyped or unexpected type %v", path, schema["type"]))
	}
	return out
}

func TestUnboundedFindsOpenSchemas(t *testing.T) {
	tests := []struct {
		name   string
		schema string
	}{
		{"open object", `{"type":"object","properties":{}}`},
		{"free string", `{"type":"object","properties":{"s":{"type":"string"}},"additionalProperties":false}`},
		{"unbounded array", `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string","maxLength":1}}},"additionalProperties":false}`},
		{"number without range", `{"type":"object","properties":{"n":{"type":"number","minimum":0}},"additionalProperties":false}`},
		{"untyped", `{"type":"object","properties":{"x":{}},"additionalProperties":false}`},
		{"required undeclared", `{"type":"object","properties":{},"required":["x"],"additionalProperties":false}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s map[string]any
			if err := json.Unmarshal([]byte(tt.schema), &s); err != nil {
				t.Fatal(err)
			}
			if len(unbounded("schema", s)) == 0 {
				t.Errorf("unbounded passed %s", tt.schema)
			}
		})
	}
}

func TestAnnotationApps(t *testing.T) {
	var names []string
	for _, a := range apps.Builtin() {
		spec := a.Spec()
		if !spec.IsAnnotation() {
			continue
		}
		names = append(names, spec.Name)
		if len(spec.Functions) != 1 || spec.Functions[0].Name != apps.AnnotationFunction {
			t.Errorf("%s: functions %v, want exactly %s", spec.Name, spec.Functions, apps.AnnotationFunction)
			continue
		}
		fn := spec.Functions[0]
		if err := apps.ValidateDocument(fn.Request, json.RawMessage(`{}`)); err != nil {
			t.Errorf("%s: request schema rejects {}: %v", spec.Name, err)
		}
		if err := apps.ValidateDocument(fn.Request, json.RawMessage(`{"query":"x"}`)); err == nil {
			t.Errorf("%s: request schema takes arguments", spec.Name)
		}
		if err := apps.ValidateDocument(fn.Response, json.RawMessage(`{"answer":"Rest and see a doctor."}`)); err != nil {
			t.Errorf("%s: response schema rejects an answer: %v", spec.Name, err)
		}
		if _, err := a.Call(context.Background(), appstest.NewEnv(), fn.Name, json.RawMessage(`{}`)); err == nil {
			t.Errorf("%s: Call succeeded; an annotation app has no code", spec.Name)
		}
	}
	if want := []string{"creative_muse", "symptom_solver"}; !reflect.DeepEqual(names, want) {
		t.Errorf("annotation apps = %v, want %v", names, want)
	}
}
