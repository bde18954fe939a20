package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/settlement"
)

// projectionSnapshotKind names the in-memory read models' snapshots in the
// snapshot bucket, beside the writer's.
const projectionSnapshotKind = "projections"

// projectionSnapshotMax bounds the read models' snapshot: the embedded
// server refused or stalled on objects past about 128 MB (docs/snapshots.md),
// and the read models hold the whole history (about 1.3 GB after a sold-out
// block). Past the bound serve stops taking them, since history only
// grows, and the read models apply the stream at start as without
// snapshots.
const projectionSnapshotMax = 64 << 20

// projectionSnapshots saves and reloads serve's in-memory read models, so
// that the embedded default is ready without applying the whole stream.
// PostgreSQL read models keep their own checkpoint and need none.
type projectionSnapshots struct {
	slot     *eventstore.SnapshotSlot
	store    *memstore.Store
	interval time.Duration
	log      *slog.Logger
	// saved is the checkpoint of the last snapshot taken or loaded.
	saved uint64
	// tooLarge is set once a snapshot was over projectionSnapshotMax.
	tooLarge bool
}

// newProjectionSnapshots returns the snapshots of store, nil when
// snapshots are off or the read models are not in memory.
func newProjectionSnapshots(snaps *eventstore.Snapshots, store any, rules *domain.RuleSet, cfg *Config, log *slog.Logger) *projectionSnapshots {
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
	seq, data, skipped, err := p.slot.Load(ctx)
	for _, why := range skipped {
		p.log.Warn("projections snapshot skipped for an older one", "reason", why)
	}
	if err == nil {
		err = p.store.Restore(data)
	}
	switch {
	case err == nil:
		p.saved = seq
		p.log.Info("projections start from a snapshot", "seq", seq, "bytes", len(data), "after", time.Since(start).Round(time.Millisecond))
	case errors.Is(err, eventstore.ErrNoSnapshot):
		p.log.Info("no projections snapshot: applying the whole stream")
	default:
		p.log.Warn("projections snapshot ignored: applying the whole stream", "reason", err)
	}
}

// run takes a snapshot every p.interval if any event was applied, until
// ctx ends. Unlike the writer's, the read models' snapshot holds the whole
// history (every play, every journal line: about 1.3 GB after a sold-out
// block) and batches wait while it encodes, so it is not taken every
// --snapshot-every events: during a catch-up that would spend the catch-up
// encoding.
func (p *projectionSnapshots) run(ctx context.Context, applied func() uint64) {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if applied() > p.saved && !p.tooLarge {
			p.save(ctx)
		}
	}
}

// save encodes the store and stores the snapshot; a failure is logged.
// Batches wait while the store encodes; the writer does not.
func (p *projectionSnapshots) save(ctx context.Context) {
	if p.tooLarge {
		return
	}
	start := time.Now()
	seq, data, err := p.store.Encode()
	if err == nil && len(data) > projectionSnapshotMax {
		p.tooLarge = true
		p.log.Warn("projections snapshots stopped: the read models are too large to store as one object; they apply the stream at start",
			"seq", seq, "bytes", len(data), "max", projectionSnapshotMax)
		return
	}
	if err == nil && seq > p.saved {
		err = p.slot.Save(context.WithoutCancel(ctx), seq, data)
	}
	if err != nil {
		p.log.Warn("projections snapshot not taken", "seq", seq, "err", err)
		return
	}
	if seq > p.saved {
		p.saved = seq
		p.log.Info("projections snapshot taken", "seq", seq, "bytes", len(data), "after", time.Since(start).Round(time.Millisecond))
	}
}
