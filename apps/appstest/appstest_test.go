package appstest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/apps"
)

func ids(docs []apps.Doc) []string {
	out := []string{}
	for _, d := range docs {
		out = append(out, d.ID)
	}
	return out
}

func TestStoreContract(t *testing.T) {
	ctx := context.Background()
	s := NewStore()
	put := func(coll, id, body string) {
		t.Helper()
		if err := s.Put(ctx, coll, id, json.RawMessage(body)); err != nil {
			t.Fatal(err)
		}
	}
	put("c", "a", `{"n":1}`)
	put("c", "b", `{"n":2}`)
	put("c", "c", `{"n":3}`)
	put("other", "a", `{"n":9}`)

	tests := []struct {
		name  string
		limit int
		want  []string
	}{
		{"newest first", 10, []string{"c", "b", "a"}},
		{"limit", 2, []string{"c", "b"}},
		{"one", 1, []string{"c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := s.List(ctx, "c", tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(docs); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("List = %v, want %v", got, tt.want)
			}
			for i := 1; i < len(docs); i++ {
				if !docs[i-1].Updated.After(docs[i].Updated) {
					t.Errorf("Updated not strictly descending: %v", docs)
				}
			}
		})
	}

	put("c", "a", `{"n":4}`) // a replaced document becomes the newest
	docs, err := s.List(ctx, "c", 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(docs); !reflect.DeepEqual(got, []string{"a", "c", "b"}) {
		t.Errorf("after replace List = %v, want [a c b]", got)
	}
	if body, err := s.Get(ctx, "c", "a"); err != nil || string(body) != `{"n":4}` {
		t.Errorf("Get = %s, %v; want the replacement", body, err)
	}

	if _, err := s.Get(ctx, "c", "zz"); !errors.Is(err, apps.ErrNotFound) {
		t.Errorf("Get missing: %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, "nope", "a"); !errors.Is(err, apps.ErrNotFound) {
		t.Errorf("Get in missing collection: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "c", "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "c", "b"); !errors.Is(err, apps.ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	if docs, err := s.List(ctx, "empty", 5); err != nil || len(docs) != 0 {
		t.Errorf("List of an empty collection = %v, %v", docs, err)
	}
}

func TestStoreRejects(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	s := NewStore()
	tests := []struct {
		name string
		err  error
	}{
		{"invalid JSON", s.Put(ctx, "c", "a", json.RawMessage(`{`))},
		{"empty id", s.Put(ctx, "c", "", json.RawMessage(`{}`))},
		{"empty collection", s.Put(ctx, "", "a", json.RawMessage(`{}`))},
		{"cancelled put", s.Put(cancelled, "c", "a", json.RawMessage(`{}`))},
		{"cancelled delete", s.Delete(cancelled, "c", "a")},
		{"limit 0", func() error { _, err := s.List(ctx, "c", 0); return err }()},
		{"cancelled list", func() error { _, err := s.List(cancelled, "c", 1); return err }()},
		{"cancelled get", func() error { _, err := s.Get(cancelled, "c", "a"); return err }()},
	}
	for _, tt := range tests {
		if tt.err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
}

func TestStoreCopies(t *testing.T) {
	ctx := context.Background()
	s := NewStore()
	body := json.RawMessage(`{"n":1}`)
	if err := s.Put(ctx, "c", "a", body); err != nil {
		t.Fatal(err)
	}
	body[5] = '7'
	got, err := s.Get(ctx, "c", "a")
	if err != nil {
		t.Fatal(err)
	}
	got[5] = '8'
	docs, err := s.List(ctx, "c", 1)
	if err != nil {
		t.Fatal(err)
	}
	docs[0].Body[5] = '9'
	if again, _ := s.Get(ctx, "c", "a"); string(again) != `{"n":1}` {
		t.Errorf("stored body changed through an alias: %s", again)
	}
}

func TestEnvRefusesEgress(t *testing.T) {
	env := NewEnv()
	resp, err := env.HTTP().Get("https://example.com/steal?ssn=1")
	if resp != nil {
		_ = resp.Body.Close()
	}
	if !errors.Is(err, ErrEgressRefused) {
		t.Errorf("Get err = %v, want ErrEgressRefused", err)
	}
	if got := env.RefusedRequests(); !reflect.DeepEqual(got, []string{"https://example.com/steal?ssn=1"}) {
		t.Errorf("RefusedRequests = %v", got)
	}
}

func TestEnvLogs(t *testing.T) {
	env := NewEnv()
	env.Log().Info().Str("booking_id", "TM123456").Msg("Booked flight")
	if logs := env.Logs(); !strings.Contains(logs, `"booking_id":"TM123456"`) || !strings.Contains(logs, `"message":"Booked flight"`) {
		t.Errorf("Logs = %q", logs)
	}
}

func TestFixtureEnvs(t *testing.T) {
	fixture := []byte(`
email:
  inbox:
    - {id: "m1", subject: "old"}
    - {id: "m2", subject: "new"}
  sent: []
drive:
  files:
    - {id: "f1", name: "x"}
`)
	envs := FixtureEnvs(t, fixture)
	if len(envs) != 2 {
		t.Fatalf("got %d envs, want 2", len(envs))
	}
	docs, err := envs["email"].Data().List(context.Background(), "inbox", 5)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(docs); !reflect.DeepEqual(got, []string{"m2", "m1"}) {
		t.Errorf("inbox = %v, want the last document newest", got)
	}
	if _, err := envs["drive"].Data().Get(context.Background(), "inbox", "m1"); !errors.Is(err, apps.ErrNotFound) {
		t.Errorf("drive sees the email app's data: %v", err)
	}
}
