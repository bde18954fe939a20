package eventstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
)

// The store's own Void event: the marker that an append cut short is not
// the ledger's. Its type is registered in every Registry.
const (
	VoidType          = "eventstore.Void"
	VoidSchemaVersion = 1
	// VoidKind is the aggregate kind of voids ('_' is reserved, as for
	// seals).
	VoidKind = "_void"
)

// Void is the payload of a Void event. A disk that tears a write (a power
// cut in the middle of a batch) can leave the first events of an append
// on the stream without the rest; the stream denies deletes, so they stay.
// The writer that finds such a torn append at the chain's end records a
// Void right after it, naming its events; every reader then passes them by
// (RecordedEvent.Voided), so that no part of an append that was never
// acknowledged is decided on, applied or settled. The voided events stay
// in the hash chain, which the Void continues.
type Void struct {
	// Chain is the chain of the torn append.
	Chain string `json:"chain"`
	// FirstSeq and LastSeq are the stream sequences of the events of the
	// torn append that the stream holds.
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// Announced is how many events the append's first event announced
	// (its AppendRemaining plus one); Found is how many the stream holds.
	Announced int `json:"announced"`
	Found     int `json:"found"`
	// Reason says why the append is voided, for the people reading it.
	Reason string `json:"reason"`
}

// voidReason is what a writer records as the reason of a torn append's
// Void.
const voidReason = "append cut short on disk and never acknowledged: its events are not the ledger's"

// newVoid is the Void event of the torn append recs.
func newVoid(chain string, torn []RecordedEvent) (Event, error) {
	v := Void{Chain: chain, FirstSeq: torn[0].Sequence, LastSeq: torn[len(torn)-1].Sequence,
		Announced: torn[0].AppendRemaining + 1, Found: len(torn), Reason: voidReason}
	payload, err := json.Marshal(v)
	if err != nil {
		return Event{}, fmt.Errorf("void the torn append of chain %s: %w", chain, err)
	}
	return Event{Type: VoidType, SchemaVersion: VoidSchemaVersion, Aggregate: Aggregate{Kind: VoidKind, ID: chain}, Payload: payload}, nil
}

// ParseVoid reads a Void event's payload.
func ParseVoid(ev RecordedEvent) (Void, error) {
	var v Void
	if ev.Type != VoidType {
		return v, fmt.Errorf("event at sequence %d is a %s, not a void: %w", ev.Sequence, ev.Type, ErrInvalid)
	}
	if err := json.Unmarshal(ev.Payload, &v); err != nil {
		return v, fmt.Errorf("void at sequence %d: %w", ev.Sequence, err)
	}
	return v, nil
}

// wholeAppends hands fn the events of whole appends only: the events of a
// multi-event append are held until its last one is read, then handed on
// together; those of an append that a Void follows are handed on marked
// Voided, then the Void. Events held when the read ends (a torn append not
// yet voided) are never handed on: torn returns them.
type wholeAppends struct {
	fn   func(RecordedEvent) error
	held []RecordedEvent
	// broken, when set, is told of an append cut short with no Void, or
	// a Void that names no torn append, instead of the read failing with
	// it: the events are then handed on as they are, for an auditor to
	// report what their chain and sequences show.
	broken func(*IntegrityError)
}

// add takes the next event of the stream, in order.
func (w *wholeAppends) add(ev RecordedEvent) error {
	if len(w.held) == 0 && ev.AppendRemaining == 0 && ev.Type != VoidType {
		return w.fn(ev)
	}
	if ev.Type == VoidType {
		return w.void(ev)
	}
	if n := len(w.held); n > 0 {
		prev := w.held[n-1]
		if ev.Sequence != prev.Sequence+1 || ev.AppendRemaining != prev.AppendRemaining-1 {
			err := &IntegrityError{Sequence: ev.Sequence, Subject: ev.Type, What: "append",
				Expected: fmt.Sprintf("event %d of the append begun at %d, %d more to follow", n+1, w.held[0].Sequence, prev.AppendRemaining-1),
				Found:    fmt.Sprintf("%d more to follow: the append begun at %d is cut short with no Void", ev.AppendRemaining, w.held[0].Sequence)}
			if err := w.tolerate(err); err != nil {
				return err
			}
		}
	}
	w.held = append(w.held, ev)
	if ev.AppendRemaining > 0 {
		return nil
	}
	return w.flush(false)
}

// void hands on the held events marked Voided, then the Void itself, which
// must name exactly the held events.
func (w *wholeAppends) void(ev RecordedEvent) error {
	v, err := ParseVoid(ev)
	var first, last uint64
	if len(w.held) > 0 {
		first, last = w.held[0].Sequence, w.held[len(w.held)-1].Sequence
	}
	if err != nil || len(w.held) == 0 || v.FirstSeq != first || v.LastSeq != last || ev.Sequence != last+1 {
		err := &IntegrityError{Sequence: ev.Sequence, Subject: ev.Type, What: "void",
			Expected: fmt.Sprintf("a void of the torn append before it (%s)", seqRangeText(first, last)),
			Found:    fmt.Sprintf("a void of %s (%v)", seqRangeText(v.FirstSeq, v.LastSeq), err)}
		if err := w.tolerate(err); err != nil {
			return err
		}
		return w.fn(ev)
	}
	if err := w.flush(true); err != nil {
		return err
	}
	return w.fn(ev)
}

// tolerate returns err, or, when the reader is told of broken appends,
// tells it and hands the held events on as they are.
func (w *wholeAppends) tolerate(err *IntegrityError) error {
	if w.broken == nil {
		return err
	}
	w.broken(err)
	return w.flush(false)
}

// flush hands on the held events.
func (w *wholeAppends) flush(voided bool) error {
	for i := range w.held {
		w.held[i].Voided = voided
		if err := w.fn(w.held[i]); err != nil {
			return err
		}
	}
	clear(w.held)
	w.held = w.held[:0]
	return nil
}

// torn returns the events held at the end of a read: an append cut short
// that no Void follows yet.
func (w *wholeAppends) torn() []RecordedEvent { return w.held }

// seqRangeText names a range of stream sequences.
func seqRangeText(first, last uint64) string {
	if first == 0 {
		return "none"
	}
	return strconv.FormatUint(first, 10) + " to " + strconv.FormatUint(last, 10)
}

// WholeAppends wraps fn, the reader of a raw stream read in order
// (ReadStored, ReadExport), as ReadFrom and Follow read: whole appends
// only, a voided append's events marked Voided. An append cut short before
// another begins, or a Void that names no torn append, is told to broken
// and its events handed on as they are (an auditor reports them from
// their chain and sequences). It returns the reader to pass on and a
// function that returns, once the read has ended, the events of a torn
// append not yet voided, which were never handed to fn.
func WholeAppends(fn func(RecordedEvent) error, broken func(*IntegrityError)) (read func(RecordedEvent) error, torn func() []RecordedEvent) {
	w := &wholeAppends{fn: fn, broken: broken}
	return w.add, w.torn
}

// tornTail returns the events of the torn append at the end of chain
// (head is its last event as stored), oldest first, or nil when the chain
// ends on a whole append. The first event of an append announces how many
// follow it, so that the walk back is bounded by BatchEventsMax.
func (s *NATSStore) tornTail(ctx context.Context, chain string, head Head) ([]RecordedEvent, error) {
	if head.Sequence == 0 {
		return nil, nil
	}
	var torn []RecordedEvent
	for seq := head.Sequence; seq > 0 && len(torn) < BatchEventsMax; seq-- {
		ev, err := s.eventAt(ctx, seq)
		if err != nil {
			return nil, err
		}
		if len(torn) > 0 && (ev.Chain != chain || ev.AppendRemaining != torn[0].AppendRemaining+1) {
			break
		}
		if len(torn) == 0 && ev.AppendRemaining == 0 {
			return nil, nil
		}
		torn = append([]RecordedEvent{ev}, torn...)
	}
	return torn, nil
}

// eventAt reads and hash-checks the event stored at seq.
func (s *NATSStore) eventAt(ctx context.Context, seq uint64) (RecordedEvent, error) {
	ctx, cancel := s.reqCtx(ctx)
	defer cancel()
	m, err := s.stream.GetMsg(ctx, seq)
	if err != nil {
		return RecordedEvent{}, fmt.Errorf("get the event at sequence %d: %w", seq, err)
	}
	ev, err := s.subj.decode(m.Subject, m.Sequence, m.Header, m.Data)
	if err != nil {
		return RecordedEvent{}, fmt.Errorf("read the event at sequence %d: %w", seq, err)
	}
	return ev, nil
}

// HeadAt returns the position of the event stored at a stream sequence,
// hash-checked, which must belong to chain: what a snapshot's head is
// checked against.
func (s *NATSStore) HeadAt(ctx context.Context, chain string, seq uint64) (Head, error) {
	ev, err := s.eventAt(ctx, seq)
	if err != nil {
		return Head{}, err
	}
	if ev.Chain != chain {
		return Head{}, fmt.Errorf("the event at sequence %d is of chain %s, not %s: %w", seq, ev.Chain, chain, ErrInvalid)
	}
	return Head{Sequence: ev.Sequence, ChainSeq: ev.ChainSeq, Hash: ev.Hash}, nil
}

// LedgerFact reports whether ev is one of the ledger's facts, for a reader
// to decode and apply: not the store's own Seal, Void or seal-key events,
// nor an event of a voided append.
func (ev *RecordedEvent) LedgerFact() bool {
	return !ev.Voided && ev.Type != SealType && ev.Type != VoidType && ev.Type != SealKeyRotatedType && ev.Type != SealKeyRevokedType
}
