package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Store keeps the snapshots of one kind of state: what the writer and a
// standby save to and load from. *Slot is the one on the stream.
type Store interface {
	// Load returns the newest snapshot that passes its checks against the
	// stream and the stream sequence it was taken at, with why each newer
	// one was skipped, or an error naming why none can be used
	// (ErrNotFound when there is none).
	Load(ctx context.Context) (seq uint64, data []byte, skipped []error, err error)
	// Save stores a snapshot of the state after the event at seq, and
	// prunes the oldest beyond the ones kept. data is the caller's again
	// once Save returns (the writer encodes the next snapshot into the
	// same buffer).
	Save(ctx context.Context, seq uint64, data []byte) error
}

var _ Store = (*Slot)(nil)

// Due says whether a snapshot is due after since events applied since the
// last one, taken at taken: every `every` events, or every interval if
// anything happened.
func Due(every int, interval time.Duration, since int, taken time.Time) bool {
	return since >= every || (since > 0 && time.Since(taken) >= interval)
}

// SaveMax bounds one snapshot's store by Save.
const SaveMax = time.Minute

// Save stores data, a snapshot after the event at seq, encoded in
// encoded, bounded by SaveMax, unless ctx ends first (abandoned); the
// outcome is logged (a failure only costs the next start a longer replay)
// and returned.
func Save(ctx context.Context, store Store, log *slog.Logger, seq uint64, data []byte, encoded time.Duration) bool {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, SaveMax)
	defer cancel()
	if err := store.Save(ctx, seq, data); err != nil {
		if errors.Is(err, context.Canceled) {
			log.Info("snapshot store abandoned", "seq", seq, "after", time.Since(start).Round(time.Millisecond))
		} else {
			log.Warn("snapshot not stored", "seq", seq, "err", err)
		}
		return false
	}
	log.Info("snapshot taken", "seq", seq, "bytes", len(data), "encode", encoded.Round(time.Millisecond),
		"total", (encoded + time.Since(start)).Round(time.Millisecond))
	return true
}

// Slot is where one kind of state of one chain keeps its snapshots, in
// one format under one rule set: a load refuses any other.
type Slot struct {
	b           *Bucket
	kind, chain string
	format      int
	ruleSet     string
	pace        Pace
}

// Slot returns the slot of a kind of state of chain, whose data is in
// format under ruleSet, saved at DefaultPace.
func (b *Bucket) Slot(kind, chain string, format int, ruleSet string) *Slot {
	return &Slot{b: b, kind: kind, chain: chain, format: format, ruleSet: ruleSet, pace: DefaultPace}
}

// Paced returns the slot whose saves go at p.
func (sl *Slot) Paced(p Pace) *Slot {
	c := *sl
	c.pace = p
	return &c
}

// Save stores data, the state after the event at stream sequence seq, at
// the slot's pace for its size (Pace.Rate); see SaveParts. data is the
// caller's again once Save returns.
func (sl *Slot) Save(ctx context.Context, seq uint64, data []byte) error {
	return sl.save(ctx, seq, sl.pace.Rate(len(data)), func(w *PartWriter) error { return w.writeWhole(data) })
}

// SaveParts stores what write writes, the state after the event at stream
// sequence seq, with the hash of that event as the stream holds it now,
// in parts of at most Config.PartBytes as write goes, in sections where
// write cuts them (PartWriter.Cut), at the slot's pace (its size unknown
// beforehand, at Pace.BytesPerSecond); then it prunes the slot's oldest
// snapshots beyond Config.Keep.
func (sl *Slot) SaveParts(ctx context.Context, seq uint64, write func(*PartWriter) error) error {
	return sl.save(ctx, seq, sl.pace.BytesPerSecond, write)
}

// save is SaveParts at rate bytes a second.
func (sl *Slot) save(ctx context.Context, seq uint64, rate int, write func(*PartWriter) error) error {
	head, err := sl.b.store.HeadAt(ctx, sl.chain, seq)
	if err != nil {
		return fmt.Errorf("save %s snapshot: %w", sl.kind, err)
	}
	return sl.b.putParts(ctx, Meta{Kind: sl.kind, Chain: sl.chain, Sequence: seq, ChainSeq: head.ChainSeq, Head: head.Hash,
		Format: sl.format, RuleSet: sl.ruleSet, CreatedAt: time.Now().UTC()}, rate, write)
}

// Load returns the newest snapshot that passes every check, whole, and its
// sequence (see LoadParts).
func (sl *Slot) Load(ctx context.Context) (seq uint64, data []byte, skipped []error, err error) {
	seq, skipped, err = sl.LoadParts(ctx, func(_ uint64, r io.Reader) error {
		data, err = io.ReadAll(r)
		return err
	})
	if err != nil {
		return 0, nil, skipped, err
	}
	return seq, data, skipped, nil
}

// LoadParts hands read the data of the newest snapshot that passes every
// check, as its parts arrive, and returns its sequence: its manifest's
// authentication, its format and rule set, the stream still holding, at
// its sequence, the event whose hash it names, and, as read reads them,
// each part's authentication. Newer snapshots that fail one (a store cut
// short, a part lost or altered, another build's format or layout) are
// skipped, each with the reason, which the caller logs; an older one
// still saves most of the replay. read must read its reader to the end
// and may be called again for an older snapshot when a part fails: it
// must start from nothing each time. An error of read's own (the data
// does not decode) is returned as it is, no older snapshot tried. A
// snapshot is never trusted over the stream: the error (ErrNotFound, or
// the last refusal when none passes) means replaying from the start. Of a
// snapshot in sections, read reads the first only (see LoadSections).
func (sl *Slot) LoadParts(ctx context.Context, read func(seq uint64, r io.Reader) error) (seq uint64, skipped []error, err error) {
	return sl.LoadSections(ctx, func(seq uint64, r io.Reader, _ *Sections) error { return read(seq, r) })
}

// LoadSections is LoadParts handing read, beside the reader of the first
// section, the snapshot's other sections, which it may open later, alone
// (a section's parts pruned or altered by then are refused as they are
// read).
//
// A passing error (ErrUnavailable: a request timed out, the cluster
// elects a leader) is no verdict on a snapshot: the load is tried again,
// for loadPatience at most, before it returns it; a start that gave a
// snapshot up for it would replay the whole history.
func (sl *Slot) LoadSections(ctx context.Context, read func(seq uint64, r io.Reader, rest *Sections) error) (seq uint64, skipped []error, err error) {
	err = sl.b.retryPassing(ctx, "snapshot load", func() error {
		seq, skipped, err = sl.loadSections(ctx, read)
		return err
	})
	return seq, skipped, err
}

// retryPassing calls try until it returns no ErrUnavailable or
// loadPatience has passed, pausing longer each time (at most
// loadPauseMax), and returns its last error.
func (b *Bucket) retryPassing(ctx context.Context, what string, try func() error) error {
	start, pause := time.Now(), loadPause
	for n := 1; ; n++ {
		err := try()
		if !errors.Is(err, ErrUnavailable) || time.Since(start) > loadPatience || ctx.Err() != nil {
			return err
		}
		b.cfg.Logger.Warn(what+": trying again after a passing error", "try", n, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, loadPauseMax)
	}
}

// Bounds of a snapshot load's tries after passing errors: a stream's
// leader is elected seconds after its quorum is back, and a start that
// gives its snapshot up replays the whole history instead.
const (
	loadPatience = 20 * time.Second
	loadPause    = 250 * time.Millisecond
	loadPauseMax = 2 * time.Second
)

// loadSections is one try of LoadSections.
func (sl *Slot) loadSections(ctx context.Context, read func(seq uint64, r io.Reader, rest *Sections) error) (seq uint64, skipped []error, err error) {
	started := time.Now()
	names, err := sl.b.names(ctx, sl.kind, sl.chain)
	if err != nil {
		return 0, nil, unavailable(err)
	}
	if len(names) == 0 {
		return 0, nil, fmt.Errorf("%s snapshot of chain %s: %w", sl.kind, sl.chain, ErrNotFound)
	}
	sl.b.cfg.Logger.Info("snapshot found", "kind", sl.kind, "name", names[len(names)-1], "of", len(names), "after", since(started))
	for i := len(names) - 1; i >= 0; i-- {
		seq, err = sl.load(ctx, names[i], read)
		if err == nil {
			return seq, skipped, nil
		}
		if errors.Is(err, errGone) {
			continue
		}
		// A passing error (ErrUnavailable) is no refusal: the snapshot
		// may be whole, and an older one is not tried for it.
		if !errors.Is(err, ErrRefused) {
			return 0, skipped, err
		}
		skipped = append(skipped, err)
	}
	if len(skipped) == 0 {
		return 0, nil, fmt.Errorf("%s snapshot of chain %s: %w", sl.kind, sl.chain, ErrNotFound)
	}
	return 0, skipped[:len(skipped)-1], skipped[len(skipped)-1]
}

// load checks the snapshot name and hands its data to read (see
// LoadParts).
func (sl *Slot) load(ctx context.Context, name string, read func(uint64, io.Reader, *Sections) error) (uint64, error) {
	started := time.Now()
	meta, r, rest, err := sl.b.open(ctx, name)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	opened := time.Since(started)
	switch {
	case meta.Kind != sl.kind || meta.Chain != sl.chain:
		return 0, fmt.Errorf("%w: %s: names %s of chain %s", ErrRefused, name, meta.Kind, meta.Chain)
	case meta.Format != sl.format:
		return 0, fmt.Errorf("%w: %s: format version %d, this build reads %d", ErrRefused, name, meta.Format, sl.format)
	case meta.RuleSet != sl.ruleSet:
		return 0, fmt.Errorf("%w: %s: rule set %s, this build runs %s", ErrRefused, name, meta.RuleSet, sl.ruleSet)
	}
	head, err := sl.b.store.HeadAt(ctx, sl.chain, meta.Sequence)
	if err != nil {
		return 0, refused(err, "%s", name)
	}
	if head.Hash != meta.Head || head.ChainSeq != meta.ChainSeq {
		return 0, fmt.Errorf("%w: %s: the stream holds event %s (chain position %d) at sequence %d, the snapshot names %s (%d)",
			ErrRefused, name, head.Hash, head.ChainSeq, meta.Sequence, meta.Head, meta.ChainSeq)
	}
	sl.b.cfg.Logger.Info("snapshot head checked", "kind", sl.kind, "seq", meta.Sequence, "bytes", meta.Bytes,
		"manifest", round(opened), "head_check", since(started.Add(opened)))
	if err := read(meta.Sequence, r, rest); err != nil {
		return 0, err
	}
	// Every part must have been read and authenticated: data the decoder
	// left unread is a snapshot it does not understand.
	if n, err := r.Read(make([]byte, 1)); n > 0 || !errors.Is(err, io.EOF) {
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		return 0, fmt.Errorf("%s: the data goes on after its end", name)
	}
	return meta.Sequence, nil
}
