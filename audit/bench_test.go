package audit_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
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
// measures the whole path on a real stream.
func BenchmarkAudit(b *testing.B) {
	cfg, events := busyDay(b)
	b.ResetTimer()
	for b.Loop() {
		a, err := audit.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		for _, ev := range events {
			a.Check(ev)
		}
		wantOK(b, a.Finish())
	}
	b.ReportMetric(float64(len(events))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkAuditResume measures an incremental audit of the same stream:
// the state of an audit of its first four fifths is on disk; each round
// reads it, checks the last fifth and writes the new state. It should take
// about a fifth of BenchmarkAudit's time.
func BenchmarkAuditResume(b *testing.B) {
	cfg, events := busyDay(b)
	// Cut between two appends, as a live stream always is: before a stake.
	cut := len(events) * 4 / 5
	for events[cut].Type != "StakePlaced" {
		cut++
	}
	first, err := audit.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for _, ev := range events[:cut] {
		first.Check(ev)
	}
	wantOK(b, first.Finish())
	st, err := first.State()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	saved, next := filepath.Join(dir, "saved.state"), filepath.Join(dir, "next.state")
	if err := audit.WriteStateFile(saved, st); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		st, err := audit.ReadStateFile(saved)
		if err != nil {
			b.Fatal(err)
		}
		a, err := audit.Resume(cfg, st)
		if err != nil {
			b.Fatal(err)
		}
		for _, ev := range events[cut:] {
			a.Check(ev)
		}
		wantOK(b, a.Finish())
		if st, err = a.State(); err != nil {
			b.Fatal(err)
		}
		if err := audit.WriteStateFile(next, st); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(events)-cut)*float64(b.N)/b.Elapsed().Seconds(), "new-events/s")
	if fi, err := os.Stat(saved); err == nil {
		b.ReportMetric(float64(fi.Size()), "state-bytes")
	}
}

// busyDay returns the configuration and the events of the benchmarks: a
// busy day's stream, not sealed, so no chain of it is expected to be.
func busyDay(b *testing.B) (audit.Config, []eventstore.RecordedEvent) {
	b.Helper()
	rules, err := domain.DefaultRules()
	if err != nil {
		b.Fatal(err)
	}
	return audit.Config{Rules: rules, SealGapMax: math.MaxUint64}, recorded(b, projectionstest.Busy(b, rules, 20_000))
}

func wantOK(b *testing.B, r *audit.Report) {
	b.Helper()
	if !r.OK {
		b.Fatalf("%d violations: %+v", r.ViolationsTotal, r.Violations[:min(5, len(r.Violations))])
	}
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
