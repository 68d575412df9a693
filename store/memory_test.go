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

func TestAuditNewestFirst(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	fixed := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	for i := range 5 {
		e := store.AuditEntry{User: "@a:x", SessionID: "s", QueryID: fmt.Sprint("q", i), Category: store.CategoryExec,
			Subject: "mail", AppVersion: "v1", Decision: "allow", Source: "user", Detail: "d"}
		if i == 2 {
			e.Time = fixed
		}
		if err := s.AppendAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AppendAudit(ctx, store.AuditEntry{User: "@b:x", Decision: "deny"}); err != nil {
		t.Fatal(err)
	}
	got, err := s.RecentAudit(ctx, "@a:x", 3)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range got {
		ids = append(ids, e.QueryID)
	}
	if strings.Join(ids, ",") != "q4,q3,q2" {
		t.Errorf("RecentAudit query IDs = %v, want q4,q3,q2", ids)
	}
	if !got[2].Time.Equal(fixed) || got[0].Time.IsZero() {
		t.Errorf("times = %v, %v; want the given time kept and a zero time set", got[2].Time, got[0].Time)
	}
	if e := got[0]; e.User != "@a:x" || e.SessionID != "s" || e.Subject != "mail" || e.AppVersion != "v1" || e.Source != "user" || e.Detail != "d" {
		t.Errorf("entry not kept as written: %+v", e)
	}
	for _, bad := range []store.AuditEntry{{Decision: "allow"}, {User: "@a:x"}} {
		if err := s.AppendAudit(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("AppendAudit(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestHubMemory(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	for i := range 5 {
		if err := s.RecordTurn(ctx, "@a:x", fmt.Sprint("q", i), store.AnswerPart{Content: fmt.Sprint("a", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AppendHubMemory(ctx, "@a:x", store.RoleUser, "last", store.Provenance{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		limit int
		want  string
	}{
		{1, "user:last"},
		{3, "user:q4,assistant:a4,user:last"},
		{0, "user:q0,assistant:a0,user:q1,assistant:a1,user:q2,assistant:a2,user:q3,assistant:a3,user:q4,assistant:a4,user:last"},
		{100, "user:q0,assistant:a0,user:q1,assistant:a1,user:q2,assistant:a2,user:q3,assistant:a3,user:q4,assistant:a4,user:last"},
	}
	for _, tt := range tests {
		mem, err := s.HubMemory(ctx, "@a:x", tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := memoryString(mem); got != tt.want {
			t.Errorf("HubMemory(limit %d) = %s, want %s", tt.limit, got, tt.want)
		}
	}
	for _, role := range []string{"", "spoke", "system", "tool"} {
		if err := s.AppendHubMemory(ctx, "@a:x", role, "x", store.Provenance{}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("AppendHubMemory(role %q) = %v, want ErrInvalid", role, err)
		}
	}
	if err := s.RecordTurn(ctx, "@a:x", "q", store.AnswerPart{Content: strings.Repeat("x", store.MaxContentBytes+1)}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("RecordTurn with an oversized answer = %v, want ErrInvalid", err)
	}
	if mem, _ := s.HubMemory(ctx, "@a:x", 0); len(mem) != 11 {
		t.Errorf("a rejected turn changed hub memory: %d entries, want 11", len(mem))
	}
}

// TestHubMemoryProvenance: each part of an answer keeps the apps that
// shaped it; a user's message is always the user's own words; an entry
// whose provenance was not given is unknown, not app-free.
func TestHubMemoryProvenance(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	err := s.RecordTurn(ctx, "@a:x", "fares?",
		store.AnswerPart{Content: "metro part", Provenance: store.ShapedBy("metro_hail")},
		store.AnswerPart{Content: "summary", Provenance: store.ShapedBy("quick_ride", "metro_hail", "quick_ride")},
		store.AnswerPart{Content: "no-app answer", Provenance: store.ShapedBy()},
		store.AnswerPart{Content: "unknown"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AppendHubMemory(ctx, "@a:x", store.RoleUser, "typed", store.ShapedBy("email")); err != nil {
		t.Fatal(err)
	}
	mem, err := s.HubMemory(ctx, "@a:x", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		content string
		prov    store.Provenance
		appFree bool
	}{
		{"fares?", store.Provenance{Known: true}, true},
		{"metro part", store.Provenance{Known: true, Apps: []string{"metro_hail"}}, false},
		{"summary", store.Provenance{Known: true, Apps: []string{"metro_hail", "quick_ride"}}, false},
		{"no-app answer", store.Provenance{Known: true}, true},
		{"unknown", store.Provenance{}, false},
		{"typed", store.Provenance{Known: true}, true},
	}
	if len(mem) != len(want) {
		t.Fatalf("HubMemory = %d entries, want %d", len(mem), len(want))
	}
	for i, w := range want {
		got := mem[i].Provenance
		if mem[i].Content != w.content || got.Known != w.prov.Known || strings.Join(got.Apps, ",") != strings.Join(w.prov.Apps, ",") || got.AppFree() != w.appFree {
			t.Errorf("entry %d = %q %+v (app-free %t), want %q %+v (%t)", i, mem[i].Content, got, got.AppFree(), w.content, w.prov, w.appFree)
		}
	}
	for _, bad := range []store.Provenance{store.ShapedBy(""), store.ShapedBy("a,b")} {
		if err := s.RecordTurn(ctx, "@a:x", "q", store.AnswerPart{Content: "a", Provenance: bad}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("RecordTurn with provenance %+v = %v, want ErrInvalid", bad, err)
		}
	}
	if err := s.RecordTurn(ctx, "@a:x", "q"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("RecordTurn without an answer = %v, want ErrInvalid", err)
	}
}

func TestSpokeMemoryIsolation(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	for _, ua := range [][2]string{{"@a:x", "mail"}, {"@a:x", "drive"}, {"@b:x", "mail"}} {
		for i := range 3 {
			if err := s.AppendSpokeMemory(ctx, ua[0], ua[1], fmt.Sprint(ua[0], "/", ua[1], "/", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		user, app string
		limit     int
		want      string
	}{
		{"@a:x", "mail", 0, "spoke:@a:x/mail/0,spoke:@a:x/mail/1,spoke:@a:x/mail/2"},
		{"@a:x", "mail", 2, "spoke:@a:x/mail/1,spoke:@a:x/mail/2"},
		{"@a:x", "drive", 0, "spoke:@a:x/drive/0,spoke:@a:x/drive/1,spoke:@a:x/drive/2"},
		{"@b:x", "mail", 1, "spoke:@b:x/mail/2"},
		{"@b:x", "drive", 0, ""},
	}
	for _, tt := range tests {
		mem, err := s.SpokeMemory(ctx, tt.user, tt.app, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := memoryString(mem); got != tt.want {
			t.Errorf("SpokeMemory(%s, %s, %d) = %s, want %s", tt.user, tt.app, tt.limit, got, tt.want)
		}
	}
	if err := s.AppendSpokeMemory(ctx, "@a:x", "", "x"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("AppendSpokeMemory with no app = %v, want ErrInvalid", err)
	}
}

func TestForgetUser(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	for _, u := range []string{"@a:x", "@b:x"} {
		if err := s.RecordTurn(ctx, u, "q", store.AnswerPart{Content: "a"}); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendSpokeMemory(ctx, u, "mail", "m"); err != nil {
			t.Fatal(err)
		}
		if err := s.PutGrant(ctx, store.Grant{User: u, Category: store.CategoryExec, Subject: "mail", AppVersion: "v", Duration: store.DurationAlways}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutDoc(ctx, u, "mail", "inbox", "1", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ForgetUser(ctx, "@a:x"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		user      string
		wantEmpty bool
	}{{"@a:x", true}, {"@b:x", false}}
	for _, tt := range tests {
		hub, err := s.HubMemory(ctx, tt.user, 0)
		if err != nil {
			t.Fatal(err)
		}
		spoke, err := s.SpokeMemory(ctx, tt.user, "mail", 0)
		if err != nil {
			t.Fatal(err)
		}
		if (len(hub) == 0) != tt.wantEmpty || (len(spoke) == 0) != tt.wantEmpty {
			t.Errorf("%s after forgetting @a:x: %d hub and %d spoke entries", tt.user, len(hub), len(spoke))
		}
		if grants, _ := s.ListGrants(ctx, tt.user); len(grants) != 1 {
			t.Errorf("ForgetUser touched %s's grants: %+v", tt.user, grants)
		}
		if n, _ := s.CountDocs(ctx, tt.user, "mail", "inbox"); n != 1 {
			t.Errorf("ForgetUser touched %s's app data: %d docs", tt.user, n)
		}
	}
}

func memoryString(mem []store.MemoryEntry) string {
	parts := make([]string, len(mem))
	for i, e := range mem {
		parts[i] = e.Role + ":" + e.Content
	}
	return strings.Join(parts, ",")
}
