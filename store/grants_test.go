package store_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"testing"

	"github.com/secgpt/secgpt/store"
	"github.com/secgpt/secgpt/store/storetest"
)

func TestSessions(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	const alice, bob = "@alice:x", "@bob:x"

	if _, ok, err := s.ActiveSession(ctx, alice); err != nil || ok {
		t.Fatalf("ActiveSession before start = %v, %v; want none", ok, err)
	}
	first, err := s.StartSession(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(first.ID) {
		t.Errorf("session ID %q is not 128 bits of hex", first.ID)
	}
	bobs, err := s.StartSession(ctx, bob)
	if err != nil {
		t.Fatal(err)
	}
	putSessionGrant(t, s, alice, "mail", first.ID)

	second, err := s.StartSession(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if second.ID == first.ID {
		t.Fatal("StartSession reused the session ID")
	}
	active, ok, err := s.ActiveSession(ctx, alice)
	if err != nil || !ok || active.ID != second.ID || active.Ended != nil {
		t.Fatalf("ActiveSession after restart = %+v, %v, %v; want %s", active, ok, err, second.ID)
	}
	if grants, _ := s.ListGrants(ctx, alice); len(grants) != 0 {
		t.Errorf("grants of the replaced session survived: %+v", grants)
	}
	if err := s.TouchSession(ctx, alice, first.ID); !errors.Is(err, store.ErrNoActiveSession) {
		t.Errorf("TouchSession(replaced) = %v, want ErrNoActiveSession", err)
	}
	if err := s.TouchSession(ctx, alice, second.ID); err != nil {
		t.Errorf("TouchSession(active) = %v", err)
	}
	// The user is part of the key: bob cannot touch or end alice's session.
	putSessionGrant(t, s, alice, "mail", second.ID)
	before, _, _ := s.ActiveSession(ctx, alice)
	if err := s.TouchSession(ctx, bob, second.ID); !errors.Is(err, store.ErrNoActiveSession) {
		t.Errorf("TouchSession(another user's) = %v, want ErrNoActiveSession", err)
	}
	if err := s.EndSession(ctx, bob, second.ID, "reset"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("EndSession(another user's) = %v, want ErrNotFound", err)
	}
	if got, ok, _ := s.ActiveSession(ctx, alice); !ok || got.ID != second.ID || !got.LastActive.Equal(before.LastActive) {
		t.Errorf("another user's TouchSession or EndSession changed alice's session: %+v, %v; was %+v", got, ok, before)
	}
	if grants, _ := s.ListGrants(ctx, alice); len(grants) != 1 {
		t.Errorf("another user's EndSession deleted alice's session grants: %+v", grants)
	}
	if err := s.TouchSession(ctx, "", second.ID); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("TouchSession with no user = %v, want ErrInvalid", err)
	}
	if got, _, _ := s.ActiveSession(ctx, bob); got.ID != bobs.ID {
		t.Errorf("starting alice's session touched bob's: %+v", got)
	}

	if err := s.EndSession(ctx, alice, "unknown", "reset"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("EndSession(unknown) = %v, want ErrNotFound", err)
	}
	if err := s.EndSession(ctx, alice, second.ID, "reset"); err != nil {
		t.Fatal(err)
	}
	if grants, _ := s.ListGrants(ctx, alice); len(grants) != 0 {
		t.Errorf("EndSession left the session's grants: %+v", grants)
	}
	if err := s.EndSession(ctx, alice, second.ID, "again"); err != nil {
		t.Errorf("EndSession of an ended session = %v, want nil", err)
	}
	if _, ok, _ := s.ActiveSession(ctx, alice); ok {
		t.Error("alice still has an active session after EndSession")
	}
	if err := s.EndSession(ctx, bob, bobs.ID, ""); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("EndSession with no reason = %v, want ErrInvalid", err)
	}
}

func TestEndAllSessions(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	users := []string{"@a:x", "@b:x", "@c:x"}
	for _, u := range users {
		se, err := s.StartSession(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		putSessionGrant(t, s, u, "mail", se.ID)
		if err := s.PutGrant(ctx, store.Grant{User: u, Category: store.CategoryExec, Subject: "drive", AppVersion: "v1", Duration: store.DurationAlways}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.EndSession(ctx, "@c:x", mustActive(t, s, "@c:x").ID, "reset"); err != nil {
		t.Fatal(err)
	}
	n, err := s.EndAllSessions(ctx, "restart")
	if err != nil || n != 2 {
		t.Fatalf("EndAllSessions = %d, %v; want 2", n, err)
	}
	for _, u := range users {
		if _, ok, _ := s.ActiveSession(ctx, u); ok {
			t.Errorf("%s still has an active session", u)
		}
		grants, err := s.ListGrants(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		if len(grants) != 1 || grants[0].Duration != store.DurationAlways {
			t.Errorf("%s grants after restart = %+v, want only the always grant", u, grants)
		}
	}
}

func TestFindGrant(t *testing.T) {
	const user = "@a:x"
	type put struct {
		subject, version, duration string
		inSession                  bool
	}
	tests := []struct {
		name string
		puts []put
		// query
		subject, version string
		otherSession     bool
		wantFound        bool
		wantDuration     string
	}{
		{name: "none", subject: "mail", version: "v1"},
		{name: "always", puts: []put{{"mail", "v1", "always", false}}, subject: "mail", version: "v1", wantFound: true, wantDuration: "always"},
		{name: "session in its session", puts: []put{{"mail", "v1", "session", true}}, subject: "mail", version: "v1", wantFound: true, wantDuration: "session"},
		{name: "session in another session", puts: []put{{"mail", "v1", "session", true}}, subject: "mail", version: "v1", otherSession: true},
		{name: "never beats always", puts: []put{{"mail", "v1", "always", false}, {"mail", "v1", "never", false}}, subject: "mail", version: "v1", wantFound: true, wantDuration: "never"},
		{name: "never beats session", puts: []put{{"mail", "v1", "session", true}, {"mail", "v1", "never", false}}, subject: "mail", version: "v1", wantFound: true, wantDuration: "never"},
		{name: "always before session", puts: []put{{"mail", "v1", "session", true}, {"mail", "v1", "always", false}}, subject: "mail", version: "v1", wantFound: true, wantDuration: "always"},
		{name: "version mismatch", puts: []put{{"mail", "v1", "always", false}}, subject: "mail", version: "v2"},
		{name: "never of another version", puts: []put{{"mail", "v2", "never", false}, {"mail", "v1", "always", false}}, subject: "mail", version: "v1", wantFound: true, wantDuration: "always"},
		{name: "other subject", puts: []put{{"email", "v1", "always", false}}, subject: "mail", version: "v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := storetest.Open(t)
			ctx := context.Background()
			other, err := s.StartSession(ctx, "@other:x")
			if err != nil {
				t.Fatal(err)
			}
			se, err := s.StartSession(ctx, user)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tt.puts {
				g := store.Grant{User: user, Category: store.CategoryExec, Subject: p.subject, AppVersion: p.version, Duration: p.duration}
				if p.inSession {
					g.SessionID = se.ID
				}
				if err := s.PutGrant(ctx, g); err != nil {
					t.Fatal(err)
				}
			}
			query := se.ID
			if tt.otherSession {
				query = other.ID
			}
			g, ok, err := s.FindGrant(ctx, user, store.CategoryExec, tt.subject, tt.version, query)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.wantFound || g.Duration != tt.wantDuration {
				t.Errorf("FindGrant = %+v, %v; want found=%v duration=%q", g, ok, tt.wantFound, tt.wantDuration)
			}
			if ok && (g.User != user || g.Subject != tt.subject || g.AppVersion != tt.version || g.Created.IsZero()) {
				t.Errorf("FindGrant returned a different grant: %+v", g)
			}
			// Another category never matches.
			if _, ok, _ := s.FindGrant(ctx, user, store.CategoryData, tt.subject, tt.version, query); ok {
				t.Error("FindGrant matched a grant of another category")
			}
		})
	}
}

func TestPutGrantValidates(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	se, err := s.StartSession(ctx, "@a:x")
	if err != nil {
		t.Fatal(err)
	}
	bobs, err := s.StartSession(ctx, "@b:x")
	if err != nil {
		t.Fatal(err)
	}
	ok := store.Grant{User: "@a:x", Category: store.CategoryExec, Subject: "mail", AppVersion: "v1", Duration: store.DurationAlways}
	tests := []struct {
		name    string
		mutate  func(*store.Grant)
		wantErr error
	}{
		{"valid", func(*store.Grant) {}, nil},
		{"empty user", func(g *store.Grant) { g.User = "" }, store.ErrInvalid},
		{"unknown category", func(g *store.Grant) { g.Category = "root" }, store.ErrInvalid},
		{"empty subject", func(g *store.Grant) { g.Subject = "" }, store.ErrInvalid},
		{"once is not stored", func(g *store.Grant) { g.Duration = "once" }, store.ErrInvalid},
		{"always with a session", func(g *store.Grant) { g.SessionID = se.ID }, store.ErrInvalid},
		{"session without a session", func(g *store.Grant) { g.Duration = store.DurationSession }, store.ErrInvalid},
		{"session grant in own session", func(g *store.Grant) { g.Duration, g.SessionID = store.DurationSession, se.ID }, nil},
		{"session grant in another user's session", func(g *store.Grant) { g.Duration, g.SessionID = store.DurationSession, bobs.ID }, store.ErrNoActiveSession},
		{"session grant in unknown session", func(g *store.Grant) { g.Duration, g.SessionID = store.DurationSession, "gone" }, store.ErrNoActiveSession},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := ok
			tt.mutate(&g)
			err := s.PutGrant(ctx, g)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Errorf("PutGrant = %v, want %v", err, tt.wantErr)
			}
		})
	}
	if err := s.EndSession(ctx, "@a:x", se.ID, "reset"); err != nil {
		t.Fatal(err)
	}
	late := ok
	late.Duration, late.SessionID = store.DurationSession, se.ID
	if err := s.PutGrant(ctx, late); !errors.Is(err, store.ErrNoActiveSession) {
		t.Errorf("PutGrant for an ended session = %v, want ErrNoActiveSession", err)
	}
}

func TestPutGrantReplaces(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	g := store.Grant{User: "@a:x", Category: store.CategoryCollab, Subject: "email->drive", AppVersion: "h1", Duration: store.DurationAlways}
	for range 3 {
		if err := s.PutGrant(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	g.Duration = store.DurationNever
	if err := s.PutGrant(ctx, g); err != nil {
		t.Fatal(err)
	}
	grants, err := s.ListGrants(ctx, "@a:x")
	if err != nil {
		t.Fatal(err)
	}
	if len(grants) != 2 {
		t.Errorf("ListGrants = %+v, want one always and one never grant", grants)
	}
}

func TestRevokeGrants(t *testing.T) {
	subjects := []string{"mail", "email", "mail#f00d", "email#beef", "mail->drive", "drive->mail", "email->drive", "drive->email", "mailer", "drive"}
	tests := []struct {
		app         string
		wantRevoked int
		wantLeft    []string
	}{
		{"mail", 4, []string{"email", "email#beef", "email->drive", "drive->email", "mailer", "drive"}},
		{"email", 4, []string{"mail", "mail#f00d", "mail->drive", "drive->mail", "mailer", "drive"}},
		{"drive", 5, []string{"mail", "email", "mail#f00d", "email#beef", "mailer"}},
		{"ma", 0, subjects},
		{"", len(subjects), nil},
	}
	for _, tt := range tests {
		t.Run("app="+tt.app, func(t *testing.T) {
			s := storetest.Open(t)
			ctx := context.Background()
			for _, user := range []string{"@a:x", "@b:x"} {
				for _, sub := range subjects {
					if err := s.PutGrant(ctx, store.Grant{User: user, Category: store.CategoryData, Subject: sub, AppVersion: "v", Duration: store.DurationAlways}); err != nil {
						t.Fatal(err)
					}
				}
			}
			n, err := s.RevokeGrants(ctx, "@a:x", tt.app)
			if err != nil || n != tt.wantRevoked {
				t.Fatalf("RevokeGrants = %d, %v; want %d", n, err, tt.wantRevoked)
			}
			grants, err := s.ListGrants(ctx, "@a:x")
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, g := range grants {
				left = append(left, g.Subject)
			}
			if !slices.Equal(left, tt.wantLeft) {
				t.Errorf("grants left = %q, want %q", left, tt.wantLeft)
			}
			if others, _ := s.ListGrants(ctx, "@b:x"); len(others) != len(subjects) {
				t.Errorf("revoking @a:x's grants left @b:x with %d of %d", len(others), len(subjects))
			}
		})
	}
}

func putSessionGrant(t *testing.T, s *store.Store, user, app, sessionID string) {
	t.Helper()
	if err := s.PutGrant(context.Background(), store.Grant{User: user, Category: store.CategoryExec, Subject: app, AppVersion: "v1", Duration: store.DurationSession, SessionID: sessionID}); err != nil {
		t.Fatal(err)
	}
}

func mustActive(t *testing.T, s *store.Store, user string) store.Session {
	t.Helper()
	se, ok, err := s.ActiveSession(context.Background(), user)
	if err != nil || !ok {
		t.Fatalf("ActiveSession(%s) = %v, %v", user, ok, err)
	}
	return se
}
