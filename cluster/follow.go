package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/settlement"
	"github.com/fdj/tresor/snapshot"
)

// follower keeps a ledger current by applying the stream's events as they
// land, through Ledger.Evolve as the writer's replay does, and opens the
// deck of every block that opens: a standby that takes over then replays
// only the events past its position and builds no deck. It starts from the
// newest writer snapshot that passes the writer's checks (the first event
// without one), so that a standby is warm in the time of the tail, not of
// the history. On the writer's node, whose writer took a standby's ledger
// and so keeps no snapshotter, it takes the writer's snapshots.
type follower struct {
	cfg   *settlement.Config
	store eventstore.Store
	log   *slog.Logger
	// snapshotting says whether it takes the writer's snapshots now.
	snapshotting func() bool
	cancel       context.CancelFunc
	done         chan struct{}
	// wake tells the snapshots' goroutine that SnapshotEvery events came.
	wake chan struct{}
	// pos is seq, read without the lock: an encoding holds the lock, and
	// the node's status must not wait for it.
	pos atomic.Uint64

	mu     sync.Mutex
	ledger *domain.Ledger
	seq    uint64 // last stream sequence applied
	// from is the sequence it started after (its snapshot's, 0 for the
	// first event), applied the stream records applied since: what a
	// start from a snapshot saves.
	from    uint64
	applied int
	// loaded is set once ledger holds the stream up to seq: the snapshot
	// is loaded, or there was none to load.
	loaded bool
	err    error // why it stopped following, nil while it runs
	// taken is set when the ledger was handed over: apply then leaves it
	// alone, however long the read takes to notice its cancellation.
	taken bool
	// since counts the events applied since the last snapshot taken (or
	// the start), snapAt is when that was.
	since  int
	snapAt time.Time
}

// errTaken ends the reading of a follower whose ledger was handed over.
var errTaken = errors.New("standby: the ledger was handed to the writer")

// startFollower follows the stream from the newest usable snapshot of
// cfg.Snapshots, or from its first event; it takes the writer's snapshots
// while snapshotting says so. It does not wait for the snapshot's load.
func startFollower(cfg *settlement.Config, store eventstore.Store, log *slog.Logger, snapshotting func() bool) *follower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{cfg: cfg, store: store, log: log, snapshotting: snapshotting, cancel: cancel, done: make(chan struct{}),
		wake: make(chan struct{}, 1), ledger: cfg.NewLedger(), loaded: cfg.Snapshots == nil, snapAt: time.Now()}
	go func() {
		defer close(f.done)
		after, ok := f.load(ctx)
		if !ok {
			return
		}
		var snaps sync.WaitGroup
		defer snaps.Wait()
		if cfg.Snapshots != nil {
			snaps.Go(func() { f.takeSnapshots(ctx) })
		}
		err := eventstore.FollowResuming(ctx, store, after+1, f.apply, func(err error) {
			log.Warn("standby: following the stream again after an error", "err", err)
		})
		if ctx.Err() == nil {
			log.Error("standby: stopped following the stream; a takeover will start from a snapshot or replay it all", "err", err)
			f.mu.Lock()
			f.err = err
			f.mu.Unlock()
			cancel()
		}
	}()
	return f
}

// load starts the ledger from the newest snapshot that passes every check
// (settlement.SnapshotStart logs why one is ignored), and returns the
// sequence to follow after; false when the ledger was handed over first.
func (f *follower) load(ctx context.Context) (uint64, bool) {
	var st *settlement.Start
	if !f.loaded {
		st = settlement.SnapshotStart(ctx, f.cfg)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.taken {
		return 0, false
	}
	if st != nil {
		f.ledger, f.seq, f.from = st.Ledger, st.Seq, st.Seq
		f.pos.Store(st.Seq)
	}
	f.loaded = true
	f.log.Info("standby: following the stream", "after", f.seq)
	return f.seq, true
}

// apply applies one stream record.
func (f *follower) apply(r eventstore.RecordedEvent) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.taken {
		return errTaken
	}
	f.seq = r.Sequence
	f.pos.Store(r.Sequence)
	f.applied++
	if !r.LedgerFact() {
		return nil
	}
	e, err := domain.DecodeEvent(r.Type, r.Payload)
	if err != nil {
		return fmt.Errorf("stream sequence %d: %w", r.Sequence, err)
	}
	if err := f.ledger.Evolve(r.RecordedAt, e); err != nil {
		return fmt.Errorf("stream sequence %d: %w", r.Sequence, err)
	}
	if f.since++; f.since >= f.cfg.SnapshotEvery && f.cfg.Snapshots != nil {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
	if o, ok := e.(*domain.BlockOpened); ok {
		b := f.ledger.Blocks[o.Block]
		deck, _, err := settlement.OpenDeck(f.cfg, b)
		if err != nil {
			return err
		}
		f.ledger.AttachDeck(deck)
	}
	return nil
}

// takeSnapshots takes a snapshot when one is due (snapshot.Due)
// and snapshotting says so, until ctx ends. The ledger is encoded under
// the follower's lock (the read waits, the writer does not), then stored
// outside it.
func (f *follower) takeSnapshots(ctx context.Context) {
	tick := time.NewTicker(min(f.cfg.SnapshotInterval, time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
		case <-tick.C:
		}
		if !f.snapshotting() {
			continue
		}
		if seq, data, encoded, ok := f.encode(); ok {
			// A stop cuts the store short: at the writer's pace a
			// large ledger's store takes seconds, which it would wait
			// for.
			snapshot.Save(ctx, f.cfg.Snapshots, f.log, seq, data, encoded)
		}
	}
}

// encode encodes the ledger if a snapshot is due.
func (f *follower) encode() (uint64, []byte, time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.taken || f.err != nil || f.seq == 0 || !snapshot.Due(f.cfg.SnapshotEvery, f.cfg.SnapshotInterval, f.since, f.snapAt) {
		return 0, nil, 0, false
	}
	start := time.Now()
	enc := domain.LedgerEncoder{Pause: snapshot.YieldingPause()}
	data, err := enc.Encode(f.ledger)
	f.since, f.snapAt = 0, time.Now()
	if err != nil {
		f.log.Error("snapshot not taken", "seq", f.seq, "err", err)
		return 0, nil, 0, false
	}
	return f.seq, data, time.Since(start), true
}

// position returns the last sequence applied.
func (f *follower) position() uint64 { return f.pos.Load() }

// progress returns the sequence it started after and the records applied
// since.
func (f *follower) progress() (from uint64, applied int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.from, f.applied
}

// take stops the follower and hands its ledger over: nil when it stopped
// on an error (the taker then starts as the single writer does: from the
// newest snapshot, or the whole stream) or is still
// loading its snapshot (the taker loads one itself rather than wait). It
// does not wait for the read to end: a consumer being re-created after a
// stream leader change can ignore its cancellation for seconds, and a
// takeover must not wait for it; the reading goroutine ends on its own and
// applies nothing more. The follower must not be used afterwards.
func (f *follower) take() *settlement.Start {
	f.cancel()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.taken = true
	if f.err != nil || !f.loaded {
		return nil
	}
	return &settlement.Start{Ledger: f.ledger, Seq: f.seq}
}

// stop stops following, for good.
func (f *follower) stop() {
	f.cancel()
	<-f.done
}
