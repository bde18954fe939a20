package main

import (
	"context"
	"crypto/ed25519"
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
	// source names what is restored in messages: the backup, the vault's
	// copy.
	source string
	// reappend sends a batch of whole appends and returns its outcome's
	// wait (a store's ReappendAsync or ReappendRestoringAsync).
	reappend func([]eventstore.RecordedEvent) (func(context.Context) error, error)
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
	// inFlight are the outcomes of the batches sent and not yet
	// awaited, oldest first, at most depth of them.
	inFlight []func(context.Context) error
	depth    int
	batches  int
	// waited is the time spent waiting for batches to commit.
	waited time.Duration
	// erased are the data keys whose erasure was restored.
	erased map[string]bool
}

// errCut stops the read of a part at the point asked for.
var errCut = errors.New("the point to restore to is reached")

// newRestorer returns a restorer of source into the target of cfg, checking seals
// with pub, up to the point o asks for.
func newRestorer(source string, target *restoreTarget, cfg *Config, pub ed25519.PublicKey, o restoreOptions) *restorer {
	store := target.st.store
	r := &restorer{source: source, reappend: store.ReappendAsync, verify: eventstore.NewVerifier(pub), batchMax: eventstore.BatchEventsMax,
		toSeq: o.toSeq, toTime: o.to, heads: map[string]eventstore.Head{}, next: 1, depth: 1, erased: map[string]bool{}}
	if cfg.NATSURL == "" {
		// On the embedded server, the marked stream takes plain messages,
		// stored once where an atomic batch is staged then stored, and
		// several batches are in flight; a replicated stream commits one
		// atomic batch at a time, as the writer's committer does there.
		r.reappend, r.batchMax, r.depth = store.ReappendRestoringAsync, eventstore.CommitBatchEventsMax, restoreDepthEmbedded
	}
	return r
}

// run restores what read hands to take, in order.
func (r *restorer) run(ctx context.Context, read func(context.Context) error) error {
	r.whole, r.torn = eventstore.WholeAppends(r.add, nil)
	if err := read(ctx); err != nil {
		return err
	}
	if torn := r.torn(); !r.cut && len(torn) > 0 {
		return fmt.Errorf("%s ends inside the append begun at sequence %d (%d events announced, %d found): it was cut",
			r.source, torn[0].Sequence, torn[0].AppendRemaining+1, len(torn))
	}
	return r.flush(ctx)
}

// readBackup reads the parts of m from dir, up to the point asked for.
func (r *restorer) readBackup(dir string, m *backupManifest) func(context.Context) error {
	return func(ctx context.Context) error {
		for _, p := range m.Parts {
			if err := r.readPart(ctx, dir, p); err != nil {
				return err
			}
			if r.cut {
				break
			}
		}
		return nil
	}
}

// readPart restores one part: every event it holds must be the next one,
// and it must hold exactly what the manifest says.
func (r *restorer) readPart(ctx context.Context, dir string, p backupPart) error {
	f, err := os.Open(filepath.Join(dir, p.File))
	if err != nil {
		return fmt.Errorf("backup file %s: %w", p.File, err)
	}
	defer f.Close()
	// The lines are parsed and hashed on every core; their order, chain
	// links and seals are checked here, one at a time.
	err = eventstore.ReadExportHashed(f, func(ev eventstore.RecordedEvent, computed eventstore.Hash) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if ev.Sequence != r.next {
			return fmt.Errorf("at sequence %d the file holds sequence %d: a line removed, added or moved", r.next, ev.Sequence)
		}
		if ev.Sequence > p.LastSequence {
			return fmt.Errorf("sequence %d is past the part's last, %d, in the manifest", ev.Sequence, p.LastSequence)
		}
		return r.take(ctx, ev, computed)
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

// take checks the next event (its hash, chain link and seal) and queues
// it, writing the batches it fills.
func (r *restorer) take(ctx context.Context, ev eventstore.RecordedEvent, computed eventstore.Hash) error {
	if err := r.verify.CheckComputed(ev, computed); err != nil {
		return err
	}
	r.next++
	if err := r.whole(ev); err != nil {
		return err
	}
	return r.flushFull(ctx)
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
	for _, ev := range r.group {
		if err := noteErasure(r.erased, ev); err != nil {
			return err
		}
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

// flush writes every whole append read so far, and waits for every
// batch's commit.
func (r *restorer) flush(ctx context.Context) error {
	for len(r.batch) > 0 {
		if err := r.write(ctx); err != nil {
			return err
		}
	}
	for len(r.inFlight) > 0 {
		if err := r.committed(ctx); err != nil {
			return err
		}
	}
	return nil
}

// write sends the first whole appends of the batch that fit in one atomic
// batch, once fewer than depth batches are in flight: the server commits
// one while the next is sent, and the lines after them are read and
// verified meanwhile.
func (r *restorer) write(ctx context.Context) error {
	for len(r.inFlight) >= r.depth {
		if err := r.committed(ctx); err != nil {
			return err
		}
	}
	n := r.fit()
	events := r.batch[:n]
	first, last := events[0].Sequence, events[n-1].Sequence
	wait, err := r.reappend(events)
	if err != nil {
		return fmt.Errorf("restore sequences %d to %d: %w", first, last, err)
	}
	r.inFlight = append(r.inFlight, func(ctx context.Context) error {
		if err := wait(ctx); err != nil {
			return fmt.Errorf("restore sequences %d to %d: %w", first, last, err)
		}
		return nil
	})
	for _, ev := range events {
		head := eventstore.Head{Sequence: ev.Sequence, ChainSeq: ev.ChainSeq, Hash: ev.Hash}
		if _, ok := r.heads[ev.Chain]; ok {
			r.heads[ev.Chain] = head
		} else {
			// A copy of the name: the events' strings share the reader's
			// chunks of lines, which a key would keep alive.
			r.heads[strings.Clone(ev.Chain)] = head
		}
	}
	r.events += uint64(n)
	r.last = last
	r.batches++
	r.batch = slices.Delete(r.batch, 0, n)
	return nil
}

// committed waits for the oldest batch in flight and returns its error.
func (r *restorer) committed(ctx context.Context) error {
	wait := r.inFlight[0]
	r.inFlight = slices.Delete(r.inFlight, 0, 1)
	began := time.Now()
	defer func() { r.waited += time.Since(began) }()
	return wait(ctx)
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
func (r *restorer) summary(of uint64, elapsed time.Duration) string {
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
	upTo := "the whole of " + r.source
	if r.cut {
		upTo = "the point asked for"
	}
	rate := float64(r.events) / max(elapsed.Seconds(), 1e-3) // float-ok: a rate
	return fmt.Sprintf("restored %d events, sequences 1 to %d (%s, of %d), %d seals verified, in %d batches: %s; in %s, %.0f events/s",
		r.events, r.last, upTo, of, r.verify.Stats().Seals, r.batches, strings.Join(chains, "; "),
		elapsed.Round(time.Millisecond), rate)
}
