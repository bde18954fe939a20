package eventstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrTruncated reports a stream that ends short of a position that
// evidence kept outside it says it held, or holds another event there: a
// damaged disk lost acknowledged events (nats-server drops every message
// from a damaged record on, and starts). The details are in a
// *TruncatedError.
var ErrTruncated = errors.New("eventstore: the stream lost acknowledged events")

// Evidence is a position of a chain that something kept outside the
// stream says the stream held: the high-water mark of acknowledged
// commits, a snapshot's manifest.
type Evidence struct {
	// Source names the evidence ("high-water mark", "snapshot
	// writer.s0.00000000000000001234").
	Source string
	// Head is the position: its sequence, and its event's chain position
	// and hash when known (zero otherwise).
	Head Head
}

// TruncatedError names the evidence a stream fails. It matches
// ErrTruncated.
type TruncatedError struct {
	// Stream and Chain are what was checked.
	Stream, Chain string
	// End is the stream sequence of the last event of the chain's last
	// whole append.
	End uint64
	// Missing lists the evidence past End; Differing, the evidence at a
	// sequence where the stream holds another event.
	Missing, Differing []Evidence
	// Holes counts the messages the stream's copy lacks below its last
	// sequence (JetStream counts them deleted): a stream that denies
	// deletes has none unless a damaged disk lost them.
	Holes uint64
}

// Error names the end, each piece of evidence failed, and the way out.
func (e *TruncatedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stream %s (chain %s) ends at sequence %d, short of what was acknowledged:", e.Stream, e.Chain, e.End)
	for _, ev := range e.Missing {
		fmt.Fprintf(&b, " %s names sequence %d (%s missing);", ev.Source, ev.Head.Sequence, events(ev.Head.Sequence-e.End))
	}
	for _, ev := range e.Differing {
		fmt.Fprintf(&b, " %s names event %s at sequence %d, the stream holds another;", ev.Source, ev.Head.Hash, ev.Head.Sequence)
	}
	if e.Holes > 0 {
		fmt.Fprintf(&b, " its copy lacks %s below its last sequence, though it denies deletes;", events(e.Holes))
	}
	b.WriteString(" a damaged disk lost acknowledged events: restore the stream from a backup, the regulator's copy or a healthy replica (docs/operations.md, \"Storage faults\")")
	return b.String()
}

// events counts events in words: "1 event", "9 events".
func events(n uint64) string {
	if n == 1 {
		return "1 event"
	}
	return fmt.Sprintf("%d events", n)
}

// Is makes errors.Is(err, ErrTruncated) true.
func (e *TruncatedError) Is(target error) bool { return target == ErrTruncated }

// CheckEvidence checks chain against evidence: the stream must hold, as
// whole appends, every position the evidence names, and at each the event
// it names when it names one; and its copy (the leader's, on a cluster)
// must lack no message below its last sequence. It returns the head of
// the last whole append and the events of a torn append after it (nil
// when none), or a *TruncatedError, or the read error.
func (s *NATSStore) CheckEvidence(ctx context.Context, chain string, evidence []Evidence) (Head, []RecordedEvent, error) {
	holes, err := s.holes(ctx)
	if err != nil {
		return Head{}, nil, err
	}
	head, err := s.ChainHead(ctx, chain)
	if err != nil {
		return Head{}, nil, err
	}
	torn, err := s.tornTail(ctx, chain, head)
	if err != nil {
		return Head{}, nil, err
	}
	whole := head
	if len(torn) > 0 {
		whole = Head{Sequence: torn[0].Sequence - 1, ChainSeq: torn[0].ChainSeq - 1, Hash: torn[0].PrevHash}
	}
	te := &TruncatedError{Stream: s.cfg.Stream, Chain: chain, End: whole.Sequence, Holes: holes}
	for _, ev := range evidence {
		switch {
		case ev.Head.Sequence > whole.Sequence:
			te.Missing = append(te.Missing, ev)
		case ev.Head.Sequence == 0 || ev.Head.Hash == (Hash{}):
		default:
			at, err := s.HeadAt(ctx, chain, ev.Head.Sequence)
			if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) && !errors.Is(err, ErrInvalid) {
				return Head{}, nil, err
			}
			if err != nil || at.Hash != ev.Head.Hash || at.ChainSeq != ev.Head.ChainSeq {
				te.Differing = append(te.Differing, ev)
			}
		}
	}
	if len(te.Missing) > 0 || len(te.Differing) > 0 || te.Holes > 0 {
		return Head{}, nil, te
	}
	return whole, torn, nil
}

// holes counts the messages the stream's copy lacks below its last
// sequence. Nothing deletes from a Tresor stream, so JetStream counts as
// deleted only what a damaged block file lost: a replica restarted on one
// keeps the stream's last sequence and lacks the damaged records'
// messages, and is counted current by its peers.
func (s *NATSStore) holes(ctx context.Context) (uint64, error) {
	st, err := s.state(ctx)
	if err != nil {
		return 0, err
	}
	if st.Msgs == 0 {
		return 0, nil
	}
	return uint64(st.NumDeleted) + (st.FirstSeq - 1), nil
}

// startHead is the head a committer starts on: the chain's, once checked
// against the evidence (cfg.Evidence and the high-water mark), a torn
// append at its end voided. It returns a *TruncatedError for a stream that
// lost acknowledged events: a writer never starts on one.
// Its reads are bounded by rctx, its Void's append by ctx.
func (s *NATSStore) startHead(ctx, rctx context.Context, chain string, cfg *CommitterConfig) (Head, error) {
	evidence := slices.Clip(cfg.Evidence)
	if cfg.HighWater != nil {
		mark, ok, err := cfg.HighWater.Load(rctx)
		if err != nil {
			return Head{}, err
		}
		if ok {
			evidence = append(evidence, Evidence{Source: "the high-water mark of acknowledged commits", Head: mark})
		}
	}
	head, torn, err := s.CheckEvidence(rctx, chain, evidence)
	if err != nil {
		return Head{}, err
	}
	if len(torn) > 0 {
		if head, err = s.voidTorn(ctx, chain, torn); err != nil {
			return Head{}, err
		}
	}
	if cfg.HighWater != nil {
		cfg.HighWater.Advance(head)
	}
	return head, nil
}

// voidTorn appends the Void of the torn append at the end of chain and
// returns the new head, the Void's.
func (s *NATSStore) voidTorn(ctx context.Context, chain string, torn []RecordedEvent) (Head, error) {
	ev, err := newVoid(chain, torn)
	if err != nil {
		return Head{}, err
	}
	last := torn[len(torn)-1]
	recs, head := s.record(chain, Head{Sequence: last.Sequence, ChainSeq: last.ChainSeq, Hash: last.Hash}, []Event{ev}, s.cfg.Now().UTC(), nil)
	seqs, err := s.commitBatch(ctx, chain, last.Sequence, recs, nil)
	if err != nil {
		return Head{}, fmt.Errorf("void the torn append %s: %w", seqRangeText(torn[0].Sequence, last.Sequence), err)
	}
	head.Sequence = seqs[0]
	if s.cfg.Logger != nil {
		s.cfg.Logger.Warn("torn append voided", "chain", chain, "first_seq", torn[0].Sequence, "last_seq", last.Sequence,
			"announced", torn[0].AppendRemaining+1, "found", len(torn), "void_seq", head.Sequence)
	}
	return head, nil
}
