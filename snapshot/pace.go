package snapshot

import (
	"context"
	"io"
	"runtime"
	"time"
)

// A snapshot is taken beside the commands it must not slow down: its
// encoding competes for the processors with the writer, and its bytes for
// the server and the disk with the stream's commits. This file holds the
// one policy for both: an encoding beside a running writer takes a small
// share of one processor (EncodePace), and a store sends its bytes at a
// Pace chosen by what the snapshot is (DefaultPace, WriterPace), unpaced
// only when nothing else waits on the server (Unpaced).

// Pace is how fast a store sends a snapshot's bytes to the server. Sent
// at once, a snapshot's megabytes queue in front of the writer's commits
// on the connection, the server and the disk they share; held to a pace,
// a snapshot of B bytes takes B / BytesPerSecond to store instead. A
// slower pace delays the commands less, at the cost of a snapshot that
// takes longer to land.
type Pace struct {
	// BytesPerSecond bounds the rate; 0 (or below): as fast as the server
	// takes them.
	BytesPerSecond int
	// Within, when set, lets a snapshot saved whole (Slot.Save) go faster
	// than BytesPerSecond when that would take longer than Within: a pace
	// chosen for the usual size does not stretch a large snapshot's store
	// past it.
	Within time.Duration
}

// The paces of Tresor's snapshots.
var (
	// DefaultPace is the read models' snapshots' pace: large (hundreds of
	// megabytes after a sold-out block) and taken every few minutes, they
	// need a pace that stores them in seconds.
	DefaultPace = Pace{BytesPerSecond: 16 << 20}
	// WriterPace is the writer's snapshots' pace, a sixteenth of
	// DefaultPace: taken every settlement.Config.SnapshotEvery events
	// while commands go on, they are stored while the writer is busiest.
	// Each chunk crossing the server delays the commits in flight; sent
	// less often, the chunks meet fewer commands. Within keeps a large
	// ledger's store well inside SaveMax.
	WriterPace = Pace{BytesPerSecond: 1 << 20, Within: 20 * time.Second}
	// Unpaced is for a snapshot taken when nothing waits on the server
	// (the closing snapshot of the embedded default, once its writer has
	// stopped), which a pace would only make the stop wait for.
	Unpaced = Pace{}
)

// Rate is the rate, in bytes a second, at which the pace sends a
// snapshot of bytes: BytesPerSecond, or faster to take Within (0: as fast
// as the server takes them).
func (p Pace) Rate(bytes int) int {
	if p.BytesPerSecond <= 0 {
		return 0
	}
	if p.Within <= 0 {
		return p.BytesPerSecond
	}
	return max(p.BytesPerSecond, int(time.Duration(bytes)*time.Second/p.Within))
}

// limiter holds bytes back to a rate: the rate is a ceiling, not a wait
// added, so time the server already took to take the bytes before counts
// toward it.
type limiter struct {
	rate int       // bytes a second; 0 lets every byte go at once
	next time.Time // when the limiter lets the next bytes go
}

// wait returns once the limiter lets n more bytes go.
func (l *limiter) wait(ctx context.Context, n int) error {
	if l.rate <= 0 {
		return nil
	}
	now := time.Now()
	if wait := l.next.Sub(now); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		now = l.next
	}
	l.next = now.Add(time.Duration(n) * time.Second / time.Duration(l.rate))
	return nil
}

// pacedReader hands a part to the Object Store, which publishes each read
// (a chunk, Config.ChunkBytes) at once without waiting for its
// acknowledgement: it holds a read back until the limiter lets its bytes
// go, so that the stream's commits never queue behind more than a chunk of
// the snapshot's.
type pacedReader struct {
	ctx  context.Context
	pace *limiter
	data []byte
}

func (r *pacedReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	if err := r.pace.wait(r.ctx, min(len(p), len(r.data))); err != nil {
		return 0, err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// NewPacedReader returns a reader of data that holds each read back as a
// snapshot's parts are held, at rate bytes a second (0: no pace). It is
// exported for the latency yardstick of internal/bench, which stores
// objects at the writer's pace with no writer beside it.
func NewPacedReader(ctx context.Context, rate int, data []byte) io.Reader {
	return &pacedReader{ctx: ctx, pace: &limiter{rate: rate}, data: data}
}

// encodeShareInverse sets the share of one processor an encoding paced by
// EncodePace takes: one part in sixteen. An encoding that ran flat out
// held a whole processor, and on a machine with few cores every goroutine
// a command goes through (the writer's loop, the committer, the server's)
// waited for it. The price is a longer encoding, seconds for a large
// ledger, which a snapshot every settlement.Config.SnapshotEvery events
// affords.
const encodeShareInverse = 16

// encodeSliceMin is the least work between two rests: shorter sleeps
// cost more in timer wake-ups than they give back.
const encodeSliceMin = 500 * time.Microsecond

// EncodePace paces an encoding beside a running writer (its Pause is a
// domain.LedgerEncoder's): after each slice of work it sleeps fifteen
// times as long, the processor free for the writer meanwhile, and within
// a slice it yields at every call, so that a goroutine of the writer or
// of the server that became runnable meanwhile runs first instead of
// waiting for the slice to end. Time the encoding lost to other
// goroutines counts as work: the pace errs on the quiet side.
type EncodePace struct {
	// Stopped, once closed (the writer has stopped), lifts the pace: the
	// close would otherwise wait seconds for a large snapshot's paced
	// encoding.
	Stopped <-chan struct{}
	since   time.Time
}

// Begin starts counting the work of an encoding: call it as one begins.
func (p *EncodePace) Begin() { p.since = time.Now() }

// Pause rests or yields as the pace says.
func (p *EncodePace) Pause() {
	select {
	case <-p.Stopped:
		return
	default:
	}
	worked := time.Since(p.since)
	if worked < encodeSliceMin {
		runtime.Gosched()
		return
	}
	time.Sleep(worked * (encodeShareInverse - 1))
	p.since = time.Now()
}

// YieldingPause returns a pause for an encoding that needs no rest (a
// closing snapshot, a standby's) but must not hold a processor: it lets
// the goroutines waiting for it run every pausesBetweenYields pauses, and
// never waits. Without it, an encoding on few cores would be preempted
// only at the end of the scheduler's time slice, a delay a command may
// meet at each goroutine it goes through.
func YieldingPause() func() {
	n := 0
	return func() {
		if n++; n%pausesBetweenYields == 0 {
			runtime.Gosched()
		}
	}
}

// pausesBetweenYields is how many of an encoder's pauses (a few hundred
// keys or accounts each) YieldingPause lets go by between two yields: a
// few tenths of a millisecond of encoding.
const pausesBetweenYields = 8
