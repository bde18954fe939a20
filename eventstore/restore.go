package eventstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"

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
	if s.cfg.ReadOnly {
		return fmt.Errorf("reappend to stream %s: %w", s.cfg.Stream, ErrReadOnly)
	}
	n := len(events)
	if n == 0 || n > CommitBatchEventsMax {
		return fmt.Errorf("reappend %d events, want 1..%d: %w", n, CommitBatchEventsMax, ErrInvalid)
	}
	first, last := events[0].Sequence, events[n-1].Sequence
	msgs := make([]*nats.Msg, n)
	for i := range events {
		if events[i].Sequence != first+uint64(i) || first == 0 {
			return fmt.Errorf("reappend: event %d of the batch at sequence %d, want %d: %w", i, events[i].Sequence, first+uint64(i), ErrInvalid)
		}
		msgs[i] = s.subj.encodeMsg(&events[i])
	}
	if events[n-1].AppendRemaining != 0 {
		return fmt.Errorf("reappend: the batch ends at sequence %d inside an append (%d more announced): %w", last, events[n-1].AppendRemaining, ErrInvalid)
	}
	msgs[0].Header.Set(jetstream.ExpectedLastSeqHeader, strconv.FormatUint(first-1, 10))
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	ack, err := jetstreamext.PublishMsgBatch(rctx, s.js, msgs, jetstreamext.BatchFlowControl{AckFirst: false})
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeWrongLastSequence:
		return &ConflictError{Chain: events[0].Chain, Subject: s.subj.all(), Expected: first - 1}
	case err != nil:
		return fmt.Errorf("reappend sequences %d to %d to stream %s: %w", first, last, s.cfg.Stream, err)
	case ack.Sequence != last || ack.BatchSize != uint64(n):
		return fmt.Errorf("reappend sequences %d to %d: acknowledged %d messages ending at %d: %w", first, last, ack.BatchSize, ack.Sequence, ErrIntegrity)
	}
	return nil
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
