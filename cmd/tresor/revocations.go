package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/settlement"
)

// revocationsAggregate is where every TokenRevoked lies on the stream.
var revocationsAggregate = func() eventstore.Aggregate {
	kind, id, _ := strings.Cut(domain.RevocationsAggregate, ".")
	return eventstore.Aggregate{Kind: kind, ID: id}
}()

// revocationsPoll bounds one round of reading the revocations: a round
// slower than the set's staleness bound is of no use anyway.
const revocationsPoll = api.RevocationsStaleAfter

// revocationsFollower keeps a node's set of revoked tokens current: every
// api.RevocationsPollEvery it reads the stream's head, then the last
// revocation, and the revocations it does not hold yet. Polling rather
// than following a consumer: its one question, "is anything newer than
// what I hold acknowledged?", is two reads from the stream's leader, and
// its answer dates the set (api.Revocations.Fresh), which a consumer idle
// on a quiet subject cannot do.
type revocationsFollower struct {
	store *eventstore.NATSStore
	set   *api.Revocations
	log   *slog.Logger
}

// startRevocations follows the revocations into set until its stop.
func startRevocations(ctx context.Context, store *eventstore.NATSStore, set *api.Revocations, log *slog.Logger) *background {
	f := &revocationsFollower{store: store, set: set, log: log}
	return goBackground(ctx, f.run)
}

func (f *revocationsFollower) run(ctx context.Context) {
	tick := time.NewTicker(api.RevocationsPollEvery)
	defer tick.Stop()
	failing := false
	for {
		err := f.round(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			f.log.Warn("token revocations: cannot read the stream; every token is refused once they are stale", "err", err)
		case err == nil && failing:
			f.log.Info("token revocations: read again")
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// round reads what the stream holds past the set and dates the set.
func (f *revocationsFollower) round(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, revocationsPoll)
	defer cancel()
	asOf := time.Now()
	head, err := f.store.LastSequence(ctx)
	if err != nil {
		return err
	}
	last, err := f.store.AggregateLast(ctx, settlement.Chain, revocationsAggregate)
	if err != nil {
		return err
	}
	if from := f.set.Applied() + 1; last >= from {
		err := f.store.ReadAggregate(ctx, settlement.Chain, revocationsAggregate, from, last, f.apply)
		if err != nil {
			return err
		}
	}
	f.set.Fresh(asOf, head)
	return nil
}

// apply adds one revocation read from the stream.
func (f *revocationsFollower) apply(ev eventstore.RecordedEvent) error {
	if !ev.LedgerFact() {
		return nil
	}
	e, err := domain.DecodeEvent(ev.Type, ev.Payload)
	if err != nil {
		return fmt.Errorf("stream sequence %d: %w", ev.Sequence, err)
	}
	r, ok := e.(*domain.TokenRevoked)
	if !ok {
		return fmt.Errorf("stream sequence %d: a %s among the token revocations", ev.Sequence, ev.Type)
	}
	f.set.Apply(ev.Sequence, ev.RecordedAt, r)
	return nil
}
