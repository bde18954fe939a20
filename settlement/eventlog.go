package settlement

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/domain/codec"
	"github.com/fdj/tresor/eventstore"
)

// Chain is the hash chain of the single writer shard. More shards, each
// with its own chain and blocks, are the path past one machine.
const Chain = "s0"

// upcasters lists, per event type, the functions that bring each older
// schema version to the next (upcasters[t][0] turns version 1 into 2).
var upcasters = map[string][]eventstore.Upcaster{
	// Version 2 adds the optional idempotency_key: a version 1 payload is
	// a version 2 payload without a key. Version 3 adds the optional by.
	// Version 4 may seal by's subject (domain.SealedPrefix).
	domain.TypeEmissionCreated: {sameShape, sameShape, sameShape},
	// Version 2 of these adds the optional by (who gave the command) and,
	// where an action needs one, reason; LimitChanged's adds period_days,
	// whose absence reads as the weekly period of version 1. Version 3
	// may seal the subject and the reason.
	domain.TypeAccountOpened:  {sameShape, sameShape},
	domain.TypeLimitChanged:   {sameShape, sameShape},
	domain.TypeSelfExcluded:   {sameShape, sameShape},
	domain.TypeFundsDeposited: {sameShape, sameShape},
	domain.TypeFundsWithdrawn: {sameShape, sameShape},
	domain.TypeBlockClosed:    {sameShape, sameShape},
	// Version 2 of these may seal the staff subjects, reasons and
	// references they carry: same keys, same shape.
	domain.TypeSelfExcludedUntil:  {sameShape},
	domain.TypePlayerBanned:       {sameShape},
	domain.TypeBanLifted:          {sameShape},
	domain.TypeSalesSuspended:     {sameShape},
	domain.TypeSalesResumed:       {sameShape},
	domain.TypeAccountClosed:      {sameShape},
	domain.TypeAccountReopened:    {sameShape},
	domain.TypeAdjustmentProposed: {sameShape},
	domain.TypeAdjustmentApproved: {sameShape},
	domain.TypeAdjustmentRejected: {sameShape},
	// Version 2 seals the subject and adds its pseudonym, subject_ref.
	domain.TypeTokenRevoked: {sameShape},
	// Version 2 adds the proposal it approves (erasure, proposed_by): a
	// version 1 erasure was recorded at once, without one.
	domain.TypePersonalDataErased: {sameShape},
}

// sameShape upcasts a payload whose new version only added optional fields.
func sameShape(p json.RawMessage) (json.RawMessage, error) { return p, nil }

// NewRegistry returns the event store registry of every domain event type
// at its current schema version, with the upcasters of older versions.
func NewRegistry() (*eventstore.Registry, error) {
	r := eventstore.NewRegistry()
	for typ, v := range domain.SchemaVersion {
		if err := r.Register(typ, uint32(v), upcasters[typ]...); err != nil {
			return nil, fmt.Errorf("register %s: %w", typ, err)
		}
	}
	return r, nil
}

// EventLog is the writer's Log on the event store: domain events become
// envelopes on the shard's chain, group-committed by an
// eventstore.Committer.
type EventLog struct {
	store     eventstore.Store
	committer eventstore.Committer

	// Commands' envelopes and payloads are cut from shared chunks, so
	// that a command allocates nothing of its own most of the time. A
	// chunk stays reachable while a request cut from it does, that is
	// until the committer has answered it and reused its batch.
	mu       sync.Mutex
	payloads []byte             // what is left of the current payload chunk
	events   []eventstore.Event // what is left of the current envelope chunk
}

// Chunk sizes of EventLog.Append: a new payload chunk when less than
// payloadRoom is left (a payload needing more grows the chunk, correctly
// but at a copy), a new envelope chunk when a command does not fit.
const (
	payloadChunk = 64 << 10
	payloadRoom  = 4 << 10
	eventsChunk  = 512
)

// OpenEventLog starts the committer of the shard's chain on store. The
// committer loads the chain's head now; Replay then checks that the stream
// ends there, so that a writer never decides on a state older than the head
// it is fenced on.
func OpenEventLog(ctx context.Context, store eventstore.Store, cfg eventstore.CommitterConfig) (*EventLog, error) {
	c, err := store.NewCommitter(ctx, Chain, cfg)
	if err != nil {
		return nil, fmt.Errorf("open event log: %w", err)
	}
	return &EventLog{store: store, committer: c}, nil
}

// Stats counts the batches the committer has committed.
func (l *EventLog) Stats() eventstore.CommitterStats { return l.committer.Stats() }

// Close commits what was submitted and stops the committer.
func (l *EventLog) Close() error { return l.committer.Close() }

// Abort stops appending at once: what was not sent yet fails with err (see
// eventstore.Committer.Abort). Close must still be called.
func (l *EventLog) Abort(err error) { l.committer.Abort(err) }

// Append implements Log.
func (l *EventLog) Append(ctx context.Context, recs []Record, done func(AppendResult)) {
	req, err := l.envelopes(recs)
	if err != nil {
		done(AppendResult{Err: err})
		return
	}
	l.committer.SubmitFunc(ctx, req, func(r eventstore.AppendResult) {
		done(AppendResult{Seqs: r.Sequences, Err: r.Err,
			Commit: CommitTiming{Queued: r.Timing.Queued, Held: r.Timing.Held, Committed: r.Timing.Committed}})
	})
}

// envelopes builds the request of one command, its envelopes and payloads
// cut from the log's chunks. envelope marshals every payload
// (codec.AppendEventJSON gives json.Marshal's bytes): the store need not
// check their JSON again.
func (l *EventLog) envelopes(recs []Record) (eventstore.AppendRequest, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.events) < len(recs) {
		l.events = make([]eventstore.Event, max(eventsChunk, len(recs)))
	}
	evs := l.events[:len(recs):len(recs)]
	for i, r := range recs {
		if cap(l.payloads)-len(l.payloads) < payloadRoom {
			l.payloads = make([]byte, 0, payloadChunk)
		}
		ev, err := envelope(r, &l.payloads)
		if err != nil {
			clear(evs)
			return eventstore.AppendRequest{}, err
		}
		evs[i] = ev
	}
	l.events = l.events[len(recs):]
	return eventstore.AppendRequest{Events: evs, PayloadsMarshaled: true}, nil
}

// envelope turns a domain event into the event store's envelope, its
// payload appended to buf (json.Marshal's bytes: see
// codec.AppendEventJSON) and capped there, so that a later append to buf
// never writes into it.
func envelope(r Record, buf *[]byte) (eventstore.Event, error) {
	start := len(*buf)
	b, err := codec.AppendEventJSON(*buf, r.Event)
	if err != nil {
		return eventstore.Event{}, fmt.Errorf("encode %s: %w", r.Event.EventType(), err)
	}
	*buf = b
	payload := b[start:len(b):len(b)]
	kind, id, ok := strings.Cut(r.Event.AggregateID(), ".")
	if !ok {
		return eventstore.Event{}, fmt.Errorf("encode %s: aggregate %q has no kind", r.Event.EventType(), r.Event.AggregateID())
	}
	return eventstore.Event{
		Type:          r.Event.EventType(),
		SchemaVersion: uint32(domain.SchemaVersion[r.Event.EventType()]),
		Aggregate:     eventstore.Aggregate{Kind: kind, ID: id},
		At:            r.At,
		CorrelationID: r.CorrelationID,
		Payload:       payload,
	}, nil
}

// Replay implements Log: every domain event of the stream after sequence
// after, in order, with the time it was recorded; seals are checked by the
// store and skipped here, as are voids and the voided events of a torn
// append.
func (l *EventLog) Replay(ctx context.Context, after uint64, fn func(seq uint64, at time.Time, e domain.Event) error) (uint64, error) {
	var lastChain uint64
	last, err := l.store.ReadFrom(ctx, after+1, func(r eventstore.RecordedEvent) error {
		if r.Chain == Chain {
			lastChain = r.Sequence
		}
		if !r.LedgerFact() {
			return nil
		}
		e, err := domain.DecodeEvent(r.Type, r.Payload)
		if err != nil {
			return fmt.Errorf("stream sequence %d: %w", r.Sequence, err)
		}
		return fn(r.Sequence, r.RecordedAt, e)
	})
	if err != nil {
		return 0, err
	}
	// The chain's head must be the last chain event read, or, when the
	// tail read holds none, before the tail.
	if head := l.committer.Head(); head.Sequence != lastChain && (lastChain != 0 || head.Sequence > after) {
		return 0, fmt.Errorf("%w: chain %s ends at sequence %d but its head moved to %d while replaying: another writer is appending",
			eventstore.ErrFenced, Chain, lastChain, head.Sequence)
	}
	// While the stream elects a leader, a replica answers the head with
	// its own state, which may lag behind what a caller starting after
	// (a standby's ledger) has already read: never report less.
	return max(last, after), nil
}
