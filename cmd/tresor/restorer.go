package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fdj/tresor/eventstore"
)

// restorer reads the parts of a backup in order, checks each event (its
// sequence, hash, chain link and seal) and re-appends whole appends in
// batches, up to the point asked for.
type restorer struct {
	store    *eventstore.NATSStore
	verify   *eventstore.Verifier
	batchMax int
	// toSeq and toTime are the point to restore to (zero: the end).
	toSeq  uint64
	toTime time.Time
	// next is the sequence the next event must carry.
	next uint64
	// whole hands on whole appends; torn returns an append cut short at
	// the end of the backup.
	whole func(eventstore.RecordedEvent) error
	torn  func() []eventstore.RecordedEvent
	// group is the append being read (with its Void, for a torn one),
	// batch the whole appends not yet written.
	group, batch []eventstore.RecordedEvent
	// cut is set once an append past the point asked for is read.
	cut bool
	// heads are the chains' heads restored, last the last sequence;
	// events and batches are counted.
	heads  map[string]eventstore.Head
	last   uint64
	events uint64
	// inFlight answers the commit of the batch sent last, nil when none
	// is in flight.
	inFlight chan error
	batches  int
}

// errCut stops the read of a part at the point asked for.
var errCut = errors.New("the point to restore to is reached")

// run restores the parts of m from dir.
func (r *restorer) run(ctx context.Context, dir string, m *backupManifest) error {
	r.whole, r.torn = eventstore.WholeAppends(r.add, nil)
	for _, p := range m.Parts {
		if err := r.readPart(ctx, dir, p); err != nil {
			return err
		}
		if r.cut {
			break
		}
	}
	if torn := r.torn(); !r.cut && len(torn) > 0 {
		return fmt.Errorf("the backup ends inside the append begun at sequence %d (%d events announced, %d found): it was cut",
			torn[0].Sequence, torn[0].AppendRemaining+1, len(torn))
	}
	return r.flush(ctx)
}

// readPart restores one part: every event it holds must be the next one,
// and it must hold exactly what the manifest says.
func (r *restorer) readPart(ctx context.Context, dir string, p backupPart) error {
	f, err := os.Open(filepath.Join(dir, p.File))
	if err != nil {
		return fmt.Errorf("backup file %s: %w", p.File, err)
	}
	defer f.Close()
	err = eventstore.ReadExport(f, func(ev eventstore.RecordedEvent) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if ev.Sequence != r.next {
			return fmt.Errorf("at sequence %d the file holds sequence %d: a line removed, added or moved", r.next, ev.Sequence)
		}
		if ev.Sequence > p.LastSequence {
			return fmt.Errorf("sequence %d is past the part's last, %d, in the manifest", ev.Sequence, p.LastSequence)
		}
		if err := r.verify.Check(ev); err != nil {
			return err
		}
		r.next++
		if err := r.whole(ev); err != nil {
			return err
		}
		return r.flushFull(ctx)
	})
	switch {
	case errors.Is(err, errCut):
		return nil
	case err != nil:
		return fmt.Errorf("backup file %s refused: %w", p.File, err)
	case r.next != p.LastSequence+1:
		return fmt.Errorf("backup file %s refused: it ends at sequence %d, the manifest says %d: it was cut", p.File, r.next-1, p.LastSequence)
	}
	return nil
}

// add takes the next event of a whole append (or of a torn one, then its
// Void); the last event of an append ends the group, which is kept unless
// it goes past the point asked for.
func (r *restorer) add(ev eventstore.RecordedEvent) error {
	r.group = append(r.group, ev)
	if ev.AppendRemaining != 0 {
		// A voided append's events all announce more: its group ends
		// with its Void.
		return nil
	}
	first, last := r.group[0], r.group[len(r.group)-1]
	if (r.toSeq != 0 && last.Sequence > r.toSeq) || (!r.toTime.IsZero() && first.RecordedAt.After(r.toTime)) {
		r.cut = true
		return errCut
	}
	r.batch = append(r.batch, r.group...)
	r.group = r.group[:0]
	return nil
}

// flushFull writes full batches, leaving what does not fill one.
func (r *restorer) flushFull(ctx context.Context) error {
	for len(r.batch) >= r.batchMax {
		if err := r.write(ctx); err != nil {
			return err
		}
	}
	return nil
}

// flush writes every whole append read so far, and waits for the last
// batch's commit.
func (r *restorer) flush(ctx context.Context) error {
	for len(r.batch) > 0 {
		if err := r.write(ctx); err != nil {
			return err
		}
	}
	return r.committed()
}

// write sends the first whole appends of the batch that fit in one atomic
// batch, once the batch before is committed: the next is read and
// verified while one commits.
func (r *restorer) write(ctx context.Context) error {
	if err := r.committed(); err != nil {
		return err
	}
	n := r.fit()
	events := slices.Clone(r.batch[:n])
	r.inFlight = make(chan error, 1)
	go func(done chan<- error) {
		err := r.store.Reappend(ctx, events)
		if err != nil {
			err = fmt.Errorf("restore sequences %d to %d: %w", events[0].Sequence, events[n-1].Sequence, err)
		}
		done <- err
	}(r.inFlight)
	for _, ev := range events {
		r.heads[ev.Chain] = eventstore.Head{Sequence: ev.Sequence, ChainSeq: ev.ChainSeq, Hash: ev.Hash}
	}
	r.events += uint64(n)
	r.last = events[n-1].Sequence
	r.batches++
	r.batch = slices.Delete(r.batch, 0, n)
	return nil
}

// committed waits for the batch in flight, if any, and returns its error.
func (r *restorer) committed() error {
	if r.inFlight == nil {
		return nil
	}
	err := <-r.inFlight
	r.inFlight = nil
	return err
}

// fit is how many events of the batch go in one atomic batch: all of them
// when they fit, else the whole appends that do.
func (r *restorer) fit() int {
	if len(r.batch) <= r.batchMax {
		return len(r.batch)
	}
	n := 0
	for i, ev := range r.batch[:r.batchMax] {
		if ev.AppendRemaining == 0 {
			n = i + 1
		}
	}
	return n
}

// summary is the one line printed at the end.
func (r *restorer) summary(m *backupManifest, elapsed time.Duration) string {
	var chains []string
	for _, c := range slices.Sorted(func(yield func(string) bool) {
		for name := range r.heads {
			if !yield(name) {
				return
			}
		}
	}) {
		h := r.heads[c]
		chains = append(chains, fmt.Sprintf("chain %s at position %d, hash %s", c, h.ChainSeq, h.Hash))
	}
	upTo := "the whole backup"
	if r.cut {
		upTo = "the point asked for"
	}
	rate := float64(r.events) / max(elapsed.Seconds(), 1e-3) // float-ok: a rate
	return fmt.Sprintf("restored %d events, sequences 1 to %d (%s, of %d), %d seals verified, in %d batches: %s; in %s, %.0f events/s",
		r.events, r.last, upTo, m.lastSequence(), r.verify.Stats().Seals, r.batches, strings.Join(chains, "; "),
		elapsed.Round(time.Millisecond), rate)
}
