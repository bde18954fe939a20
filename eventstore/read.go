package eventstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// readSpec says what consume reads and how.
type readSpec struct {
	// filter is the subject filter, "" for the whole stream.
	filter string
	// from is the first stream sequence (0 means 1).
	from uint64
	// contiguous requires stream sequences without gaps (whole-stream reads).
	contiguous bool
	// bounded is a catch-up read: a wait past RequestTimeout is an error,
	// not an idle tail.
	bounded bool
	// stored reads events as stored: parsed, neither hash-checked nor
	// upcast.
	stored bool
}

// decodeJS decodes a consumed message; unless stored, it checks its hash
// and upcasts it.
func (s *NATSStore) decodeJS(m jetstream.Msg, stored bool) (RecordedEvent, error) {
	md, err := m.Metadata()
	if err != nil {
		return RecordedEvent{}, fmt.Errorf("read message metadata: %w", err)
	}
	return s.decodeMsg(m.Subject(), md.Sequence.Stream, m.Headers(), m.Data(), stored)
}

// decodeMsg is decodeJS for a message's parts.
func (s *NATSStore) decodeMsg(subject string, seq uint64, hdr nats.Header, data []byte, stored bool) (RecordedEvent, error) {
	if stored {
		return s.subj.parse(subject, seq, hdr, data)
	}
	ev, err := s.subj.decode(subject, seq, hdr, data)
	if err != nil {
		return RecordedEvent{}, err
	}
	if s.cfg.Registry != nil {
		if err := s.cfg.Registry.Upcast(&ev); err != nil {
			return RecordedEvent{}, err
		}
	}
	return ev, nil
}

// consume runs an ordered consumer as spec says and calls fn for each event
// until stop says so. Each wait for a message is bounded by
// Config.RequestTimeout: an error for catch-up reads (bounded), a
// connection check when following the tail.
func (s *NATSStore) consume(ctx context.Context, spec readSpec, fn func(RecordedEvent) (stop bool, err error)) error {
	from := max(spec.from, 1)
	cfg := jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   from,
		// Bound resets: a connection that stays broken surfaces as an
		// error instead of an endless silent retry.
		MaxResetAttempts: 10,
	}
	if spec.filter != "" {
		cfg.FilterSubjects = []string{spec.filter}
	}
	cctx, cancel := s.reqCtx(ctx)
	cons, err := s.stream.OrderedConsumer(cctx, cfg)
	cancel()
	if err != nil {
		return fmt.Errorf("create ordered consumer on %s from %d: %w", s.cfg.Stream, from, err)
	}
	// Short pull expiry and heartbeats: a pull request lost while a
	// consumer or stream leader comes up is noticed and re-issued within
	// seconds, well inside RequestTimeout, instead of after the 30s default.
	it, err := cons.Messages(jetstream.PullMaxMessages(s.cfg.ReadBatchMax),
		jetstream.PullExpiry(4*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return fmt.Errorf("read %s from %d: %w", s.cfg.Stream, from, err)
	}
	defer it.Stop()
	// Cancelling ctx stops the iterator, which unblocks Next at once.
	defer context.AfterFunc(ctx, it.Stop)()
	next := from
	down := 0 // consecutive idle waits with the connection down
	for {
		m, err := it.Next(jetstream.NextMaxWait(s.cfg.RequestTimeout))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !spec.bounded && errors.Is(err, nats.ErrTimeout) {
				// Following an idle tail: waiting is normal, a connection
				// that is closed or stays down for a whole wait is not
				// (a reconnect to another node within it is fine: the
				// ordered consumer resumes at the next sequence).
				if s.nc.IsConnected() {
					down = 0
					// An ordered consumer can stall without an error
					// after its stream's leader was lost: idle while
					// the stream holds more is a stall, which the
					// caller cures by following again.
					if last, err := s.LastSequence(ctx); err == nil && last >= next {
						return fmt.Errorf("follow %s: no message for %s at sequence %d while the stream ends at %d: %w",
							s.cfg.Stream, s.cfg.RequestTimeout, next, last, ErrDisconnected)
					}
					continue
				}
				if down++; down < 2 && !s.nc.IsClosed() {
					continue
				}
				return fmt.Errorf("follow %s at sequence %d: %s: %w", s.cfg.Stream, next, s.nc.Status(), ErrDisconnected)
			}
			return fmt.Errorf("read %s at sequence %d: %w", s.cfg.Stream, next, err)
		}
		ev, err := s.decodeJS(m, spec.stored)
		if err != nil {
			return fmt.Errorf("read %s: %w", s.cfg.Stream, err)
		}
		if ev.Sequence < next || (spec.contiguous && ev.Sequence != next) {
			return fmt.Errorf("read %s: want sequence %d, got %d: %w", s.cfg.Stream, next, ev.Sequence, ErrGap)
		}
		next = ev.Sequence + 1
		stop, err := fn(ev)
		if err != nil || stop {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// LoadAggregate implements Store.
func (s *NATSStore) LoadAggregate(ctx context.Context, chain string, agg Aggregate) ([]RecordedEvent, error) {
	if err := ValidateChain(chain); err != nil {
		return nil, err
	}
	subject := s.subj.event(chain, agg)
	last, err := s.lastMsg(ctx, subject)
	if err != nil || last == nil {
		return nil, err
	}
	var out []RecordedEvent
	err = s.consume(ctx, readSpec{filter: subject, bounded: true}, func(ev RecordedEvent) (bool, error) {
		if len(out) == s.cfg.AggregateEventsMax {
			return true, fmt.Errorf("aggregate %s holds more than %d events: %w", subject, s.cfg.AggregateEventsMax, ErrInvalid)
		}
		out = append(out, ev)
		return ev.Sequence >= last.Sequence, nil
	})
	if err != nil {
		return nil, fmt.Errorf("load aggregate %s: %w", subject, err)
	}
	return out, nil
}

// ReadFrom implements Store.
func (s *NATSStore) ReadFrom(ctx context.Context, from uint64, fn func(RecordedEvent) error) (uint64, error) {
	last, err := s.LastSequence(ctx)
	if err != nil {
		return 0, err
	}
	if from == 0 {
		from = 1
	}
	if last < from {
		return last, nil
	}
	w := &wholeAppends{fn: fn}
	if err := s.readRange(ctx, readSpec{from: from, contiguous: true, bounded: true}, last, w.add); err != nil {
		return 0, err
	}
	if torn := w.torn(); len(torn) > 0 {
		// Never handed on: the stream ends inside an append, which the
		// writer voids at its start.
		return torn[0].Sequence - 1, nil
	}
	return last, nil
}

// shortReadMax is the longest range a writer's store reads message by
// message from the stream's leader rather than through a consumer:
// creating a consumer takes the cluster's meta leader, which a lost NATS
// node may have taken down with it, while a writer taking over replays only
// a short tail. A read-only store always reads through a consumer: the
// regulator's user may not get single messages.
const shortReadMax = 128

// readRange reads the whole stream from spec.from to sequence to, both
// included; the caller knows that to is stored.
func (s *NATSStore) readRange(ctx context.Context, spec readSpec, to uint64, fn func(RecordedEvent) error) error {
	if from := max(spec.from, 1); !s.cfg.ReadOnly && spec.filter == "" && spec.contiguous && from <= to && to-from < shortReadMax {
		return s.readEach(ctx, from, to, spec.stored, fn)
	}
	return s.consume(ctx, spec, func(ev RecordedEvent) (bool, error) {
		if err := fn(ev); err != nil {
			return true, err
		}
		return ev.Sequence >= to, nil
	})
}

// readEach reads the stream from sequence from to sequence to, both
// included, one message at a time (readRange).
func (s *NATSStore) readEach(ctx context.Context, from, to uint64, stored bool, fn func(RecordedEvent) error) error {
	for seq := from; seq <= to; seq++ {
		rctx, cancel := s.reqCtx(ctx)
		m, err := s.stream.GetMsg(rctx, seq)
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("read %s: no message at sequence %d: %w", s.cfg.Stream, seq, ErrGap)
		}
		if err != nil {
			return fmt.Errorf("read %s at sequence %d: %w", s.cfg.Stream, seq, err)
		}
		ev, err := s.decodeMsg(m.Subject, m.Sequence, m.Header, m.Data, stored)
		if err != nil {
			return fmt.Errorf("read %s: %w", s.cfg.Stream, err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	return nil
}

// ReadStored calls fn for every message of the stream from sequence from
// to sequence to, both included, in order and without gaps, as stored:
// parsed, but neither hash-checked nor upcast, so that an export carries an
// altered event as found, for an auditor to report with its sequence. from
// 0 means 1; from past to reads nothing. It returns ErrInvalid when to is
// past the stream's last sequence, fn's error, ErrGap, an *IntegrityError
// for a message whose envelope does not parse, or the read error.
func (s *NATSStore) ReadStored(ctx context.Context, from, to uint64, fn func(RecordedEvent) error) error {
	from = max(from, 1)
	if from > to {
		return nil
	}
	last, err := s.LastSequence(ctx)
	if err != nil {
		return err
	}
	if to > last {
		return fmt.Errorf("read %s up to sequence %d: the stream ends at %d: %w", s.cfg.Stream, to, last, ErrInvalid)
	}
	return s.readRange(ctx, readSpec{from: from, contiguous: true, bounded: true, stored: true}, to, fn)
}

// Follow implements Store.
func (s *NATSStore) Follow(ctx context.Context, from uint64, fn func(RecordedEvent) error) error {
	return s.follow(ctx, readSpec{from: from, contiguous: true}, fn)
}

// FollowStored implements Store.
func (s *NATSStore) FollowStored(ctx context.Context, from uint64, fn func(RecordedEvent) error) error {
	return s.follow(ctx, readSpec{from: from, contiguous: true, stored: true}, fn)
}

func (s *NATSStore) follow(ctx context.Context, spec readSpec, fn func(RecordedEvent) error) error {
	w := &wholeAppends{fn: fn}
	return s.followUnstalled(ctx, spec, w.add)
}

// AggregateLast returns the stream sequence of the last event of one
// aggregate, 0 when it has none. Like every single-message read it goes to
// the stream's leader, so it sees every acknowledged append.
func (s *NATSStore) AggregateLast(ctx context.Context, chain string, agg Aggregate) (uint64, error) {
	if err := ValidateChain(chain); err != nil {
		return 0, err
	}
	m, err := s.lastMsg(ctx, s.subj.event(chain, agg))
	if err != nil || m == nil {
		return 0, err
	}
	return m.Sequence, nil
}

// ReadAggregate calls fn, in order, for the events of one aggregate whose
// stream sequences are from to to, both included; to must be one of the
// aggregate's (AggregateLast). A few events of an aggregate spread over a
// long stream are read without reading the rest.
func (s *NATSStore) ReadAggregate(ctx context.Context, chain string, agg Aggregate, from, to uint64, fn func(RecordedEvent) error) error {
	if err := ValidateChain(chain); err != nil {
		return err
	}
	if from > to {
		return nil
	}
	subject := s.subj.event(chain, agg)
	err := s.consume(ctx, readSpec{filter: subject, from: from, bounded: true}, func(ev RecordedEvent) (bool, error) {
		if ev.Sequence > to {
			return true, nil
		}
		return ev.Sequence >= to, fn(ev)
	})
	if err != nil {
		return fmt.Errorf("read aggregate %s from %d to %d: %w", subject, from, to, err)
	}
	return nil
}
