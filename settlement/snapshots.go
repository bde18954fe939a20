package settlement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/snapshot"
)

// SnapshotKind names the writer's snapshots in the snapshot bucket.
const SnapshotKind = "writer"

// WriterSnapshots returns the slot of the writer's snapshots of the
// shard's chain under rules, stored at the writer's pace.
func WriterSnapshots(b *snapshot.Bucket, rules *domain.RuleSet) *snapshot.Slot {
	return b.Slot(SnapshotKind, Chain, domain.LedgerFormatVersion, domain.RuleSetID(rules)).Paced(snapshot.WriterPace)
}

// Follower is a ledger that follows events applied elsewhere first — the
// writer's acknowledged appends, or the stream's tail for a standby — so
// that it can be encoded at a known sequence without stopping anyone.
type Follower struct {
	ledger *domain.Ledger
	seq    uint64
}

// NewFollower follows on from a ledger that holds every event up to seq.
func NewFollower(l *domain.Ledger, seq uint64) *Follower { return &Follower{ledger: l, seq: seq} }

// Apply applies the event recorded at stream sequence seq.
func (f *Follower) Apply(seq uint64, at time.Time, e domain.Event) error {
	if err := f.ledger.Evolve(at, e); err != nil {
		return fmt.Errorf("follow sequence %d: %w", seq, err)
	}
	f.seq = seq
	return nil
}

// Seq returns the sequence of the last event applied.
func (f *Follower) Seq() uint64 { return f.seq }

// Encode returns the ledger's snapshot as of Seq.
func (f *Follower) Encode() ([]byte, error) { return domain.EncodeLedger(f.ledger) }

// EncodeWith encodes the ledger's snapshot as of Seq with e, into e's
// buffer (see domain.LedgerEncoder).
func (f *Follower) EncodeWith(e *domain.LedgerEncoder) ([]byte, error) { return e.Encode(f.ledger) }

// startingLedger returns the ledger the writer starts from and the
// sequence it holds everything up to: a standby's (Config.Start), or the
// newest snapshot that passes every
// check, or an empty ledger when there is none or it fails one, which the
// log names. With snapshots, it also returns where the follower starts: the
// snapshot's bytes, which the follower decodes itself once the writer runs
// (a second decode would delay the start), or an empty follower beside an
// empty ledger.
func startingLedger(ctx context.Context, cfg Config) (*domain.Ledger, uint64, *Follower, []byte) {
	if cfg.Start != nil {
		return cfg.Start.Ledger, cfg.Start.Seq, nil, nil
	}
	fresh := cfg.NewLedger
	if cfg.Snapshots == nil {
		return fresh(), 0, nil, nil
	}
	if l, seq, data := loadSnapshot(ctx, &cfg); l != nil {
		return l, seq, nil, data
	}
	return fresh(), 0, NewFollower(fresh(), 0), nil
}

// loadSnapshot decodes the newest snapshot that passes every check into a
// ledger of its own, and returns it with the sequence it holds everything
// up to and the snapshot's bytes; with none usable it logs why and returns
// a nil ledger: the caller then replays the whole stream.
func loadSnapshot(ctx context.Context, cfg *Config) (*domain.Ledger, uint64, []byte) {
	start := time.Now()
	seq, data, skipped, err := cfg.Snapshots.Load(ctx)
	loaded := time.Since(start)
	for _, why := range skipped {
		cfg.Logger.Warn("snapshot skipped for an older one", "reason", why)
	}
	if err == nil {
		var l *domain.Ledger
		if l, err = decodeLedger(*cfg, data); err == nil {
			cfg.Logger.Info("starting from a snapshot", "seq", seq, "bytes", len(data), "load", loaded.Round(time.Millisecond),
				"decode", (time.Since(start) - loaded).Round(time.Millisecond))
			return l, seq, data
		}
	}
	switch {
	case ctx.Err() != nil:
		// Given up (a standby's follower handed over while it loaded):
		// nothing to say about the snapshot.
	case errors.Is(err, snapshot.ErrNotFound):
		cfg.Logger.Info("no snapshot: replaying the whole stream")
	default:
		cfg.Logger.Warn("snapshot ignored: replaying the whole stream", "reason", err)
	}
	return nil, 0, nil
}

// SnapshotStart returns a ledger decoded from the newest snapshot that
// passes every check of Config.Snapshots (the writer's checks: see
// loadSnapshot), with the deck of each block not yet closed attached, for
// a standby to follow the stream from; the ledger is its own, shared with
// nothing. It returns nil without snapshots or when none is usable (the
// log names why): the standby then follows from the first event.
func SnapshotStart(ctx context.Context, cfg *Config) *Start {
	if cfg.Snapshots == nil {
		return nil
	}
	l, seq, _ := loadSnapshot(ctx, cfg)
	if l == nil {
		return nil
	}
	for _, b := range l.Blocks {
		if b.State == domain.BlockStateClosed {
			continue
		}
		deck, _, err := OpenDeck(cfg, b)
		if err != nil {
			cfg.Logger.Warn("snapshot ignored: replaying the whole stream", "reason", err)
			return nil
		}
		l.AttachDeck(deck)
	}
	return &Start{Ledger: l, Seq: seq}
}

// decodeLedger decodes a snapshot and checks it was taken under the
// idempotency window in force: keys a shorter window forgot would be
// remembered by a replay under a longer one.
func decodeLedger(cfg Config, data []byte) (*domain.Ledger, error) {
	l, err := domain.DecodeLedger(cfg.Rules, data)
	if err != nil {
		return nil, err
	}
	if l.IdempotencyWindow != cfg.IdempotencyWindow {
		return nil, fmt.Errorf("%w: taken with an idempotency window of %s, the writer runs %s",
			domain.ErrSnapshotFormat, l.IdempotencyWindow, cfg.IdempotencyWindow)
	}
	return l, nil
}

// snapshotter feeds a follower with the writer's appends once they are
// acknowledged, in the order they were submitted, and takes snapshots
// from it: the writer's loop only queues its appends, never waits.
type snapshotter struct {
	// f is the follower; nil until run has decoded data, the snapshot
	// taken at dataSeq that the writer started from.
	f        *Follower
	data     []byte
	dataSeq  uint64
	cfg      Config
	store    snapshot.Store
	closing  snapshot.Store
	interval time.Duration
	log      *slog.Logger

	mu    sync.Mutex
	queue []*appendDone
	wake  chan struct{}

	// since counts the events applied since the last snapshot (at start,
	// those replayed after the snapshot started from); taken is when the
	// last snapshot was taken.
	since int
	taken time.Time

	// enc keeps its buffers from one snapshot to the next; pace is its
	// Pause while the writer runs.
	enc  domain.LedgerEncoder
	pace snapshot.EncodePace

	// stored is closed once the store of the last snapshot encoded has
	// ended (until then enc's buffer holds its bytes, and no other is
	// encoded), abandon cuts that store short, and storedOK says, once
	// stored is closed, whether it succeeded.
	stored   chan struct{}
	abandon  context.CancelFunc
	storedOK bool
}

// newSnapshotter follows on from f, or from the snapshot data taken at
// dataSeq when f is nil; since counts the events f applied since the
// snapshot it started from (those queued are counted as they are
// applied).
func newSnapshotter(cfg Config, f *Follower, data []byte, dataSeq uint64, since int) *snapshotter {
	s := &snapshotter{f: f, data: data, dataSeq: dataSeq, cfg: cfg, store: cfg.Snapshots, closing: cfg.ClosingSnapshots,
		interval: cfg.SnapshotInterval, log: cfg.Logger, wake: make(chan struct{}, 1), since: since, taken: time.Now()}
	s.enc.Pause = s.pace.Pause
	return s
}

// push queues an append handed to the log; it never blocks.
func (s *snapshotter) push(a *appendDone) {
	s.mu.Lock()
	s.queue = append(s.queue, a)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run follows the appends until stop is closed (the writer's loop has
// returned and every append has answered), then takes a last snapshot of
// what is new, so that the next start replays nothing.
func (s *snapshotter) run(stop <-chan struct{}) {
	if s.f == nil {
		l, err := decodeLedger(s.cfg, s.data)
		if err != nil {
			// The writer decoded the same bytes: a bug, not a bad snapshot.
			s.log.Error("snapshots stopped: the follower cannot decode the snapshot the writer started from", "err", err)
			return
		}
		s.f, s.data = NewFollower(l, s.dataSeq), nil
	}
	s.pace.Stopped = stop
	// The events replayed after the snapshot first: a snapshot due
	// because of them holds them.
	if !s.follow() {
		return
	}
	tick := time.NewTicker(min(s.interval, time.Minute))
	defer tick.Stop()
	// A writer that failed takes no closing snapshot: the store of the
	// last one, of acknowledged events only, is let finish, briefly.
	defer s.settle()
	for {
		if snapshot.Due(s.cfg.SnapshotEvery, s.cfg.SnapshotInterval, s.since, s.taken) && s.isStored() {
			s.save()
		}
		select {
		case <-s.wake:
			if !s.follow() {
				return
			}
		case <-tick.C:
		case <-stop:
			if !s.follow() {
				return
			}
			// A store still going at the writer's pace would make the
			// close wait for it (up to snapshot.WriterPace.Within): it is
			// abandoned, and the closing snapshot, which holds all it
			// held, goes in its place.
			cutShort := s.abandonStore()
			if s.since > 0 || cutShort {
				// The writer has stopped: nobody waits on the cores, and
				// the close waits for this one.
				s.enc.Pause = snapshot.YieldingPause()
				if s.closing != nil {
					s.store = s.closing
				}
				s.save()
				s.awaitStored()
			}
			return
		}
	}
}

// isStored says whether the last snapshot encoded is stored.
func (s *snapshotter) isStored() bool {
	select {
	case <-s.stored:
		return true
	default:
		return s.stored == nil
	}
}

// storeAfterFailureMax bounds how long a failed writer's close waits for a
// snapshot store in progress: the failure may be the store's own (a full
// disk), where the store would only end at its timeouts and hold the data
// directory's lock meanwhile.
const storeAfterFailureMax = 2 * time.Second

// settle waits, up to storeAfterFailureMax, until the last snapshot encoded
// is stored, then abandons its store.
func (s *snapshotter) settle() {
	if s.stored == nil {
		return
	}
	t := time.NewTimer(storeAfterFailureMax)
	defer t.Stop()
	select {
	case <-s.stored:
	case <-t.C:
		s.abandonStore()
	}
}

// awaitStored waits until the last snapshot encoded is stored.
func (s *snapshotter) awaitStored() {
	if s.stored != nil {
		<-s.stored
	}
}

// abandonStore abandons the store of the last snapshot encoded if it is
// still going, and says whether that snapshot is not stored (cut short,
// or failed).
func (s *snapshotter) abandonStore() bool {
	if s.stored == nil {
		return false
	}
	s.abandon()
	<-s.stored
	return !s.storedOK
}

// followYieldEvery is how many events the follower applies, at least,
// between two yields of its processor (it yields between two appends):
// after an encoding it has the appends
// acknowledged meanwhile to apply (a second or two of them), and applied
// in one stretch they would hold a processor for tens of milliseconds,
// which the commands in flight on two cores would wait for.
const followYieldEvery = 512

// follow applies the queued appends as they are acknowledged. It returns
// false once one failed: the writer has stopped, and nothing after it was
// recorded.
func (s *snapshotter) follow() bool {
	s.mu.Lock()
	q := s.queue
	s.queue = nil
	s.mu.Unlock()
	applied := 0
	for _, a := range q {
		if applied >= followYieldEvery {
			runtime.Gosched()
			applied = 0
		}
		applied += len(a.recs)
		<-a.done
		if a.err != nil {
			return false
		}
		for i, r := range a.recs {
			if err := s.f.Apply(a.seqs[i], r.At, r.Event); err != nil {
				s.log.Error("snapshots stopped: the follower cannot apply an acknowledged event", "err", err)
				return false
			}
		}
		s.since += len(a.recs)
	}
	return true
}

// save encodes the follower and stores the snapshot in the background,
// the follower applying the appends meanwhile (a store at the writer's
// pace takes seconds, and a follower that waited for it would then apply
// them all in one go); a failure is logged and the next one is tried
// after as many events or as long again.
func (s *snapshotter) save() {
	s.since, s.taken = 0, time.Now()
	seq := s.f.Seq()
	if seq == 0 {
		return
	}
	start := time.Now()
	s.observe(SnapshotEncoding, start, 0)
	s.pace.Begin()
	data, err := s.f.EncodeWith(&s.enc)
	if err != nil {
		s.log.Error("snapshot not taken", "seq", seq, "err", err)
		return
	}
	encoded := time.Now()
	s.observe(SnapshotStoring, encoded, len(data))
	stored, store := make(chan struct{}), s.store
	ctx, abandon := context.WithCancel(context.Background())
	s.stored, s.abandon, s.storedOK = stored, abandon, false
	go func() {
		defer close(stored)
		defer abandon()
		s.storedOK = snapshot.Save(ctx, store, s.log, seq, data, encoded.Sub(start))
		s.observe(NoSnapshot, time.Now(), len(data))
	}()
}

// observe tells Config.SnapshotObserver, if any, that the snapshot being
// taken entered phase at t.
func (s *snapshotter) observe(phase SnapshotPhase, t time.Time, bytes int) {
	if s.cfg.SnapshotObserver != nil {
		s.cfg.SnapshotObserver.ObserveSnapshot(phase, t, bytes)
	}
}

// SnapshotPhase is what the writer's snapshotter was doing at a time.
type SnapshotPhase int

// The phases of a snapshot.
const (
	NoSnapshot       SnapshotPhase = iota
	SnapshotEncoding               // the follower encodes its ledger (CPU)
	SnapshotStoring                // the parts are written to the bucket (the stream's server and disk)
)

// SnapshotObserver is told when the writer's snapshots go from one phase
// to the next, so that a measurement outside the writer (tresor
// simulate's, in internal/bench) can tell what a command met without the
// writer keeping any state for it.
type SnapshotObserver interface {
	// ObserveSnapshot is called as a snapshot enters phase at t:
	// SnapshotEncoding as its encoding begins, SnapshotStoring once it is
	// encoded into bytes, NoSnapshot once its store has ended, stored or
	// not. One snapshot's calls come in that order and before the next
	// snapshot's; one whose encoding failed gets no more after the first.
	// It is called from the snapshotter's goroutines and must not block.
	ObserveSnapshot(phase SnapshotPhase, t time.Time, bytes int)
}

// SnapshotTimeline tells what the writer's snapshotter was doing at a
// time, as recorded by a SnapshotObserver: Simulate splits the commands'
// latencies by it.
type SnapshotTimeline interface {
	At(t time.Time) SnapshotPhase
}
