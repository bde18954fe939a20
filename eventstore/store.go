package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// BatchEventsMax is nats-server's default limit of messages in one atomic
// batch (jetstream max_batch_size). One append never exceeds it, and
// neither does a committer batch unless the server allows more
// (CommitterConfig.BatchEventsMax).
const BatchEventsMax = 1000

// CommitBatchEventsMax bounds a committer batch on a server whose
// max_batch_size allows it, as the embedded server's does. A server commits
// an atomic batch at a fixed cost of several milliseconds on top of its
// messages, so larger batches move more events a second where that cost is
// the bound. A batch stays well below the recentMax positions a seal may
// point back (the committer keeps fewer events than that unacknowledged):
// every auditor already released reads a stream written with such batches.
const CommitBatchEventsMax = 3 * BatchEventsMax

// JetStream error codes the store interprets.
const (
	errCodeWrongLastSequence         = 10071 // wrong last sequence: {seq}
	errCodeWrongLastSequenceConstant = 10164 // wrong last sequence (inside a batch)
	errCodeBatchDuplicateMsgID       = 10201 // replayed batch: possibly committed
	errCodeStreamNotMatch            = 10060 // expected stream does not match
)

// LeaderElectedPrefix begins the subject on which JetStream announces a
// stream's new leader, the stream's name following: a request sent into
// the election waits out its timeout, while the new leader answers at once.
const LeaderElectedPrefix = "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED."

// Head is the position of the last event of a chain: what the next event
// links to and what the next append is fenced on.
type Head struct {
	// Sequence is the stream sequence of the chain's last event, 0 for an
	// empty chain.
	Sequence uint64
	// ChainSeq is the number of events in the chain.
	ChainSeq uint64
	// Hash is the last event's hash, zero for an empty chain.
	Hash Hash
}

// Expect is an optimistic-concurrency expectation on a last sequence. The
// zero value expects nothing.
type Expect struct {
	seq uint64
	set bool
}

// ExpectLast expects the last stream sequence seen to be seq (0: nothing
// yet).
func ExpectLast(seq uint64) Expect { return Expect{seq: seq, set: true} }

// AggregateExpectation states the last stream sequence a caller saw for one
// aggregate (0: the aggregate must have no events yet).
type AggregateExpectation struct {
	Aggregate Aggregate
	LastSeq   uint64
}

// AppendRequest is one atomic unit: all its events are written, in order,
// or none is.
type AppendRequest struct {
	// Events are 1..BatchEventsMax events (fewer for the committer, which
	// may add a seal to a batch).
	Events []Event
	// ExpectChain is the last stream sequence of the chain the caller saw.
	ExpectChain Expect
	// ExpectAggregates are per-aggregate expectations, at most one per
	// aggregate.
	ExpectAggregates []AggregateExpectation
	// PayloadsMarshaled says that the caller built every payload with
	// encoding/json, or with an encoder tested to give its bytes
	// (domain/codec.AppendEventJSON), so that the store does not check again
	// that each is valid JSON: that check reads every payload again, on
	// the writer's one loop, where the CPU bounds the rate. Every other
	// check still applies. A payload that is not valid JSON would be
	// hashed into the chain for good and refused by every reader, so a
	// caller passing on bytes it did not encode leaves it false.
	PayloadsMarshaled bool
}

// Store is the event store port. The NATS JetStream implementation is
// *NATSStore; eventstoretest.Run checks any implementation.
type Store interface {
	// Append writes req's events atomically at the end of chain, fenced on
	// the chain's head so no other writer can interleave, and returns the
	// stream sequence of each event. It returns *ConflictError
	// (ErrConflict) when an expectation fails or another writer moved the
	// chain, nothing written; ErrOutcomeUnknown when the acknowledgement
	// was lost and the events were not found; ErrInvalid for a malformed
	// request; *SchemaError for a type the registry does not know;
	// ErrIntegrity when the chain head fails its hash check; ErrReadOnly
	// on a store opened read-only, nothing written.
	Append(ctx context.Context, chain string, req AppendRequest) ([]uint64, error)
	// NewCommitter starts the group-commit writer of chain, loading its head.
	// It returns ErrInvalid for a bad chain or configuration, ErrReadOnly on
	// a store opened read-only, ErrIntegrity for a tampered head, or the
	// read error.
	NewCommitter(ctx context.Context, chain string, cfg CommitterConfig) (Committer, error)
	// LoadAggregate returns the events of one aggregate in stream order,
	// upcast by the registry. It returns ErrIntegrity for a tampered event,
	// *SchemaError for an unknown type or newer schema, ErrInvalid when the
	// aggregate holds more than Config.AggregateEventsMax events, or the
	// read error.
	LoadAggregate(ctx context.Context, chain string, agg Aggregate) ([]RecordedEvent, error)
	// ReadFrom calls fn for every event from stream sequence from up to the
	// last sequence at the time of the call, in order, without gaps, and
	// returns that last sequence. It returns fn's error, ErrGap,
	// ErrIntegrity, *SchemaError, or the read error (a lost connection is
	// an error, never a short read).
	ReadFrom(ctx context.Context, from uint64, fn func(RecordedEvent) error) (uint64, error)
	// Follow calls fn for every event from stream sequence from onwards,
	// waiting for new ones, until ctx ends (it then returns ctx.Err()) or an
	// error as for ReadFrom; ErrDisconnected when the connection closes or
	// stays down for a whole RequestTimeout.
	Follow(ctx context.Context, from uint64, fn func(RecordedEvent) error) error
	// FollowStored is Follow for events as stored: parsed, neither
	// hash-checked nor upcast, so that the caller checks each hash with
	// CheckHash where it likes (the finance feed, on another goroutine
	// than the read). It returns what Follow returns but ErrIntegrity
	// for a bad hash or *SchemaError.
	FollowStored(ctx context.Context, from uint64, fn func(RecordedEvent) error) error
	// LastSequence is the stream's last sequence (0 when empty).
	LastSequence(ctx context.Context) (uint64, error)
	// ChainHead is the head of chain as stored now. It returns ErrIntegrity
	// when the head fails its hash check.
	ChainHead(ctx context.Context, chain string) (Head, error)
	// Close releases the store (and its connection if it opened it).
	Close() error
}

// Config configures a NATSStore. Zero fields take the documented defaults.
type Config struct {
	// Stream is the JetStream stream name (default "TRESOR").
	Stream string
	// SubjectPrefix is the first subject token (default "tresor").
	SubjectPrefix string
	// Replicas is the stream's replica count: 1 embedded, 3 in a cluster
	// (default 1).
	Replicas int
	// DuplicateWindow is JetStream's Nats-Msg-Id window (default 2m). Only
	// used to recognise a replayed batch (error 10201); it is not the
	// system's idempotency.
	DuplicateWindow time.Duration
	// Registry checks written types and upcasts read events. Nil means raw
	// events: what an auditor wants, since hashes cover the stored bytes.
	Registry *Registry
	// RequestTimeout bounds every request to the server (default 10s,
	// which is also the server's limit to commit a batch).
	RequestTimeout time.Duration
	// ReadBatchMax bounds the messages buffered by a reader (default 1000).
	ReadBatchMax int
	// AggregateEventsMax bounds LoadAggregate (default 100 000).
	AggregateEventsMax int
	// Now is the clock for RecordedAt (default time.Now); tests pin it.
	Now func() time.Time
	// ReadOnly opens an existing stream only, creating and changing
	// nothing, and makes every write fail with ErrReadOnly: what exports
	// and audits use, and all that a regulator's NATS user may do
	// (docs/export.md lists its permissions).
	ReadOnly bool
	// Logger logs a writer's tries at opening its stream while the server
	// cannot answer yet (nil: none).
	Logger *slog.Logger
	// Restore opens the stream for tresor restore: a stream it creates is
	// marked as being restored from the start (RestoreMetadataKey), with
	// the server's shortest duplicate window when it has one replica
	// (restoreDuplicateWindow), and a marked stream is opened; every other store refuses a marked stream
	// with ErrRestoreIncomplete.
	Restore bool
}

func (c *Config) setDefaults() error {
	if c.Stream == "" {
		c.Stream = "TRESOR"
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = defaultSubjectPrefix
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 2 * time.Minute
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.ReadBatchMax == 0 {
		c.ReadBatchMax = 1000
	}
	if c.AggregateEventsMax == 0 {
		c.AggregateEventsMax = 100_000
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	switch {
	case !validName(c.Stream, NameLenMax, false):
		return fmt.Errorf("stream name %q: %w", c.Stream, ErrInvalid)
	case !validName(c.SubjectPrefix, NameLenMax, false):
		return fmt.Errorf("subject prefix %q: %w", c.SubjectPrefix, ErrInvalid)
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("replicas %d: want 1..5: %w", c.Replicas, ErrInvalid)
	case c.DuplicateWindow < 0 || c.RequestTimeout < 0 || c.ReadBatchMax < 1 || c.AggregateEventsMax < 1:
		return fmt.Errorf("negative limit in config: %w", ErrInvalid)
	}
	return nil
}

// defaultSubjectPrefix is Config.SubjectPrefix when not set.
const defaultSubjectPrefix = "tresor"

// NATSStore is the Store on NATS JetStream.
type NATSStore struct {
	cfg      Config
	nc       *nats.Conn
	js       jetstream.JetStream
	stream   jetstream.Stream
	subj     subjects
	ownsConn bool
	moves    *leaderMoves
	// reappending holds the messages of Reappend's batches.
	reappending reappendMsgs
}

var _ Store = (*NATSStore)(nil)

// Open checks the server version, then creates the stream or verifies the
// existing one, on a connection the caller keeps owning. It returns an error
// wrapping ErrServerTooOld, ErrUnsafeStream, ErrInvalid, or the server's.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*NATSStore, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("open event store: %w", err)
	}
	if err := checkServerVersion(nc); err != nil {
		return nil, fmt.Errorf("open event store: %w", err)
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(cfg.RequestTimeout))
	if err != nil {
		return nil, fmt.Errorf("open event store: jetstream: %w", err)
	}
	s := &NATSStore{cfg: cfg, nc: nc, js: js, subj: subjects{prefix: cfg.SubjectPrefix}}
	if s.stream, err = s.ensureStream(ctx); err != nil {
		return nil, fmt.Errorf("open event store: %w", err)
	}
	if err := s.watchLeader(); err != nil {
		return nil, fmt.Errorf("open event store: watch the stream's leader: %w", err)
	}
	return s, nil
}

// streamConfig is the configuration Tresor creates: nothing ever deletes,
// purges, rolls up or expires an event.
func (s *NATSStore) streamConfig() jetstream.StreamConfig {
	return TresorStreamConfig(s.cfg.Stream, s.subj.all(), s.cfg.Replicas, s.cfg.DuplicateWindow)
}

// TresorStreamConfig is the configuration of a Tresor stream. It is
// exported for the yardsticks of internal/bench, which create scratch
// streams configured as Tresor's so that what the configuration costs the
// server can be measured apart from Tresor's own work.
func TresorStreamConfig(name, subjects string, replicas int, duplicates time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:               name,
		Description:        "Tresor event log: the only source of truth",
		Subjects:           []string{subjects},
		Storage:            jetstream.FileStorage,
		Replicas:           replicas,
		Retention:          jetstream.LimitsPolicy,
		Discard:            jetstream.DiscardNew,
		MaxAge:             0,
		MaxBytes:           -1,
		MaxMsgs:            -1,
		MaxMsgsPerSubject:  -1,
		Duplicates:         duplicates,
		DenyDelete:         true,
		DenyPurge:          true,
		AllowAtomicPublish: true,
	}
}

// ensureStream creates the stream or binds to it. A writer's store tries
// again while the server cannot answer yet (OpenPatiently: a cluster
// restarting elects its meta leader and the stream's seconds apart); a
// stream whose configuration could lose events, or a reader's, fails at
// the first answer.
func (s *NATSStore) ensureStream(ctx context.Context) (jetstream.Stream, error) {
	if s.cfg.ReadOnly {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
		defer cancel()
		return s.ensureStreamOnce(ctx)
	}
	return OpenPatiently(ctx, s.cfg.Logger, "stream "+s.cfg.Stream, func(ctx context.Context) (jetstream.Stream, error) {
		st, err := s.ensureStreamOnce(ctx)
		if ue := (*UnsafeStreamError)(nil); errors.As(err, &ue) || errors.Is(err, ErrRestoreIncomplete) {
			return nil, finalError{err}
		}
		return st, err
	})
}

// ensureStreamOnce is one try of ensureStream, bounded by ctx.
func (s *NATSStore) ensureStreamOnce(ctx context.Context) (jetstream.Stream, error) {
	want := s.streamConfig()
	st, err := s.js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) && s.cfg.ReadOnly {
		return nil, fmt.Errorf("look up stream %s: not found, and a read-only store creates nothing: %w", want.Name, err)
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		create := want
		if s.cfg.Restore {
			create.Metadata = map[string]string{RestoreMetadataKey: restoreMarkValue}
			if s.cfg.Replicas <= 1 {
				create.Duplicates = restoreDuplicateWindow
			}
		}
		st, err = s.js.CreateStream(ctx, create)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = s.js.Stream(ctx, want.Name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("create or look up stream %s: %w", want.Name, err)
	}
	if diffs := unsafeDiffs(want, st.CachedInfo().Config); len(diffs) > 0 {
		return nil, &UnsafeStreamError{Stream: want.Name, Diffs: diffs}
	}
	if restoring(st.CachedInfo().Config) && !s.cfg.Restore {
		return nil, restoreIncomplete(want.Name)
	}
	if have := st.CachedInfo().Config; !s.cfg.ReadOnly && !s.cfg.Restore && have.Duplicates != want.Duplicates {
		if st, err = s.setDuplicateWindow(ctx, have, want.Duplicates); err != nil {
			return nil, err
		}
	}
	if err := waitForLeader(ctx, st); err != nil {
		return nil, fmt.Errorf("stream %s: %w", want.Name, err)
	}
	if !s.cfg.ReadOnly {
		if err := s.waitForResponder(ctx); err != nil {
			return nil, fmt.Errorf("stream %s: %w", want.Name, err)
		}
	}
	return st, nil
}

// restoreDuplicateWindow is the duplicate window of a stream a restore
// creates: the server's shortest. A restore sends no message id, and the
// server, whenever it opens a stream, reads every message stored within
// the window to rebuild its ids: with the writer's window, the first
// start after a restore would read nearly the whole stream restored
// (every message was stored in the minutes before), where it reads none
// with this one. The writer's store sets its own window back as it
// opens the stream (setDuplicateWindow). Only a one-replica stream gets
// it: a cluster's servers do not restart when serve starts, so the short
// window would gain nothing there, and changing a replicated stream's
// window under its first writer is one more moving part.
const restoreDuplicateWindow = 100 * time.Millisecond

// setDuplicateWindow gives the stream, configured as have, the writer's
// duplicate window: a restored stream has the restore's
// (restoreDuplicateWindow), and a replayed batch is recognised only
// within the writer's. The window changes nothing else of the stream.
func (s *NATSStore) setDuplicateWindow(ctx context.Context, have jetstream.StreamConfig, window time.Duration) (jetstream.Stream, error) {
	was := have.Duplicates
	have.Duplicates = window
	st, err := s.js.UpdateStream(ctx, have)
	if err != nil {
		return nil, fmt.Errorf("set the duplicate window of stream %s to %s (it is %s): %w", have.Name, window, was, err)
	}
	if s.cfg.Logger != nil {
		s.cfg.Logger.Info("stream duplicate window set", "stream", have.Name, "window", window, "was", was)
	}
	return st, nil
}

// waitForResponder waits, bounded by ctx, until a message published on the
// stream's subjects from this connection reaches the stream. In a cluster
// the new leader's interest in the subjects reaches the other servers a
// moment after the election that waitForLeader sees; a batch committed in
// that moment meets no responder, an outcome the writer cannot tell
// (ErrOutcomeUnknown), and it stops. The probe expects another stream
// (Nats-Expected-Stream), so the stream refuses it and stores nothing; any
// other answer is an error.
func (s *NATSStore) waitForResponder(ctx context.Context) error {
	probe := nats.NewMsg(s.subj.prefix + ".probe")
	probe.Header.Set(jetstream.ExpectedStreamHeader, s.cfg.Stream+".probe")
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		m, err := s.nc.RequestMsgWithContext(ctx, probe)
		if err == nil {
			var r struct {
				Error *jetstream.APIError `json:"error"`
			}
			if json.Unmarshal(m.Data, &r) != nil || r.Error == nil || r.Error.ErrorCode != errCodeStreamNotMatch {
				return fmt.Errorf("probe on %s: unexpected answer %q", probe.Subject, m.Data)
			}
			return nil
		}
		if !errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("probe on %s: %w", probe.Subject, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no responder on %s: %w", probe.Subject, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// waitForLeader waits, bounded by ctx, until a replicated stream has a
// leader: a stream just created in a cluster elects one a moment later, and
// a batch published before has no responder.
func waitForLeader(ctx context.Context, st jetstream.Stream) error {
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		info := st.CachedInfo()
		if info.Config.Replicas <= 1 || (info.Cluster != nil && info.Cluster.Leader != "") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no stream leader elected: %w", ctx.Err())
		case <-time.After(delay):
		}
		if _, err := st.Info(ctx); err != nil && ctx.Err() == nil {
			return fmt.Errorf("wait for a stream leader: %w", err)
		}
	}
}

// unsafeDiffs lists the settings of have that could lose, rewrite or
// refuse events compared with want.
func unsafeDiffs(want, have jetstream.StreamConfig) []string {
	var d []string
	add := func(ok bool, name string, w, h any) {
		if !ok {
			d = append(d, fmt.Sprintf("%s: want %v, have %v", name, w, h))
		}
	}
	add(have.Storage == jetstream.FileStorage, "storage", want.Storage, have.Storage)
	add(have.Replicas >= want.Replicas, "replicas", want.Replicas, have.Replicas)
	add(have.Retention == jetstream.LimitsPolicy, "retention", want.Retention, have.Retention)
	add(have.MaxAge == 0, "max_age", want.MaxAge, have.MaxAge)
	add(have.MaxBytes <= 0, "max_bytes", want.MaxBytes, have.MaxBytes)
	add(have.MaxMsgs <= 0, "max_msgs", want.MaxMsgs, have.MaxMsgs)
	add(have.MaxMsgsPerSubject <= 0, "max_msgs_per_subject", want.MaxMsgsPerSubject, have.MaxMsgsPerSubject)
	add(have.DenyDelete, "deny_delete", true, have.DenyDelete)
	add(have.DenyPurge, "deny_purge", true, have.DenyPurge)
	add(have.AllowAtomicPublish, "allow_atomic", true, have.AllowAtomicPublish)
	add(!have.AllowRollup, "allow_rollup_hdrs", false, have.AllowRollup)
	add(!have.AllowMsgTTL, "allow_msg_ttl", false, have.AllowMsgTTL)
	add(have.SubjectDeleteMarkerTTL == 0, "subject_delete_marker_ttl", time.Duration(0), have.SubjectDeleteMarkerTTL)
	add(!have.Sealed, "sealed", false, have.Sealed)
	add(have.Mirror == nil, "mirror", "none", have.Mirror)
	add(slices.Contains(have.Subjects, want.Subjects[0]), "subjects", want.Subjects, have.Subjects)
	return d
}

// Close closes the connection when the store opened it.
func (s *NATSStore) Close() error {
	s.moves.stop(s.nc)
	if s.ownsConn {
		s.nc.Close()
	}
	return nil
}

// Conn exposes the connection, for tools that must publish raw messages
// (tests simulating tampering) or watch connection state.
func (s *NATSStore) Conn() *nats.Conn { return s.nc }

// Stream is the JetStream stream holding the events, for operational
// queries (cluster leader, state) that are not the store's business.
func (s *NATSStore) Stream() jetstream.Stream { return s.stream }

// StreamName is the JetStream stream holding the events.
func (s *NATSStore) StreamName() string { return s.cfg.Stream }

// Config returns the configuration the store was opened with, its
// defaults filled in, so that a measurement outside the package (the
// yardsticks of internal/bench) reads as the store's own readers do.
func (s *NATSStore) Config() Config { return s.cfg }

// Subject is the subject an aggregate's events are stored under.
func (s *NATSStore) Subject(chain string, agg Aggregate) string { return s.subj.event(chain, agg) }

func (s *NATSStore) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.RequestTimeout)
}

// lastMsg returns the last stored message on subject (a wildcard is fine),
// nil when there is none. Requests go to the stream leader, so they see
// every acknowledged write.
func (s *NATSStore) lastMsg(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := s.reqCtx(ctx)
	defer cancel()
	m, err := s.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get last message on %s: %w", subject, err)
	}
	return m, nil
}

// ChainHead reads and verifies the last event of chain.
func (s *NATSStore) ChainHead(ctx context.Context, chain string) (Head, error) {
	if err := ValidateChain(chain); err != nil {
		return Head{}, err
	}
	m, err := s.lastMsg(ctx, s.subj.chain(chain))
	if err != nil || m == nil {
		return Head{}, err
	}
	ev, err := s.subj.decode(m.Subject, m.Sequence, m.Header, m.Data)
	if err != nil {
		return Head{}, fmt.Errorf("read head of chain %s: %w", chain, err)
	}
	return Head{Sequence: ev.Sequence, ChainSeq: ev.ChainSeq, Hash: ev.Hash}, nil
}

// LastSequence is the stream's last sequence.
func (s *NATSStore) LastSequence(ctx context.Context) (uint64, error) {
	st, err := s.state(ctx)
	return st.LastSeq, err
}

// WholeEndWait is how long WholeEnd waits for the rest of an append the
// stream ends inside: the regulator's vault stores a batch of its copy
// within a fraction of that.
const WholeEndWait = 2 * time.Second

// WholeEnd is LastSequence for a reader that reads up to the stream's end:
// a stream written as plain messages (ReappendPlainAsync: the regulator's
// vault's copy) can end in the middle of an append while the rest of it is
// being stored. When the last event announces more, it waits up to wait
// for the stream to hold them, and returns the append's last sequence;
// past wait, the last sequence as it is: an append cut short, which the
// reader reports.
func (s *NATSStore) WholeEnd(ctx context.Context, wait time.Duration) (uint64, error) {
	last, err := s.LastSequence(ctx)
	if err != nil || last == 0 {
		return last, err
	}
	remaining := 0
	err = s.ReadStored(ctx, last, last, func(ev RecordedEvent) error {
		remaining = ev.AppendRemaining
		return nil
	})
	var bad *IntegrityError
	switch {
	case errors.As(err, &bad):
		return last, nil // the reader reports it where it reads it
	case err != nil:
		return 0, err
	}
	end := last + uint64(remaining)
	for deadline := time.Now().Add(wait); end > last && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(wholeEndPoll):
		}
		if last, err = s.LastSequence(ctx); err != nil {
			return 0, err
		}
	}
	return min(last, end), nil
}

// wholeEndPoll is how often WholeEnd looks for the rest of an append.
const wholeEndPoll = 10 * time.Millisecond

// state is the stream's state as its leader answers it.
func (s *NATSStore) state(ctx context.Context) (jetstream.StreamState, error) {
	ctx, cancel := s.reqCtx(ctx)
	defer cancel()
	info, err := s.stream.Info(ctx)
	if err != nil {
		return jetstream.StreamState{}, fmt.Errorf("state of stream %s: %w", s.cfg.Stream, err)
	}
	return info.State, nil
}

// validateRequest checks a request before any I/O.
func (s *NATSStore) validateRequest(chain string, req *AppendRequest, eventsMax int) error {
	if err := ValidateChain(chain); err != nil {
		return err
	}
	if len(req.Events) == 0 || len(req.Events) > eventsMax {
		return fmt.Errorf("append to chain %s: %d events, want 1..%d: %w", chain, len(req.Events), eventsMax, ErrInvalid)
	}
	for i := range req.Events {
		ev := &req.Events[i]
		if err := validateEvent(ev, false); err != nil {
			return fmt.Errorf("append to chain %s: event %d: %w", chain, i, err)
		}
		if !req.PayloadsMarshaled && !json.Valid(ev.Payload) {
			return fmt.Errorf("append to chain %s: event %d: event type %q: payload is not valid JSON: %w", chain, i, ev.Type, ErrInvalid)
		}
		if s.cfg.Registry != nil {
			if err := s.cfg.Registry.checkWrite(ev); err != nil {
				return fmt.Errorf("append to chain %s: event %d: %w", chain, i, err)
			}
		}
	}
	seen := make(map[Aggregate]bool, len(req.ExpectAggregates))
	for _, e := range req.ExpectAggregates {
		if seen[e.Aggregate] || !validName(e.Aggregate.Kind, NameLenMax, false) || !validName(e.Aggregate.ID, NameLenMax, false) {
			return fmt.Errorf("append to chain %s: expectation on aggregate %s: duplicate or bad name: %w", chain, e.Aggregate, ErrInvalid)
		}
		seen[e.Aggregate] = true
	}
	return nil
}

// record turns the events of one atomic append (a request, or a seal on
// its own) into recorded ones linked after head, each marked with how many
// of them follow it, so that readers can apply the append whole. It returns
// the new head.
func (s *NATSStore) record(chain string, head Head, events []Event, now time.Time, out []RecordedEvent) ([]RecordedEvent, Head) {
	for i, e := range events {
		if e.ID == "" {
			e.ID = nuid.Next()
		}
		at := now
		if !e.At.IsZero() {
			at, e.At = e.At.UTC(), time.Time{}
		}
		r := RecordedEvent{Event: e, Chain: chain, ChainSeq: head.ChainSeq + 1, RecordedAt: at, PrevHash: head.Hash,
			AppendRemaining: len(events) - 1 - i}
		r.Hash = ComputeHash(&r)
		out = append(out, r)
		head = Head{ChainSeq: r.ChainSeq, Hash: r.Hash}
	}
	return out, head
}

// Append implements Store.
func (s *NATSStore) Append(ctx context.Context, chain string, req AppendRequest) ([]uint64, error) {
	if s.cfg.ReadOnly {
		return nil, fmt.Errorf("append to chain %s: %w", chain, ErrReadOnly)
	}
	if err := s.validateRequest(chain, &req, BatchEventsMax); err != nil {
		return nil, err
	}
	head, err := s.ChainHead(ctx, chain)
	if err != nil {
		return nil, fmt.Errorf("append to chain %s: %w", chain, err)
	}
	if req.ExpectChain.set && req.ExpectChain.seq != head.Sequence {
		return nil, &ConflictError{Chain: chain, Subject: s.subj.chain(chain), Expected: req.ExpectChain.seq, Actual: head.Sequence}
	}
	// Per-aggregate expectations are checked here against the head read
	// above: the server fence on the chain head guarantees that nothing in
	// the chain (hence in any of its aggregates) changes before the commit.
	for _, e := range req.ExpectAggregates {
		subject := s.subj.event(chain, e.Aggregate)
		m, err := s.lastMsg(ctx, subject)
		if err != nil {
			return nil, fmt.Errorf("append to chain %s: %w", chain, err)
		}
		var last uint64
		if m != nil {
			last = m.Sequence
		}
		if last != e.LastSeq || last > head.Sequence {
			return nil, &ConflictError{Chain: chain, Subject: subject, Expected: e.LastSeq, Actual: last}
		}
	}
	recs, _ := s.record(chain, head, req.Events, s.cfg.Now().UTC(), make([]RecordedEvent, 0, len(req.Events)))
	return s.commitBatch(ctx, chain, head.Sequence, recs, nil)
}

// commitBatch publishes recs as one atomic batch fenced on the chain's
// last sequence being fence, and returns their stream sequences. msgs are
// the encoded recs when the caller encoded them ahead of time; nil encodes
// them here.
func (s *NATSStore) commitBatch(ctx context.Context, chain string, fence uint64, recs []RecordedEvent, msgs []*nats.Msg) ([]uint64, error) {
	if s.cfg.ReadOnly {
		return nil, fmt.Errorf("append batch to %s: %w", s.subj.chain(chain), ErrReadOnly)
	}
	if msgs == nil {
		msgs = make([]*nats.Msg, len(recs))
		for i := range recs {
			msgs[i] = s.subj.encodeMsg(&recs[i])
		}
	}
	s.fence(chain, fence, recs, msgs)
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	ack, err := jetstreamext.PublishMsgBatch(rctx, s.js, msgs, jetstreamext.BatchFlowControl{AckFirst: false})
	return s.batchOutcome(ctx, chain, fence, recs, ack, err)
}

// fence sets the batch's expectation: the chain's last sequence, checked
// by the server against the wildcard subject of the whole chain. Allowed
// on the first message of a batch only, which is where it goes.
// Nats-Msg-Id on the first message makes a replay of this very batch
// answer 10201.
func (s *NATSStore) fence(chain string, fence uint64, recs []RecordedEvent, msgs []*nats.Msg) {
	first := msgs[0].Header
	first.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(fence, 10))
	first.Set(jetstream.ExpectedLastSubjSeqSubjHeader, s.subj.chain(chain))
	first.Set(jetstream.MsgIDHeader, recs[0].ID)
}

// batchCommit is the value of the header that commits a batch, shared by
// every batch's last message (never written to).
var batchCommit = []string{"1"}

// batchPositions are the values of the header that numbers a batch's
// messages, 1 to CommitBatchEventsMax, shared by every batch (never
// written to): a batch's message i takes batchPositions[i:i+1:i+1].
var batchPositions = func() []string {
	p := make([]string, CommitBatchEventsMax)
	for i := range p {
		p[i] = strconv.Itoa(i + 1)
	}
	return p
}()

// publishBatch sends msgs (recs encoded, fenced on fence) as one atomic
// batch without waiting: the server answers the commit on reply, and
// batchReply reads that answer. The committer uses it to keep several
// batches in flight; the messages go out in call order on one connection,
// so the server sees the batches in that order.
func (s *NATSStore) publishBatch(chain string, fence uint64, recs []RecordedEvent, msgs []*nats.Msg, reply string) (batchID string, err error) {
	s.fence(chain, fence, recs, msgs)
	return s.sendBatch(msgs, reply)
}

// sendBatch sends msgs, fenced by the caller, as one atomic batch without
// waiting: the server answers the commit on reply (batchReply).
func (s *NATSStore) sendBatch(msgs []*nats.Msg, reply string) (batchID string, err error) {
	batchID = nuid.Next()
	// One value slice for the id and one array for the positions serve
	// every message of the batch (the header names are canonical already).
	ids := []string{batchID}
	for i, m := range msgs {
		m.Header[jetstreamext.BatchIDHeader] = ids
		m.Header[jetstreamext.BatchSeqHeader] = batchPositions[i : i+1 : i+1]
		if i == len(msgs)-1 {
			m.Header[jetstreamext.BatchCommitHeader] = batchCommit
			m.Reply = reply
		}
		if err := s.nc.PublishMsg(m); err != nil {
			return batchID, fmt.Errorf("publish batch message %d of %d: %w", i+1, len(msgs), err)
		}
	}
	return batchID, nil
}

// batchReply reads the server's answer to a batch's commit, as
// jetstreamext.PublishMsgBatch does: an acknowledgement of the whole batch
// or the server's error.
func batchReply(m *nats.Msg, batchID string, n int) (*jetstreamext.BatchAck, error) {
	if m.Header.Get("Status") == "503" {
		return nil, nats.ErrNoResponders
	}
	var r struct {
		Error *jetstream.APIError `json:"error"`
		jetstreamext.BatchAck
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, fmt.Errorf("batch acknowledgement %q: %w", m.Data, err)
	}
	if r.Error != nil {
		return nil, r.Error
	}
	if r.Stream == "" || r.BatchID != batchID || r.BatchSize != uint64(n) {
		return nil, fmt.Errorf("batch acknowledgement %q for batch %s of %d: %w", m.Data, batchID, n, jetstreamext.ErrInvalidBatchAck)
	}
	return &r.BatchAck, nil
}

// batchOutcome turns a batch's acknowledgement, or the error that came
// instead, into the batch's stream sequences or the store's error: a
// refused fence is a *ConflictError, a server rejection is that error, and
// a lost or doubtful answer is checked on the stream (see resolve).
func (s *NATSStore) batchOutcome(ctx context.Context, chain string, fence uint64, recs []RecordedEvent, ack *jetstreamext.BatchAck, err error) ([]uint64, error) {
	chainSubj := s.subj.chain(chain)
	if err == nil {
		if ack.BatchSize != uint64(len(recs)) || ack.Sequence < uint64(len(recs)) {
			return nil, fmt.Errorf("append batch to %s: ack of %d messages ending at %d for %d events: %w",
				chainSubj, ack.BatchSize, ack.Sequence, len(recs), ErrOutcomeUnknown)
		}
		return seqRange(ack.Sequence-uint64(len(recs))+1, len(recs)), nil
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case errCodeWrongLastSequence, errCodeWrongLastSequenceConstant:
			return nil, &ConflictError{Chain: chain, Subject: chainSubj, Expected: fence}
		case errCodeBatchDuplicateMsgID:
			// A replay of a batch whose first id is known to the server:
			// possibly committed, check the stream.
		default:
			// Any other server answer is a rejection of the whole batch.
			return nil, fmt.Errorf("append batch to %s: %w", chainSubj, err)
		}
	}
	seqs, rerr := s.resolve(context.WithoutCancel(ctx), chain, fence, recs)
	if rerr != nil {
		return nil, fmt.Errorf("append batch to %s after %v: %w", chainSubj, err, rerr)
	}
	return seqs, nil
}

// resolve finds out whether a batch whose acknowledgement was lost is on
// the stream: the first chain message after the fence carries its first
// event id, and the batch is contiguous. Not there yet is ErrOutcomeUnknown
// (the server may still commit it); another writer's event there is a
// *ConflictError.
func (s *NATSStore) resolve(ctx context.Context, chain string, fence uint64, recs []RecordedEvent) ([]uint64, error) {
	ctx, cancel := s.reqCtx(ctx)
	defer cancel()
	m, err := s.getMsgAcrossMoves(ctx, fence+1, jetstream.WithGetMsgSubject(s.subj.chain(chain)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrOutcomeUnknown
	}
	if err != nil {
		return nil, fmt.Errorf("check batch after fence %d: %v: %w", fence, err, ErrOutcomeUnknown)
	}
	if m.Header.Get(HeaderID) != recs[0].ID {
		return nil, &ConflictError{Chain: chain, Subject: s.subj.chain(chain), Expected: fence, Actual: m.Sequence}
	}
	lastSeq := m.Sequence + uint64(len(recs)) - 1
	last, err := s.getMsgAcrossMoves(ctx, lastSeq)
	if err != nil || last.Header.Get(HeaderID) != recs[len(recs)-1].ID {
		return nil, fmt.Errorf("check batch end at %d: %v: %w", lastSeq, err, ErrOutcomeUnknown)
	}
	return seqRange(m.Sequence, len(recs)), nil
}

// errMoved ends a read when the way to the stream's leader moves.
var errMoved = errors.New("the way to the stream's leader moved")

// resolveMovesMax bounds how many moves of the way to the stream's leader
// a read is sent again after.
const resolveMovesMax = 8

// getMsgAcrossMoves reads the stream's message at seq, sent again when the
// way to the stream's leader moves while it waits (see leaderMoves), until
// ctx ends: a read sent into an election is never answered, and the leader
// elected next answers at once.
func (s *NATSStore) getMsgAcrossMoves(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	for try := 0; ; try++ {
		moved, _ := s.moves.next()
		mctx, cancel := context.WithCancelCause(ctx)
		if try < resolveMovesMax {
			go func() {
				select {
				case <-moved:
					cancel(errMoved)
				case <-mctx.Done():
				}
			}()
		}
		m, err := s.stream.GetMsg(mctx, seq, opts...)
		moves := errors.Is(context.Cause(mctx), errMoved)
		cancel(nil)
		if err == nil || ctx.Err() != nil || !moves {
			return m, err
		}
	}
}

func seqRange(first uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = first + uint64(i)
	}
	return out
}
