package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// RestoreMetadataKey is the key of the stream's metadata that marks a
// stream a restore is writing. A restore is long, and a stream it left
// half written is a shorter ledger than the one backed up: every Open
// but the restore's refuses a marked stream (ErrRestoreIncomplete), so
// that no writer, reader or auditor takes it for the ledger. The restore
// removes the mark once its last event is written.
const RestoreMetadataKey = "tresor_restore"

// restoreMarkValue is the value of RestoreMetadataKey while a restore runs.
const restoreMarkValue = "incomplete"

// ErrRestoreIncomplete reports a stream that a restore marked and did not
// finish: it holds only part of the backup.
var ErrRestoreIncomplete = errors.New("eventstore: a restore of this stream has not finished")

// restoreIncomplete is the error of opening a stream a restore marked.
func restoreIncomplete(stream string) error {
	return fmt.Errorf("stream %s holds a restore that has not finished (tresor restore marks it until its last event is written): "+
		"delete the stream (on the embedded default, the data directory) and restore again: %w", stream, ErrRestoreIncomplete)
}

// restoring reports whether the stream's configuration carries the mark.
func restoring(cfg jetstream.StreamConfig) bool { return cfg.Metadata[RestoreMetadataKey] != "" }

// BeginRestore readies the stream of a store opened with Config.Restore
// for a restore: it must hold no message (a restore never mixes a backup
// with another history), and it is marked (RestoreMetadataKey) until
// FinishRestore. It returns ErrInvalid, naming what the stream holds,
// when it is not empty, ErrReadOnly, or the server's error.
func (s *NATSStore) BeginRestore(ctx context.Context) error {
	if s.cfg.ReadOnly || !s.cfg.Restore {
		return fmt.Errorf("begin a restore of stream %s: not opened to restore: %w", s.cfg.Stream, ErrReadOnly)
	}
	st, err := s.state(ctx)
	if err != nil {
		return err
	}
	if st.Msgs != 0 || st.LastSeq != 0 {
		what := "is marked as an unfinished restore"
		if !restoring(s.stream.CachedInfo().Config) {
			what = "is not empty"
		}
		return fmt.Errorf("restore into stream %s: it holds %d events, sequences %d to %d, and %s: a restore writes into an empty stream only: %w",
			s.cfg.Stream, st.Msgs, st.FirstSeq, st.LastSeq, what, ErrInvalid)
	}
	return s.markRestore(ctx, true)
}

// FinishRestore removes the mark of BeginRestore: the stream holds the
// whole restore and is the ledger again for every reader and writer.
func (s *NATSStore) FinishRestore(ctx context.Context) error {
	return s.markRestore(ctx, false)
}

// markRestore sets or removes the restore's mark in the stream's
// metadata.
func (s *NATSStore) markRestore(ctx context.Context, on bool) error {
	ctx, cancel := s.reqCtx(ctx)
	defer cancel()
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("mark stream %s: %w", s.cfg.Stream, err)
	}
	cfg := info.Config
	if restoring(cfg) == on {
		return nil
	}
	cfg.Metadata = maps.Clone(cfg.Metadata)
	if on {
		if cfg.Metadata == nil {
			cfg.Metadata = map[string]string{}
		}
		cfg.Metadata[RestoreMetadataKey] = restoreMarkValue
	} else {
		delete(cfg.Metadata, RestoreMetadataKey)
	}
	st, err := s.js.UpdateStream(ctx, cfg)
	if err != nil {
		return fmt.Errorf("mark stream %s (restoring: %t): %w", s.cfg.Stream, on, err)
	}
	s.stream = st
	return nil
}

// Reappend writes events as another stream of Tresor recorded them (a
// backup) at the end of this one: the same subjects, envelopes, hashes and
// append markers, at the same stream sequences, so that every chain, seal
// and position reads as it did. events are whole appends, possibly of
// several chains, that follow the stream's last sequence without a gap,
// at most CommitBatchEventsMax of them (BatchEventsMax unless the server
// allows more). They are published as one atomic batch fenced on the
// stream's last sequence, not on a chain's: they land whole or not at
// all, and only right after the event they follow. Hashes are the
// caller's to verify. It returns ErrInvalid for events out of sequence, a
// *ConflictError when the stream does not end where they follow,
// ErrReadOnly, or the server's error.
func (s *NATSStore) Reappend(ctx context.Context, events []RecordedEvent) error {
	wait, err := s.ReappendAsync(events)
	if err != nil {
		return err
	}
	return wait(ctx)
}

// ReappendAsync is Reappend that returns once the batch is sent: wait
// returns its outcome, Reappend's errors. Batches sent one after the
// other from one goroutine reach the server in that order, each fenced on
// where the one before ends, so that several can be in flight: when one
// fails, every one sent after it fails its fence, and none lands out of
// order. Each wait is to be called, in order: a batch not awaited keeps
// its reply's subscription until the connection closes. events may be
// reused once ReappendAsync returns.
func (s *NATSStore) ReappendAsync(events []RecordedEvent) (wait func(context.Context) error, err error) {
	return s.reappendAsync(events, true)
}

// ReappendRestoringAsync is ReappendPlainAsync for a stream that
// BeginRestore marked, which no reader takes for the ledger until
// FinishRestore. A failed restore abandons the stream (AbandonRestore), so
// that only a whole restore is ever read. It returns ErrInvalid on a store
// not opened with Config.Restore, and ReappendPlainAsync's errors.
func (s *NATSStore) ReappendRestoringAsync(events []RecordedEvent) (wait func(context.Context) error, err error) {
	if !s.cfg.Restore {
		return nil, fmt.Errorf("reappend to stream %s without a batch: not opened to restore: %w", s.cfg.Stream, ErrInvalid)
	}
	return s.ReappendPlainAsync(events)
}

// ReappendPlainAsync is ReappendAsync with the events sent as plain
// messages rather than one atomic batch, which the server would stage and
// then store again: it stores each once. Each message is fenced on the
// one before it (the stream must end at the sequence before its own), and
// the last asks for an answer: an event refused or lost on the way makes
// its fence fail, and every later one's, so that none lands at another
// sequence than its own, but the events before it in the batch may have
// landed. A reader may therefore find an append cut short at the stream's
// end: it is for a stream whose writer mends that itself before anything
// reads it as the ledger (a restore, the regulator's copy).
func (s *NATSStore) ReappendPlainAsync(events []RecordedEvent) (wait func(context.Context) error, err error) {
	return s.reappendAsync(events, false)
}

// reappendAsync sends events as one atomic batch, or as plain messages.
func (s *NATSStore) reappendAsync(events []RecordedEvent, atomic bool) (wait func(context.Context) error, err error) {
	if s.cfg.ReadOnly {
		return nil, fmt.Errorf("reappend to stream %s: %w", s.cfg.Stream, ErrReadOnly)
	}
	n := len(events)
	if n == 0 || n > CommitBatchEventsMax {
		return nil, fmt.Errorf("reappend %d events, want 1..%d: %w", n, CommitBatchEventsMax, ErrInvalid)
	}
	first, last, chain := events[0].Sequence, events[n-1].Sequence, events[0].Chain
	for i := range events {
		if events[i].Sequence != first+uint64(i) || first == 0 {
			return nil, fmt.Errorf("reappend: event %d of the batch at sequence %d, want %d: %w", i, events[i].Sequence, first+uint64(i), ErrInvalid)
		}
	}
	if events[n-1].AppendRemaining != 0 {
		return nil, fmt.Errorf("reappend: the batch ends at sequence %d inside an append (%d more announced): %w", last, events[n-1].AppendRemaining, ErrInvalid)
	}
	s.reappending.Lock()
	defer s.reappending.Unlock()
	msgs := s.reappending.encode(s.subj, events)
	sub, err := s.nc.SubscribeSync(s.nc.NewRespInbox())
	if err != nil {
		return nil, fmt.Errorf("reappend sequences %d to %d: %w", first, last, err)
	}
	var batchID string
	if atomic {
		msgs[0].Header.Set(jetstream.ExpectedLastSeqHeader, strconv.FormatUint(first-1, 10))
		batchID, err = s.sendBatch(msgs, sub.Subject)
	} else {
		for i, m := range msgs {
			m.Header.Set(jetstream.ExpectedLastSeqHeader, strconv.FormatUint(first+uint64(i)-1, 10))
		}
		msgs[n-1].Reply = sub.Subject
		err = s.sendPlain(msgs)
	}
	if err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("reappend sequences %d to %d to stream %s: %w", first, last, s.cfg.Stream, err)
	}
	return func(ctx context.Context) error {
		defer sub.Unsubscribe()
		rctx, cancel := s.reqCtx(ctx)
		defer cancel()
		m, err := sub.NextMsgWithContext(rctx)
		seq, count := uint64(0), uint64(n)
		if err == nil && atomic {
			var ack *jetstreamext.BatchAck
			if ack, err = batchReply(m, batchID, n); err == nil {
				seq, count = ack.Sequence, ack.BatchSize
			}
		} else if err == nil {
			seq, err = pubAckReply(m)
		}
		var apiErr *jetstream.APIError
		switch {
		case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeWrongLastSequence:
			return &ConflictError{Chain: chain, Subject: s.subj.all(), Expected: first - 1}
		case err != nil:
			return fmt.Errorf("reappend sequences %d to %d to stream %s: %w", first, last, s.cfg.Stream, err)
		case seq != last || count != uint64(n):
			return fmt.Errorf("reappend sequences %d to %d: acknowledged %d messages ending at %d: %w", first, last, count, seq, ErrIntegrity)
		}
		return nil
	}, nil
}

// reappendMsgs are the messages of the batch being reappended, reused by
// the next batch: a publish copies a message out before it returns, so a
// batch's messages are free once it is sent, and a restore then allocates
// no message, header map or header values for each of its millions of
// events. The mutex keeps one batch at a time in them.
type reappendMsgs struct {
	sync.Mutex
	msgs []*nats.Msg
	vals []string
}

// encode encodes events into the messages, cleared of the last batch's.
func (r *reappendMsgs) encode(subj subjects, events []RecordedEvent) []*nats.Msg {
	for len(r.msgs) < len(events) {
		r.msgs = append(r.msgs, new(nats.Msg))
	}
	r.vals = r.vals[:0]
	for i := range events {
		r.vals = subj.encodeMsgInto(r.msgs[i], r.vals, &events[i])
	}
	return r.msgs[:len(events)]
}

// sendPlain publishes msgs one after the other, each a message of its own.
func (s *NATSStore) sendPlain(msgs []*nats.Msg) error {
	for i, m := range msgs {
		if err := s.nc.PublishMsg(m); err != nil {
			return fmt.Errorf("publish message %d of %d: %w", i+1, len(msgs), err)
		}
	}
	return nil
}

// pubAckReply reads the server's answer to a plain publish: the sequence
// it stored the message at, or its error.
func pubAckReply(m *nats.Msg) (uint64, error) {
	if m.Header.Get("Status") == "503" {
		return 0, nats.ErrNoResponders
	}
	var r struct {
		Error *jetstream.APIError `json:"error"`
		jetstream.PubAck
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return 0, fmt.Errorf("publish acknowledgement %q: %w", m.Data, err)
	}
	if r.Error != nil {
		return 0, r.Error
	}
	return r.Sequence, nil
}

// AbandonRestore deletes the stream of a restore that failed, which
// BeginRestore marked, so that nothing of it is left for a reader to
// find. A stream without the mark is never deleted: it returns
// ErrInvalid.
func (s *NATSStore) AbandonRestore(ctx context.Context) error {
	ctx, cancel := s.reqCtx(ctx)
	defer cancel()
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("abandon the restore of stream %s: %w", s.cfg.Stream, err)
	}
	if !restoring(info.Config) {
		return fmt.Errorf("abandon the restore of stream %s: it is not marked as a restore: %w", s.cfg.Stream, ErrInvalid)
	}
	if err := s.js.DeleteStream(ctx, s.cfg.Stream); err != nil {
		return fmt.Errorf("abandon the restore of stream %s: %w", s.cfg.Stream, err)
	}
	return nil
}
