package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/store"
	"github.com/secgpt/secgpt/store/storetest"
)

func TestDocsRoundTrip(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	if _, err := s.GetDoc(ctx, "@a:x", "drive", "files", "f1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetDoc(missing) = %v, want ErrNotFound", err)
	}
	if err := s.PutDoc(ctx, "@a:x", "drive", "files", "f1", []byte(`{"name": "a"}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutDoc(ctx, "@a:x", "drive", "files", "f1", []byte(`{"name": "b"}`)); err != nil {
		t.Fatal(err)
	}
	body, err := s.GetDoc(ctx, "@a:x", "drive", "files", "f1")
	if err != nil || string(body) != `{"name": "b"}` {
		t.Errorf("GetDoc after replace = %s, %v", body, err)
	}
	if n, err := s.CountDocs(ctx, "@a:x", "drive", "files"); err != nil || n != 1 {
		t.Errorf("CountDocs = %d, %v; want 1", n, err)
	}
	if err := s.DeleteDoc(ctx, "@a:x", "drive", "files", "f1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteDoc(ctx, "@a:x", "drive", "files", "f1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteDoc(deleted) = %v, want ErrNotFound", err)
	}
	if _, err := s.GetDoc(ctx, "@a:x", "drive", "files", "f1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetDoc(deleted) = %v, want ErrNotFound", err)
	}
}

func TestDocsIsolation(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	owners := []struct{ user, app string }{{"@a:x", "mail"}, {"@a:x", "drive"}, {"@b:x", "mail"}}
	for _, o := range owners {
		body := fmt.Sprintf(`{"owner": %q}`, o.user+"/"+o.app)
		if err := s.PutDoc(ctx, o.user, o.app, "c", "same-id", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		user, app string
		want      string // "" means not found
	}{
		{"@a:x", "mail", "@a:x/mail"},
		{"@a:x", "drive", "@a:x/drive"},
		{"@b:x", "mail", "@b:x/mail"},
		{"@b:x", "drive", ""},
		{"@c:x", "mail", ""},
	}
	for _, tt := range tests {
		body, err := s.GetDoc(ctx, tt.user, tt.app, "c", "same-id")
		if tt.want == "" {
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetDoc(%s, %s) = %s, %v; want ErrNotFound", tt.user, tt.app, body, err)
			}
			continue
		}
		var doc struct{ Owner string }
		if err != nil || json.Unmarshal(body, &doc) != nil || doc.Owner != tt.want {
			t.Errorf("GetDoc(%s, %s) = %s, %v; want owner %s", tt.user, tt.app, body, err, tt.want)
		}
		docs, err := s.ListDocs(ctx, tt.user, tt.app, "c", 0)
		if err != nil || len(docs) != 1 || !bytes.Contains(docs[0].Body, []byte(tt.want)) {
			t.Errorf("ListDocs(%s, %s) = %v, %v; want only its own document", tt.user, tt.app, docs, err)
		}
	}
	// Deleting one owner's document leaves the others'.
	if err := s.DeleteDoc(ctx, "@a:x", "mail", "c", "same-id"); err != nil {
		t.Fatal(err)
	}
	for _, o := range owners[1:] {
		if _, err := s.GetDoc(ctx, o.user, o.app, "c", "same-id"); err != nil {
			t.Errorf("deleting @a:x/mail's document removed %s/%s's: %v", o.user, o.app, err)
		}
	}
}

func TestListDocsNewestFirst(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	const n = 200
	for i := range n {
		// Alternate collections so the per-app clock is shared between them.
		if err := s.PutDoc(ctx, "@a:x", "mail", "inbox", fmt.Sprint(i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if err := s.PutDoc(ctx, "@a:x", "mail", "sent", fmt.Sprint(i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	// Re-putting an old document makes it the newest.
	if err := s.PutDoc(ctx, "@a:x", "mail", "inbox", "5", []byte(`{"edited": true}`)); err != nil {
		t.Fatal(err)
	}
	docs, err := s.ListDocs(ctx, "@a:x", "mail", "inbox", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != n {
		t.Fatalf("ListDocs returned %d documents, want %d", len(docs), n)
	}
	want := []string{"5"}
	for i := n - 1; i >= 0; i-- {
		if i != 5 {
			want = append(want, fmt.Sprint(i))
		}
	}
	for i, d := range docs {
		if d.ID != want[i] {
			t.Fatalf("ListDocs[%d] = %s, want %s", i, d.ID, want[i])
		}
		if i > 0 && !d.Updated.Before(docs[i-1].Updated) {
			t.Errorf("ListDocs[%d].Updated %v is not before ListDocs[%d].Updated %v", i, d.Updated, i-1, docs[i-1].Updated)
		}
	}
	if limited, err := s.ListDocs(ctx, "@a:x", "mail", "inbox", 3); err != nil || len(limited) != 3 || limited[2].ID != "198" {
		t.Errorf("ListDocs(limit 3) = %v, %v", limited, err)
	}
}

func TestListDocsLimitCap(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	var fixture strings.Builder
	fixture.WriteString(`{"drive": {"files": [`)
	for i := range store.MaxListLimit + 5 {
		if i > 0 {
			fixture.WriteString(",")
		}
		fmt.Fprintf(&fixture, `{"id": "f%d"}`, i)
	}
	fixture.WriteString("]}}")
	if _, err := s.SeedFixture(ctx, "@a:x", strings.NewReader(fixture.String())); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{-1, 0, store.MaxListLimit + 1, 1 << 30} {
		docs, err := s.ListDocs(ctx, "@a:x", "drive", "files", limit)
		if err != nil || len(docs) != store.MaxListLimit {
			t.Errorf("ListDocs(limit %d) returned %d documents, %v; want %d", limit, len(docs), err, store.MaxListLimit)
		}
	}
}

func TestDocsValidate(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	long := strings.Repeat("é", store.MaxKeyRunes)
	tests := []struct {
		name                      string
		user, app, collection, id string
		body                      string
		wantErr                   bool
	}{
		{"valid", "@a:x", "mail", "inbox", "m1", `{}`, false},
		{"64 characters", "@a:x", "mail", long, long, `[1,2]`, false},
		{"empty user", "", "mail", "inbox", "m1", `{}`, true},
		{"empty app", "@a:x", "", "inbox", "m1", `{}`, true},
		{"empty collection", "@a:x", "mail", "", "m1", `{}`, true},
		{"empty id", "@a:x", "mail", "inbox", "", `{}`, true},
		{"65 characters", "@a:x", "mail", "inbox", long + "x", `{}`, true},
		{"control character in id", "@a:x", "mail", "inbox", "a\nb", `{}`, true},
		{"control character in collection", "@a:x", "mail", "in\x00box", "m1", `{}`, true},
		{"invalid UTF-8", "@a:x", "mail", "inbox", "\xff", `{}`, true},
		{"control character in user", "@a\n:x", "mail", "inbox", "m1", `{}`, true},
		{"not JSON", "@a:x", "mail", "inbox", "m1", `{`, true},
		{"empty body", "@a:x", "mail", "inbox", "m1", ``, true},
		{"256 KiB", "@a:x", "mail", "inbox", "m1", `"` + strings.Repeat("x", store.MaxDocBytes-2) + `"`, false},
		{"over 256 KiB", "@a:x", "mail", "inbox", "m1", `"` + strings.Repeat("x", store.MaxDocBytes-1) + `"`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.PutDoc(ctx, tt.user, tt.app, tt.collection, tt.id, []byte(tt.body))
			if tt.wantErr != (err != nil) || (err != nil && !errors.Is(err, store.ErrInvalid)) {
				t.Errorf("PutDoc = %v, want error %v (ErrInvalid)", err, tt.wantErr)
			}
		})
	}
}

// TestForgetUserErasesContent: after ForgetUser returns, neither the
// database file nor its write-ahead log holds the forgotten text, without
// the caller doing anything more. While a reader keeps the log busy it
// says the erasure is incomplete, and a later call completes it.
func TestForgetUserErasesContent(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "secgpt.db")
	s := storetest.OpenAt(t, path)
	const secret = "marker-3f9c2d-the-users-diagnosis"
	remember := func(user string) {
		t.Helper()
		if err := s.RecordTurn(ctx, user, secret, store.AnswerPart{Content: "noted"}); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendSpokeMemory(ctx, user, "health", secret); err != nil {
			t.Fatal(err)
		}
	}
	wantErased := func() {
		t.Helper()
		for _, p := range []string{path, path + "-wal"} {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(data, []byte(secret)) {
				t.Errorf("%s still holds forgotten content", filepath.Base(p))
			}
		}
	}

	remember("@a:x")
	if err := s.ForgetUser(ctx, "@a:x"); err != nil {
		t.Fatal(err)
	}
	wantErased()

	remember("@b:x")
	// A reader in a read transaction (DEFERRED: the store's own BEGIN is
	// IMMEDIATE, a writer's) whose snapshot still has the rows.
	reader, err := s.DB().RawDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if _, err := reader.ExecContext(ctx, "BEGIN DEFERRED"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRowContext(ctx, "SELECT count(*) FROM hub_memory").Scan(&n); err != nil {
		t.Fatal(err)
	}
	err = s.ForgetUser(ctx, "@b:x")
	if err == nil || !strings.Contains(err.Error(), "write-ahead log may still hold it") {
		t.Fatalf("ForgetUser while a reader holds the log = %v, want an error saying so", err)
	}
	if mem, _ := s.HubMemory(ctx, "@b:x", 0); len(mem) != 0 {
		t.Errorf("the rows survived a failed checkpoint: %+v", mem)
	}
	if _, err := reader.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	reader.Close()
	if err := s.ForgetUser(ctx, "@b:x"); err != nil {
		t.Fatalf("ForgetUser again once the reader is gone: %v", err)
	}
	wantErased()
	// The connection that checkpointed went back to the pool with the
	// usual busy timeout.
	var timeouts []int
	conns := make([]*sql.Conn, 4)
	for i := range conns {
		if conns[i], err = s.DB().RawDB.Conn(ctx); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close()
		var ms int
		if err := conns[i].QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&ms); err != nil {
			t.Fatal(err)
		}
		timeouts = append(timeouts, ms)
	}
	for _, ms := range timeouts {
		if ms != 5000 {
			t.Errorf("busy timeouts of the pool = %v, want 5000 each", timeouts)
			break
		}
	}
}
