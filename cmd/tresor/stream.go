package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fdj/tresor/cluster"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/internal/bench"
	"github.com/fdj/tresor/personal"
	"github.com/fdj/tresor/settlement"
	"github.com/fdj/tresor/snapshot"
	"github.com/nats-io/nats.go"
)

// stream is an open event stream: the store, and the embedded server when
// Tresor runs on its default.
type stream struct {
	store    *eventstore.NATSStore
	embedded *eventstore.EmbeddedServer
	log      *settlement.EventLog
	replicas int
	// sealer, snaps and highWater are opened once, by the first that
	// needs them.
	sealer    *settlement.Sealer
	keyring   *personal.Keyring
	snaps     *snapshot.Bucket
	highWater eventstore.HighWater
	// snapshotObserver, when set, is told of the writer's snapshots
	// (simulate records them).
	snapshotObserver settlement.SnapshotObserver
	// logger, when set (serve), gets the writer's lines and those of each
	// phase of a snapshot's load, so that a start's log says where its
	// time goes.
	logger *slog.Logger
}

// openStream starts the embedded nats-server on cfg.Data (or connects to
// cfg.NATSURL) and opens or verifies Tresor's stream; log (nil: none) gets
// its tries while a cluster cannot answer yet, and the stream's lines.
func openStream(ctx context.Context, cfg *Config, log *slog.Logger) (*stream, error) {
	reg, err := settlement.NewRegistry()
	if err != nil {
		return nil, err
	}
	scfg := eventstore.Config{Registry: reg, Replicas: cfg.Replicas, Logger: log}
	var opts []nats.Option
	if cfg.NATSURL != "" {
		scfg.RequestTimeout = clusterRequestTimeout
		// Nothing is buffered while disconnected: a publish then fails at
		// once instead of landing after a reconnect, when another node may
		// have taken the chain over.
		opts = append(opts, nats.ReconnectBufSize(-1))
	}
	st, err := connectStream(ctx, cfg, scfg, opts...)
	if err != nil {
		return nil, err
	}
	st.logger = log
	return st, nil
}

// openStreamReadOnly opens an existing stream to read it as stored (no
// registry: raw events, whose hashes verify), creating and writing
// nothing: in embedded mode, only a data directory that already holds
// JetStream files is opened, and never with a second server: when another
// process (tresor serve) runs the directory's server, the stream is read
// through the read-only listener that process advertises. opts go to the
// connection to an external server (a regulator's inbox prefix) or to a
// running serve's (whose advertisement names the inbox prefix).
func openStreamReadOnly(ctx context.Context, cfg *Config, opts ...nats.Option) (*stream, error) {
	if err := requireStream(cfg); err != nil {
		return nil, err
	}
	return connectStream(ctx, cfg, eventstore.Config{ReadOnly: true}, opts...)
}

// openStreamForBackup is openStreamReadOnly for tresor backup: beside a
// running serve on the embedded default it joins as the server's keeper,
// which may read the data keys bucket too.
func openStreamForBackup(ctx context.Context, cfg *Config, opts ...nats.Option) (*stream, error) {
	if err := requireStream(cfg); err != nil {
		return nil, err
	}
	return connectStreamAs(ctx, cfg, eventstore.Config{ReadOnly: true}, true, opts...)
}

// requireStream refuses, in embedded mode, a data directory that holds no
// JetStream files: a reader never creates an empty stream.
func requireStream(cfg *Config) error {
	if cfg.NATSURL != "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join(cfg.Data, "jetstream")); err != nil {
		return fmt.Errorf("no Tresor stream in data directory %s: %w", cfg.Data, err)
	}
	return nil
}

// connectStream opens the store with scfg on cfg.NATSURL or on the
// embedded server of cfg.Data: its own for a writer, its own or the one
// already running there for a reader.
func connectStream(ctx context.Context, cfg *Config, scfg eventstore.Config, opts ...nats.Option) (*stream, error) {
	return connectStreamAs(ctx, cfg, scfg, false, opts...)
}

// connectStreamAs is connectStream for a reader that joins a running
// embedded server as its keeper when keeper is set.
func connectStreamAs(ctx context.Context, cfg *Config, scfg eventstore.Config, keeper bool, opts ...nats.Option) (*stream, error) {
	s := &stream{replicas: cfg.Replicas}
	var err error
	if cfg.NATSURL != "" {
		s.store, err = eventstore.Connect(ctx, cfg.NATSURL, scfg, opts...)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	if !scfg.ReadOnly {
		if err := refuseClusterNode(cfg.Data); err != nil {
			return nil, err
		}
	}
	ecfg := eventstore.EmbeddedConfig{DataDir: filepath.Join(cfg.Data, "jetstream"), SyncInterval: cfg.SyncInterval,
		Holder: commandPath, Readers: &eventstore.ReaderAccess{}, Keeper: keeper}
	var nc *nats.Conn
	if scfg.ReadOnly {
		// The holder's advertisement names the inbox prefix, after
		// opts: an error handler of opts applies, an inbox prefix not.
		s.embedded, nc, err = eventstore.RunOrJoin(ctx, ecfg, opts...)
	} else if s.embedded, err = eventstore.RunEmbedded(ecfg); err == nil {
		if nc, err = s.embedded.Conn(); err != nil {
			s.embedded.Shutdown()
		}
	}
	if le := (*eventstore.LockedError)(nil); errors.As(err, &le) {
		// One line naming what the user named: --data, not its jetstream
		// subdirectory.
		return nil, fmt.Errorf("data directory %s is in use by %s", cfg.Data, le.Holder)
	}
	if err != nil {
		return nil, err
	}
	s.store, err = eventstore.Open(ctx, nc, scfg)
	if err != nil {
		nc.Close()
		if s.embedded != nil {
			s.embedded.Shutdown()
		}
		return nil, err
	}
	return s, nil
}

// openSealer loads (or, embedded, creates) the master key, once, and the
// next master key when its file exists: the writer then seals under the
// next key, opens under either, and reseals the seeds of the blocks not
// yet closed under it when it starts.
func (s *stream) openSealer(ctx context.Context, cfg *Config) (*settlement.Sealer, error) {
	if s.sealer != nil {
		return s.sealer, nil
	}
	create, err := s.mayMakeKeys(ctx, cfg)
	if err != nil {
		return nil, err
	}
	key, err := loadOrCreateKey(cfg.MasterKeyFile, settlement.MasterKeySize, create)
	if err != nil {
		return nil, fmt.Errorf("master key: %w", keyNotMade(err, cfg))
	}
	sealer, err := settlement.NewSealer(key)
	if err != nil || !fileExists(cfg.MasterKeyNextFile) {
		s.sealer = sealer
		return sealer, err
	}
	next, err := loadOrCreateKey(cfg.MasterKeyNextFile, settlement.MasterKeySize, false)
	if err != nil {
		return nil, fmt.Errorf("next master key: %w", err)
	}
	if s.sealer, err = sealer.Rotating(next); err != nil {
		return nil, fmt.Errorf("next master key: %w", err)
	}
	return s.sealer, nil
}

// mayMakeKeys reports whether the master and seal keys may be made when
// their files do not exist: on the embedded default, beside a stream that
// holds no event yet. Beside one that does, a key made now is not the one
// its seeds were sealed and its seals signed with (a restore without
// --keys, a keys directory moved): a seal under it would fail every
// audit from then on.
func (s *stream) mayMakeKeys(ctx context.Context, cfg *Config) (bool, error) {
	if cfg.NATSURL != "" {
		return false, nil
	}
	last, err := s.store.LastSequence(ctx)
	if err != nil {
		return false, fmt.Errorf("read the stream's last sequence: %w", err)
	}
	return last == 0, nil
}

// keyNotMade explains a key file that does not exist beside an embedded
// stream holding events, which mayMakeKeys did not let be made.
func keyNotMade(err error, cfg *Config) error {
	if cfg.NATSURL != "" || !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return fmt.Errorf("%w: the stream holds events, sealed and signed with the ledger's keys, and a key made now would not be theirs: put them back (tresor restore --keys) or name their files", err)
}

// openKeyring opens the personal data keys' bucket, once, with the
// master key that wraps its keys. While the master key rotates, it first
// wraps every data key under the next one: the events, sealed under the
// data keys, stay as they are.
func (s *stream) openKeyring(ctx context.Context, cfg *Config) (*personal.Keyring, error) {
	if s.keyring != nil {
		return s.keyring, nil
	}
	sealer, err := s.openSealer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	keys, err := s.store.OpenDataKeys(ctx)
	if err != nil {
		return nil, err
	}
	ring := personal.New(keys, sealer)
	if fileExists(cfg.MasterKeyNextFile) {
		moved, err := ring.Rewrap(ctx)
		if err != nil {
			return nil, fmt.Errorf("rewrap the data keys under the next master key: %w", err)
		}
		if s.logger != nil {
			s.logger.Info("data keys rewrapped under the next master key", "keys", moved, "master_key_id", sealer.KeyID())
		}
	}
	s.keyring = ring
	return ring, nil
}

// openSnapshots opens the snapshot bucket next to the stream, once,
// authenticated with a key derived from the master key; nil when
// --snapshots=false.
func (s *stream) openSnapshots(ctx context.Context, cfg *Config) (*snapshot.Bucket, error) {
	if !cfg.Snapshots || s.snaps != nil {
		return s.snaps, nil
	}
	sealer, err := s.openSealer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s.snaps, err = snapshot.Open(ctx, s.store, snapshot.Config{Key: sealer.SnapshotKey(), Keep: cfg.SnapshotKeep, Replicas: cfg.Replicas,
		Logger: s.logger})
	return s.snaps, err
}

// openWriter starts the settlement writer of the shard on the stream.
func (s *stream) openWriter(ctx context.Context, cfg *Config) (*settlement.Writer, error) {
	wcfg, ccfg, err := s.writerConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s.log, err = settlement.OpenEventLog(ctx, s.store, ccfg)
	if err != nil {
		return nil, err
	}
	return settlement.Open(ctx, s.log, wcfg)
}

// writerConfig is the configuration of the shard's writer and of its
// committer: rules, keys, settings and snapshots.
func (s *stream) writerConfig(ctx context.Context, cfg *Config) (settlement.Config, eventstore.CommitterConfig, error) {
	rules, err := domain.DefaultRules()
	if err != nil {
		return settlement.Config{}, eventstore.CommitterConfig{}, err
	}
	sealer, err := s.openSealer(ctx, cfg)
	if err != nil {
		return settlement.Config{}, eventstore.CommitterConfig{}, err
	}
	snaps, err := s.openSnapshots(ctx, cfg)
	if err != nil {
		return settlement.Config{}, eventstore.CommitterConfig{}, err
	}
	create, err := s.mayMakeKeys(ctx, cfg)
	if err != nil {
		return settlement.Config{}, eventstore.CommitterConfig{}, err
	}
	sealKey, err := cfg.sealKey(create)
	if err != nil {
		return settlement.Config{}, eventstore.CommitterConfig{}, fmt.Errorf("seal key: %w", keyNotMade(err, cfg))
	}
	sealKeyNext, err := cfg.sealKeyNext()
	if err != nil {
		return settlement.Config{}, eventstore.CommitterConfig{}, fmt.Errorf("next seal key: %w", err)
	}
	revocations, err := cfg.revocations()
	if err != nil {
		return settlement.Config{}, eventstore.CommitterConfig{}, err
	}
	ccfg := eventstore.CommitterConfig{SealKey: sealKey, SealKeyNext: sealKeyNext, Revocations: revocations,
		PipelineDepth: cfg.PipelineDepth, BatchEventsMax: cfg.BatchEvents}
	if ccfg.HighWater, err = s.openHighWater(ctx, cfg); err != nil {
		return settlement.Config{}, eventstore.CommitterConfig{}, err
	}
	if snaps != nil {
		if ccfg.Evidence, err = snaps.Evidence(ctx, settlement.Chain); err != nil {
			return settlement.Config{}, eventstore.CommitterConfig{}, fmt.Errorf("read the snapshots' positions: %w", err)
		}
	}
	settings, err := cfg.settings()
	if err != nil {
		return settlement.Config{}, eventstore.CommitterConfig{}, err
	}
	ring, err := s.openKeyring(ctx, cfg)
	if err != nil {
		return settlement.Config{}, eventstore.CommitterConfig{}, err
	}
	wcfg := settlement.Config{Rules: rules, Sealer: sealer, Personal: ring, AbandonAfter: cfg.AbandonAfter, Settings: &settings.Settings,
		SnapshotEvery: cfg.SnapshotEvery, SnapshotInterval: cfg.SnapshotInterval, SnapshotObserver: s.snapshotObserver}
	if snaps != nil {
		slot := settlement.WriterSnapshots(snaps, rules)
		wcfg.Snapshots = slot
		if cfg.NATSURL == "" {
			// The server is this process's, and its writer has stopped
			// when it closes.
			wcfg.ClosingSnapshots = slot.Paced(snapshot.Unpaced)
		} else {
			// A standby may be taking over on the same servers: the
			// read models' pace, as theirs at a node's stop, and not the
			// writer's, which the stop would wait for.
			wcfg.ClosingSnapshots = slot.Paced(snapshot.DefaultPace)
		}
	}
	if s.logger != nil {
		wcfg.Logger = s.logger
	}
	return wcfg, ccfg, nil
}

// highWaterFile is the file of the embedded default's data directory that
// keeps the position of the last acknowledged commit
// (eventstore.HighWaterFile).
const highWaterFile = "high-water"

// openHighWater opens, once, the high-water mark of acknowledged commits:
// a file of the data directory on the embedded default, a KV bucket on a
// cluster, where the writer may move to another machine.
func (s *stream) openHighWater(ctx context.Context, cfg *Config) (eventstore.HighWater, error) {
	if s.highWater != nil {
		return s.highWater, nil
	}
	if cfg.NATSURL == "" {
		hw, err := eventstore.OpenHighWaterFile(filepath.Join(cfg.Data, highWaterFile))
		if err != nil {
			return nil, err
		}
		s.highWater = hw
	} else {
		hw, err := s.store.OpenHighWaterKV(ctx, settlement.Chain)
		if err != nil {
			return nil, err
		}
		s.highWater = hw
	}
	return s.highWater, nil
}

// clusterRequestTimeout bounds each request to a NATS cluster, a batch's
// commit included: a commit stuck on a lost node or stream leader is then
// settled by reading the stream within seconds (the writer reopens from
// what landed) instead of after the 10s default.
const clusterRequestTimeout = 2 * time.Second

// openNode opens this process's place among the writers of the chain on
// the NATS cluster: its lease handle and the node that follows the stream,
// takes the lease and forwards commands.
func (s *stream) openNode(ctx context.Context, cfg *Config, log *slog.Logger) (*cluster.Node, error) {
	wcfg, ccfg, err := s.writerConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	lease, err := eventstore.OpenLease(ctx, s.store.Conn(), settlement.Chain,
		eventstore.LeaseConfig{Holder: cfg.NodeName, TTL: cfg.LeaseTTL, Replicas: cfg.Replicas, Logger: log})
	if err != nil {
		return nil, err
	}
	wcfg.Logger = log
	return cluster.NewNode(cluster.NodeConfig{Store: s.store, Lease: lease, Writer: wcfg, Committer: ccfg, Logger: log})
}

// claimNodeName claims --node-name on the NATS cluster for this process
// (eventstore.ClaimName): a second serve started under the same name (a
// unit started twice, a copied configuration) is refused, naming the
// process that holds it, instead of running as a second node of that name.
func (s *stream) claimNodeName(ctx context.Context, cfg *Config, log *slog.Logger, started time.Time) (*eventstore.NameClaim, error) {
	host, err := os.Hostname()
	if err != nil {
		host = "an unknown host"
	}
	instance := fmt.Sprintf("pid %d on %s, started %s", os.Getpid(), host, started.UTC().Format(time.RFC3339))
	claim, err := eventstore.ClaimName(ctx, s.store.Conn(), cfg.NodeName, instance,
		eventstore.LeaseConfig{TTL: cfg.LeaseTTL, Replicas: cfg.Replicas, Logger: log})
	if errors.Is(err, eventstore.ErrNameInUse) {
		return nil, fmt.Errorf("%w: give each node its own --node-name", err)
	}
	return claim, err
}

// closeLog stops the committer, which commits what was submitted and its
// closing seal. It is safe to call again (Close does).
func (s *stream) closeLog() error {
	if s.log == nil {
		return nil
	}
	err := s.log.Close()
	s.log = nil
	return err
}

// Close stops the committer, the store and the embedded server, in that
// order, so that whatever was acknowledged is on disk first.
func (s *stream) Close() error {
	errs := []error{s.closeLog()}
	if s.highWater != nil {
		errs = append(errs, s.highWater.Close())
	}
	if s.store != nil {
		errs = append(errs, s.store.Close())
		// The connection to an embedded server is ours, not the store's
		// (closing a closed connection does nothing).
		s.store.Conn().Close()
	}
	if s.embedded != nil {
		s.embedded.Shutdown()
	}
	return errors.Join(errs...)
}

// yardstickMessageBytes is the size of the yardsticks' messages.
const yardstickMessageBytes = 400

// yardstick measures raw 1 000-message atomic batches on the same server.
func (s *stream) yardstick(ctx context.Context) (float64, error) {
	return bench.MeasureAtomicBatches(ctx, s.store.Conn(), bench.Yardstick{Batches: 50, BatchSize: 1000, MessageBytes: yardstickMessageBytes, Replicas: s.replicas})
}

// checkBooks replays the whole stream into fresh double-entry books,
// independently of the writer's state, and reports whether they balance.
func checkBooks(ctx context.Context, s *stream) (bool, string, error) {
	books := domain.NewBooks()
	var violation error
	_, err := s.store.ReadFrom(ctx, 1, func(r eventstore.RecordedEvent) error {
		if !r.LedgerFact() {
			return nil
		}
		e, err := domain.DecodeEvent(r.Type, r.Payload)
		if err != nil {
			return fmt.Errorf("stream sequence %d: %w", r.Sequence, err)
		}
		if err := books.Apply(e); err != nil && violation == nil {
			violation = fmt.Errorf("stream sequence %d: %w", r.Sequence, err)
		}
		return nil
	})
	if err != nil {
		return false, "", fmt.Errorf("replay the books: %w", err)
	}
	summary, err := books.Check()
	if violation == nil {
		violation = err
	}
	if violation != nil {
		return false, summary + "; " + violation.Error(), nil
	}
	return true, summary, nil
}

// clusterNodeMark is the file `serve --nats` leaves in its data directory.
// A writer started on that directory without --nats (an operator who
// forgot TRESOR_NATS_URL, a unit file without it) would otherwise start
// the embedded default there: a second, empty ledger with the cluster's
// keys, taking deposits that the cluster never sees.
const clusterNodeMark = "cluster-node"

// markClusterNode leaves clusterNodeMark in the data directory of a node
// of a NATS cluster, creating the directory if needed.
func markClusterNode(data, node string) error {
	if err := os.MkdirAll(data, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	text := fmt.Sprintf("This data directory is that of %s, a node of a NATS cluster (tresor serve --nats).\n"+
		"A tresor started on it without --nats is refused: it would run a second, empty ledger.\n"+
		"Remove this file only if the directory is to hold an embedded ledger of its own.\n", node)
	if err := os.WriteFile(filepath.Join(data, clusterNodeMark), []byte(text), 0o600); err != nil {
		return fmt.Errorf("mark the data directory as a cluster node's: %w", err)
	}
	return nil
}

// refuseClusterNode refuses to run the embedded default's writer on the
// data directory of a node of a NATS cluster (markClusterNode).
func refuseClusterNode(data string) error {
	mark := filepath.Join(data, clusterNodeMark)
	if _, err := os.Stat(mark); err == nil {
		return fmt.Errorf("data directory %s is a NATS cluster node's (%s): without --nats (or TRESOR_NATS_URL) this would start a second, empty ledger; give the cluster's URLs, or remove that file if the directory is to hold an embedded ledger", data, mark)
	}
	return nil
}
