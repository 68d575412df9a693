package store_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"go.mau.fi/util/dbutil"

	"github.com/secgpt/secgpt/store"
	"github.com/secgpt/secgpt/store/storetest"
)

func TestOpenMigratesEmptyFile(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	var version, compat int
	if err := s.DB().QueryRow(ctx, "SELECT version, compat FROM "+store.VersionTable).Scan(&version, &compat); err != nil {
		t.Fatalf("read schema version: %v", err)
	}
	if version != 5 || compat != 5 {
		t.Errorf("schema version = %d (compat %d), want 5 (5)", version, compat)
	}
	for _, table := range []string{"sessions", "grants", "audit_log", "hub_memory", "spoke_memory", "app_docs", "scratch", "model_usage", "app_data_usage"} {
		if ok, err := s.DB().TableExists(ctx, table); err != nil || !ok {
			t.Errorf("table %s exists = %v, %v; want true", table, ok, err)
		}
	}
}

func TestOpenSetsPragmas(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	tests := []struct {
		pragma string
		want   string
	}{
		{"journal_mode", "wal"},
		{"foreign_keys", "1"},
		{"synchronous", "2"}, // FULL
		{"busy_timeout", "5000"},
		{"secure_delete", "1"},
	}
	for _, tt := range tests {
		var got string
		if err := s.DB().QueryRow(ctx, "PRAGMA "+tt.pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: %v", tt.pragma, err)
		}
		if got != tt.want {
			t.Errorf("PRAGMA %s = %q, want %q", tt.pragma, got, tt.want)
		}
	}
}

func TestOpenFileMode(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "new.db")
	s := storetest.OpenAt(t, path)
	if err := s.AppendHubMemory(ctx, "@a:x", store.RoleUser, "hello", store.Provenance{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", filepath.Base(p), st.Mode().Perm())
		}
	}

	// Files left with a looser mode are tightened before SQLite opens them.
	loose := filepath.Join(dir, "loose.db")
	for _, p := range []string{loose, loose + "-wal"} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	storetest.OpenAt(t, loose)
	for _, p := range []string{loose, loose + "-wal"} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("existing 0644 %s after Open: %v; want mode 0600", filepath.Base(p), err)
		}
	}
}

func TestOpenRejectsBadPaths(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		path    string
		wantMsg string
	}{
		{"empty", "", "empty path"},
		{"missing parent", filepath.Join(dir, "nope", "x.db"), "parent directory " + filepath.Join(dir, "nope") + " does not exist"},
		{"directory", dir, "not a regular file"},
		{"parent is a file", filepath.Join(dir, "file", "x.db"), "is not a directory"},
		{"symlink", filepath.Join(dir, "link.db"), "link.db is not a regular file"},
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "file"), filepath.Join(dir, "link.db")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := store.Open(context.Background(), tt.path)
			if err == nil {
				_ = s.Close()
				t.Fatalf("Open(%q) succeeded, want error", tt.path)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Open(%q) error %q does not say %q", tt.path, err, tt.wantMsg)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open created the missing parent directory: %v", err)
	}
}

// TestUpgradeKeepsHubMemoryOfUnknownProvenance: a v1 database's answers,
// written before provenance was kept, come back of unknown provenance
// (readers treat them as app-shaped), and its user messages as the user's.
func TestUpgradeKeepsHubMemoryOfUnknownProvenance(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "secgpt.db")
	s, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	// Back to v1: the table as it was, with a turn in it.
	for _, q := range []string{
		"ALTER TABLE hub_memory DROP COLUMN provenance",
		"DROP TABLE app_discovery",
		"DROP TABLE scratch",
		"DROP TABLE model_usage",
		"DROP TRIGGER app_docs_usage_insert",
		"DROP TRIGGER app_docs_usage_update",
		"DROP TRIGGER app_docs_usage_delete",
		"DROP TABLE app_data_usage",
		"INSERT INTO hub_memory (user_id, role, content, created_at) VALUES ('@a:x', 'user', 'old question', 1), ('@a:x', 'assistant', 'old answer', 2)",
		"UPDATE " + store.VersionTable + " SET version=1, compat=1",
	} {
		if _, err := s.DB().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mem, err := s.HubMemory(ctx, "@a:x", 0)
	if err != nil || len(mem) != 2 {
		t.Fatalf("HubMemory after the upgrade = %+v, %v", mem, err)
	}
	if !mem[0].Provenance.AppFree() || mem[1].Provenance.Known || mem[1].Provenance.AppFree() {
		t.Errorf("provenance after the upgrade: question %+v, answer %+v; want the user's words and unknown", mem[0].Provenance, mem[1].Provenance)
	}
}

func TestOpenRejectsNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "secgpt.db")
	s, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().Exec(ctx, "UPDATE "+store.VersionTable+" SET version=99, compat=99"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = store.Open(ctx, path)
	if err == nil {
		_ = s.Close()
		t.Fatal("Open of a v99 database succeeded, want error")
	}
	if !errors.Is(err, dbutil.ErrUnsupportedDatabaseVersion) || !strings.Contains(err.Error(), "failed to upgrade store schema") {
		t.Errorf("Open error = %v, want an unsupported-version upgrade error", err)
	}
}

// TestChildSchemaAlongside checks that another package's schema, with its
// own version table, lives in the same file and survives the store's
// migrations, as the bot's and mautrix's will.
func TestChildSchemaAlongside(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "secgpt.db")
	s, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	table := dbutil.BuildUpgradeTable().WithRaw(0, 1, 0, "bot tables", dbutil.TxnModeOn, func(ctx context.Context, db *dbutil.Database) error {
		_, err := db.Exec(ctx, "CREATE TABLE bot_rooms (room_id TEXT PRIMARY KEY)")
		return err
	}).Finish()
	child := s.DB().Child("bot_version", table, nil)
	if err := child.Upgrade(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := child.Exec(ctx, "INSERT INTO bot_rooms VALUES ('!r:x')"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = storetest.OpenAt(t, path)
	var n int
	if err := s.DB().QueryRow(ctx, "SELECT COUNT(*) FROM bot_rooms").Scan(&n); err != nil || n != 1 {
		t.Errorf("bot_rooms after reopen: %d rows, %v; want 1", n, err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "secgpt.db")
	s, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	se, err := s.StartSession(ctx, "@a:x")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutGrant(ctx, store.Grant{User: "@a:x", Category: store.CategoryExec, Subject: "mail", AppVersion: "v1", Duration: store.DurationAlways}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordTurn(ctx, "@a:x", "q", store.AnswerPart{Content: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutDoc(ctx, "@a:x", "mail", "inbox", "m1", []byte(`{"id":"m1"}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = storetest.OpenAt(t, path)
	if got, ok, err := s.ActiveSession(ctx, "@a:x"); err != nil || !ok || got.ID != se.ID {
		t.Errorf("ActiveSession after reopen = %+v, %v, %v; want %s", got, ok, err, se.ID)
	}
	if _, ok, err := s.FindGrant(ctx, "@a:x", store.CategoryExec, "mail", "v1", ""); err != nil || !ok {
		t.Errorf("FindGrant after reopen = %v, %v; want found", ok, err)
	}
	if mem, err := s.HubMemory(ctx, "@a:x", 10); err != nil || len(mem) != 2 {
		t.Errorf("HubMemory after reopen = %v, %v; want 2 entries", mem, err)
	}
	if body, err := s.GetDoc(ctx, "@a:x", "mail", "inbox", "m1"); err != nil || string(body) != `{"id":"m1"}` {
		t.Errorf("GetDoc after reopen = %s, %v", body, err)
	}
}

func TestConcurrentWriters(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	const writers, each = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers*each*4)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("@u%d:x", w%3)
			for i := range each {
				id := fmt.Sprintf("w%d-%d", w, i)
				errs <- s.PutDoc(ctx, user, "drive", "files", id, []byte(`{}`))
				errs <- s.AppendAudit(ctx, store.AuditEntry{User: user, Decision: "allow"})
				errs <- s.RecordTurn(ctx, user, "q "+id, store.AnswerPart{Content: "a " + id})
				if _, err := s.HubMemory(ctx, user, 5); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent write: %v", err)
		}
	}
	total := 0
	for u := range 3 {
		n, err := s.CountDocs(ctx, fmt.Sprintf("@u%d:x", u), "drive", "files")
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != writers*each {
		t.Errorf("stored %d documents, want %d", total, writers*each)
	}
}

// crashChildEnv names the database the crash child writes to; set only in
// the child process.
const crashChildEnv = "SECGPT_STORE_CRASH_CHILD_DB"

// TestCrashChild is the child process of TestCrashLosesNothingAcknowledged.
// It records turns until it is killed, printing the number of each turn
// after RecordTurn returned.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashChildEnv)
	if path == "" {
		t.Skip("helper process for TestCrashLosesNothingAcknowledged")
	}
	ctx := context.Background()
	s, err := store.Open(ctx, path)
	if err != nil {
		fmt.Println("error", err)
		return
	}
	// The loop ends only by SIGKILL; the bound stops a child whose parent died.
	for i := range 100_000 {
		if err := s.RecordTurn(ctx, "@crash:x", "q"+strconv.Itoa(i), store.AnswerPart{Content: "a" + strconv.Itoa(i)}); err != nil {
			fmt.Println("error", err)
			return
		}
		fmt.Println("committed", i)
	}
}

func TestCrashLosesNothingAcknowledged(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "crash.db")
	committed := map[int]bool{}
	killDuring(t, "TestCrashChild", crashChildEnv+"="+path, 200, func(line string) bool {
		n, ok := strings.CutPrefix(line, "committed ")
		if !ok {
			return false
		}
		i, err := strconv.Atoi(n)
		if err != nil {
			t.Fatalf("bad child line %q", line)
		}
		committed[i] = true
		return true
	})

	s := storetest.OpenAt(t, path)
	mem, err := s.HubMemory(ctx, "@crash:x", store.MaxListLimit)
	if err != nil {
		t.Fatal(err)
	}
	if len(mem)%2 != 0 {
		t.Errorf("hub memory holds %d entries: half a turn survived the crash", len(mem))
	}
	stored := map[string]bool{}
	for _, e := range mem {
		stored[e.Role+":"+e.Content] = true
	}
	for i := range committed {
		if !stored["user:q"+strconv.Itoa(i)] || !stored["assistant:a"+strconv.Itoa(i)] {
			t.Errorf("turn %d was acknowledged but is missing after the crash", i)
		}
	}
	t.Logf("child acknowledged %d turns, %d entries stored after SIGKILL", len(committed), len(mem))
}

// burstChildEnv names the database the burst crash child writes to; set
// only in the child process.
const burstChildEnv = "SECGPT_STORE_BURST_CHILD_DB"

// TestBurstCrashChild is the child process of
// TestCrashDuringBurstLosesNothingAcknowledged: writers in parallel, each
// queueing a write no one waits for (Later) and then one it waits for,
// printing "ack W-I" once the latter returned, until it is killed.
func TestBurstCrashChild(t *testing.T) {
	path := os.Getenv(burstChildEnv)
	if path == "" {
		t.Skip("helper process for TestCrashDuringBurstLosesNothingAcknowledged")
	}
	ctx := context.Background()
	s, err := store.Open(ctx, path)
	if err != nil {
		fmt.Println("error", err)
		return
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("@w%d:x", w)
			// The loop ends only by SIGKILL; the bound stops a child whose
			// parent died.
			for i := range 20_000 {
				key := fmt.Sprintf("%d-%d", w, i)
				if err := s.Later().AppendSpokeMemory(ctx, user, "mail", "note "+key); err != nil {
					say("error %v", err)
					return
				}
				switch i % 3 {
				case 0:
					err = s.RecordTurn(ctx, user, "q "+key, store.AnswerPart{Content: "a " + key})
				case 1:
					err = s.AppendAudit(ctx, store.AuditEntry{User: user, Decision: "allow", QueryID: key})
				default:
					err = s.PutDoc(ctx, user, "drive", "files", key, []byte(`{}`))
				}
				if err != nil {
					say("error %v", err)
					return
				}
				say("ack %s", key)
				if w == 0 && i%50 == 0 {
					st := s.WriteStats()
					say("stats %d %d", st.Writes, st.Commits)
				}
			}
		}()
	}
	wg.Wait()
}

// TestCrashDuringBurstLosesNothingAcknowledged kills a process with
// SIGKILL while 16 writers write at once through group commit: every
// write it acknowledged is there after the crash, and so is every write
// queued before an acknowledged one (the note each writer queued without
// waiting); and the writes did share commits.
func TestCrashDuringBurstLosesNothingAcknowledged(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "burst.db")
	var acked []string
	var writes, commits int64
	killDuring(t, "TestBurstCrashChild", burstChildEnv+"="+path, 600, func(line string) bool {
		if strings.HasPrefix(line, "stats ") {
			if _, err := fmt.Sscanf(line, "stats %d %d", &writes, &commits); err != nil {
				t.Fatalf("bad child line %q", line)
			}
		}
		key, ok := strings.CutPrefix(line, "ack ")
		if ok {
			acked = append(acked, key)
		}
		return ok
	})
	if writes == 0 || commits*2 > writes {
		t.Errorf("the child made %d writes in %d commits: writes in a burst should share commits", writes, commits)
	}

	s := storetest.OpenAt(t, path)
	for _, key := range acked {
		var w, i int
		if _, err := fmt.Sscanf(key, "%d-%d", &w, &i); err != nil {
			t.Fatalf("bad key %q", key)
		}
		user := fmt.Sprintf("@w%d:x", w)
		var found bool
		switch i % 3 {
		case 0:
			mem, err := s.HubMemory(ctx, user, store.MaxListLimit)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range mem {
				found = found || e.Content == "a "+key
			}
		case 1:
			var n int
			if err := s.DB().QueryRow(ctx, "SELECT COUNT(*) FROM audit_log WHERE user_id=$1 AND query_id=$2", user, key).Scan(&n); err != nil {
				t.Fatal(err)
			}
			found = n == 1
		default:
			_, err := s.GetDoc(ctx, user, "drive", "files", key)
			found = err == nil
		}
		if !found {
			t.Errorf("write %s was acknowledged but is missing after the crash", key)
		}
		var notes int
		if err := s.DB().QueryRow(ctx, "SELECT COUNT(*) FROM spoke_memory WHERE user_id=$1 AND content=$2", user, "note "+key).Scan(&notes); err != nil {
			t.Fatal(err)
		}
		if notes != 1 {
			t.Errorf("the note queued before acknowledged write %s is missing after the crash", key)
		}
	}
	t.Logf("child acknowledged %d writes (%d writes in %d commits at its last count) before SIGKILL", len(acked), writes, commits)
}

// killDuring runs the crash child test (the test binary itself, running
// only that test, with env set) and kills it with SIGKILL once it has
// acknowledged killAfter writes. ack reads each line of its output and
// reports whether it acknowledged a write; a line starting "error" fails
// the test.
func killDuring(t *testing.T, test, env string, killAfter int, ack func(line string) bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := 0
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "error") {
			t.Errorf("child: %s", line)
			continue
		}
		if ack(line) {
			if acked++; acked == killAfter {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	err = cmd.Wait()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL", err)
	}
	if acked < killAfter {
		t.Fatalf("child acknowledged %d writes before it died, want at least %d", acked, killAfter)
	}
}
