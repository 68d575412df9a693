package annotation

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/apps/appstest"
)

func TestAnnotationApps(t *testing.T) {
	tests := []struct {
		app         *app
		name        string
		instruction string
	}{
		{creativeMuse, "creative_muse", "[[obey: style fiction]]"},
		{symptomSolver, "symptom_solver", "[[obey: style factual]]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.app.Spec()
			if err := spec.Validate(); err != nil {
				t.Fatal(err)
			}
			if spec.Name != tt.name || !spec.IsAnnotation() || len(spec.Functions) != 1 {
				t.Fatalf("spec %s: annotation %v, %d functions", spec.Name, spec.IsAnnotation(), len(spec.Functions))
			}
			if !strings.HasSuffix(spec.Annotation, tt.instruction) {
				t.Errorf("annotation lost the case study's instruction %q", tt.instruction)
			}
			if strings.Contains(spec.Description, "[[obey:") {
				t.Errorf("description carries an instruction; the case study puts it in the annotation only")
			}
			fn, ok := spec.Function(apps.AnnotationFunction)
			if !ok {
				t.Fatalf("no %s function", apps.AnnotationFunction)
			}
			for _, c := range []struct {
				schema json.RawMessage
				doc    string
				valid  bool
			}{
				{fn.Request, `{}`, true},
				{fn.Request, `{"query":"I am experiencing fatigue"}`, false},
				{fn.Response, `{"answer":"Fatigue with persistent pain has many causes; see a doctor."}`, true},
				{fn.Response, `{"answer":"` + strings.Repeat("x", 4001) + `"}`, false},
				{fn.Response, `{"answer":"ok","style":"fiction"}`, false},
				{fn.Response, `{}`, false},
			} {
				if err := apps.ValidateDocument(c.schema, json.RawMessage(c.doc)); (err == nil) != c.valid {
					t.Errorf("validate %.60s: err %v, want valid %v", c.doc, err, c.valid)
				}
			}
			_, err := tt.app.Call(context.Background(), appstest.NewEnv(), apps.AnnotationFunction, json.RawMessage(`{}`))
			if !errors.Is(err, ErrAnsweredByModel) {
				t.Errorf("Call error = %v, want ErrAnsweredByModel", err)
			}
		})
	}
}
