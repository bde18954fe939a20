package eventstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SignificantConfig configures the significant-event log: a JetStream
// stream of its own, apart from the event log, with limits, so that what
// it records (failed authentications, refused role checks) can neither
// grow the event log nor slow its writer, and a flood of it stays bounded.
// Zero fields take the documented defaults.
type SignificantConfig struct {
	// Stream is the stream's name (default "TRESOR_SIGNIFICANT").
	Stream string
	// SubjectPrefix is the first subject token (default
	// "tresor-significant"); an entry of kind k is on <prefix>.<k>. It must
	// not be the event log's prefix.
	SubjectPrefix string
	// Replicas is the stream's replica count (default 1).
	Replicas int
	// MaxAge is how long an entry is kept (default 400 days: a year and a
	// margin for the yearly review of the logs).
	MaxAge time.Duration
	// MaxBytes bounds the stream (default 1 GiB); past it the oldest
	// entries go first. JetStream reserves it against its store's limit
	// (three quarters of the free disk) whether or not it is used, so a
	// small disk wants a smaller bound. An existing stream is never brought
	// below what it holds: a start on a fuller disk drops no entry.
	MaxBytes int64
	// MaxPerKind bounds the entries of one kind (default 1 000 000), so
	// that a flood of one kind (failed logins) never pushes out another
	// (refused role checks).
	MaxPerKind int64
	// RequestTimeout bounds every request (default 10s).
	RequestTimeout time.Duration
	// Logger logs the tries at opening the stream while the server cannot
	// answer yet (nil: none).
	Logger *slog.Logger
	// Description describes the stream (default: the significant-event
	// log's).
	Description string
	// KindTokens is how many subject tokens a kind is (default 1): the
	// access log's are two, what an entry is about and which one
	// ("player.p-42").
	KindTokens int
}

// The bounded logs' streams and subject prefixes: the significant-event
// log's defaults, and the access log's (a SignificantConfig too).
const (
	SignificantStream        = "TRESOR_SIGNIFICANT"
	SignificantSubjectPrefix = "tresor-significant"
	AccessLogStream          = "TRESOR_ACCESS"
	AccessLogSubjectPrefix   = "tresor-access"
)

// LogTimeHeader carries, on an entry a restore put back, the time it was
// first stored: JetStream stamps a message with the time it stores it,
// which a republish cannot set, and a log's reader prefers this header's.
const LogTimeHeader = "Tresor-Log-Time"

// entryTime is a stored entry's time: its LogTimeHeader's when it has a
// valid one, else when the server stored it.
func entryTime(h nats.Header, stored time.Time) time.Time {
	if v := h.Get(LogTimeHeader); v != "" {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t.UTC()
		}
	}
	return stored.UTC()
}

func (c *SignificantConfig) setDefaults() error {
	if c.Stream == "" {
		c.Stream = SignificantStream
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = SignificantSubjectPrefix
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.MaxAge == 0 {
		c.MaxAge = 400 * 24 * time.Hour
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = 1 << 30
	}
	if c.MaxPerKind == 0 {
		c.MaxPerKind = 1_000_000
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.Description == "" {
		c.Description = "Tresor significant events: failed authentications and refused role checks (bounded; not the event log)"
	}
	if c.KindTokens == 0 {
		c.KindTokens = 1
	}
	switch {
	case !validName(c.Stream, NameLenMax, false) || c.Stream == "TRESOR":
		return fmt.Errorf("significant-event stream %q: %w", c.Stream, ErrInvalid)
	case !validName(c.SubjectPrefix, NameLenMax, false) || c.SubjectPrefix == defaultSubjectPrefix:
		return fmt.Errorf("significant-event subject prefix %q: %w", c.SubjectPrefix, ErrInvalid)
	case c.Replicas < 1 || c.Replicas > 5 || c.MaxAge < 0 || c.MaxBytes < 0 || c.MaxPerKind < 0 || c.RequestTimeout < 0 || c.KindTokens < 1 || c.KindTokens > 2:
		return fmt.Errorf("significant-event log limits: %w", ErrInvalid)
	}
	return nil
}

// LogEntry is one entry of the significant-event log: its stream
// sequence, when it was stored (entryTime: the first time, for an entry a
// restore put back), its kind and its bytes.
type LogEntry struct {
	Seq  uint64
	At   time.Time
	Kind string
	Data []byte
}

// SignificantLog is the significant-event log on JetStream.
type SignificantLog struct {
	cfg    SignificantConfig
	js     jetstream.JetStream
	stream jetstream.Stream
}

// OpenSignificantLog creates the significant-event stream, or brings an
// existing one to the configured limits (unlike the event log's, they are
// meant to change: they bound what is kept).
func OpenSignificantLog(ctx context.Context, nc *nats.Conn, cfg SignificantConfig) (*SignificantLog, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(cfg.RequestTimeout))
	if err != nil {
		return nil, fmt.Errorf("open significant-event log: jetstream: %w", err)
	}
	// A cluster restarting answers once it has elected the stream's
	// leader: try again meanwhile, as for the event stream.
	st, err := OpenPatiently(ctx, cfg.Logger, "significant-event log "+cfg.Stream, func(ctx context.Context) (jetstream.Stream, error) {
		return js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:              cfg.Stream,
			Description:       cfg.Description,
			Subjects:          []string{cfg.SubjectPrefix + ".>"},
			Storage:           jetstream.FileStorage,
			Replicas:          cfg.Replicas,
			Retention:         jetstream.LimitsPolicy,
			Discard:           jetstream.DiscardOld,
			MaxAge:            cfg.MaxAge,
			MaxBytes:          heldBytes(ctx, js, cfg.Stream, cfg.MaxBytes),
			MaxMsgs:           -1,
			MaxMsgsPerSubject: cfg.MaxPerKind,
			MaxMsgSize:        4 << 10,
			DenyDelete:        true,
			DenyPurge:         true,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("open significant-event log %s: %w", cfg.Stream, err)
	}
	return &SignificantLog{cfg: cfg, js: js, stream: st}, nil
}

// heldBytes is maxBytes, or more when the existing stream already holds
// more (up to its current bound), so that shrinking the bound never
// discards entries.
func heldBytes(ctx context.Context, js jetstream.JetStream, name string, maxBytes int64) int64 {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return maxBytes
	}
	info := st.CachedInfo()
	held := min(int64(info.State.Bytes), info.Config.MaxBytes)
	return max(maxBytes, held)
}

// validKind reports whether kind is KindTokens subject tokens, each 1–64
// of [A-Za-z0-9_-].
func (l *SignificantLog) validKind(kind string) bool {
	tokens := strings.Split(kind, ".")
	if len(tokens) != l.cfg.KindTokens {
		return false
	}
	for _, t := range tokens {
		if !validName(t, NameLenMax, false) {
			return false
		}
	}
	return true
}

// Append stores one entry of a kind (KindTokens subject tokens) and
// returns its sequence once stored.
func (l *SignificantLog) Append(ctx context.Context, kind string, data []byte) (uint64, error) {
	if !l.validKind(kind) {
		return 0, fmt.Errorf("%s: kind %q: %w", l.cfg.Stream, kind, ErrInvalid)
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
	defer cancel()
	ack, err := l.js.Publish(ctx, l.cfg.SubjectPrefix+"."+kind, data)
	if err != nil {
		return 0, fmt.Errorf("append to %s: %w", l.cfg.Stream, err)
	}
	return ack.Sequence, nil
}

// Read returns up to limit entries after sequence after, recorded at or
// after since (zero: any), oldest first, up to the last entry stored when
// it is called.
func (l *SignificantLog) Read(ctx context.Context, after uint64, since time.Time, limit int) ([]LogEntry, error) {
	return l.ReadKinds(ctx, nil, after, since, limit)
}

// ReadKinds is Read of the entries of some kinds only (nil: every kind).
// A kind may end in the wildcard "*" for its last token.
func (l *SignificantLog) ReadKinds(ctx context.Context, kinds []string, after uint64, since time.Time, limit int) ([]LogEntry, error) {
	filters := []string{l.cfg.SubjectPrefix + ".>"}
	if len(kinds) > 0 {
		filters = filters[:0]
		for _, k := range kinds {
			filters = append(filters, l.cfg.SubjectPrefix+"."+k)
		}
	}
	last, lastAt, err := l.lastOf(ctx, filters)
	if err != nil || limit < 1 || after >= last || lastAt.Before(since) {
		return nil, err
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: after + 1, FilterSubjects: filters}
	if !since.IsZero() && after == 0 {
		cfg = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since, FilterSubjects: filters}
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
	defer cancel()
	cons, err := l.stream.OrderedConsumer(cctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("read %s after %d: %w", l.cfg.Stream, after, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(limit))
	if err != nil {
		return nil, fmt.Errorf("read %s after %d: %w", l.cfg.Stream, after, err)
	}
	defer it.Stop()
	defer context.AfterFunc(cctx, it.Stop)()
	var out []LogEntry
	for len(out) < limit {
		m, err := it.Next(jetstream.NextMaxWait(l.cfg.RequestTimeout))
		if errors.Is(err, nats.ErrTimeout) {
			// The entries left expired while being read: nothing more.
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", l.cfg.Stream, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", l.cfg.Stream, err)
		}
		kind := m.Subject()[len(l.cfg.SubjectPrefix)+1:]
		// A restored entry was stored later than its time: the consumer's
		// start by time hands on a superset, filtered here.
		if at := entryTime(m.Headers(), md.Timestamp); !at.Before(since) {
			out = append(out, LogEntry{Seq: md.Sequence.Stream, At: at, Kind: kind, Data: m.Data()})
		}
		if md.Sequence.Stream >= last {
			break
		}
	}
	return out, nil
}

// lastOf returns the sequence and time of the last entry on any of
// filters, 0 when there is none: where a read of them ends, so that it
// never waits for an entry that is not coming.
func (l *SignificantLog) lastOf(ctx context.Context, filters []string) (uint64, time.Time, error) {
	var last uint64
	var at time.Time
	for _, f := range filters {
		ctx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
		m, err := l.stream.GetLastMsgForSubject(ctx, f)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return 0, time.Time{}, fmt.Errorf("read %s: last entry on %s: %w", l.cfg.Stream, f, err)
		case m.Sequence > last:
			last, at = m.Sequence, m.Time
		}
	}
	return last, at, nil
}
