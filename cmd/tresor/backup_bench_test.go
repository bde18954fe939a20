package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/internal/bench"
	"github.com/nats-io/nats.go"
)

// BenchmarkBackupAndRestore sells TRESOR_BACKUP_BENCH_PLAYS plays (20 000
// by default; 450 000 sell out a block: make bench-backup) with tresor
// simulate, runs serve on the ledger once so that it holds what a serving
// ledger holds (the read models' snapshot taken at its stop), then
// measures, each against its yardstick on the same data directory in the
// same run, before and after it: tresor backup against the raw ordered
// read of the same range, tresor restore against raw atomic batches of its
// batch size (and, once after, raw atomic batches of messages like the
// events: their size, their envelope's headers, over as many subjects:
// what the server itself takes for such messages); and the time to
// recover, the restore then serve on it until ready. TRESOR_BACKUP_BENCH_DATA names a data directory to measure
// instead of simulating one (serve runs on it once all the same).
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
		data := os.Getenv("TRESOR_BACKUP_BENCH_DATA")
		if data == "" {
			data = filepath.Join(b.TempDir(), "data")
			mustRun(b, "simulate", "--data", data, "--plays", plays, "--players", "1024", "--quiet")
		}
		serveUntilReady(b, data).stop()

		events, readBefore := orderedReadYardstick(b, data)
		dir := filepath.Join(b.TempDir(), "backup")
		start := time.Now()
		b.Log(mustRun(b, "backup", "--data", data, "--out", dir, "--keys", "--passphrase-file", passphrase))
		backupRate := float64(events) / time.Since(start).Seconds() // float-ok: a rate
		_, readAfter := orderedReadYardstick(b, data)
		readYardstick := (readBefore + readAfter) / 2

		batchBefore := atomicBatchYardstick(b)
		restored := filepath.Join(b.TempDir(), "restored")
		start = time.Now()
		b.Log(mustRun(b, "restore", "--from", dir, "--data", restored, "--keys", "--passphrase-file", passphrase))
		restoreTime := time.Since(start)
		s := serveUntilReady(b, restored)
		rto := time.Since(start)
		s.stop()
		batchYardstick := (batchBefore + atomicBatchYardstick(b)) / 2
		shape := eventsShape(b, data)
		likeEvents := atomicBatchesOf(b, shape)
		restoreRate := float64(events) / restoreTime.Seconds() // float-ok: a rate
		b.Logf("yardsticks before · after: ordered read %.0f · %.0f, atomic batches %.0f · %.0f msgs/s", readBefore, readAfter, batchBefore, 2*batchYardstick-batchBefore)
		b.ReportMetric(float64(events), "events")                       // float-ok: a metric
		b.ReportMetric(backupRate, "backup_events/s")                   // float-ok: a metric
		b.ReportMetric(readYardstick, "ordered_read_msgs/s")            // float-ok: a metric
		b.ReportMetric(backupRate/readYardstick, "backup/yardstick")    // float-ok: a ratio
		b.ReportMetric(restoreRate, "restore_events/s")                 // float-ok: a metric
		b.ReportMetric(batchYardstick, "atomic_batches_msgs/s")         // float-ok: a metric
		b.ReportMetric(restoreRate/batchYardstick, "restore/yardstick") // float-ok: a ratio
		b.ReportMetric(likeEvents, "atomic_batches_like_events_msgs/s") // float-ok: a metric
		b.ReportMetric(restoreRate/likeEvents, "restore/like_events")   // float-ok: a ratio
		b.ReportMetric(restoreTime.Seconds(), "restore_s")              // float-ok: a metric
		b.ReportMetric(rto.Seconds(), "rto_s")                          // float-ok: a metric
	}
}

// serveReadyMax bounds serve's start on a ledger of a sold-out block: a
// replay of the whole stream when it has no snapshot.
const serveReadyMax = 10 * time.Minute

// serveUntilReady starts serve on data and waits until it is ready.
func serveUntilReady(tb testing.TB, data string) *server {
	tb.Helper()
	s := startListening(tb, data)
	s.waitReady(serveReadyMax)
	return s
}

// openStreamOf opens the stream in data read-only on an embedded server
// of the benchmark's own, and returns its last sequence and what closes
// both, to be called before a command opens data.
func openStreamOf(tb testing.TB, data string) (store *eventstore.NATSStore, last uint64, shut func()) {
	tb.Helper()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: filepath.Join(data, "jetstream")})
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	store, err = srv.Open(ctx, eventstore.Config{ReadOnly: true})
	if err != nil {
		srv.Shutdown()
		tb.Fatal(err)
	}
	shut = func() {
		store.Close()
		srv.Shutdown()
	}
	if last, err = store.LastSequence(ctx); err != nil {
		shut()
		tb.Fatal(err)
	}
	return store, last, shut
}

// orderedReadYardstick returns the events of the stream in data and the
// raw ordered read's rate over them.
func orderedReadYardstick(tb testing.TB, data string) (uint64, float64) {
	tb.Helper()
	ctx := context.Background()
	store, last, shut := openStreamOf(tb, data)
	defer shut()
	rate, err := bench.MeasureOrderedRead(ctx, store, 1, last)
	if err != nil {
		tb.Fatal(err)
	}
	return last, rate
}

// atomicBatchYardstick is the rate of raw atomic batches of a restore's
// size (the embedded server's largest) of the yardsticks' 400-byte
// messages, fenced, into a stream configured like Tresor's, on a fresh
// embedded server.
func atomicBatchYardstick(tb testing.TB) float64 {
	return atomicBatchesOf(tb, messageShape{bytes: yardstickMessageBytes, subjects: 1024})
}

// messageShape is what a batch yardstick's messages are like: their
// header, payload size and how many subjects they spread over.
type messageShape struct {
	header          nats.Header
	bytes, subjects int
}

// atomicBatchesOf is atomicBatchYardstick of messages of shape m.
func atomicBatchesOf(tb testing.TB, m messageShape) float64 {
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
		MessageBytes: m.bytes, Header: m.header, Replicas: 1, Subjects: m.subjects, Fence: true, LikeTresor: true})
	if err != nil {
		tb.Fatal(err)
	}
	return rate
}

// eventsShape is the shape of the events of the stream in data, for a
// yardstick of messages like them: the envelope headers of the event in
// the middle of the stream (without the server's own), the mean payload
// of the batch of events around it, and as many subjects as the stream
// holds (a play's, a player's: each new one costs the server an entry).
func eventsShape(tb testing.TB, data string) messageShape {
	tb.Helper()
	store, last, shut := openStreamOf(tb, data)
	defer shut()
	return eventsShapeOf(tb, store, last)
}

// eventsShapeOf is eventsShape of the stream of store, which ends at last.
func eventsShapeOf(tb testing.TB, store *eventstore.NATSStore, last uint64) messageShape {
	tb.Helper()
	ctx := context.Background()
	from := max(1, last/2)
	to := min(last, from+eventstore.CommitBatchEventsMax-1)
	info, err := store.Stream().Info(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	header, payload := nats.Header{}, 0
	for seq := from; seq <= to; seq++ {
		m, err := store.Stream().GetMsg(ctx, seq)
		if err != nil {
			tb.Fatal(err)
		}
		payload += len(m.Data)
		if seq == from {
			for k, v := range m.Header {
				if !strings.HasPrefix(k, "Nats-") {
					header[k] = v
				}
			}
		}
	}
	return messageShape{header: header, bytes: payload / int(to-from+1), subjects: int(max(info.State.NumSubjects, 1))}
}
