package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/projections/pgstore"
	"github.com/fdj/tresor/projections/projectionstest"
	"github.com/jackc/pgx/v5"
)

// benchPlays is the size of the benchmark stream: about 7.3 events a play.
const benchPlays = 20_000

var (
	// benchRuns numbers the benchmark's tables, unique in the test database.
	benchRuns   int
	benchOnce   sync.Once
	benchRules  *domain.RuleSet
	benchEvents []projections.Envelope
)

// benchStream generates the benchmark stream once per run, with the rules
// in force (450 000-unit blocks, real proof lengths).
func benchStream(b *testing.B) ([]projections.Envelope, *domain.RuleSet) {
	benchOnce.Do(func() {
		rules, err := domain.DefaultRules()
		if err != nil {
			b.Fatal(err)
		}
		benchRules = rules
		benchEvents = projectionstest.Busy(b, rules, benchPlays).Events
	})
	return benchEvents, benchRules
}

// BenchmarkProjections measures, in one run, events/s applied into the
// in-memory store and into PostgreSQL, and the raw COPY rate of the same
// events into a plain PostgreSQL table (seq, at, type, payload) in
// transactions of the same batch size: the yardstick the PostgreSQL store
// is held to (goal: pg/copy ≥ 0.7, memory ≥ 300 000 events/s).
func BenchmarkProjections(b *testing.B) {
	events, rules := benchStream(b)
	ctx := context.Background()
	n := float64(len(events))
	var memTime, pgTime, copyTime time.Duration
	for b.Loop() {
		benchRuns++
		i := benchRuns
		mem := memstore.New(rules)
		start := time.Now()
		if err := projections.NewRunner(projectionstest.NewLog(events), mem).RunTo(ctx, uint64(len(events))); err != nil {
			b.Fatal(err)
		}
		memTime += time.Since(start)

		pg, err := pgstore.Open(ctx, testPool, pgstore.Config{Rules: rules, Namespace: fmt.Sprintf("bench_%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if err := projections.NewRunner(projectionstest.NewLog(events), pg).RunTo(ctx, uint64(len(events))); err != nil {
			b.Fatal(err)
		}
		pgTime += time.Since(start)

		d, err := copyYardstick(ctx, events, i)
		if err != nil {
			b.Fatal(err)
		}
		copyTime += d
	}
	loops := float64(b.N)
	mem, pg, cp := n*loops/memTime.Seconds(), n*loops/pgTime.Seconds(), n*loops/copyTime.Seconds()
	b.ReportMetric(mem, "mem-events/s")
	b.ReportMetric(pg, "pg-events/s")
	b.ReportMetric(cp, "copy-rows/s")
	b.ReportMetric(pg/cp, "pg/copy")
	b.ReportMetric(n, "events")

}

// copyYardstick COPYs the events, one row each with their JSON payload,
// into a fresh table, committing every projections.BatchMax rows.
func copyYardstick(ctx context.Context, events []projections.Envelope, i int) (time.Duration, error) {
	table := fmt.Sprintf("copy_yardstick_%d", i)
	if _, err := testPool.Exec(ctx, "CREATE TABLE "+table+" (seq bigint PRIMARY KEY, at timestamptz NOT NULL, type text NOT NULL, payload jsonb NOT NULL)"); err != nil {
		return 0, err
	}
	rows := make([][]any, len(events))
	for j, env := range events {
		payload, err := json.Marshal(env.Event)
		if err != nil {
			return 0, err
		}
		rows[j] = []any{int64(env.Seq), env.At, env.Event.EventType(), string(payload)}
	}
	start := time.Now()
	for lo := 0; lo < len(rows); lo += projections.BatchMax {
		hi := min(lo+projections.BatchMax, len(rows))
		err := pgx.BeginFunc(ctx, testPool, func(tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{table}, []string{"seq", "at", "type", "payload"}, pgx.CopyFromRows(rows[lo:hi]))
			return err
		})
		if err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// lagRate is the write rate BenchmarkLag paces its producer at (events/s),
// in chunks of lagChunk: the order of the event store's atomic-batch rate.
const (
	lagRate  = 50_000
	lagChunk = 500
)

// BenchmarkLag follows a stream written at lagRate events/s into PostgreSQL
// and into memory and reports the largest lag seen (head minus applied,
// sampled every millisecond): bounded lag means the projection keeps up.
func BenchmarkLag(b *testing.B) {
	events, rules := benchStream(b)
	for b.Loop() {
		benchRuns++
		pg, err := pgstore.Open(context.Background(), testPool, pgstore.Config{Rules: rules, Namespace: fmt.Sprintf("lag_%d", benchRuns)})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(maxLag(b, events, pg)), "pg-max-lag-events")
		b.ReportMetric(float64(maxLag(b, events, memstore.New(rules))), "mem-max-lag-events")
	}
}

// maxLag writes events at lagRate while a Runner follows them into s, and
// returns the largest lag sampled.
func maxLag(b *testing.B, events []projections.Envelope, s projections.Store) uint64 {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := projectionstest.NewLog(nil)
	r := projections.NewRunner(log, s)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var worst uint64
	sample := time.NewTicker(time.Millisecond)
	defer sample.Stop()
	pace := time.NewTicker(time.Second * lagChunk / lagRate)
	defer pace.Stop()
	for next := 0; next < len(events) || r.Applied() < uint64(len(events)); {
		select {
		case <-pace.C:
			if next < len(events) {
				hi := min(next+lagChunk, len(events))
				log.Append(events[next:hi]...)
				next = hi
			}
		case <-sample.C:
			lag, err := r.Lag(ctx)
			if err != nil {
				b.Fatal(err)
			}
			worst = max(worst, lag.Events())
		case err := <-done:
			b.Fatalf("runner stopped: %v", err)
		}
	}
	cancel()
	<-done
	return worst
}
