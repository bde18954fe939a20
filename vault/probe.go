package vault

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/eventstore"
)

// tick copies the events a failed comparison held back, probes the
// source and looks for a fork at the copy's end, finishes
// the round of checks when events are waiting for it, and publishes the
// status.
func (v *Vault) tick(ctx context.Context) error {
	if n := len(v.pending); n > 0 && v.pending[n-1].AppendRemaining == 0 {
		if err := v.flush(ctx); err != nil { // held back by a comparison that failed
			return err
		}
	}
	if err := v.drain(ctx); err != nil {
		return err
	}
	if v.probe(ctx) && v.halted == "" && v.copyLast > 0 && len(v.pending) == 0 {
		if _, err := v.checkFork(ctx); err != nil {
			v.log.Warn("vault: the source could not be compared with the copy", "sequence", v.copyLast, "err", err)
		}
	}
	if v.round > 0 && len(v.pending) == 0 {
		if err := v.finishRound(ctx); err != nil {
			return err
		}
	}
	v.publish()
	return nil
}

// probe asks the source for its last sequence; it reports whether it
// answered, and raises the alarm once it has not for UnreachableAfter.
func (v *Vault) probe(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	last, err := v.cfg.Source.LastSequence(pctx)
	now := time.Now()
	if err != nil {
		v.sourceFailed(now, err)
		return false
	}
	if v.unreachable {
		v.log.Info("vault: the source answers again", "sequence", last)
	}
	v.sourceUp, v.unreachable, v.unreachableSince = true, false, time.Time{}
	if last < v.sourceSeq {
		v.sourceSeq, v.seen = last, v.seen[:0] // the source shrank: the shortened alarm tells
	}
	v.sawSource(last)
	return true
}

// sourceFailed records that the source did not answer at now, and raises
// the alarm once it has not for UnreachableAfter.
func (v *Vault) sourceFailed(now time.Time, err error) {
	if v.unreachableSince.IsZero() {
		v.unreachableSince = now
	}
	v.sourceUp = false
	if !v.unreachable && now.Sub(v.unreachableSince) >= v.cfg.UnreachableAfter {
		v.unreachable = true
		v.log.Error("vault: alarm: the source is unreachable", "sequence", v.copyLast+1, "code", CodeSourceUnreachable,
			"since", v.unreachableSince.UTC().Format(time.RFC3339), "err", err)
	}
}

// checkFork compares the source with the copy at the copy's last
// position (or the source's, when it is shorter); when they differ it
// finds the first position of that chain where they do, records the fork,
// raises the alarm and halts the copy. It reports whether it found one.
func (v *Vault) checkFork(ctx context.Context) (bool, error) {
	pos := v.copyLast
	srcLast, err := v.cfg.Source.LastSequence(ctx)
	if err != nil {
		return false, err
	}
	pos = min(pos, srcLast)
	if pos == 0 {
		return false, nil
	}
	differs, err := v.differs(ctx, pos)
	if err != nil {
		return false, err
	}
	v.shortened(pos)
	if !differs {
		return false, nil
	}
	first, err := v.firstDifference(ctx, pos)
	if err != nil {
		return false, err
	}
	f, err := v.fork(ctx, first)
	if err != nil {
		return false, err
	}
	v.forks = append(v.forks, f)
	v.halted = string(CodeFork)
	v.log.Error("vault: alarm: fork: the source differs from the copy; copying stopped", "sequence", f.Sequence, "code", CodeFork,
		"chain", f.Chain, "chain_seq", f.ChainSeq, "vault_hash", f.VaultHash, "source_hash", f.SourceHash)
	v.publish()
	return true, nil
}

// shortened raises, or clears, the alarm of a source that ends at end,
// before the copy, and agrees with it up to there: events the vault holds
// are gone from the source (or not there yet, while it is rewritten: a
// rewrite shows as a fork once the source reaches the rewritten event).
func (v *Vault) shortened(end uint64) {
	switch {
	case end < v.copyLast && v.shortAt == 0:
		v.shortAt = end + 1
		v.log.Error("vault: alarm: the source ends before the copy", "sequence", end+1, "code", audit.CodeStreamTruncated, "copy_last", v.copyLast)
	case end >= v.copyLast && v.shortAt != 0:
		v.shortAt = 0
		v.log.Info("vault: the source reaches the copy's end again", "sequence", v.copyLast)
	}
}

// differs reports whether the source's event at seq is not the copy's:
// another chain, position, stated hash or bytes, or none.
func (v *Vault) differs(ctx context.Context, seq uint64) (bool, error) {
	mine, ok, err := audit.StoreEvent(ctx, v.cfg.Copy)(seq)
	if err != nil || !ok {
		return false, fmt.Errorf("vault: read the copy at %d: %v", seq, errors.Join(err, errors.New("no event")))
	}
	theirs, found, err := audit.StoreEvent(ctx, v.cfg.Source)(seq)
	if err != nil {
		return false, fmt.Errorf("vault: read the source at %d: %w", seq, err)
	}
	same := found && theirs.Chain == mine.Chain && theirs.ChainSeq == mine.ChainSeq && theirs.Hash == mine.Hash &&
		eventstore.ComputeHash(&theirs) == mine.Hash
	return !same, nil
}

// errFound stops a read of the copy once the event looked for is found.
var errFound = errors.New("found")

// firstDifference finds, by bisection, the first event of the chain of the
// copy's event at pos where the source differs from the copy: a chain's
// events each carry the hash of the one before, so an event that is the
// same vouches for every earlier one of its chain.
func (v *Vault) firstDifference(ctx context.Context, pos uint64) (uint64, error) {
	mine, _, err := audit.StoreEvent(ctx, v.cfg.Copy)(pos)
	if err != nil {
		return 0, err
	}
	lo, hi, top := uint64(0), pos, pos
	for top-lo > 1 {
		mid := lo + (top-lo)/2
		s, err := v.nextOfChain(ctx, mine.Chain, mid, top-1)
		if err != nil {
			return 0, err
		}
		if s == 0 {
			top = mid
			continue
		}
		d, err := v.differs(ctx, s)
		if err != nil {
			return 0, err
		}
		if d {
			hi, top = s, s
		} else {
			lo = s
		}
	}
	return hi, nil
}

// nextOfChain returns the sequence of the copy's first event of chain from
// from to to, 0 for none.
func (v *Vault) nextOfChain(ctx context.Context, chain string, from, to uint64) (uint64, error) {
	var found uint64
	err := v.cfg.Copy.ReadStored(ctx, from, to, func(ev eventstore.RecordedEvent) error {
		if ev.Chain == chain {
			found = ev.Sequence
			return errFound
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFound) {
		return 0, err
	}
	return found, nil
}

// fork describes the fork at seq.
func (v *Vault) fork(ctx context.Context, seq uint64) (Fork, error) {
	mine, ok, err := audit.StoreEvent(ctx, v.cfg.Copy)(seq)
	if err != nil || !ok {
		return Fork{}, fmt.Errorf("vault: read the copy at %d: %v", seq, errors.Join(err, errors.New("no event")))
	}
	f := Fork{Sequence: seq, Chain: mine.Chain, ChainSeq: mine.ChainSeq, VaultHash: mine.Hash.String()}
	theirs, found, err := audit.StoreEvent(ctx, v.cfg.Source)(seq)
	if err != nil {
		return f, err
	}
	if found {
		f.SourceHash = theirs.Hash.String()
	}
	return f, nil
}

// headAt is the hash of the copy's chain head at seq, for a log line.
func (v *Vault) headAt(seq uint64) string {
	if n := len(v.torn); n > 0 && v.torn[n-1].Sequence == seq {
		return v.torn[n-1].Hash.String()
	}
	for _, h := range v.heads {
		if h.Sequence == seq {
			return h.Hash.String()
		}
	}
	return ""
}

// publish builds the status from the vault's state and hands it to the
// status endpoint and the metrics.
func (v *Vault) publish() {
	now := time.Now()
	s := &Status{SourceSeq: v.sourceSeq, VerifiedSeq: v.verified, LastSealSeq: v.lastSeal, Forks: slices.Clone(v.forks),
		counts: map[audit.Code]int{}, sourceUp: v.sourceUp}
	if v.sourceSeq > v.verified {
		s.LagEvents = v.sourceSeq - v.verified
	}
	s.LagSeconds = v.lag(now).Seconds()
	if v.report != nil {
		s.Violations = slices.Clone(v.report.Violations)
		for code, n := range v.report.ViolationCounts {
			s.counts[code] = n
		}
	}
	alarm := func(viol audit.Violation) {
		s.Violations = append(s.Violations, viol)
		s.counts[viol.Code]++
	}
	for _, g := range v.gaps {
		alarm(g)
	}
	if v.shortAt != 0 {
		alarm(audit.Violation{Sequence: v.shortAt, Code: audit.CodeStreamTruncated, Subject: "source stream",
			Expected: fmt.Sprintf("the events up to sequence %d, as the copy holds them", v.copyLast), Found: "the source ends before them"})
	}
	if v.unreachable {
		alarm(audit.Violation{Sequence: v.copyLast + 1, Code: CodeSourceUnreachable, Subject: "source stream",
			Expected: "an answer within " + v.cfg.UnreachableAfter.String(), Found: "none since " + v.unreachableSince.UTC().Format(time.RFC3339)})
	}
	if !v.unsealedSince.IsZero() {
		s.unsealedSeconds = now.Sub(v.unsealedSince).Seconds()
		if now.Sub(v.unsealedSince) > v.cfg.SealOverdue {
			s.overdue = true
			if !v.overdueLogged {
				v.overdueLogged = true
				v.log.Error("vault: alarm: seal overdue", "sequence", v.unsealedSeq, "code", CodeSealOverdue, "since", v.unsealedSince.UTC().Format(time.RFC3339))
			}
			alarm(audit.Violation{Sequence: v.unsealedSeq, Code: CodeSealOverdue, Subject: "source stream",
				Expected: "a seal within " + v.cfg.SealOverdue.String(), Found: fmt.Sprintf("none for %.0f s", s.unsealedSeconds)})
		}
	}
	v.cfg.Metrics.publish(s)
	v.mu.Lock()
	v.published = s
	v.mu.Unlock()
}
