package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/settlement"
)

// restoreFromVault restores the regulator's vault's copy of the stream
// (docs/vault.md) into the empty stream of cfg, checking every event as a
// backup's: the copy holds the operator's events byte for byte at their
// sequences, so that a regulator's copy can bring back a lost ledger. The
// copy holds no snapshots and no keys: serve rebuilds its state from the
// events, with the operator's own keys.
func restoreFromVault(ctx context.Context, cfg *Config, o restoreOptions, stderr io.Writer) error {
	start := time.Now()
	pub, err := parsePublicKey(o.publicKey)
	if err != nil {
		return err
	}
	from := &Config{Data: o.fromVault, Replicas: 1}
	if strings.Contains(o.fromVault, "://") {
		from = &Config{NATSURL: o.fromVault, Replicas: 1}
	}
	src, err := connectStream(ctx, from, eventstore.Config{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("--from-vault %s: %w", redactURL(o.fromVault), redactErr(err, o.fromVault))
	}
	defer src.Close()
	// A vault that runs may be storing the rest of an append.
	last, err := src.store.WholeEnd(ctx, eventstore.WholeEndWait)
	switch {
	case err != nil:
		return fmt.Errorf("--from-vault: %w", err)
	case last == 0:
		return usagef("--from-vault %s: the vault's copy holds no event", redactURL(o.fromVault))
	case o.toSeq > last:
		return usagef("--to-seq %d: the vault's copy ends at sequence %d", o.toSeq, last)
	}
	target, err := openRestoreTarget(ctx, cfg)
	if err != nil {
		return err
	}
	r := newRestorer("the vault's copy", target, cfg, pub, o)
	err = r.run(ctx, r.readStream(src.store, last))
	if err == nil {
		err = target.sync(cfg)
	}
	if err == nil {
		err = target.finish(ctx, cfg, r.heads[settlement.Chain])
	}
	if err != nil {
		return errors.Join(err, target.abandon(ctx))
	}
	fmt.Fprintf(stderr, "%s; no snapshots (the vault's copy holds none: serve rebuilds its state from the events)\n", r.summary(last, time.Since(start)))
	return nil
}

// readStream reads the stream of src from its first sequence to last, up
// to the point asked for.
func (r *restorer) readStream(src *eventstore.NATSStore, last uint64) func(context.Context) error {
	return func(ctx context.Context) error {
		err := src.ReadStored(ctx, 1, last, func(ev eventstore.RecordedEvent) error {
			if ev.Sequence != r.next {
				return fmt.Errorf("at sequence %d the copy holds sequence %d", r.next, ev.Sequence)
			}
			return r.take(ctx, ev, eventstore.ComputeHash(&ev))
		})
		if err != nil && !errors.Is(err, errCut) {
			return fmt.Errorf("%s refused: %w", r.source, err)
		}
		return nil
	}
}
