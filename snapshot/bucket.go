// Package snapshot keeps the snapshots of the writer's ledger and of the
// in-memory read models: their storage next to the stream (a JetStream
// Object Store bucket, manifests, parts, MACs, pruning), the pace they are
// encoded and stored at, and when one is due. What a snapshot holds is its
// owner's format (domain's ledger codec, memstore's rows); this package
// sees bytes, a kind, a chain, a format version and a rule set.
//
// A snapshot is a shortcut, never trusted over the stream: a load checks
// its authentication, its format, its rule set and the event the stream
// holds at its sequence, and a snapshot that fails any of them is skipped
// for an older one or, with none left, the stream is replayed
// (docs/snapshots.md).
package snapshot

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BucketDefault is the JetStream Object Store bucket that keeps
// snapshots, next to the stream: a snapshot lives and is replicated with
// the stream it summarises, never in a side file.
const BucketDefault = eventstore.SnapshotBucketDefault

// OrphanChunkAgeDefault is the default Config.OrphanChunkAge: far beyond
// the time one part (at most PartBytesMax) takes at the slowest pace,
// 16 s at 1 MiB/s.
const OrphanChunkAgeDefault = 10 * time.Minute

// ChunkBytesDefault is the default Config.ChunkBytes: 1 MiB, the server's
// default max_payload (a chunk is a message without headers).
const ChunkBytesDefault = 1 << 20

// KeepDefault is how many snapshots of each kind and chain are kept.
const KeepDefault = 3

// ErrNotFound is returned by a load when there is no snapshot of a kind.
var ErrNotFound = errors.New("no snapshot")

// ErrRefused wraps the reason a stored snapshot cannot be trusted: its
// authentication fails, its metadata does not parse, or it is not in a
// layout this build reads.
var ErrRefused = errors.New("snapshot refused")

// ErrUnavailable wraps a passing error met while a snapshot was read (a
// request that timed out, a cluster electing a leader): the snapshot may
// be whole, and a load tries it again before it gives up.
var ErrUnavailable = errors.New("snapshot unavailable for now")

// refused wraps err, met while reading a snapshot, as ErrRefused, or as
// ErrUnavailable when it is a passing error.
func refused(err error, format string, args ...any) error {
	kind := ErrRefused
	if passing(err) {
		kind = ErrUnavailable
	}
	return fmt.Errorf("%w: %s: %w", kind, fmt.Sprintf(format, args...), err)
}

// unavailable wraps err as ErrUnavailable when it is a passing error.
func unavailable(err error) error {
	if passing(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// passing reports an error that a later try may not meet: a request that
// timed out or found no responder, one sent while the connection
// reconnects (a connection that buffers nothing meanwhile, as a cluster's
// serve's, refuses it at once), or JetStream answering that it is
// temporarily unavailable (a cluster electing). A consumer's message that
// says so carries only the server's description in a 503 status, which
// nats.go hands on as the error's text.
func passing(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 503 || apiErr.ErrorCode == errCodeClusterNotAvailable
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrReconnectBufExceeded) ||
		(err != nil && strings.Contains(err.Error(), clusterNotAvailableText))
}

// clusterNotAvailableText is the description of nats-server's
// JSClusterNotAvailErr.
const clusterNotAvailableText = "JetStream system temporarily unavailable"

// errCodeClusterNotAvailable is nats-server's JSClusterNotAvailErr,
// "JetStream system temporarily unavailable".
const errCodeClusterNotAvailable = 10008

// Meta describes a snapshot: what it is of and where in the stream.
type Meta struct {
	// Kind is what the snapshot holds: "writer" or "projections".
	Kind string `json:"kind"`
	// Chain is the hash chain whose state it is.
	Chain string `json:"chain"`
	// Sequence is the stream sequence of the last event applied; Head is
	// that event's hash and ChainSeq its position in the chain. A reader
	// checks that the stream still holds that event at that sequence.
	Sequence uint64          `json:"sequence"`
	ChainSeq uint64          `json:"chain_seq"`
	Head     eventstore.Hash `json:"head"`
	// Format is the version of the data's format and RuleSet the rule set
	// it was decided under, both the data's owner's to check.
	Format  int    `json:"format"`
	RuleSet string `json:"rule_set"`
	// CreatedAt is when the snapshot was taken; Bytes the data's size.
	CreatedAt time.Time `json:"created_at"`
	Bytes     int       `json:"bytes"`
}

// Config configures a Bucket.
type Config struct {
	// Bucket is the Object Store bucket (default BucketDefault).
	Bucket string
	// Key authenticates snapshots (HMAC-SHA256): a snapshot whose data or
	// metadata changed, or that another key wrote, is refused. Required.
	Key []byte
	// Keep is how many snapshots of each kind and chain are kept (default
	// KeepDefault); older ones are deleted after each save.
	Keep int
	// Replicas of the bucket (default: the store's).
	Replicas int
	// PartBytes bounds each part of a snapshot (default and at most
	// PartBytesMax).
	PartBytes int
	// ChunkBytes is the size of the Object Store chunks a part is sent
	// in (default ChunkBytesDefault, at most the server's max_payload).
	// Each chunk is one message of the bucket's stream: one write and, on
	// a server that syncs always, up to one fsync beside the stream's
	// commits; the Object Store's own default, 128 KiB, made eight times
	// as many for the same bytes.
	ChunkBytes int
	// OrphanChunkAge is how old the newest chunk of an object that was
	// never described must be for a prune to purge its chunks (default
	// OrphanChunkAgeDefault): a store cut short by a crash leaves them; a
	// younger one may be a store in progress, this process's or another
	// node's.
	OrphanChunkAge time.Duration
	// Logger, when set, logs each phase of a load with its duration: the
	// bucket opened, the newest snapshot found, its manifest read, its head
	// checked against the stream, each section fetched (bytes, MB/s); and
	// the tries at opening the bucket while the server cannot answer yet.
	// The first section's lines are at Info (a start waits for them),
	// the other sections' at Debug (they load after the start).
	Logger *slog.Logger
	// ReadOnly opens an existing bucket as it is, creating or changing
	// nothing, as a read-only user may (eventstore.ReaderAccess): the
	// bucket is then only read.
	ReadOnly bool
}

// Bucket keeps authenticated snapshots in a JetStream Object Store, next
// to the stream of store.
type Bucket struct {
	store *eventstore.NATSStore
	os    jetstream.ObjectStore
	// stream is the bucket's stream, whose subjects name its objects
	// (objectNames), and metaPrefix the subject of an object's
	// description without the encoded name.
	stream     jetstream.Stream
	metaPrefix string
	// chunkPrefix is the subject of an object's chunks without its NUID.
	chunkPrefix string
	cfg         Config
}

// Open opens (creating it if needed) the snapshot bucket beside store's
// stream, trying again for a while when the server cannot answer yet
// (eventstore.OpenPatiently).
func Open(ctx context.Context, store *eventstore.NATSStore, cfg Config) (*Bucket, error) {
	if len(cfg.Key) < 32 {
		return nil, fmt.Errorf("snapshots: key of %d bytes, want at least 32: %w", len(cfg.Key), eventstore.ErrInvalid)
	}
	if cfg.Bucket == "" {
		cfg.Bucket = BucketDefault
	}
	if cfg.Keep <= 0 {
		cfg.Keep = KeepDefault
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = store.Config().Replicas
	}
	if cfg.PartBytes <= 0 || cfg.PartBytes > PartBytesMax {
		cfg.PartBytes = PartBytesMax
	}
	if cfg.ChunkBytes <= 0 {
		cfg.ChunkBytes = ChunkBytesDefault
	}
	if cfg.OrphanChunkAge <= 0 {
		cfg.OrphanChunkAge = OrphanChunkAgeDefault
	}
	// A chunk is published as one message: a server configured with a
	// smaller max_payload than the default would refuse it.
	if mp := store.Conn().MaxPayload(); mp > 0 && int64(cfg.ChunkBytes) > mp {
		cfg.ChunkBytes = int(mp)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	started := time.Now()
	b, err := eventstore.OpenPatiently(ctx, cfg.Logger, "snapshot bucket "+cfg.Bucket, func(ctx context.Context) (*Bucket, error) {
		os, stream, err := openBucket(ctx, store, cfg)
		if err != nil {
			return nil, err
		}
		return &Bucket{store: store, os: os, stream: stream, metaPrefix: "$O." + cfg.Bucket + ".M.", chunkPrefix: "$O." + cfg.Bucket + ".C.", cfg: cfg}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("open snapshot bucket %s: %w", cfg.Bucket, err)
	}
	cfg.Logger.Info("snapshot bucket opened", "bucket", cfg.Bucket, "persist", b.stream.CachedInfo().Config.PersistMode, "after", since(started))
	return b, nil
}

// openBucket creates the snapshot bucket or binds to it. On one node its
// stream is created with asynchronous persistence: the server
// acknowledges a chunk once written, and syncs the bucket's files on its
// own timer, not after every chunk. A snapshot is a shortcut, checked
// against the stream at every start and never trusted over it, so a crash
// that loses the newest costs a start an older one or a replay, never a
// fact; synced chunk by chunk, its megabytes were flushed on the disk the
// stream's commits flush to, and the commands waited behind those flushes
// while a snapshot was stored. The stream's own writes stay synced before
// every answer: the mode is the bucket stream's alone. A replicated bucket
// keeps the default (the server refuses asynchronous persistence on
// replicated streams), and a bucket created by an earlier build keeps the
// mode it has, since a stream's persist mode cannot be changed
// (docs/snapshots.md).
func openBucket(ctx context.Context, store *eventstore.NATSStore, cfg Config) (jetstream.ObjectStore, jetstream.Stream, error) {
	// A JetStream context as the store's own, with its request timeout.
	js, err := jetstream.New(store.Conn(), jetstream.WithDefaultTimeout(store.Config().RequestTimeout))
	if err != nil {
		return nil, nil, err
	}
	name := objectStreamPrefix + cfg.Bucket
	st, err := js.Stream(ctx, name)
	switch {
	case cfg.ReadOnly && err == nil:
		os, err := js.ObjectStore(ctx, cfg.Bucket)
		return os, st, err
	case cfg.ReadOnly:
		return nil, nil, err
	case errors.Is(err, jetstream.ErrStreamNotFound) && cfg.Replicas <= 1:
		// The Object Store's own stream configuration, with the persist
		// mode its configuration has no field for.
		st, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Description: bucketDescription,
			Subjects: []string{"$O." + cfg.Bucket + ".C.>", "$O." + cfg.Bucket + ".M.>"}, MaxBytes: -1,
			Storage: jetstream.FileStorage, Replicas: 1, Discard: jetstream.DiscardNew, AllowRollup: true, AllowDirect: true,
			PersistMode: jetstream.AsyncPersistMode})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // another process created it meanwhile
			st, err = js.Stream(ctx, name)
		}
	case errors.Is(err, jetstream.ErrStreamNotFound) || err == nil && st.CachedInfo().Config.PersistMode != jetstream.AsyncPersistMode:
		// Replicated, or a bucket of an earlier build (its mode kept).
		os, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: cfg.Bucket,
			Description: bucketDescription, Storage: jetstream.FileStorage, Replicas: cfg.Replicas})
		if err != nil {
			return nil, nil, err
		}
		st, err = js.Stream(ctx, name)
		return os, st, err
	}
	if err != nil {
		return nil, nil, err
	}
	os, err := js.ObjectStore(ctx, cfg.Bucket)
	return os, st, err
}

// OpenObjectStore opens the bucket of that name beside store's stream,
// made as the snapshot bucket is (creating it if it does not exist). It is
// exported for the latency yardstick of internal/bench, which stores
// objects in a scratch bucket of that make with no writer beside it.
func OpenObjectStore(ctx context.Context, store *eventstore.NATSStore, bucket string, replicas int) (jetstream.ObjectStore, error) {
	os, _, err := openBucket(ctx, store, Config{Bucket: bucket, Replicas: replicas})
	return os, err
}

// bucketDescription describes the snapshot bucket's stream.
const bucketDescription = "Tresor snapshots of the writer and the read models"

// objectStreamPrefix names the stream of an Object Store bucket, as the
// Object Store names it: OBJ_<bucket>.
const objectStreamPrefix = "OBJ_"

// snapshotName orders a kind's snapshots by sequence: zero-padded, they
// sort as their sequences do.
func snapshotName(kind, chain string, seq uint64) string {
	return fmt.Sprintf("%s.%s.%020d", kind, chain, seq)
}

// Put stores data as a snapshot described by meta, at DefaultPace (see
// putParts).
func (b *Bucket) Put(ctx context.Context, meta Meta, data []byte) error {
	return b.putParts(ctx, meta, DefaultPace.Rate(len(data)), func(w *PartWriter) error { return w.writeWhole(data) })
}

// names lists the snapshots of a kind and chain, oldest first.
func (b *Bucket) names(ctx context.Context, kind, chain string) ([]string, error) {
	all, err := b.objectNames(ctx)
	if err != nil {
		return nil, err
	}
	return manifestNames(all, kind, chain), nil
}

// objectNames lists the names of the bucket's objects from the subjects of
// its stream, which the server keeps in memory. The Object Store's List
// reads the last message of each subject instead, loading nearly every
// block of the bucket's stream, which grows with the read models'
// snapshots: seconds of a start once a few blocks have sold out, both loads
// listing at once. The list may name an object deleted by an older build,
// whose subject still holds the delete marker (prune purges it): GetInfo
// finds no object there, and the loads skip it (errGone).
func (b *Bucket) objectNames(ctx context.Context) ([]string, error) {
	ctx, cancel := b.reqCtx(ctx)
	defer cancel()
	info, err := b.stream.Info(ctx, jetstream.WithSubjectFilter(b.metaPrefix+">"))
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	out := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		name, err := base64.URLEncoding.DecodeString(strings.TrimPrefix(subj, b.metaPrefix))
		if err != nil {
			// Not an object's subject as the Object Store writes them.
			continue
		}
		out = append(out, string(name))
	}
	return out, nil
}

// metaSubject is the subject of the description of the object name.
func (b *Bucket) metaSubject(name string) string {
	return b.metaPrefix + base64.URLEncoding.EncodeToString([]byte(name))
}

// errGone is what open returns for a name the listing named but that
// holds no object (deleted): not a snapshot refused, none at all.
var errGone = errors.New("snapshot deleted")

// Latest returns the newest snapshot of a kind and chain (the first
// section of one in sections), authenticated, whole parts and manifest.
// It returns ErrNotFound when there is none, an error wrapping ErrRefused
// when it fails its authentication, or the read error. What it holds is
// the caller's to check against the stream.
func (b *Bucket) Latest(ctx context.Context, kind, chain string) (Meta, []byte, error) {
	names, err := b.names(ctx, kind, chain)
	if err != nil {
		return Meta{}, nil, err
	}
	for i := len(names) - 1; i >= 0; i-- {
		meta, r, _, err := b.open(ctx, names[i])
		if errors.Is(err, errGone) {
			continue
		}
		if err != nil {
			return Meta{}, nil, err
		}
		defer r.Close()
		data, err := io.ReadAll(r)
		if err != nil {
			return Meta{}, nil, err
		}
		return meta, data, nil
	}
	return Meta{}, nil, fmt.Errorf("%s snapshot of chain %s: %w", kind, chain, ErrNotFound)
}

// Evidence returns, for each kind of snapshot of chain in the bucket, the
// position named by its newest manifest that authenticates, whether or not
// its data is still whole: a snapshot is stored only after the events it
// covers were acknowledged (eventstore.CommitterConfig.Evidence). A
// passing error (ErrUnavailable) is tried again, as a load does, before it
// is returned.
func (b *Bucket) Evidence(ctx context.Context, chain string) (out []eventstore.Evidence, err error) {
	err = b.retryPassing(ctx, "snapshots' positions", func() error {
		out, err = b.evidence(ctx, chain)
		return err
	})
	return out, err
}

// evidence is one try of Evidence.
func (b *Bucket) evidence(ctx context.Context, chain string) ([]eventstore.Evidence, error) {
	names, err := b.objectNames(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	slices.Sort(names)
	var out []eventstore.Evidence
	seen := map[string]bool{}
	for i := len(names) - 1; i >= 0; i-- {
		name := names[i]
		kind, _, ok := strings.Cut(name, ".")
		if !ok || seen[kind] || len(manifestNames(names[i:i+1], kind, chain)) == 0 {
			continue
		}
		m, err := b.openManifest(ctx, name)
		if errors.Is(err, errGone) {
			continue
		}
		if errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		if err != nil {
			// Not authenticated, not ours to trust: no evidence.
			continue
		}
		seen[kind] = true
		out = append(out, eventstore.Evidence{Source: "snapshot " + name,
			Head: eventstore.Head{Sequence: m.Sequence, ChainSeq: m.ChainSeq, Hash: m.Head}})
	}
	return out, nil
}

// reqCtx bounds ctx by one request's time, the store's.
func (b *Bucket) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.store.Config().RequestTimeout)
}

// since is the time since t, rounded for a log line.
func since(t time.Time) time.Duration { return round(time.Since(t)) }

// round rounds a duration for a log line: to the microsecond below a
// millisecond, to the millisecond above.
func round(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(time.Millisecond)
}
