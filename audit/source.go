package audit

import (
	"context"
	"errors"
	"fmt"

	"github.com/fdj/tresor/eventstore"
)

// unreadableMax bounds how many unreadable messages a read skips before it
// gives up: past that, the stream is not worth auditing further.
const unreadableMax = 1000

// ReadStore feeds a the events of store from sequence from to the
// stream's last sequence at the time of the call, and returns that
// sequence. The store must be opened without a Registry, so that events are
// raw. A message the store refuses to decode (altered headers or bytes) is
// reported as a violation and reading resumes after it. It returns the
// read error otherwise.
func ReadStore(ctx context.Context, store eventstore.Store, a *Auditor, from uint64) (uint64, error) {
	for skipped := 0; ; skipped++ {
		last, err := store.ReadFrom(ctx, from, func(ev eventstore.RecordedEvent) error {
			a.Check(ev)
			from = ev.Sequence + 1
			return nil
		})
		if err == nil {
			return last, nil
		}
		v, ok := fromIntegrity(err)
		if !ok || v.Sequence < from || skipped == unreadableMax {
			return 0, fmt.Errorf("audit: read the stream from %d: %w", from, err)
		}
		a.Unreadable(v)
		from = v.Sequence + 1
	}
}

// errFound stops a read once the event looked for is found.
var errFound = errors.New("found")

// ReadSeal returns the raw event at stream sequence seq of store, which
// must be a Seal, to start an audit at (NewFromSeal).
func ReadSeal(ctx context.Context, store eventstore.Store, seq uint64) (eventstore.RecordedEvent, error) {
	var seal eventstore.RecordedEvent
	var found bool
	_, err := store.ReadFrom(ctx, seq, func(ev eventstore.RecordedEvent) error {
		seal, found = ev, true
		return errFound
	})
	if err != nil && !errors.Is(err, errFound) {
		return seal, fmt.Errorf("audit: read the seal at %d: %w", seq, err)
	}
	return seal, checkSeal(seal, found, seq)
}

func checkSeal(ev eventstore.RecordedEvent, found bool, seq uint64) error {
	switch {
	case !found || ev.Sequence != seq:
		return fmt.Errorf("audit: no event at sequence %d", seq)
	case ev.Type != eventstore.SealType:
		return fmt.Errorf("audit: the event at sequence %d is a %s, not a seal", seq, ev.Type)
	}
	return nil
}
