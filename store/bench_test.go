package store_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/secgpt/secgpt/store"
	"github.com/secgpt/secgpt/store/storetest"
)

// BenchmarkCommit measures one small committed INSERT (autocommit) with the
// two WAL drivers registered by go.mau.fi/util/dbutil/litestream, which
// differ only in synchronous=NORMAL versus FULL. It decided the store's
// driver: FULL unless it costs more than about 2 ms per commit.
func BenchmarkCommit(b *testing.B) {
	for _, bm := range []struct{ name, driver string }{
		{"synchronous=NORMAL", "sqlite3-fk-wal"},
		{"synchronous=FULL", "sqlite3-fk-wal-fullsync"},
	} {
		b.Run(bm.name, func(b *testing.B) {
			db, err := sql.Open(bm.driver, "file:"+filepath.Join(b.TempDir(), "bench.db")+"?_txlock=immediate")
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)"); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := db.Exec("INSERT INTO t (v) VALUES ('a small committed row')"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendAudit measures one audit entry through the store, as the
// hub writes one per permission decision.
func BenchmarkAppendAudit(b *testing.B) {
	s := storetest.Open(b)
	ctx := context.Background()
	e := store.AuditEntry{User: "@a:x", SessionID: "s", QueryID: "q", Category: store.CategoryExec,
		Subject: "mail", AppVersion: "v1", Decision: "allow", Source: "grant"}
	start := cpuTime(b)
	for b.Loop() {
		if err := s.AppendAudit(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime(b)-start).Microseconds())/float64(b.N), "cpu-µs/op")
}

// BenchmarkAppendAuditConcurrent measures audit entries written by 100
// writers at once, as 100 users' first queries write theirs: with group
// commit the writers waiting at one moment share one commit, so the time
// per entry falls with the number of writers instead of queueing each
// behind the others' syncs.
func BenchmarkAppendAuditConcurrent(b *testing.B) {
	s := storetest.Open(b)
	ctx := context.Background()
	e := store.AuditEntry{User: "@a:x", SessionID: "s", QueryID: "q", Category: store.CategoryExec,
		Subject: "mail", AppVersion: "v1", Decision: "allow", Source: "grant"}
	before := s.WriteStats()
	b.SetParallelism(50) // × GOMAXPROCS writers
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.AppendAudit(ctx, e); err != nil {
				b.Error(err)
				return
			}
		}
	})
	after := s.WriteStats()
	if c := after.Commits - before.Commits; c > 0 {
		b.ReportMetric(float64(after.Writes-before.Writes)/float64(c), "writes/commit")
	}
}

// BenchmarkFindGrant measures the grant lookup the hub makes for each
// step of a plan, and reports its CPU time per lookup (this process's,
// so it holds on a machine whose wall times vary with its other load).
func BenchmarkFindGrant(b *testing.B) {
	s := storetest.Open(b)
	ctx := context.Background()
	if err := s.PutGrant(ctx, store.Grant{User: "@a:x", Category: store.CategoryExec, Subject: "mail", AppVersion: "v1", Duration: store.DurationAlways}); err != nil {
		b.Fatal(err)
	}
	start := cpuTime(b)
	for b.Loop() {
		if _, ok, err := s.FindGrant(ctx, "@a:x", store.CategoryExec, "mail", "v1", "s"); err != nil || !ok {
			b.Fatalf("FindGrant: %v, found %t", err, ok)
		}
	}
	b.ReportMetric(float64((cpuTime(b)-start).Microseconds())/float64(b.N), "cpu-µs/op")
}

// cpuTime is this process's CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
