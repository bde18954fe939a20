package eventstore

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SnapshotBucketDefault is the JetStream Object Store bucket that keeps
// snapshots, next to the stream: a snapshot lives and is replicated with
// the stream it summarises, never in a side file.
const SnapshotBucketDefault = "TRESOR_SNAPSHOTS"

// SnapshotPaceDefault is the default SnapshotConfig.PaceBytesPerSecond:
// a read models' snapshot of 300 MB is stored in about 19 s (the writer's
// slot stores at a sixteenth of it: settlement.WriterSnapshotPace). The
// chunks of a snapshot share the server and the disk with the stream's
// commits: a slower pace delays the commands less while a snapshot is
// stored, a faster one gets the snapshot stored sooner. Halving the pace
// from 32 MiB/s made the commands' tail latency while storing markedly
// closer to their latency outside, for a store that still takes seconds.
const SnapshotPaceDefault = 16 << 20

// SnapshotOrphanChunkAgeDefault is the default
// SnapshotConfig.OrphanChunkAge: far beyond the time one part (at most
// SnapshotPartBytesMax) takes at the slowest pace, 16 s at 1 MiB/s.
const SnapshotOrphanChunkAgeDefault = 10 * time.Minute

// SnapshotChunkDefault is the default SnapshotConfig.ChunkBytes: 1 MiB,
// the server's default max_payload (a chunk is a message without headers).
const SnapshotChunkDefault = 1 << 20

// SnapshotKeepDefault is how many snapshots of each kind and chain are kept.
const SnapshotKeepDefault = 3

// ErrNoSnapshot is returned by Latest when there is no snapshot of a kind.
var ErrNoSnapshot = errors.New("no snapshot")

// ErrSnapshotRefused wraps the reason a stored snapshot cannot be trusted:
// its authentication fails or its metadata does not parse.
var ErrSnapshotRefused = errors.New("snapshot refused")

// ErrSnapshotUnavailable wraps a passing error met while a snapshot was
// read (a request that timed out, a cluster electing a leader): the
// snapshot may be whole, and a load tries it again before it gives up.
var ErrSnapshotUnavailable = errors.New("snapshot unavailable for now")

// refused wraps err, met while reading a snapshot, as ErrSnapshotRefused,
// or as ErrSnapshotUnavailable when it is a passing error.
func refused(err error, format string, args ...any) error {
	kind := ErrSnapshotRefused
	if passing(err) {
		kind = ErrSnapshotUnavailable
	}
	return fmt.Errorf("%w: %s: %w", kind, fmt.Sprintf(format, args...), err)
}

// passing reports an error that a later try may not meet: a request that
// timed out or found no responder, or JetStream answering that it is
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
		(err != nil && strings.Contains(err.Error(), clusterNotAvailableText))
}

// clusterNotAvailableText is the description of nats-server's
// JSClusterNotAvailErr.
const clusterNotAvailableText = "JetStream system temporarily unavailable"

// errCodeClusterNotAvailable is nats-server's JSClusterNotAvailErr,
// "JetStream system temporarily unavailable".
const errCodeClusterNotAvailable = 10008

// SnapshotMeta describes a snapshot: what it is of and where in the stream.
type SnapshotMeta struct {
	// Kind is what the snapshot holds: "writer" or "projections".
	Kind string `json:"kind"`
	// Chain is the hash chain whose state it is.
	Chain string `json:"chain"`
	// Sequence is the stream sequence of the last event applied; Head is
	// that event's hash and ChainSeq its position in the chain. A reader
	// checks that the stream still holds that event at that sequence.
	Sequence uint64 `json:"sequence"`
	ChainSeq uint64 `json:"chain_seq"`
	Head     Hash   `json:"head"`
	// Format is the version of the data's format and RuleSet the rule set
	// it was decided under, both the data's owner's to check.
	Format  int    `json:"format"`
	RuleSet string `json:"rule_set"`
	// CreatedAt is when the snapshot was taken; Bytes the data's size.
	CreatedAt time.Time `json:"created_at"`
	Bytes     int       `json:"bytes"`
}

// SnapshotConfig configures Snapshots.
type SnapshotConfig struct {
	// Bucket is the Object Store bucket (default SnapshotBucketDefault).
	Bucket string
	// Key authenticates snapshots (HMAC-SHA256): a snapshot whose data or
	// metadata changed, or that another key wrote, is refused. Required.
	Key []byte
	// Keep is how many snapshots of each kind and chain are kept (default
	// SnapshotKeepDefault); older ones are deleted after each Put.
	Keep int
	// Replicas of the bucket (default: the store's).
	Replicas int
	// PartBytes bounds each part of a snapshot (default and at most
	// SnapshotPartBytesMax).
	PartBytes int
	// PaceBytesPerSecond bounds the rate a snapshot's bytes are sent to
	// the server (default SnapshotPaceDefault; negative: as fast as the
	// server takes them). The bucket shares the stream's server, disk and
	// connection: sent at once, a snapshot's megabytes queue in front of
	// the writer's commits. A snapshot of B bytes then takes at least
	// B / PaceBytesPerSecond to store.
	PaceBytesPerSecond int
	// ChunkBytes is the size of the Object Store chunks a part is sent
	// in (default SnapshotChunkDefault, at most the server's max_payload).
	// Each chunk is one message of the bucket's stream: one write and, on
	// a server that syncs always, up to one fsync beside the stream's
	// commits; the Object Store's own default, 128 KiB, made eight times
	// as many for the same bytes.
	ChunkBytes int
	// OrphanChunkAge is how old the newest chunk of an object that was
	// never described must be for a prune to purge its chunks (default
	// SnapshotOrphanChunkAgeDefault): a store cut short by a crash leaves
	// them; a younger one may be a store in progress, this process's or
	// another node's.
	OrphanChunkAge time.Duration
	// Logger, when set, logs each phase of a load with its duration: the
	// bucket opened, the newest snapshot found, its manifest read, its head
	// checked against the stream, each section fetched (bytes, MB/s); and
	// the tries at opening the bucket while the server cannot answer yet.
	// The first section's lines are at Info (a start waits for them),
	// the other sections' at Debug (they load after the start).
	Logger *slog.Logger
}

// Snapshots keeps authenticated snapshots in a JetStream Object Store.
type Snapshots struct {
	store *NATSStore
	os    jetstream.ObjectStore
	// stream is the bucket's stream, whose subjects name its objects
	// (objectNames), and metaPrefix the subject of an object's
	// description without the encoded name.
	stream     jetstream.Stream
	metaPrefix string
	// chunkPrefix is the subject of an object's chunks without its NUID.
	chunkPrefix string
	cfg         SnapshotConfig
}

// Metadata keys of a snapshot object.
const (
	snapshotMetaKey = "tresor-snapshot"
	snapshotMACKey  = "tresor-hmac"
)

// OpenSnapshots opens (creating it if needed) the snapshot bucket, trying
// again for a while when the server cannot answer yet (openPatiently).
func (s *NATSStore) OpenSnapshots(ctx context.Context, cfg SnapshotConfig) (*Snapshots, error) {
	if len(cfg.Key) < 32 {
		return nil, fmt.Errorf("snapshots: key of %d bytes, want at least 32: %w", len(cfg.Key), ErrInvalid)
	}
	if cfg.Bucket == "" {
		cfg.Bucket = SnapshotBucketDefault
	}
	if cfg.Keep <= 0 {
		cfg.Keep = SnapshotKeepDefault
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = s.cfg.Replicas
	}
	if cfg.PartBytes <= 0 || cfg.PartBytes > SnapshotPartBytesMax {
		cfg.PartBytes = SnapshotPartBytesMax
	}
	if cfg.PaceBytesPerSecond == 0 {
		cfg.PaceBytesPerSecond = SnapshotPaceDefault
	}
	if cfg.ChunkBytes <= 0 {
		cfg.ChunkBytes = SnapshotChunkDefault
	}
	if cfg.OrphanChunkAge <= 0 {
		cfg.OrphanChunkAge = SnapshotOrphanChunkAgeDefault
	}
	// A chunk is published as one message: a server configured with a
	// smaller max_payload than the default would refuse it.
	if mp := s.nc.MaxPayload(); mp > 0 && int64(cfg.ChunkBytes) > mp {
		cfg.ChunkBytes = int(mp)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	started := time.Now()
	snaps, err := openPatiently(ctx, cfg.Logger, "snapshot bucket "+cfg.Bucket, func(ctx context.Context) (*Snapshots, error) {
		os, stream, err := s.openSnapshotBucket(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return &Snapshots{store: s, os: os, stream: stream, metaPrefix: "$O." + cfg.Bucket + ".M.", chunkPrefix: "$O." + cfg.Bucket + ".C.", cfg: cfg}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("open snapshot bucket %s: %w", cfg.Bucket, err)
	}
	cfg.Logger.Info("snapshot bucket opened", "bucket", cfg.Bucket, "persist", snaps.stream.CachedInfo().Config.PersistMode, "after", since(started))
	return snaps, nil
}

// openSnapshotBucket creates the snapshot bucket or binds to it. On one
// node its stream is created with asynchronous persistence: the server
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
func (s *NATSStore) openSnapshotBucket(ctx context.Context, cfg SnapshotConfig) (jetstream.ObjectStore, jetstream.Stream, error) {
	name := objectStreamPrefix + cfg.Bucket
	st, err := s.js.Stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound) && cfg.Replicas <= 1:
		// The Object Store's own stream configuration, with the persist
		// mode its configuration has no field for.
		st, err = s.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Description: snapshotBucketDescription,
			Subjects: []string{"$O." + cfg.Bucket + ".C.>", "$O." + cfg.Bucket + ".M.>"}, MaxBytes: -1,
			Storage: jetstream.FileStorage, Replicas: 1, Discard: jetstream.DiscardNew, AllowRollup: true, AllowDirect: true,
			PersistMode: jetstream.AsyncPersistMode})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // another process created it meanwhile
			st, err = s.js.Stream(ctx, name)
		}
	case errors.Is(err, jetstream.ErrStreamNotFound) || err == nil && st.CachedInfo().Config.PersistMode != jetstream.AsyncPersistMode:
		// Replicated, or a bucket of an earlier build (its mode kept).
		os, err := s.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: cfg.Bucket,
			Description: snapshotBucketDescription, Storage: jetstream.FileStorage, Replicas: cfg.Replicas})
		if err != nil {
			return nil, nil, err
		}
		st, err = s.js.Stream(ctx, name)
		return os, st, err
	}
	if err != nil {
		return nil, nil, err
	}
	os, err := s.js.ObjectStore(ctx, cfg.Bucket)
	return os, st, err
}

// SnapshotBucket opens the bucket of that name, made as the snapshot
// bucket is (creating it if it does not exist). It is exported for the
// latency yardstick of internal/bench, which stores objects in a scratch
// bucket of that make with no writer beside it.
func (s *NATSStore) SnapshotBucket(ctx context.Context, bucket string, replicas int) (jetstream.ObjectStore, error) {
	os, _, err := s.openSnapshotBucket(ctx, SnapshotConfig{Bucket: bucket, Replicas: replicas})
	return os, err
}

// snapshotBucketDescription describes the snapshot bucket's stream.
const snapshotBucketDescription = "Tresor snapshots of the writer and the read models"

// name orders a kind's snapshots by sequence: zero-padded, they sort as
// their sequences do.
func snapshotName(kind, chain string, seq uint64) string {
	return fmt.Sprintf("%s.%s.%020d", kind, chain, seq)
}

// legacyMAC authenticates the metadata and the data of a snapshot stored
// as one object, as builds before the multi-part format stored them.
func (s *Snapshots) legacyMAC(meta, data []byte) string {
	h := hmac.New(sha256.New, s.cfg.Key)
	h.Write(meta)
	h.Write([]byte{0})
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// Put stores data as a snapshot described by meta (see PutParts).
func (s *Snapshots) Put(ctx context.Context, meta SnapshotMeta, data []byte) error {
	return s.PutParts(ctx, meta, func(w *PartWriter) error { return w.writeWhole(data) })
}

// objectStreamPrefix names the stream of an Object Store bucket, as the
// Object Store names it: OBJ_<bucket>.
const objectStreamPrefix = "OBJ_"

// names lists the snapshots of a kind and chain, oldest first.
func (s *Snapshots) names(ctx context.Context, kind, chain string) ([]string, error) {
	all, err := s.objectNames(ctx)
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
// finds no object there, and the loads skip it (errSnapshotGone).
func (s *Snapshots) objectNames(ctx context.Context) ([]string, error) {
	ctx, cancel := s.store.reqCtx(ctx)
	defer cancel()
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(s.metaPrefix+">"))
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	out := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		name, err := base64.URLEncoding.DecodeString(strings.TrimPrefix(subj, s.metaPrefix))
		if err != nil {
			// Not an object's subject as the Object Store writes them.
			continue
		}
		out = append(out, string(name))
	}
	return out, nil
}

// metaSubject is the subject of the description of the object name.
func (s *Snapshots) metaSubject(name string) string {
	return s.metaPrefix + base64.URLEncoding.EncodeToString([]byte(name))
}

// errSnapshotGone is what open returns for a name the listing named but
// that holds no object (deleted): not a snapshot refused, none at all.
var errSnapshotGone = errors.New("snapshot deleted")

// Latest returns the newest snapshot of a kind and chain (the first section
// of one in sections), authenticated, whole parts and manifest. It returns ErrNoSnapshot when there is none,
// an error wrapping ErrSnapshotRefused when it fails its authentication,
// or the read error. What it holds is the caller's to check against the
// stream.
func (s *Snapshots) Latest(ctx context.Context, kind, chain string) (SnapshotMeta, []byte, error) {
	names, err := s.names(ctx, kind, chain)
	if err != nil {
		return SnapshotMeta{}, nil, err
	}
	if len(names) == 0 {
		return SnapshotMeta{}, nil, fmt.Errorf("%s snapshot of chain %s: %w", kind, chain, ErrNoSnapshot)
	}
	var meta SnapshotMeta
	var r io.ReadCloser
	for i := len(names) - 1; ; i-- {
		meta, r, _, err = s.open(ctx, names[i])
		if i == 0 && errors.Is(err, errSnapshotGone) {
			return SnapshotMeta{}, nil, fmt.Errorf("%s snapshot of chain %s: %w", kind, chain, ErrNoSnapshot)
		}
		if !errors.Is(err, errSnapshotGone) {
			break
		}
	}
	if err != nil {
		return SnapshotMeta{}, nil, err
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		return SnapshotMeta{}, nil, err
	}
	return meta, data, nil
}

// getLegacy reads a snapshot stored as one object and checks its
// authentication.
func (s *Snapshots) getLegacy(ctx context.Context, name string, info *jetstream.ObjectInfo) (SnapshotMeta, []byte, error) {
	data, err := s.os.GetBytes(ctx, name)
	if err != nil {
		return SnapshotMeta{}, nil, fmt.Errorf("%w: read %s: %w", ErrSnapshotRefused, name, err)
	}
	mb := info.Metadata[snapshotMetaKey]
	if !hmac.Equal([]byte(s.legacyMAC([]byte(mb), data)), []byte(info.Metadata[snapshotMACKey])) {
		return SnapshotMeta{}, nil, fmt.Errorf("%w: %s: authentication fails (altered, truncated or written under another key)", ErrSnapshotRefused, name)
	}
	var meta SnapshotMeta
	if err := json.Unmarshal([]byte(mb), &meta); err != nil {
		return SnapshotMeta{}, nil, fmt.Errorf("%w: %s: metadata: %w", ErrSnapshotRefused, name, err)
	}
	return meta, data, nil
}

// HeadAt returns the position of the event stored at a stream sequence,
// hash-checked, which must belong to chain: what a snapshot's Head is
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

// SnapshotSlot is where one kind of state of one chain keeps its
// snapshots, in one format under one rule set: Load refuses any other.
type SnapshotSlot struct {
	snaps       *Snapshots
	kind, chain string
	format      int
	ruleSet     string
	// pace, when not 0, replaces SnapshotConfig.PaceBytesPerSecond for
	// this slot's saves (Paced); within, when not 0, bounds the time a
	// whole save takes at it (PacedWithin).
	pace   int
	within time.Duration
}

// Slot returns the slot of a kind of state of chain, whose data is in
// format under ruleSet.
func (s *Snapshots) Slot(kind, chain string, format int, ruleSet string) *SnapshotSlot {
	return &SnapshotSlot{snaps: s, kind: kind, chain: chain, format: format, ruleSet: ruleSet}
}

// Paced returns the slot whose saves send their bytes at most at
// bytesPerSecond, whatever the bucket's pace (negative: as fast as the
// server takes them; 0: at the bucket's pace), within the time of a slot
// made by PacedWithin.
func (sl *SnapshotSlot) Paced(bytesPerSecond int) *SnapshotSlot {
	c := *sl
	c.pace = bytesPerSecond
	return &c
}

// PacedWithin returns the slot whose saves send their bytes at
// bytesPerSecond, or, for a snapshot saved whole (Save), at the pace that
// stores it in within when that is faster: a pace chosen for the usual
// size does not stretch a large snapshot's store past within.
func (sl *SnapshotSlot) PacedWithin(bytesPerSecond int, within time.Duration) *SnapshotSlot {
	c := sl.Paced(bytesPerSecond)
	c.within = within
	return c
}

// PaceWithin returns the pace, in bytes a second, that sends bytes at
// bytesPerSecond or in within, whichever is faster (within 0: at
// bytesPerSecond).
func PaceWithin(bytesPerSecond, bytes int, within time.Duration) int {
	if within <= 0 {
		return bytesPerSecond
	}
	return max(bytesPerSecond, int(time.Duration(bytes)*time.Second/within))
}

// Save stores data, the state after the event at stream sequence seq (see
// SaveParts).
func (sl *SnapshotSlot) Save(ctx context.Context, seq uint64, data []byte) error {
	return sl.SaveParts(ctx, seq, func(w *PartWriter) error {
		if w.pace.rate > 0 {
			w.pace.rate = PaceWithin(w.pace.rate, len(data), sl.within)
		}
		return w.writeWhole(data)
	})
}

// SaveParts stores what write writes, the state after the event at stream
// sequence seq, with the hash of that event as the stream holds it now,
// in parts of at most SnapshotConfig.PartBytes as write goes, in sections
// where write cuts them (PartWriter.Cut).
func (sl *SnapshotSlot) SaveParts(ctx context.Context, seq uint64, write func(*PartWriter) error) error {
	head, err := sl.snaps.store.HeadAt(ctx, sl.chain, seq)
	if err != nil {
		return fmt.Errorf("save %s snapshot: %w", sl.kind, err)
	}
	return sl.snaps.PutParts(ctx, SnapshotMeta{Kind: sl.kind, Chain: sl.chain, Sequence: seq, ChainSeq: head.ChainSeq, Head: head.Hash,
		Format: sl.format, RuleSet: sl.ruleSet, CreatedAt: time.Now().UTC()}, func(w *PartWriter) error {
		if sl.pace != 0 {
			w.pace.rate = sl.pace
		}
		return write(w)
	})
}

// Load returns the newest snapshot that passes every check, whole, and its
// sequence (see LoadParts).
func (sl *SnapshotSlot) Load(ctx context.Context) (seq uint64, data []byte, skipped []error, err error) {
	seq, skipped, err = sl.LoadParts(ctx, func(_ uint64, r io.Reader) error {
		data, err = io.ReadAll(r)
		return err
	})
	if err != nil {
		return 0, nil, skipped, err
	}
	return seq, data, skipped, nil
}

// LoadParts hands read the data of the newest snapshot that passes every
// check, as its parts arrive, and returns its sequence: its manifest's
// authentication, its format and rule set, the stream still holding, at
// its sequence, the event whose hash it names, and, as read reads them,
// each part's authentication. Newer snapshots that fail one (a store cut
// short, a part lost or altered, another build's format) are skipped, each
// with the reason, which the caller logs; an older one still saves most of
// the replay. read must read its reader to the end and may be called
// again for an older snapshot when a part fails: it must start from
// nothing each time. An error of read's own (the data does not decode) is
// returned as it is, no older snapshot tried. A snapshot is never trusted
// over the stream: the error (ErrNoSnapshot, or the last refusal when none
// passes) means replaying from the start. Of a snapshot in sections, read
// reads the first only (see LoadSections).
func (sl *SnapshotSlot) LoadParts(ctx context.Context, read func(seq uint64, r io.Reader) error) (seq uint64, skipped []error, err error) {
	return sl.LoadSections(ctx, func(seq uint64, r io.Reader, _ *SnapshotSections) error { return read(seq, r) })
}

// LoadSections is LoadParts handing read, beside the reader of the first
// section, the snapshot's other sections, which it may open later, alone
// (a section's parts pruned or altered by then are refused as they are
// read).
//
// A passing error (ErrSnapshotUnavailable: a request timed out, the
// cluster elects a leader) is no verdict on a snapshot: the load is tried
// again, for snapshotLoadPatience at most, before it returns it; a start
// that gave a snapshot up for it would replay the whole history.
func (sl *SnapshotSlot) LoadSections(ctx context.Context, read func(seq uint64, r io.Reader, rest *SnapshotSections) error) (seq uint64, skipped []error, err error) {
	err = sl.snaps.retryPassing(ctx, "snapshot load", func() error {
		seq, skipped, err = sl.loadSections(ctx, read)
		return err
	})
	return seq, skipped, err
}

// retryPassing calls try until it returns no ErrSnapshotUnavailable or
// snapshotLoadPatience has passed, pausing longer each time (at most
// snapshotLoadPauseMax), and returns its last error.
func (s *Snapshots) retryPassing(ctx context.Context, what string, try func() error) error {
	start, pause := time.Now(), snapshotLoadPause
	for n := 1; ; n++ {
		err := try()
		if !errors.Is(err, ErrSnapshotUnavailable) || time.Since(start) > snapshotLoadPatience || ctx.Err() != nil {
			return err
		}
		s.cfg.Logger.Warn(what+": trying again after a passing error", "try", n, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, snapshotLoadPauseMax)
	}
}

// Bounds of a snapshot load's tries after passing errors: a stream's
// leader is elected seconds after its quorum is back, and a start that
// gives its snapshot up replays the whole history instead.
const (
	snapshotLoadPatience = 20 * time.Second
	snapshotLoadPause    = 250 * time.Millisecond
	snapshotLoadPauseMax = 2 * time.Second
)

// loadSections is one try of LoadSections.
func (sl *SnapshotSlot) loadSections(ctx context.Context, read func(seq uint64, r io.Reader, rest *SnapshotSections) error) (seq uint64, skipped []error, err error) {
	started := time.Now()
	names, err := sl.snaps.names(ctx, sl.kind, sl.chain)
	if err != nil {
		if passing(err) {
			err = fmt.Errorf("%w: %w", ErrSnapshotUnavailable, err)
		}
		return 0, nil, err
	}
	if len(names) == 0 {
		return 0, nil, fmt.Errorf("%s snapshot of chain %s: %w", sl.kind, sl.chain, ErrNoSnapshot)
	}
	sl.snaps.cfg.Logger.Info("snapshot found", "kind", sl.kind, "name", names[len(names)-1], "of", len(names), "after", since(started))
	for i := len(names) - 1; i >= 0; i-- {
		seq, err = sl.load(ctx, names[i], read)
		if err == nil {
			return seq, skipped, nil
		}
		if errors.Is(err, errSnapshotGone) {
			continue
		}
		// A passing error (ErrSnapshotUnavailable) is no refusal: the
		// snapshot may be whole, and an older one is not tried for it.
		if !errors.Is(err, ErrSnapshotRefused) {
			return 0, skipped, err
		}
		skipped = append(skipped, err)
	}
	if len(skipped) == 0 {
		return 0, nil, fmt.Errorf("%s snapshot of chain %s: %w", sl.kind, sl.chain, ErrNoSnapshot)
	}
	return 0, skipped[:len(skipped)-1], skipped[len(skipped)-1]
}

// load checks the snapshot name and hands its data to read (see
// LoadParts).
func (sl *SnapshotSlot) load(ctx context.Context, name string, read func(uint64, io.Reader, *SnapshotSections) error) (uint64, error) {
	started := time.Now()
	meta, r, rest, err := sl.snaps.open(ctx, name)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	opened := time.Since(started)
	switch {
	case meta.Kind != sl.kind || meta.Chain != sl.chain:
		return 0, fmt.Errorf("%w: %s: names %s of chain %s", ErrSnapshotRefused, name, meta.Kind, meta.Chain)
	case meta.Format != sl.format:
		return 0, fmt.Errorf("%w: %s: format version %d, this build reads %d", ErrSnapshotRefused, name, meta.Format, sl.format)
	case meta.RuleSet != sl.ruleSet:
		return 0, fmt.Errorf("%w: %s: rule set %s, this build runs %s", ErrSnapshotRefused, name, meta.RuleSet, sl.ruleSet)
	}
	head, err := sl.snaps.store.HeadAt(ctx, sl.chain, meta.Sequence)
	if err != nil {
		return 0, refused(err, "%s", name)
	}
	if head.Hash != meta.Head || head.ChainSeq != meta.ChainSeq {
		return 0, fmt.Errorf("%w: %s: the stream holds event %s (chain position %d) at sequence %d, the snapshot names %s (%d)",
			ErrSnapshotRefused, name, head.Hash, head.ChainSeq, meta.Sequence, meta.Head, meta.ChainSeq)
	}
	sl.snaps.cfg.Logger.Info("snapshot head checked", "kind", sl.kind, "seq", meta.Sequence, "bytes", meta.Bytes,
		"manifest", round(opened), "head_check", since(started.Add(opened)))
	if err := read(meta.Sequence, r, rest); err != nil {
		return 0, err
	}
	// Every part must have been read and authenticated: data the decoder
	// left unread is a snapshot it does not understand.
	if n, err := r.Read(make([]byte, 1)); n > 0 || !errors.Is(err, io.EOF) {
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		return 0, fmt.Errorf("%s: the data goes on after its end", name)
	}
	return meta.Sequence, nil
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
