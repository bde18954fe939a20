package audit_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/projections/projectionstest"
	"github.com/fdj/tresor/settlement"
)

// BenchmarkAudit measures the auditor alone, without a server: a busy
// day's stream of the real write side (projectionstest.Busy: 1 € plays on
// a 450 000-unit block, so proofs have their real length), encoded as the
// event store records it, fed from memory. tresor audit --yardstick
// measures the whole path on a real stream (docs/performance.md).
func BenchmarkAudit(b *testing.B) {
	rules, err := domain.DefaultRules()
	if err != nil {
		b.Fatal(err)
	}
	events := recorded(b, projectionstest.Busy(b, rules, 20_000))
	b.ResetTimer()
	for b.Loop() {
		// The stream is not sealed: no chain of it is expected to be.
		a, err := audit.New(audit.Config{Rules: rules, SealGapMax: math.MaxUint64})
		if err != nil {
			b.Fatal(err)
		}
		for _, ev := range events {
			a.Check(ev)
		}
		if r := a.Finish(); !r.OK {
			b.Fatalf("%d violations: %+v", r.ViolationsTotal, r.Violations[:min(5, len(r.Violations))])
		}
	}
	b.ReportMetric(float64(len(events))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// recorded turns a World's stream into the chain the event store would
// have recorded: payloads as the writer encodes them, hashed and linked.
func recorded(tb testing.TB, w *projectionstest.World) []eventstore.RecordedEvent {
	tb.Helper()
	events := make([]eventstore.RecordedEvent, 0, len(w.Events))
	for _, env := range w.Events {
		p, err := json.Marshal(env.Event)
		if err != nil {
			tb.Fatal(err)
		}
		kind, id, _ := strings.Cut(env.Event.AggregateID(), ".")
		events = append(events, eventstore.RecordedEvent{
			Event: eventstore.Event{ID: "e" + id, Type: env.Event.EventType(), SchemaVersion: uint32(domain.SchemaVersion[env.Event.EventType()]),
				Aggregate: eventstore.Aggregate{Kind: kind, ID: id}, Payload: p},
			Chain: settlement.Chain, RecordedAt: env.At,
		})
	}
	return rechain(events)
}
