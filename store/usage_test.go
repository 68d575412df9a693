package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/secgpt/secgpt/store"
	"github.com/secgpt/secgpt/store/storetest"
)

func TestUsageAddsUpPerUserAppAndDay(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	adds := []struct {
		user, day string
		u         store.Usage
	}{
		{"@a:x", "2026-11-28", store.Usage{App: "", Calls: 1, PromptTokens: 100, CompletionTokens: 10}},
		{"@a:x", "2026-11-28", store.Usage{App: "mail", Calls: 1, PromptTokens: 200, CompletionTokens: 20, Estimated: 220}},
		{"@a:x", "2026-11-28", store.Usage{App: "mail", Calls: 2, PromptTokens: 300, CompletionTokens: 30, HubTime: time.Millisecond}},
		{"@a:x", "2026-11-27", store.Usage{App: "mail", Calls: 1, PromptTokens: 9999}},
		{"@b:x", "2026-11-28", store.Usage{App: "mail", Calls: 1, PromptTokens: 7777}},
	}
	for _, a := range adds {
		if err := s.AddUsage(ctx, a.user, a.day, a.u); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.DayUsage(ctx, "@a:x", "2026-11-28")
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Usage{
		{App: "", Calls: 1, PromptTokens: 100, CompletionTokens: 10},
		{App: "mail", Calls: 3, PromptTokens: 500, CompletionTokens: 50, Estimated: 220, HubTime: time.Millisecond},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("DayUsage = %+v, want %+v", got, want)
	}
	if got[1].Tokens() != 550 {
		t.Errorf("Tokens() = %d, want 550", got[1].Tokens())
	}
	if err := s.AddUsage(ctx, "", "2026-11-28", store.Usage{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("AddUsage with no user = %v, want ErrInvalid", err)
	}
}

func TestDay(t *testing.T) {
	at := time.Date(2026, 11, 28, 23, 30, 0, 0, time.FixedZone("UTC-2", -2*3600))
	if got := store.Day(at); got != "2026-11-29" {
		t.Errorf("Day(%v) = %s, want the UTC day 2026-11-29", at, got)
	}
}

// TestDataUsageFollowsEveryChange: the counters the quota reads follow
// inserts, replacements (in bytes, not characters) and deletions.
func TestDataUsageFollowsEveryChange(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	steps := []struct {
		name string
		do   func() error
		want store.DataUsage
	}{
		{"empty", func() error { return nil }, store.DataUsage{}},
		{"insert", func() error { return s.PutDoc(ctx, "@a:x", "notes", "c", "1", []byte(`"abcd"`)) }, store.DataUsage{Bytes: 6, Docs: 1}},
		{"insert multibyte", func() error { return s.PutDoc(ctx, "@a:x", "notes", "d", "1", []byte(`"é"`)) }, store.DataUsage{Bytes: 10, Docs: 2}},
		{"replace", func() error { return s.PutDoc(ctx, "@a:x", "notes", "c", "1", []byte(`"ab"`)) }, store.DataUsage{Bytes: 8, Docs: 2}},
		{"other user", func() error { return s.PutDoc(ctx, "@b:x", "notes", "c", "1", []byte(`"abcdefgh"`)) }, store.DataUsage{Bytes: 8, Docs: 2}},
		{"delete", func() error { return s.DeleteDoc(ctx, "@a:x", "notes", "c", "1") }, store.DataUsage{Bytes: 4, Docs: 1}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got, err := s.DataUsage(ctx, "@a:x", "notes")
		if err != nil || got != st.want {
			t.Errorf("%s: DataUsage = %+v, %v; want %+v", st.name, got, err, st.want)
		}
	}
}

func TestPutDocWithinRefusesOverQuota(t *testing.T) {
	doc := []byte(`"` + strings.Repeat("x", 98) + `"`) // 100 bytes
	tests := []struct {
		name    string
		quota   store.DocQuota
		puts    []string // document IDs put before, 100 bytes each
		id      string
		wantErr string // "" for success
	}{
		{"within", store.DocQuota{Bytes: 300, Docs: 3}, []string{"1", "2"}, "3", ""},
		{"over bytes", store.DocQuota{Bytes: 250}, []string{"1", "2"}, "3", "notes would store 300 bytes for this user, over its limit of 250"},
		{"over documents", store.DocQuota{Docs: 2}, []string{"1", "2"}, "3", "notes would store 3 documents for this user, over its limit of 2"},
		{"replace at the bound", store.DocQuota{Bytes: 200, Docs: 2}, []string{"1", "2"}, "2", ""},
		{"unbounded", store.DocQuota{}, []string{"1", "2"}, "3", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := storetest.Open(t)
			ctx := context.Background()
			for _, id := range tt.puts {
				if err := s.PutDoc(ctx, "@a:x", "notes", "c", id, doc); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := s.DataUsage(ctx, "@a:x", "notes")
			err := s.PutDocWithin(ctx, tt.quota, "@a:x", "notes", "c", tt.id, doc)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("PutDocWithin = %v, want success", err)
				}
				return
			}
			var qe *store.QuotaError
			if !errors.Is(err, store.ErrQuota) || !errors.As(err, &qe) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("PutDocWithin = %v, want a quota error saying %q", err, tt.wantErr)
			}
			if after, _ := s.DataUsage(ctx, "@a:x", "notes"); after != before {
				t.Errorf("a refused put changed the data: %+v, was %+v", after, before)
			}
		})
	}
}

// TestUpgradeCountsExistingData: a v3 database's documents are counted
// by the upgrade that adds the quota's counters.
func TestUpgradeCountsExistingData(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/secgpt.db"
	s := storetest.OpenAt(t, path)
	for _, q := range []string{
		"DROP TABLE model_usage",
		"DROP TRIGGER app_docs_usage_insert",
		"DROP TRIGGER app_docs_usage_update",
		"DROP TRIGGER app_docs_usage_delete",
		"DROP TABLE app_data_usage",
		"DROP TABLE scratch",
		`INSERT INTO app_docs (user_id, app, collection, doc_id, body, updated_at) VALUES
			('@a:x', 'notes', 'c', '1', '"é"', 1), ('@a:x', 'notes', 'c', '2', '[]', 2), ('@b:x', 'notes', 'c', '1', '{}', 3)`,
		"UPDATE " + store.VersionTable + " SET version=3, compat=3",
	} {
		if _, err := s.DB().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = storetest.OpenAt(t, path)
	if got, err := s.DataUsage(ctx, "@a:x", "notes"); err != nil || got != (store.DataUsage{Bytes: 6, Docs: 2}) {
		t.Errorf("DataUsage after the upgrade = %+v, %v; want 6 bytes in 2 documents", got, err)
	}
}

// TestSpokeMemoryKeepsWhatCanBeRead: an app appending to its memory in a
// loop keeps only the entries a reader can see, and other apps' and
// users' memory is untouched.
func TestSpokeMemoryKeepsWhatCanBeRead(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	if err := s.AppendSpokeMemory(ctx, "@b:x", "notes", "bob's"); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendSpokeMemory(ctx, "@a:x", "mail", "mail's"); err != nil {
		t.Fatal(err)
	}
	for i := range store.MaxListLimit + 50 {
		if err := s.Later().AppendSpokeMemory(ctx, "@a:x", "notes", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AppendSpokeMemory(ctx, "@a:x", "notes", "last"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.DB().QueryRow(ctx, "SELECT COUNT(*) FROM spoke_memory WHERE user_id='@a:x' AND app='notes'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != store.MaxListLimit {
		t.Errorf("kept %d entries, want %d", n, store.MaxListLimit)
	}
	mem, err := s.SpokeMemory(ctx, "@a:x", "notes", 0)
	if err != nil || len(mem) != store.MaxListLimit || mem[len(mem)-1].Content != "last" || mem[0].Content != "51" {
		t.Errorf("SpokeMemory = %d entries from %q to %q, %v; want the newest %d", len(mem), mem[0].Content, mem[len(mem)-1].Content, err, store.MaxListLimit)
	}
	for _, k := range [][2]string{{"@b:x", "notes"}, {"@a:x", "mail"}} {
		if m, _ := s.SpokeMemory(ctx, k[0], k[1], 0); len(m) != 1 {
			t.Errorf("%s's memory of %s = %d entries, want 1", k[0], k[1], len(m))
		}
	}
}
