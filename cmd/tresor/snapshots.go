package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/settlement"
	"github.com/fdj/tresor/snapshot"
)

// projectionSnapshotKind names the in-memory read models' snapshots in the
// snapshot bucket, beside the writer's.
const projectionSnapshotKind = "projections"

// projectionSnapshots saves and reloads serve's in-memory read models, so
// that the embedded default is ready without applying the whole stream.
// PostgreSQL read models keep their own checkpoint and need none.
type projectionSnapshots struct {
	slot     *snapshot.Slot
	store    *memstore.Store
	interval time.Duration
	log      *slog.Logger
	// saved is the checkpoint of the last snapshot taken or loaded.
	saved uint64
	// restored says the read models started from a snapshot, whose
	// shards the warm-up loads.
	restored bool
}

// newProjectionSnapshots returns the snapshots of store, nil when
// snapshots are off or the read models are not in memory.
func newProjectionSnapshots(snaps *snapshot.Bucket, store any, rules *domain.RuleSet, cfg *Config, log *slog.Logger) *projectionSnapshots {
	mem, ok := store.(*memstore.Store)
	if snaps == nil || !ok {
		return nil
	}
	return &projectionSnapshots{slot: snaps.Slot(projectionSnapshotKind, settlement.Chain, memstore.FormatVersion, domain.RuleSetID(rules)),
		store: mem, interval: cfg.SnapshotInterval, log: log}
}

// restore loads the newest snapshot that passes its checks into the empty
// store; without one, the runner applies the stream from the start.
func (p *projectionSnapshots) restore(ctx context.Context) {
	start := time.Now()
	var read int64
	seq, skipped, err := p.slot.LoadSections(ctx, func(_ uint64, r io.Reader, shards *snapshot.Sections) error {
		cr := &countingReader{r: r}
		err := p.store.Restore(cr, shards, func(err error) {
			p.log.Error("projections snapshot shard refused: the read models are applied again from the stream, reads answer 503 meanwhile", "err", err)
		})
		read = cr.n
		return err
	})
	for _, why := range skipped {
		p.log.Warn("projections snapshot skipped for an older one", "reason", why)
	}
	switch {
	case err == nil:
		p.saved, p.restored = seq, true
		// bytes counts the hot section only: the shards load when read.
		p.log.Info("projections start from a snapshot", "seq", seq, "bytes", read, "after", time.Since(start).Round(time.Millisecond))
	case errors.Is(err, snapshot.ErrNotFound):
		p.log.Info("no projections snapshot: applying the whole stream")
	default:
		p.log.Warn("projections snapshot ignored: applying the whole stream", "reason", err)
	}
}

// run takes a snapshot every p.interval if any event was applied, until
// ctx ends. Unlike the writer's, the read models' snapshot holds the whole
// history (every play, every journal line: hundreds of megabytes after a
// sold-out block) and its encoding takes a core for seconds (after the
// warm-up, which Freeze waits for, when the store started from a
// snapshot), so it is not taken every --snapshot-every events: during a
// catch-up that would spend the catch-up encoding.
func (p *projectionSnapshots) run(ctx context.Context, applied func() uint64) {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if applied() > p.saved {
			p.save(ctx, false)
		}
	}
}

// warm loads the shards of the snapshot restored once the service is
// ready, so that their decoding does not compete with the start, and logs
// when every shard is in memory: until then a read or a batch may wait for
// its shard, and nothing else shows where the warm-up is.
func (p *projectionSnapshots) warm(ctx context.Context, ready func() bool) {
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	for !ready() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	if !p.restored {
		return
	}
	start := time.Now()
	if err := p.store.WarmUp(ctx); err == nil {
		p.log.Info("projections snapshot shards loaded", "after", time.Since(start).Round(time.Millisecond))
	}
}

// save freezes the store's rows (batches wait for the copy only; first,
// the shards of the snapshot restored that are not loaded yet), then
// encodes them outside the lock, streamed into the snapshot's parts; a
// failure is logged. The writer does not wait. Nothing
// new since the last snapshot taken or loaded is not worth a freeze, which
// would first load every shard not loaded yet (a stop right after a start).
// A closing snapshot, taken once the runner and the writer have stopped,
// is stored unpaced: nothing waits on the server, and the stop waits for
// it.
func (p *projectionSnapshots) save(ctx context.Context, closing bool) {
	if at, _ := p.store.Checkpoint(ctx); at <= p.saved {
		return
	}
	start := time.Now()
	frozen, err := p.store.Freeze(context.WithoutCancel(ctx))
	if err != nil {
		p.log.Warn("projections snapshot not taken", "err", err)
		return
	}
	held := time.Since(start)
	seq := frozen.Checkpoint()
	if seq <= p.saved {
		return
	}
	slot := p.slot
	if closing {
		slot = slot.Paced(snapshot.Unpaced)
	}
	var n int64
	err = slot.SaveParts(context.WithoutCancel(ctx), seq, func(w *snapshot.PartWriter) (err error) {
		n, err = frozen.Encode(w)
		return err
	})
	if err != nil {
		p.log.Warn("projections snapshot not taken", "seq", seq, "err", err)
		return
	}
	p.saved = seq
	p.log.Info("projections snapshot taken", "seq", seq, "bytes", n, "freeze", held.Round(time.Microsecond),
		"after", time.Since(start).Round(time.Millisecond))
}

// countingReader counts what it reads.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
