package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/internal/bench"
)

// BenchmarkBackupAndRestore sells TRESOR_BACKUP_BENCH_PLAYS plays (20 000
// by default; 450 000 sells out a block) with tresor simulate, then
// measures, each against its yardstick on the same data directory in the
// same run: tresor backup against the raw ordered read of the same range,
// tresor restore against raw atomic batches of its batch size, and the
// time to recover (the restore, then serve on it until ready).
//
//	go test -run '^$' -bench BenchmarkBackupAndRestore -benchtime 1x ./cmd/tresor/
func BenchmarkBackupAndRestore(b *testing.B) {
	plays := "20000"
	if v := os.Getenv("TRESOR_BACKUP_BENCH_PLAYS"); v != "" {
		plays = v
	}
	passphrase := filepath.Join(b.TempDir(), "passphrase")
	if err := os.WriteFile(passphrase, []byte("bench only\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		data := filepath.Join(b.TempDir(), "data")
		mustRun(b, "simulate", "--data", data, "--plays", plays, "--players", "1024", "--quiet")
		events, readYardstick := orderedReadYardstick(b, data)
		dir := filepath.Join(b.TempDir(), "backup")
		start := time.Now()
		mustRun(b, "backup", "--data", data, "--out", dir, "--keys", "--passphrase-file", passphrase)
		backupRate := float64(events) / time.Since(start).Seconds() // float-ok: a rate

		restored := filepath.Join(b.TempDir(), "restored")
		start = time.Now()
		mustRun(b, "restore", "--from", dir, "--data", restored, "--keys", "--passphrase-file", passphrase)
		restoreTime := time.Since(start)
		s := startServe(b, restored)
		rto := time.Since(start)
		s.stop()
		restoreRate := float64(events) / restoreTime.Seconds() // float-ok: a rate
		batchYardstick := atomicBatchYardstick(b)
		b.ReportMetric(float64(events), "events")                       // float-ok: a metric
		b.ReportMetric(backupRate, "backup_events/s")                   // float-ok: a metric
		b.ReportMetric(readYardstick, "ordered_read_msgs/s")            // float-ok: a metric
		b.ReportMetric(backupRate/readYardstick, "backup/yardstick")    // float-ok: a ratio
		b.ReportMetric(restoreRate, "restore_events/s")                 // float-ok: a metric
		b.ReportMetric(batchYardstick, "atomic_batches_msgs/s")         // float-ok: a metric
		b.ReportMetric(restoreRate/batchYardstick, "restore/yardstick") // float-ok: a ratio
		b.ReportMetric(rto.Seconds(), "rto_s")                          // float-ok: a metric
	}
}

// orderedReadYardstick returns the events of the stream in data and the
// raw ordered read's rate over them.
func orderedReadYardstick(tb testing.TB, data string) (uint64, float64) {
	tb.Helper()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: filepath.Join(data, "jetstream")})
	if err != nil {
		tb.Fatal(err)
	}
	defer srv.Shutdown()
	ctx := context.Background()
	store, err := srv.Open(ctx, eventstore.Config{ReadOnly: true})
	if err != nil {
		tb.Fatal(err)
	}
	defer store.Close()
	last, err := store.LastSequence(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	rate, err := bench.MeasureOrderedRead(ctx, store, 1, last)
	if err != nil {
		tb.Fatal(err)
	}
	return last, rate
}

// atomicBatchYardstick is the rate of raw atomic batches of a restore's
// size (the embedded server's largest), fenced, into a stream configured
// like Tresor's, on a fresh embedded server.
func atomicBatchYardstick(tb testing.TB) float64 {
	tb.Helper()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Conn()
	if err != nil {
		tb.Fatal(err)
	}
	defer nc.Close()
	rate, err := bench.MeasureAtomicBatches(context.Background(), nc, bench.Yardstick{Batches: 50, BatchSize: eventstore.CommitBatchEventsMax,
		MessageBytes: yardstickMessageBytes, Replicas: 1, Subjects: 1024, Fence: true, LikeTresor: true})
	if err != nil {
		tb.Fatal(err)
	}
	return rate
}
