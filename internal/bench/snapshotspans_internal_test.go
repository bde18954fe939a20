package bench

import (
	"testing"
	"time"

	"github.com/fdj/tresor/settlement"
)

// TestPhaseCPUSumsTheSnapshotsWithinTheWindow: each phase's processor and
// wall time, and the snapshots' count and bytes, are summed over the
// snapshots taken wholly within the window; one begun before it or stored
// after it is left out.
func TestPhaseCPUSumsTheSnapshotsWithinTheWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cpu := func(ms ...int) [3]time.Duration {
		return [3]time.Duration{time.Duration(ms[0]) * time.Millisecond, time.Duration(ms[1]) * time.Millisecond, time.Duration(ms[2]) * time.Millisecond}
	}
	s := &SnapshotSpans{}
	add := func(sp snapshotSpan) {
		ms := sp.cpu
		s.CPU = func() time.Duration { return ms[0] }
		s.ObserveSnapshot(settlement.SnapshotEncoding, sp.began, 0)
		s.CPU = func() time.Duration { return ms[1] }
		s.ObserveSnapshot(settlement.SnapshotStoring, sp.encoded, sp.bytes)
		s.CPU = func() time.Duration { return ms[2] }
		s.ObserveSnapshot(settlement.NoSnapshot, sp.stored, sp.bytes)
	}
	add(snapshotSpan{at(-50), at(10), at(20), cpu(0, 30, 35), 1})          // begun before the window
	add(snapshotSpan{at(100), at(300), at(400), cpu(100, 180, 230), 20})   // within
	add(snapshotSpan{at(500), at(600), at(1000), cpu(300, 350, 500), 300}) // within
	add(snapshotSpan{at(1900), at(1950), at(2100), cpu(900, 920, 990), 4}) // stored after it
	got := s.PhaseCPU(at(0), at(2000))
	want := PhaseCPU{EncodingCPU: 130 * time.Millisecond, EncodingWall: 300 * time.Millisecond,
		StoringCPU: 200 * time.Millisecond, StoringWall: 500 * time.Millisecond, Snapshots: 2, Bytes: 320}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if (&SnapshotSpans{}).cpu() != 0 || (*SnapshotSpans)(nil).cpu() != 0 {
		t.Fatal("a clock read without CPU set")
	}
}

// TestSnapshotSpansTellWhatACommandMet: a time within a recorded snapshot
// is in its encoding or its store; before or after, or within a snapshot
// whose encoding failed (no store observed), in none.
func TestSnapshotSpansTellWhatACommandMet(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s := &SnapshotSpans{}
	s.ObserveSnapshot(settlement.SnapshotEncoding, at(0), 0) // its encoding failed
	s.ObserveSnapshot(settlement.SnapshotEncoding, at(100), 0)
	s.ObserveSnapshot(settlement.SnapshotStoring, at(200), 10)
	s.ObserveSnapshot(settlement.NoSnapshot, at(300), 10)
	for _, c := range []struct {
		ms   int
		want settlement.SnapshotPhase
	}{{50, settlement.NoSnapshot}, {100, settlement.SnapshotEncoding}, {199, settlement.SnapshotEncoding},
		{200, settlement.SnapshotStoring}, {299, settlement.SnapshotStoring}, {300, settlement.NoSnapshot}} {
		if got := s.At(at(c.ms)); got != c.want {
			t.Errorf("at %d ms: got phase %d, want %d", c.ms, got, c.want)
		}
	}
	if s.Count() != 1 {
		t.Fatalf("%d snapshots recorded, want 1", s.Count())
	}
}
