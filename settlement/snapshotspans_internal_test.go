package settlement

import (
	"testing"
	"time"
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
	s.add(snapshotSpan{at(-50), at(10), at(20), cpu(0, 30, 35), 1})          // begun before the window
	s.add(snapshotSpan{at(100), at(300), at(400), cpu(100, 180, 230), 20})   // within
	s.add(snapshotSpan{at(500), at(600), at(1000), cpu(300, 350, 500), 300}) // within
	s.add(snapshotSpan{at(1900), at(1950), at(2100), cpu(900, 920, 990), 4}) // stored after it
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
