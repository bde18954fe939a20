package memstore_test

import (
	"context"
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
	rules, err := domain.DefaultRules()
	if err != nil {
		b.Fatal(err)
	}
	events := projectionstest.Busy(b, rules, 20_000).Events
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
