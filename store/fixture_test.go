package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/store"
	"github.com/secgpt/secgpt/store/storetest"
)

func TestSeedFixture(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		want    int
		// wantDocs maps "app/collection" to the IDs listed newest first.
		wantDocs map[string]string
		// wantBody maps "app/collection/id" to the stored body.
		wantBody map[string]string
	}{
		{
			name: "yaml",
			fixture: `
mail:
  inbox:
    - id: m1
      from: alice@example.com
      subject: "Hi"
      unread: true
      size: 12
      tags: [a, b]
    - {id: m2, date: 2024-05-01, nothing: null, ratio: 0.5}
  sent: []
drive:
  files:
    - id: "007"
      meta: {owner: bob, "quoted key": 1}
`,
			want:     3,
			wantDocs: map[string]string{"mail/inbox": "m2,m1", "mail/sent": "", "drive/files": "007"},
			wantBody: map[string]string{
				"mail/inbox/m1":   `{"id":"m1","from":"alice@example.com","subject":"Hi","unread":true,"size":12,"tags":["a","b"]}`,
				"mail/inbox/m2":   `{"id":"m2","date":"2024-05-01","nothing":null,"ratio":0.5}`,
				"drive/files/007": `{"id":"007","meta":{"owner":"bob","quoted key":1}}`,
			},
		},
		{
			name:     "json",
			fixture:  `{"mail": {"inbox": [{"id": "m1", "n": 12345678901234567890}, {"id": "m2", "x": {"y": [1, "two"]}}, {"id": "m3"}]}}`,
			want:     3,
			wantDocs: map[string]string{"mail/inbox": "m3,m2,m1"},
			wantBody: map[string]string{
				"mail/inbox/m1": `{"id":"m1","n":12345678901234567890}`,
				"mail/inbox/m2": `{"id":"m2","x":{"y":[1,"two"]}}`,
			},
		},
		{
			name:     "json with tabs",
			fixture:  "{\n\t\"ride\": {\n\t\t\"trips\": [\n\t\t\t{\"id\": \"t1\"}\n\t\t]\n\t}\n}\n",
			want:     1,
			wantDocs: map[string]string{"ride/trips": "t1"},
		},
		{
			name:    "empty mapping",
			fixture: "{}",
			want:    0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := storetest.Open(t)
			ctx := context.Background()
			n, err := s.SeedFixture(ctx, "@a:x", strings.NewReader(tt.fixture))
			if err != nil || n != tt.want {
				t.Fatalf("SeedFixture = %d, %v; want %d", n, err, tt.want)
			}
			for key, want := range tt.wantDocs {
				app, collection, _ := strings.Cut(key, "/")
				docs, err := s.ListDocs(ctx, "@a:x", app, collection, 0)
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, d := range docs {
					ids = append(ids, d.ID)
				}
				if got := strings.Join(ids, ","); got != want {
					t.Errorf("%s lists %s, want %s", key, got, want)
				}
			}
			for key, want := range tt.wantBody {
				parts := strings.SplitN(key, "/", 3)
				body, err := s.GetDoc(ctx, "@a:x", parts[0], parts[1], parts[2])
				if err != nil || string(body) != want {
					t.Errorf("%s = %s, %v; want %s", key, body, err, want)
				}
			}
			if n, _ := s.CountDocs(ctx, "@b:x", "mail", "inbox"); n != 0 {
				t.Errorf("seeding @a:x gave @b:x %d documents", n)
			}
		})
	}
}

func TestSeedFixtureRejects(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		wantMsg string
	}{
		{"empty", "", "empty fixture"},
		{"top level list", "- a\n- b\n", "at the top level"},
		{"top level scalar", "hello", "at the top level"},
		{"app not a mapping", "mail: [1]\n", "at mail (line 1)"},
		{"collection not a list", "mail:\n  inbox: {id: m1}\n", "at mail.inbox (line 2)"},
		{"element not a mapping", "mail:\n  inbox:\n    - m1\n", "at mail.inbox[0] (line 3)"},
		{"missing id", "mail:\n  inbox:\n    - {id: m1}\n    - {subject: x}\n", "at mail.inbox[1] (line 4): missing \"id\""},
		{"numeric id", "mail:\n  inbox:\n    - {id: 7}\n", "at mail.inbox[0].id (line 3): want a string"},
		{"null id", "mail:\n  inbox:\n    - {id: null}\n", "at mail.inbox[0].id"},
		{"empty id", "mail:\n  inbox:\n    - {id: ''}\n", "empty document ID"},
		{"duplicate id", "mail:\n  inbox:\n    - {id: m1}\n    - {id: m1}\n", `document ID repeated`},
		{"bad collection name", "mail:\n  \"in\\tbox\":\n    - {id: m1}\n", "collection contains a non-printable character"},
		{"alias", "mail:\n  inbox:\n    - &a {id: m1}\n    - {id: m2, copy: *a}\n", "at mail.inbox[1].copy (line 4): YAML anchors and aliases"},
		{"merge key", "mail:\n  inbox:\n    - {id: m1, <<: {a: 1}}\n", "keys must be strings"},
		{"infinity", "mail:\n  inbox:\n    - {id: m1, x: .inf}\n", "at mail.inbox[0].x"},
		{"custom tag", "mail:\n  inbox:\n    - {id: m1, x: !thing 1}\n", "unsupported YAML tag"},
		{"two documents", "mail: {}\n---\ndrive: {}\n", "more than one YAML document"},
		{"json collection not a list", `{"mail": {"inbox": {"id": "m1"}}}`, "at mail.inbox: want a list"},
		{"json null app", `{"mail": null}`, "at mail: want a mapping"},
		{"json numeric id", `{"mail": {"inbox": [{"id": 1}]}}`, "at mail.inbox[0].id: want a string"},
		{"json element not an object", `{"mail": {"inbox": ["m1"]}}`, "at mail.inbox[0]: want a document"},
		{"invalid syntax", "mail: {inbox: [\n", "failed to parse fixture"},
		{"oversized document", `{"mail": {"inbox": [{"id": "m1", "x": "` + strings.Repeat("x", store.MaxDocBytes) + `"}]}}`, `at mail.inbox[id="m1"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := storetest.Open(t)
			ctx := context.Background()
			// A valid first part must not be written when a later part is bad.
			n, err := s.SeedFixture(ctx, "@a:x", strings.NewReader(tt.fixture))
			if err == nil {
				t.Fatalf("SeedFixture = %d, nil; want an error saying %q", n, tt.wantMsg)
			}
			if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("SeedFixture error %q: want ErrInvalid saying %q", err, tt.wantMsg)
			}
			if c, _ := s.CountDocs(ctx, "@a:x", "mail", "inbox"); c != 0 {
				t.Errorf("a rejected fixture wrote %d documents", c)
			}
		})
	}
}

func TestSeedFixtureReplaces(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	if err := s.PutDoc(ctx, "@a:x", "mail", "inbox", "m1", []byte(`{"old": true}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SeedFixture(ctx, "@a:x", strings.NewReader("mail:\n  inbox:\n    - {id: m1, new: true}\n")); err != nil {
		t.Fatal(err)
	}
	if body, err := s.GetDoc(ctx, "@a:x", "mail", "inbox", "m1"); err != nil || string(body) != `{"id":"m1","new":true}` {
		t.Errorf("GetDoc after seeding = %s, %v", body, err)
	}
}
