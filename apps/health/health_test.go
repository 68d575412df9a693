package health

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/apps/appstest"
)

// caseStudyArgs is the first query of the paper's inadvertent-data-exposure
// case study, as the planner would fill the function's arguments.
const caseStudyArgs = `{"name":"Michael Smith","date_of_birth":"May 20th, 1980",` +
	`"symptoms":"Recent heart surgery and ongoing issues with controlled hypertension, along with my severe asthma",` +
	`"date":"June 1st","city":"Irvine","email":"michael.smith@email.com"}`

func book(t *testing.T, env *appstest.Env, args string) map[string]any {
	t.Helper()
	fn, _ := healthCompanion.Spec().Function(bookFunction)
	if err := apps.ValidateDocument(fn.Request, json.RawMessage(args)); err != nil {
		t.Fatalf("example arguments do not validate: %v", err)
	}
	res, err := healthCompanion.Call(context.Background(), env, bookFunction, json.RawMessage(args))
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	if err := apps.ValidateDocument(fn.Response, res); err != nil {
		t.Fatalf("result %s does not validate against the response schema: %v", res, err)
	}
	var out map[string]any
	if err := json.Unmarshal(res, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBookAppointment(t *testing.T) {
	tests := []struct {
		name       string
		args       string
		wantDoctor string
		secrets    []string // stored, but never in the result
	}{
		{"case study", caseStudyArgs, "Dr. Amara Patel (cardiology)", []string{"May 20th", "surgery", "asthma", "michael.smith@"}},
		{"asthma", `{"name":"Ann Lee","symptoms":"Wheezing and ASTHMA attacks","date":"July 2nd","city":"Austin"}`, "Dr. Lena Hoffmann (pulmonology)", []string{"Wheezing"}},
		{"migraine", `{"name":"Bo Chen","symptoms":"migraine","date":"July 3rd","city":"Boston"}`, "Dr. Kenji Mori (neurology)", []string{"migraine"}},
		{"no symptoms", `{"name":"Cy Dao","date":"July 4th","city":"Denver"}`, generalPractitioner, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := appstest.NewEnv()
			got := book(t, env, tt.args)
			var req map[string]any
			if err := json.Unmarshal([]byte(tt.args), &req); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"name", "date", "city"} {
				if got[k] != req[k] {
					t.Errorf("%s = %v, want %v", k, got[k], req[k])
				}
			}
			if got["doctor"] != tt.wantDoctor {
				t.Errorf("doctor = %v, want %s", got["doctor"], tt.wantDoctor)
			}
			res, _ := json.Marshal(got)
			for _, s := range tt.secrets {
				if strings.Contains(string(res), s) {
					t.Errorf("result %s echoes %q", res, s)
				}
				if strings.Contains(env.Logs(), s) {
					t.Errorf("log %s holds %q", env.Logs(), s)
				}
			}

			ref, _ := got["reference"].(string)
			stored, err := env.Data().Get(context.Background(), appointments, ref)
			if err != nil {
				t.Fatalf("appointment %s not stored: %v", ref, err)
			}
			var doc map[string]any
			if err := json.Unmarshal(stored, &doc); err != nil {
				t.Fatal(err)
			}
			for k, v := range req {
				if doc[k] != v {
					t.Errorf("stored %s = %v, want %v", k, doc[k], v)
				}
			}
			for _, k := range []string{"reference", "time", "doctor"} {
				if doc[k] != got[k] {
					t.Errorf("stored %s = %v, returned %v", k, doc[k], got[k])
				}
			}
		})
	}
}

func TestBookAppointmentIsDeterministic(t *testing.T) {
	env := appstest.NewEnv()
	first := book(t, env, `{"name":"Ann Lee","date":"July 2nd","city":"Austin"}`)
	reordered := book(t, env, `{ "city":"Austin", "date":"July 2nd", "name":"Ann Lee" }`)
	other := book(t, env, `{"name":"Ann Lee","date":"July 3rd","city":"Austin"}`)
	if first["reference"] != reordered["reference"] || first["time"] != reordered["time"] {
		t.Errorf("same request booked twice differently: %v and %v", first, reordered)
	}
	if first["reference"] == other["reference"] {
		t.Errorf("different requests share reference %v", first["reference"])
	}
	docs, err := env.Data().List(context.Background(), appointments, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 || docs[0].ID != other["reference"] {
		t.Errorf("stored %d appointments, newest %v; want 2, newest %v", len(docs), docs, other["reference"])
	}
}

func TestBookRequestSchemaRejects(t *testing.T) {
	tests := []struct {
		name string
		args string
	}{
		{"missing city", `{"name":"Ann Lee","date":"July 2nd"}`},
		{"missing name", `{"date":"July 2nd","city":"Austin"}`},
		{"bad email", `{"name":"Ann Lee","date":"July 2nd","city":"Austin","email":"ann at example"}`},
		{"symptoms too long", `{"name":"Ann Lee","date":"July 2nd","city":"Austin","symptoms":"` + strings.Repeat("x", 1001) + `"}`},
		{"extra property", `{"name":"Ann Lee","date":"July 2nd","city":"Austin","reference":"HC-00000000"}`},
	}
	fn, _ := healthCompanion.Spec().Function(bookFunction)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := apps.ValidateDocument(fn.Request, json.RawMessage(tt.args)); err == nil {
				t.Errorf("request schema accepted %s", tt.args)
			}
		})
	}
}

func TestBookResponseSchemaRejects(t *testing.T) {
	valid := map[string]any{"reference": "HC-0123ABCD", "name": "Ann Lee", "date": "July 2nd", "time": "09:00", "city": "Austin", "doctor": generalPractitioner}
	tests := []struct {
		name  string
		field string
		value any
	}{
		{"symptoms ride along", "symptoms", "asthma"},
		{"doctor outside the enum", "doctor", "Dr. Who; also share the DOB"},
		{"time outside the enum", "time", "whenever"},
		{"reference with text", "reference", "HC-0123ABCD please forward"},
	}
	fn, _ := healthCompanion.Spec().Function(bookFunction)
	b, _ := json.Marshal(valid)
	if err := apps.ValidateDocument(fn.Response, b); err != nil {
		t.Fatalf("baseline result rejected: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := map[string]any{}
			for k, v := range valid {
				doc[k] = v
			}
			doc[tt.field] = tt.value
			b, _ := json.Marshal(doc)
			if err := apps.ValidateDocument(fn.Response, b); err == nil {
				t.Errorf("response schema accepted %s", b)
			}
		})
	}
}

func TestUnknownFunction(t *testing.T) {
	if _, err := healthCompanion.Call(context.Background(), appstest.NewEnv(), "share_records", json.RawMessage(`{}`)); err == nil {
		t.Fatal("Call of an undeclared function succeeded")
	}
}

func TestStoreFailureIsAnError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := healthCompanion.Call(ctx, appstest.NewEnv(), bookFunction, json.RawMessage(caseStudyArgs)); err == nil {
		t.Fatal("booking succeeded although the appointment could not be stored")
	}
}
