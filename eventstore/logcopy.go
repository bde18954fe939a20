package eventstore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A backup carries the bounded logs (the significant-event log, the access
// log) as JetStream stores them, each entry's subject, headers and bytes
// untouched (sealed fields stay sealed), and a restore publishes them
// back in order. Only the sequences are new: JetStream numbers what it
// stores, and its time is carried in LogTimeHeader.

// ErrNoLog is returned when the log's stream does not exist (no serve has
// run on the stream yet).
var ErrNoLog = errors.New("no such log")

// StoredLogEntry is one entry of a bounded log as its stream stores it.
// Its JSON keys are a contract (docs/backup.md).
type StoredLogEntry struct {
	// Seq is the sequence it had in the stream it was read from.
	Seq uint64 `json:"seq"`
	// Time is when it was first stored (entryTime).
	Time    time.Time   `json:"time"`
	Subject string      `json:"subject"`
	Header  nats.Header `json:"header,omitempty"`
	Data    []byte      `json:"data"`
}

// LogState is where a log's stream stands: when it was created (a stream
// deleted and created again is another log, whose sequences start anew),
// its last sequence and how long it keeps an entry.
type LogState struct {
	Created time.Time
	Last    uint64
	MaxAge  time.Duration
}

// LogReader reads a log's stream as stored, through ordered consumers
// (what a read-only user may run).
type LogReader struct {
	st      jetstream.Stream
	timeout time.Duration
	// State is where the stream stood when it was opened.
	State LogState
}

// OpenLogReader opens the log stream named stream, or returns ErrNoLog.
func OpenLogReader(ctx context.Context, nc *nats.Conn, stream string, timeout time.Duration) (*LogReader, error) {
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(timeout))
	if err != nil {
		return nil, fmt.Errorf("read %s: jetstream: %w", stream, err)
	}
	st, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%s: %w", stream, ErrNoLog)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", stream, err)
	}
	info := st.CachedInfo()
	r := &LogReader{st: st, timeout: timeout, State: LogState{Created: info.Created.UTC(), Last: info.State.LastSeq, MaxAge: info.Config.MaxAge}}
	if info.State.Msgs == 0 {
		r.State.Last = 0
	}
	return r, nil
}

// Read hands fn, oldest first, the entries after sequence after up to the
// last when the reader was opened.
func (r *LogReader) Read(ctx context.Context, after uint64, fn func(StoredLogEntry) error) error {
	if r.State.Last <= after {
		return nil
	}
	name := r.st.CachedInfo().Config.Name
	cons, err := r.st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: after + 1})
	if err != nil {
		return fmt.Errorf("read %s after %d: %w", name, after, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("read %s after %d: %w", name, after, err)
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	for {
		m, err := it.Next(jetstream.NextMaxWait(r.timeout))
		if errors.Is(err, nats.ErrTimeout) {
			// The entries left expired while being read: nothing more.
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		e := StoredLogEntry{Seq: md.Sequence.Stream, Time: entryTime(m.Headers(), md.Timestamp), Subject: m.Subject(), Data: m.Data()}
		if len(m.Headers()) > 0 {
			e.Header = m.Headers()
		}
		if err := fn(e); err != nil {
			return err
		}
		if md.Sequence.Stream >= r.State.Last {
			return nil
		}
	}
}

// Held returns how many entries the log holds: a restore writes only into
// an empty one.
func (l *SignificantLog) Held(ctx context.Context) (uint64, error) {
	info, err := l.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", l.cfg.Stream, err)
	}
	return info.State.Msgs, nil
}

// logRestoreWindow bounds the entries a restore has in flight: enough to
// keep the stream busy, few enough for the server's queue.
const logRestoreWindow = 256

// Restore publishes entries into the log, in order, each with its
// subject, headers and bytes, and its time in LogTimeHeader. The log must
// be empty: each acknowledgement must name the next sequence, so an entry
// stored out of order fails the restore. It returns how many it stored.
func (l *SignificantLog) Restore(ctx context.Context, entries iter.Seq2[StoredLogEntry, error]) (uint64, error) {
	info, err := l.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", l.cfg.Stream, err)
	}
	next := info.State.LastSeq + 1
	var stored uint64
	var inFlight []jetstream.PubAckFuture
	wait := func(f jetstream.PubAckFuture) error {
		select {
		case ack := <-f.Ok():
			if ack.Sequence != next {
				return fmt.Errorf("restore %s: an entry stored at sequence %d, want %d: out of order", l.cfg.Stream, ack.Sequence, next)
			}
			next, stored = next+1, stored+1
			return nil
		case err := <-f.Err():
			return fmt.Errorf("restore %s at sequence %d: %w", l.cfg.Stream, next, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for e, err := range entries {
		if err != nil {
			return stored, err
		}
		f, err := l.publishRestored(ctx, e)
		if err != nil {
			return stored, err
		}
		if inFlight = append(inFlight, f); len(inFlight) == logRestoreWindow {
			if err := wait(inFlight[0]); err != nil {
				return stored, err
			}
			inFlight = inFlight[1:]
		}
	}
	for _, f := range inFlight {
		if err := wait(f); err != nil {
			return stored, err
		}
	}
	return stored, nil
}

// publishRestored sends one restored entry, refusing one whose subject is
// not of this log.
func (l *SignificantLog) publishRestored(ctx context.Context, e StoredLogEntry) (jetstream.PubAckFuture, error) {
	kind, ok := strings.CutPrefix(e.Subject, l.cfg.SubjectPrefix+".")
	if !ok || !l.validKind(kind) {
		return nil, fmt.Errorf("restore %s: entry %d's subject %q is not of this log (%s.>): %w", l.cfg.Stream, e.Seq, e.Subject, l.cfg.SubjectPrefix, ErrInvalid)
	}
	m := &nats.Msg{Subject: e.Subject, Data: e.Data, Header: nats.Header{}}
	for k, v := range e.Header {
		m.Header[k] = v
	}
	m.Header.Set(LogTimeHeader, e.Time.UTC().Format(time.RFC3339Nano))
	f, err := l.js.PublishMsgAsync(m)
	if err != nil {
		return nil, fmt.Errorf("restore %s, entry %d: %w", l.cfg.Stream, e.Seq, err)
	}
	return f, nil
}

// Delete deletes the log's stream: what a failed restore wrote into it.
func (l *SignificantLog) Delete(ctx context.Context) error {
	if err := l.js.DeleteStream(ctx, l.cfg.Stream); err != nil {
		return fmt.Errorf("delete %s: %w", l.cfg.Stream, err)
	}
	return nil
}
