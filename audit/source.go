package audit

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/fdj/tresor/eventstore"
)

// unreadableMax bounds how many unreadable messages a read skips before it
// gives up: past that, the stream is not worth auditing further.
const unreadableMax = 1000

// ReadStore feeds a the events of a live stream, as stored, from sequence
// from to the stream's last sequence at the time of the call (once it ends
// a whole append, eventstore.NATSStore.WholeEnd), and returns that
// sequence. Hashes are checked by the auditor, so an altered event is
// reported at its sequence; a message whose envelope does not even parse
// is reported too, and reading resumes after it. It returns the read error
// otherwise.
func ReadStore(ctx context.Context, store *eventstore.NATSStore, a *Auditor, from uint64) (uint64, error) {
	last, err := store.WholeEnd(ctx, eventstore.WholeEndWait)
	if err != nil {
		return 0, fmt.Errorf("audit: %w", err)
	}
	from = max(from, 1)
	read, torn := eventstore.WholeAppends(check(a), a.brokenAppend)
	for skipped := 0; from <= last; skipped++ {
		err := store.ReadStored(ctx, from, last, func(ev eventstore.RecordedEvent) error {
			from = ev.Sequence + 1
			return read(ev)
		})
		if err == nil {
			break
		}
		v, ok := fromIntegrity(err)
		if !ok || v.Sequence < from || skipped == unreadableMax {
			return 0, fmt.Errorf("audit: read the stream from %d: %w", from, err)
		}
		a.Unreadable(v)
		from = v.Sequence + 1
	}
	a.Torn(torn())
	return last, nil
}

// check feeds a each event it is given, in order.
func check(a *Auditor) func(eventstore.RecordedEvent) error {
	return func(ev eventstore.RecordedEvent) error {
		a.Check(ev)
		return nil
	}
}

// EventAt reads the event at a stream sequence, as stored; found is false
// when there is none. StoreEvent and ExportEvent make one.
type EventAt func(seq uint64) (ev eventstore.RecordedEvent, found bool, err error)

// SealAt returns the event at stream sequence seq, which must be a Seal:
// where NewFromSeal starts.
func SealAt(at EventAt, seq uint64) (eventstore.RecordedEvent, error) {
	seal, found, err := at(seq)
	if err != nil {
		return seal, fmt.Errorf("audit: read the seal at %d: %w", seq, err)
	}
	return seal, checkSeal(seal, found, seq)
}

// StoreEvent returns a function that reads the event at a stream sequence
// of a live stream, as stored; found is false when there is none. It is
// what CheckContinuity reads with.
func StoreEvent(ctx context.Context, store *eventstore.NATSStore) EventAt {
	return func(seq uint64) (eventstore.RecordedEvent, bool, error) {
		var out eventstore.RecordedEvent
		last, err := store.LastSequence(ctx)
		if err != nil || seq > last || seq == 0 {
			return out, false, err
		}
		var found bool
		err = store.ReadStored(ctx, seq, seq, func(ev eventstore.RecordedEvent) error {
			out, found = ev, true
			return nil
		})
		return out, found, err
	}
}

// ReadExport feeds a the events of an NDJSON export (eventstore.ReadExport)
// from sequence from, in file order, and returns the last sequence read. A
// malformed line stops the audit with an error naming it.
func ReadExport(r io.Reader, a *Auditor, from uint64) (uint64, error) {
	var last uint64
	read, torn := eventstore.WholeAppends(check(a), a.brokenAppend)
	err := eventstore.ReadExport(r, func(ev eventstore.RecordedEvent) error {
		if ev.Sequence >= from {
			last = ev.Sequence
			return read(ev)
		}
		return nil
	})
	if err != nil {
		return last, fmt.Errorf("audit: %w", err)
	}
	a.Torn(torn())
	return last, nil
}

// errFound stops a read once the event looked for is found.
var errFound = errors.New("found")

// ExportEvent returns a function that finds the event at a stream sequence
// in an NDJSON export, reading it from its start each time; found is false
// when there is none. The reader is left anywhere: seek it back before
// reading it on.
func ExportEvent(r io.ReadSeeker) EventAt {
	return func(seq uint64) (eventstore.RecordedEvent, bool, error) {
		var out eventstore.RecordedEvent
		var found bool
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return out, false, err
		}
		err := eventstore.ReadExport(r, func(ev eventstore.RecordedEvent) error {
			if ev.Sequence != seq {
				return nil
			}
			out, found = ev, true
			return errFound
		})
		if err != nil && !errors.Is(err, errFound) {
			return out, false, err
		}
		return out, found, nil
	}
}

func checkSeal(ev eventstore.RecordedEvent, found bool, seq uint64) error {
	switch {
	case !found:
		return fmt.Errorf("audit: no event at sequence %d", seq)
	case ev.Type != eventstore.SealType:
		return fmt.Errorf("audit: the event at sequence %d is a %s, not a seal", seq, ev.Type)
	}
	return nil
}
