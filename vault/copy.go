package vault

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/eventstore"
)

// flush appends the pending events, whole appends, to the copy, in
// batches its server takes, then feeds them to the auditor. An event that
// does not link to its chain's head in the copy is either the source's own
// broken chain (the auditor reports it) or the sign of a rewrite before
// it: the source is compared with the copy at the copy's end first, and a
// fork halts the copy before anything of the other history is written. So
// is an append cut short at the copy's end, before the source completes
// it.
func (v *Vault) flush(ctx context.Context) error {
	if len(v.pending) == 0 || v.halted != "" {
		v.pending = v.pending[:0]
		return nil
	}
	// The events of an append cut short at the copy's end come first:
	// the copy holds them already.
	held := len(v.torn)
	if v.pending[0].Sequence != v.copyLast+1-uint64(held) {
		return fmt.Errorf("vault: the source handed sequence %d after the copy's %d", v.pending[0].Sequence, v.copyLast-uint64(held))
	}
	if held > 0 || !v.linked() {
		if err := v.drain(ctx); err != nil {
			return err
		}
		forked, err := v.checkFork(ctx)
		if err != nil {
			// Kept, and checked again with the next events or at the
			// next tick: nothing is copied before the source is compared.
			v.log.Warn("vault: the source could not be compared with the copy", "sequence", v.copyLast, "err", err)
			return nil
		}
		if forked {
			v.pending = v.pending[:0]
			return nil
		}
	}
	// The copier reads the events until their batch commits: the next
	// ones gather in a new slice.
	events := v.pending
	v.pending = make([]eventstore.RecordedEvent, 0, v.cfg.BatchEventsMax)
	if held > 0 {
		if err := v.mend(ctx, events); err != nil {
			return err
		}
		events = events[held:]
	}
	for len(events) > 0 {
		n := batchEnd(events, v.cfg.BatchEventsMax)
		if n == 0 {
			// The source's reader hands on whole appends of at most
			// eventstore.BatchEventsMax events, fewer than a batch holds.
			return fmt.Errorf("vault: an append of more than %d events at sequence %d", v.cfg.BatchEventsMax, events[0].Sequence)
		}
		if err := v.send(ctx, events[:n]); err != nil {
			return err
		}
		now := time.Now()
		for i := range events[:n] {
			if err := v.check(ctx, events[i], now, true); err != nil {
				return err
			}
		}
		events = events[n:]
	}
	if v.round >= roundEventsMax {
		return v.finishRound(ctx)
	}
	return nil
}

// mend checks the source's events that begin with the append cut short at
// the copy's end against the copy's (the same bytes and hashes at the same
// sequences), and feeds them to the auditor: the copy holds them, and the
// events after them go to the copy as any others.
func (v *Vault) mend(ctx context.Context, events []eventstore.RecordedEvent) error {
	now := time.Now()
	for i, mine := range v.torn {
		if i == len(events) || events[i].Sequence != mine.Sequence || events[i].Hash != mine.Hash || !bytes.Equal(events[i].Payload, mine.Payload) {
			return fmt.Errorf("vault: the copy's append cut short at sequence %d holds otherwise than the source at %d", v.torn[0].Sequence, mine.Sequence)
		}
		if err := v.check(ctx, events[i], now, true); err != nil {
			return err
		}
	}
	v.log.Info("vault: the append cut short at the copy's end is completed from the source", "first_seq", v.torn[0].Sequence, "copy_held", len(v.torn))
	v.torn = nil
	return nil
}

// batchEnd returns how many of events, whole appends from the first,
// make the largest batch of at most batchMax events; 0 when the first
// append alone is longer.
func batchEnd(events []eventstore.RecordedEvent, batchMax int) int {
	end := 0
	for i := range min(len(events), batchMax) {
		if events[i].AppendRemaining == 0 {
			end = i + 1
		}
	}
	return end
}

// send hands events to the copier once fewer than CopyDepth batches are
// in flight: the copy's server commits a batch while the vault checks it
// and reads the next one. Nothing is said verified before its batch is
// committed (finishRound drains them first).
func (v *Vault) send(ctx context.Context, events []eventstore.RecordedEvent) error {
	for len(v.inFlight) >= v.cfg.CopyDepth {
		if err := v.awaitOldest(ctx); err != nil {
			return err
		}
	}
	v.inFlight = append(v.inFlight, v.copier.enqueue(events))
	v.copyLast = events[len(events)-1].Sequence
	return nil
}

// awaitOldest waits for the oldest batch in flight to commit.
func (v *Vault) awaitOldest(ctx context.Context) error {
	b := v.inFlight[0]
	var err error
	select {
	case err = <-b.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	v.inFlight = v.inFlight[1:]
	if err != nil {
		return fmt.Errorf("vault: append sequences %d to %d to the copy: %w", b.events[0].Sequence, b.events[len(b.events)-1].Sequence, err)
	}
	if v.cfg.Metrics != nil {
		v.cfg.Metrics.copied.Add(float64(len(b.events)))
	}
	return nil
}

// drain waits for every batch in flight: the copy then holds all it was
// sent, as the comparisons with the source and the saved state need.
func (v *Vault) drain(ctx context.Context) error {
	for len(v.inFlight) > 0 {
		if err := v.awaitOldest(ctx); err != nil {
			return err
		}
	}
	return nil
}

// linked reports whether every pending event links to the one before it
// in its chain: the copy's head, or a pending event.
func (v *Vault) linked() bool {
	heads := map[string]eventstore.Head{}
	for _, ev := range v.pending {
		h, ok := heads[ev.Chain]
		if !ok {
			h, ok = v.heads[ev.Chain]
		}
		if ok && (ev.ChainSeq != h.ChainSeq+1 || ev.PrevHash != h.Hash) {
			return false
		}
		heads[ev.Chain] = eventstore.Head{Sequence: ev.Sequence, ChainSeq: ev.ChainSeq, Hash: ev.Hash}
	}
	return true
}

// check feeds an event of the copy to the auditor and follows the chains'
// heads and the seals. A seal ends the round of checks at once, so that
// the status and the cosignatures name it as soon as it is verified.
// hashed says the event comes from the source's checked read (Follow),
// which compared its stated hash with the one computed from its bytes,
// raw as the copy stores them (the source is opened without upcasting):
// the auditor does not compute it again. An event read back from the copy
// as stored was not checked, and the auditor hashes it.
func (v *Vault) check(ctx context.Context, ev eventstore.RecordedEvent, at time.Time, hashed bool) error {
	if hashed {
		v.a.CheckHashed(ev)
	} else {
		v.a.Check(ev)
	}
	v.round++
	v.heads[ev.Chain] = eventstore.Head{Sequence: ev.Sequence, ChainSeq: ev.ChainSeq, Hash: ev.Hash}
	if ev.Type != eventstore.SealType {
		if v.unsealedSince.IsZero() {
			v.unsealedSince, v.unsealedSeq = at, ev.Sequence
		}
		return nil
	}
	seen := sealSeen{chain: ev.Chain, seq: ev.Sequence, chainSeq: ev.ChainSeq}
	// A payload that does not parse fails the auditor's checks too, and
	// is never cosigned.
	seen.parsed = json.Unmarshal(ev.Payload, &seen.seal) == nil
	v.seals = append(v.seals, seen)
	v.unsealedSince, v.overdueLogged = time.Time{}, false
	return v.finishRound(ctx)
}

// finishRound finishes the auditor's checks of the events fed so far
// (audit.Auditor.Round: the auditor goes on with the next events, its
// state neither rebuilt nor copied), and once the copy holds them cosigns
// the seals verified and hands the state and the vault's position to the
// saver (at most every saveEvery: a vault stopped in between verifies the
// events after the state again from its own copy). New violations are
// logged, naming their position and code.
func (v *Vault) finishRound(ctx context.Context) error {
	rep, err := v.a.Round()
	if err != nil {
		return err
	}
	var body []byte
	if now := time.Now(); now.Sub(v.savedAt) >= saveEvery {
		// Encoded at once: the state shares memory with the auditor's,
		// which the next events change.
		st, err := v.a.State()
		if err != nil {
			return err
		}
		if body, err = audit.EncodeState(st); err != nil {
			return err
		}
		v.savedAt = now
	}
	// The work above overlaps the commit of the batches in flight; what
	// is cosigned and saved must be in the copy.
	if err := v.drain(ctx); err != nil {
		return err
	}
	// Cosignatures first: a crash before the state is saved verifies the
	// seal again at the next start, which finds it cosigned already.
	for _, s := range v.seals {
		if v.a.LastSealed(s.chain) != s.chainSeq {
			continue // not verified: the auditor reports it
		}
		v.lastSeal = s.seq
		if v.cosigner != nil && s.parsed {
			if _, err := v.cosigner.cosign(s.seal, s.seq); err != nil {
				return err
			}
		}
	}
	if body != nil {
		if err := v.saver.save(saved{state: body, pos: position{LastSealSeq: v.lastSeal}}); err != nil {
			return err
		}
	}
	v.verified, v.round, v.seals, v.report, v.lastRound = rep.LastSequence, 0, v.seals[:0], rep, time.Now()
	v.logNew(rep)
	return nil
}

// logNew logs the violations of rep not logged yet. The report lists the
// same violations round after round: only new ones are logged, and only
// the listed ones remembered.
func (v *Vault) logNew(rep *audit.Report) {
	reported := make(map[audit.Violation]bool, len(rep.Violations))
	for _, viol := range rep.Violations {
		reported[viol] = true
		if !v.reported[viol] {
			v.log.Error("vault: alarm: violation", "sequence", viol.Sequence, "code", viol.Code, "subject", viol.Subject,
				"expected", viol.Expected, "found", viol.Found)
		}
	}
	v.reported = reported
}

// sealSeen is a seal fed to the auditor in this round: the round's state
// says whether it verified.
type sealSeen struct {
	chain         string
	seq, chainSeq uint64
	// seal is its payload, when parsed.
	seal   eventstore.Seal
	parsed bool
}
