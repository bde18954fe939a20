package bench

import (
	"sync"
	"time"

	"github.com/fdj/tresor/settlement"
)

// snapshotSpan is when one snapshot's encoding began, ended, and when its
// store ended, the process's processor time at each (SnapshotSpans.CPU),
// and the snapshot's size.
type snapshotSpan struct {
	began, encoded, stored time.Time
	cpu                    [3]time.Duration
	bytes                  int
}

// SnapshotSpans records when the writer's snapshots were taken, as its
// settlement.SnapshotObserver, so that a measurement can tell what a
// command met (it is the settlement.SnapshotTimeline that
// settlement.Simulate splits latencies by). It is safe for concurrent use.
type SnapshotSpans struct {
	// CPU, when set, returns the processor time the process has used:
	// read at each phase's bounds, so that PhaseCPU can tell what each
	// phase cost the whole process (the server's work on the chunks
	// included), a figure far steadier from run to run than a latency's
	// tail.
	CPU func() time.Duration

	mu    sync.Mutex
	spans []snapshotSpan
	open  snapshotSpan // the snapshot being taken
}

// ObserveSnapshot records that the snapshot being taken entered phase at
// t (settlement.SnapshotObserver); a snapshot is recorded once its store
// has ended.
func (s *SnapshotSpans) ObserveSnapshot(phase settlement.SnapshotPhase, t time.Time, bytes int) {
	cpu := s.cpu()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch phase {
	case settlement.SnapshotEncoding:
		s.open = snapshotSpan{began: t}
		s.open.cpu[0] = cpu
	case settlement.SnapshotStoring:
		s.open.encoded, s.open.cpu[1], s.open.bytes = t, cpu, bytes
	case settlement.NoSnapshot:
		s.open.stored, s.open.cpu[2], s.open.bytes = t, cpu, bytes
		s.spans = append(s.spans, s.open)
		s.open = snapshotSpan{}
	}
}

// cpu reads CPU; zero when s or CPU is nil.
func (s *SnapshotSpans) cpu() time.Duration {
	if s == nil || s.CPU == nil {
		return 0
	}
	return s.CPU()
}

// PhaseCPU is what the process used while snapshots were encoded and
// while they were stored: processor time and wall time, summed over the
// snapshots, with their count and bytes.
type PhaseCPU struct {
	EncodingCPU, EncodingWall time.Duration
	StoringCPU, StoringWall   time.Duration
	Snapshots, Bytes          int
}

// PhaseCPU sums the phases of the snapshots taken wholly between from and
// to (with CPU set).
func (s *SnapshotSpans) PhaseCPU(from, to time.Time) PhaseCPU {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p PhaseCPU
	for _, sp := range s.spans {
		if sp.began.Before(from) || sp.stored.After(to) {
			continue
		}
		p.EncodingCPU += sp.cpu[1] - sp.cpu[0]
		p.EncodingWall += sp.encoded.Sub(sp.began)
		p.StoringCPU += sp.cpu[2] - sp.cpu[1]
		p.StoringWall += sp.stored.Sub(sp.encoded)
		p.Snapshots++
		p.Bytes += sp.bytes
	}
	return p
}

// Count returns the number of snapshots recorded.
func (s *SnapshotSpans) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.spans)
}

// At returns what the snapshotter was doing at t, by the snapshots
// recorded (settlement.SnapshotTimeline).
func (s *SnapshotSpans) At(t time.Time) settlement.SnapshotPhase {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range s.spans {
		switch {
		case t.Before(sp.began) || !t.Before(sp.stored):
		case t.Before(sp.encoded):
			return settlement.SnapshotEncoding
		default:
			return settlement.SnapshotStoring
		}
	}
	return settlement.NoSnapshot
}

// The recorder is what the writer and the simulation take.
var (
	_ settlement.SnapshotObserver = (*SnapshotSpans)(nil)
	_ settlement.SnapshotTimeline = (*SnapshotSpans)(nil)
)
