package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/projections/projectionstest"
)

// BenchmarkApply measures events/s applied into the in-memory store through
// a Runner, on 20 000 plays of a real 450 000-unit block (goal ≥ 300 000
// events/s; pgstore's BenchmarkProjections measures it beside PostgreSQL).
func BenchmarkApply(b *testing.B) {
	rules, events := busy(b)
	var elapsed time.Duration
	for b.Loop() {
		s := memstore.New(rules)
		start := time.Now()
		if err := projections.NewRunner(projectionstest.NewLog(events), s).RunTo(context.Background(), uint64(len(events))); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
	}
	b.ReportMetric(float64(len(events))*float64(b.N)/elapsed.Seconds(), "events/s")
}

// busyPlays is the size of the benchmarks' stream, in plays.
const busyPlays = 20_000

// busy returns the default rules and the events of busyPlays plays of a
// real block.
func busy(b *testing.B) (*domain.RuleSet, []projections.Envelope) {
	rules, err := domain.DefaultRules()
	if err != nil {
		b.Fatal(err)
	}
	return rules, projectionstest.Busy(b, rules, busyPlays).Events
}

// BenchmarkSnapshot measures the read models' snapshot of 20 000 and
// 100 000 plays of a real 450 000-unit block: its bytes per play (all
// sections, and the hot one alone), the time batches wait (Freeze, under
// the lock), the encoding outside it, the restore of the hot section (what
// a start waits for) against the hot section and every shard (what a
// format 2 restore decoded), and applying the same events from the first.
func BenchmarkSnapshot(b *testing.B) {
	rules, err := domain.DefaultRules()
	if err != nil {
		b.Fatal(err)
	}
	for _, plays := range []int{busyPlays, 5 * busyPlays} {
		b.Run(fmt.Sprint(plays, "-plays"), func(b *testing.B) { benchmarkSnapshot(b, rules, plays) })
	}
}

func benchmarkSnapshot(b *testing.B, rules *domain.RuleSet, plays int) {
	events := projectionstest.Busy(b, rules, plays).Events
	s := memstore.New(rules)
	applyStart := time.Now()
	if err := projections.NewRunner(projectionstest.NewLog(events), s).RunTo(context.Background(), uint64(len(events))); err != nil {
		b.Fatal(err)
	}
	apply := time.Since(applyStart)
	var held, encode, hot, full time.Duration
	var size, hotSize int
	for b.Loop() {
		start := time.Now()
		f, err := s.Freeze(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		held += time.Since(start)
		var buf memstore.Sections
		start = time.Now()
		if _, err := f.Encode(&buf); err != nil {
			b.Fatal(err)
		}
		encode += time.Since(start)
		size, hotSize = 0, len(buf.Secs[0])
		for _, sec := range buf.Secs {
			size += len(sec)
		}
		start = time.Now()
		r := memstore.New(rules)
		if err := r.Restore(buf.Hot(), &buf, nil); err != nil {
			b.Fatal(err)
		}
		hot += time.Since(start)
		if err := r.LoadAll(); err != nil {
			b.Fatal(err)
		}
		full += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(size), "bytes")
	b.ReportMetric(float64(size)/float64(plays), "bytes/play")
	b.ReportMetric(float64(hotSize), "hot-bytes")
	b.ReportMetric(float64(held.Microseconds())/n/1000, "ms-under-lock")
	b.ReportMetric(float64(encode.Microseconds())/n/1000, "ms-encode")
	b.ReportMetric(float64(hot.Microseconds())/n/1000, "ms-restore-hot")
	b.ReportMetric(float64(full.Microseconds())/n/1000, "ms-restore-full")
	b.ReportMetric(float64(hot)/float64(full), "hot/full")
	b.ReportMetric(float64(apply.Microseconds())/1000, "ms-apply")
}
