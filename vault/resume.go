package vault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/eventstore"
)

// resume starts the auditor from the saved state (a new one without it),
// verifies from the copy what it holds past that state (copied before a
// stop, not verified then: never read from the source again), and checks
// that the source still holds, at the copy's end, the event the copy
// holds there.
func (v *Vault) resume(ctx context.Context) error {
	last, err := v.cfg.Copy.LastSequence(ctx)
	if err != nil {
		return fmt.Errorf("vault: the copy: %w", err)
	}
	if v.cfg.SyncCopy != nil {
		// A crash may have left events stored and not yet synced: they
		// are verified and cosigned once on disk.
		if err := v.cfg.SyncCopy(); err != nil {
			return fmt.Errorf("vault: sync the copy: %w", err)
		}
	}
	st, err := audit.ReadStateFile(v.cfg.StateFile)
	switch {
	case isNotExist(err):
		if v.a, err = audit.New(v.cfg.Audit); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("vault: %w", err)
	default:
		if err := v.resumeState(ctx, st); err != nil {
			return err
		}
	}
	if last < v.verified {
		return fmt.Errorf("vault: the copy ends at sequence %d, before the %d its saved state verified: the vault's own storage lost events", last, v.verified)
	}
	pos, err := readPosition(v.cfg.PositionFile)
	if err != nil {
		return err
	}
	v.lastSeal = pos.LastSealSeq
	replayed, err := v.replayCopy(ctx, v.verified+1, last)
	if err != nil {
		return err
	}
	v.copyLast = last
	if err := v.finishRound(ctx); err != nil {
		return err
	}
	if v.unsealedSince.IsZero() && last > v.lastSeal {
		// The copy's tail after its last seal was received before this
		// start: its wait for a seal counts from now.
		v.unsealedSince, v.unsealedSeq = time.Now(), v.lastSeal+1
	}
	v.log.Info("vault: resumed", "verified_seq", v.verified, "replayed_from_copy", replayed, "following_from", last+1-len64(v.torn))
	return nil
}

// openSource opens the source when the vault was given how to, trying
// again every tick until it answers, with the status published and the
// alarm raised meanwhile. It reports false when ctx ended first.
func (v *Vault) openSource(ctx context.Context) bool {
	if v.cfg.Source != nil {
		return true
	}
	tick := time.NewTicker(v.cfg.Tick)
	defer tick.Stop()
	for {
		octx, cancel := context.WithTimeout(ctx, probeTimeout)
		src, err := v.cfg.OpenSource(octx)
		cancel()
		if err == nil {
			v.cfg.Source = src
			return true
		}
		if v.unreachableSince.IsZero() {
			v.log.Warn("vault: the source does not answer yet; trying again", "err", err)
		}
		v.sourceFailed(time.Now(), err)
		v.publish()
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// compareAtStart checks that the source still holds the copy's last event
// before anything is read from it.
func (v *Vault) compareAtStart(ctx context.Context) {
	if v.copyLast == 0 {
		return
	}
	forked, err := v.checkFork(ctx)
	if err != nil {
		v.log.Warn("vault: the source could not be compared with the copy yet", "sequence", v.copyLast, "err", err)
	} else if !forked {
		v.log.Info("vault: the source holds the copy's last event", "sequence", v.copyLast, "hash", v.headAt(v.copyLast))
	}
}

// resumeState resumes the auditor from st once the copy is checked to
// hold what it verified.
func (v *Vault) resumeState(ctx context.Context, st *audit.State) error {
	a, err := audit.Resume(v.cfg.Audit, st)
	if err != nil {
		return fmt.Errorf("vault: the saved state %s: %w", v.cfg.StateFile, err)
	}
	ok, err := a.CheckContinuity(audit.StoreEvent(ctx, v.cfg.Copy))
	if err != nil {
		return fmt.Errorf("vault: check the copy against the saved state: %w", err)
	}
	if !ok {
		r := a.Finish()
		return fmt.Errorf("vault: the copy does not hold what the saved state %s verified (%v): the vault's own storage changed", v.cfg.StateFile, r.Violations)
	}
	v.a, v.verified = a, st.LastSequence
	for _, c := range st.Verifier.Chains {
		if h, err := c.Head.Head(); err == nil && h.Sequence != 0 {
			v.heads[c.Chain] = h
		}
	}
	return nil
}

// replayCopy feeds the auditor the copy's events from sequence from to
// to, whole appends as the source gave them; an append cut short at the
// end is kept in v.torn.
func (v *Vault) replayCopy(ctx context.Context, from, to uint64) (uint64, error) {
	if from > to {
		return 0, nil
	}
	at := time.Now()
	var n uint64
	read, torn := eventstore.WholeAppends(func(ev eventstore.RecordedEvent) error {
		n++
		return v.check(ctx, ev, at, false)
	}, nil)
	if err := v.cfg.Copy.ReadStored(ctx, from, to, read); err != nil {
		return n, fmt.Errorf("vault: read the copy from %d to %d: %w", from, to, err)
	}
	if t := torn(); len(t) > 0 {
		if v.cfg.SyncCopy == nil {
			return n, fmt.Errorf("vault: the copy ends inside an append at sequence %d", t[0].Sequence)
		}
		// Its plain messages were cut short by a crash: the source
		// completes the append.
		v.torn = t
		v.log.Warn("vault: the copy ends inside an append, to complete from the source", "first_seq", t[0].Sequence, "copy_last", to)
	}
	if v.cfg.Metrics != nil {
		v.cfg.Metrics.replayed.Add(float64(n))
	}
	return n, nil
}

// stop finishes the round of checks in progress and saves the state, so
// that the next start verifies nothing twice.
func (v *Vault) stop() error {
	// The run's context has ended: the batches in flight are awaited
	// within the copy's own request timeout. The state is saved whatever
	// its age, so that the next start verifies nothing twice.
	v.savedAt = time.Time{}
	if err := v.finishRound(context.Background()); err != nil {
		return err
	}
	v.log.Info("vault: stopped", "verified_seq", v.verified)
	return nil
}

// position is the vault's own position file: what the audit state does not
// say.
type position struct {
	// LastSealSeq is the stream sequence of the last seal verified.
	LastSealSeq uint64 `json:"last_seal_seq"`
}

// writePosition writes the position file whole (a temporary file renamed).
func writePosition(path string, p position) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("vault: write the position: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("vault: write the position: %w", err)
	}
	return nil
}

// readPosition reads the position file; a missing one is the start's.
func readPosition(path string) (position, error) {
	var p position
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	if err != nil {
		return p, fmt.Errorf("vault: the position file %s: %w", path, err)
	}
	return p, nil
}
