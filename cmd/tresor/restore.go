package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/settlement"
	"github.com/spf13/cobra"
)

// restoreOptions are restore's own flags.
type restoreOptions struct {
	from      string
	fromVault string
	toSeq     uint64
	toTime    string
	to        time.Time // toTime parsed
	publicKey string
	snapshots bool
	dataKeys  bool
	logs      bool
	keys      keyFlags
	cpuProf   string
}

// newRestoreCmd is the tresor restore command.
func newRestoreCmd() *cobra.Command {
	var cfg Config
	var o restoreOptions
	cmd := &cobra.Command{
		Use:   "restore --from DIR | --from-vault DIR|URL [--data DIR | --nats URL --replicas N] [--to-seq N | --to-time T] [--keys --identity FILE]",
		Short: "Restore a backup into an empty data directory or an empty stream, verifying it as it goes",
		Long: "restore re-appends every event of the backup in --from, byte for byte (same ids, payloads, hashes,\n" +
			"chain positions and stream sequences), into an empty data directory (--data) or an empty stream on a\n" +
			"NATS cluster (--nats, --replicas), checking the SHA-256 of every file, then every hash, chain link and\n" +
			"seal as it goes; a backup that fails a check is refused at its first bad position, and nothing of it\n" +
			"is left for serve to take for a ledger (docs/backup.md). --to-seq and --to-time stop at the last\n" +
			"whole append at or before the point given. --keys restores the keys too, opened with --identity or\n" +
			"--passphrase-file. --from-vault restores the regulator's vault's copy instead (tresor vault's --data, or its\n" +
			"--vault-nats URL), checked with --public-key.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(cmd, &cfg); err != nil {
				return err
			}
			return runProfiled(cmd, o.cpuProf, func(ctx context.Context) error {
				if o.fromVault != "" {
					return restoreFromVault(ctx, &cfg, o, cmd.ErrOrStderr())
				}
				return restore(ctx, &cfg, o, cmd.ErrOrStderr())
			})
		},
	}
	bindStoreFlags(cmd, &cfg)
	f := cmd.Flags()
	f.StringVar(&o.from, "from", "", "backup directory (tresor backup --out) (this or --from-vault required)")
	f.StringVar(&o.fromVault, "from-vault", "", "the regulator's vault's copy instead of a backup: the vault's data directory (tresor vault --data), or the URL of its own NATS (--vault-nats); needs --public-key")
	f.Uint64Var(&o.toSeq, "to-seq", 0, "restore up to this stream sequence, at the last whole append at or before it")
	f.StringVar(&o.toTime, "to-time", "", "restore up to this time (RFC 3339), at the last whole append recorded at or before it")
	f.StringVar(&o.publicKey, "public-key", "", "the seal public key the seals must verify with (default: the one the backup's manifest records)")
	f.BoolVar(&o.snapshots, "snapshots", true, "also restore the backup's snapshots at or before the point restored to, so that serve starts from them (needs the master key)")
	f.BoolVar(&o.dataKeys, "data-keys", true, "put the backup's personal data keys back into the bucket beside the restored stream, which must hold none of its entries; false keeps that bucket as it is (a restore beside the live one). Either way the keys whose erasure the backup holds are destroyed")
	f.BoolVar(&o.logs, "logs", true, "put the backup's significant-event and access logs back beside the restored stream, into empty logs; false keeps them as they are (a restore beside the live ones)")
	f.StringVar(&o.cpuProf, "cpuprofile", "", "write a CPU profile of the restore to this file (go tool pprof)")
	bindKeyFlags(cmd, &cfg, &o.keys, false)
	return cmd
}

// validate checks the flags before anything is opened.
func (o *restoreOptions) validate(cmd *cobra.Command, cfg *Config) error {
	if err := cfg.validateStore(); err != nil {
		return err
	}
	switch {
	case o.from == "" && o.fromVault == "":
		return usagef("--from: required (the backup directory), or --from-vault (the vault's copy)")
	case o.from != "" && o.fromVault != "":
		return usagef("--from and --from-vault: give one source to restore")
	case o.fromVault != "" && o.publicKey == "":
		return usagef("--from-vault: --public-key is required (the operator's seal public key: the vault's copy records none)")
	case o.fromVault != "" && o.keys.on:
		return usagef("--from-vault and --keys: the vault's copy holds no keys; restore the operator's from its own backup")
	case cmd.Flags().Changed("to-seq") && o.toSeq == 0:
		return usagef("--to-seq 0: stream sequences start at 1")
	case o.toSeq != 0 && o.toTime != "":
		return usagef("--to-seq and --to-time: give one point to restore to")
	}
	if o.toTime != "" {
		t, err := time.Parse(time.RFC3339Nano, o.toTime)
		if err != nil {
			return usagef("--to-time %q: want an RFC 3339 time (2026-12-02T17:00:00Z): %v", o.toTime, err)
		}
		o.to = t
	}
	return o.keys.validate(cfg, false)
}

// restore restores the backup of o.from into the empty stream of cfg.
func restore(ctx context.Context, cfg *Config, o restoreOptions, stderr io.Writer) error {
	start := time.Now()
	// A restore allocates for every event (its line parsed, its message
	// encoded, the embedded server's copies) and keeps little alive (the
	// batches in flight): collecting less often leaves more of the cores
	// to the server.
	debug.SetGCPercent(bulkGCPercent)
	m, ok, err := readManifest(o.from)
	switch {
	case err != nil:
		return err
	case !ok || len(m.Parts) == 0:
		return usagef("--from %s: no backup there (no %s, or no part in it)", o.from, backupManifestFile)
	case o.toSeq > m.lastSequence():
		return usagef("--to-seq %d: the backup ends at sequence %d", o.toSeq, m.lastSequence())
	}
	pub, err := o.sealKey(m)
	if err != nil {
		return err
	}
	if err := m.checkFiles(o.from, o.keys.on); err != nil {
		return err
	}
	took := phases{last: start}
	took.done("files checked")
	keys, err := o.openKeys(cfg)
	if err != nil {
		return err
	}
	target, err := openRestoreTarget(ctx, cfg)
	if err != nil {
		return err
	}
	if err := o.targetDataKeys(ctx, target, m); err != nil {
		return errors.Join(err, target.abandon(ctx))
	}
	if err := o.targetLogs(ctx, cfg, target, m); err != nil {
		return errors.Join(err, target.abandon(ctx))
	}
	r := newRestorer("the backup", target, cfg, pub, o)
	took.done("opened")
	err = r.run(ctx, r.readBackup(o.from, m))
	took.done(fmt.Sprintf("events (%s of it waiting on the server)", r.waited.Round(time.Millisecond)))
	snaps, dataKeys := "", ""
	if err == nil {
		snaps, err = o.restoreSnapshots(ctx, cfg, target.st.store, m, keys, r.last)
		took.done("snapshots")
	}
	if err == nil {
		dataKeys, err = o.restoreDataKeys(ctx, target, m, r)
		took.done("data keys")
	}
	logs := ""
	if err == nil {
		logs, err = o.restoreLogs(ctx, target, m)
		took.done("logs")
	}
	if err == nil {
		err = target.sync(cfg)
		took.done("synced")
	}
	if err == nil {
		err = target.finish(ctx, cfg, r.heads[settlement.Chain])
	}
	if err == nil && keys != nil {
		// The chain's key is known once its key events are verified: the
		// first key, or the one its last rotation named.
		if err = keys.checkSeal(r.verify.SealKey(settlement.Chain)); err == nil {
			err = keys.write(cfg)
		}
	}
	if err != nil {
		return errors.Join(err, target.abandon(ctx))
	}
	took.done("finished")
	fmt.Fprintf(stderr, "%s; %s; %s; %s; %s\n", r.summary(m.lastSequence(), time.Since(start)), snaps, dataKeys, logs, &took)
	return nil
}

// openKeys opens the backup's keys with --keys (nil without) and checks
// their sizes.
func (o *restoreOptions) openKeys(cfg *Config) (*backupKeySet, error) {
	if !o.keys.on {
		return nil, nil
	}
	keys, err := openBackupKeys(o.from, o.keys)
	if err == nil {
		err = keys.check(cfg)
	}
	if err != nil {
		return nil, err
	}
	return keys, nil
}

// phases times the steps of a command one after the other, for its
// summary: where a restore's time goes.
type phases struct {
	last  time.Time
	steps []string
}

// done ends the step named, begun when the one before ended.
func (p *phases) done(name string) {
	now := time.Now()
	p.steps = append(p.steps, fmt.Sprintf("%s %s", name, now.Sub(p.last).Round(time.Millisecond)))
	p.last = now
}

func (p *phases) String() string { return "steps: " + strings.Join(p.steps, ", ") }

// restoreSnapshots restores the backup's snapshots at or before the
// restored head, under the key of the master key restored with --keys or
// of the one in --master-key-file.
func (o *restoreOptions) restoreSnapshots(ctx context.Context, cfg *Config, store *eventstore.NATSStore, m *backupManifest, keys *backupKeySet, head uint64) (string, error) {
	if !o.snapshots {
		return "no snapshots (--snapshots=false)", nil
	}
	var key []byte
	var err error
	if keys != nil {
		key, _, err = snapshotKeyOf(keys.Master)
	} else {
		key, _, err = snapshotKey(cfg.MasterKeyFile)
	}
	if err != nil {
		return "", err
	}
	return restoreSnapshots(ctx, store, cfg.Replicas, key, o.from, m, head)
}

// sealKey is the key the seals must verify with: --public-key, or the
// manifest's.
func (o *restoreOptions) sealKey(m *backupManifest) (ed25519.PublicKey, error) {
	if o.publicKey != "" {
		return parsePublicKey(o.publicKey)
	}
	b, err := hex.DecodeString(m.SealPublicKey)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, usagef("--public-key: the backup's manifest records no seal key; give the operator's (tresor seal-key)")
	}
	return ed25519.PublicKey(b), nil
}

// restoreTarget is the stream a restore writes: created marked as being
// restored, and on a failure removed with what the restore made.
type restoreTarget struct {
	st *stream
	// made is what to remove on a failure: the data directory, or its
	// jetstream directory when the directory held keys already ("" on a
	// cluster, where the marked stream is deleted).
	made string
	// loose is set when the embedded server does not sync each write of
	// the restore: sync does it once at the end.
	loose bool
	// keys is the data keys bucket beside the stream, when there is one;
	// keyNames the entries the restore put into it, removed on a failure.
	keys     *eventstore.DataKeys
	keyNames []string
	// logs are the bounded logs the restore puts back, deleted on a
	// failure on a cluster.
	logs []targetLog
}

// openRestoreTarget opens the empty stream a restore writes. On the
// embedded default, the data directory must not exist or hold nothing but
// a keys directory; on a cluster, the stream must be empty.
func openRestoreTarget(ctx context.Context, cfg *Config) (*restoreTarget, error) {
	t := &restoreTarget{}
	if cfg.NATSURL == "" {
		entries, err := os.ReadDir(cfg.Data)
		switch {
		case errors.Is(err, os.ErrNotExist):
			t.made = cfg.Data
		case err != nil:
			return nil, fmt.Errorf("data directory: %w", err)
		case len(entries) == 0:
			t.made = cfg.Data
		case len(entries) == 1 && entries[0].Name() == "keys":
			t.made = filepath.Join(cfg.Data, "jetstream")
		default:
			return nil, usagef("--data %s: not empty (it holds %s): a restore writes into an empty data directory, or one holding only its keys", cfg.Data, entries[0].Name())
		}
	}
	writing := cfg
	if cfg.NATSURL == "" {
		// Nothing reads the marked stream before its last event is in,
		// and a restore cut short is done again from the start: its
		// writes need not reach the disk one by one, only all of them
		// before the mark goes (sync).
		loose := *cfg
		loose.SyncInterval, writing, t.loose = restoreSyncInterval, &loose, true
	}
	st, err := connectStream(ctx, writing, restoreStreamConfig(cfg))
	if err == nil {
		t.st = st
		if err = st.store.BeginRestore(ctx); err != nil && cfg.NATSURL == "" {
			err = errors.Join(err, t.abandon(ctx))
		} else if err != nil {
			st.Close()
		}
	} else if t.made != "" {
		os.RemoveAll(t.made)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// restoreStreamConfig is how a restore opens the stream of cfg.
func restoreStreamConfig(cfg *Config) eventstore.Config {
	return eventstore.Config{Restore: true, Replicas: cfg.Replicas, RequestTimeout: restoreRequestTimeout}
}

// restoreDepthEmbedded is how many batches a restore keeps in flight on
// the embedded server: enough to keep the stream busy while the client
// reads, checks and sends the next, few enough for the server's queue of
// messages waiting to be stored.
const restoreDepthEmbedded = 4

// bulkGCPercent is the garbage collector's target during a restore or a
// backup: the heap may grow to five times what is live between
// collections.
const bulkGCPercent = 400

// restoreSyncInterval is the embedded server's fsync interval while a
// restore writes: short, so that the disk takes the stream as it comes,
// each write unsynced, and the sync at the end finds little left to do
// (at a minute's interval, it waited for a block's whole stream at once).
const restoreSyncInterval = time.Second

// sync makes everything the restore wrote durable before the mark goes,
// when the embedded server wrote it without syncing each write: the
// server writes each message to its block file before it acknowledges
// it (a stream of one replica keeps no write buffer of its own), so once
// the last batch is acknowledged, syncing every file of its directory
// puts the whole stream on the disk. Should a crash still lose a tail,
// the high-water mark set at the restored head makes serve refuse the
// shorter stream.
func (t *restoreTarget) sync(cfg *Config) error {
	if !t.loose {
		return nil
	}
	if err := syncTree(filepath.Join(cfg.Data, "jetstream")); err != nil {
		return fmt.Errorf("sync the restored stream: %w", err)
	}
	return nil
}

// syncTree syncs every file and directory under root to the disk.
func syncTree(root string) error { return (&treeSyncer{root: root}).sync() }

// treeSyncer syncs the files under root that may hold writes not on disk
// yet, and every directory: a file is passed over when its size and
// modification time are those its last sync saw and it was not modified
// lately (a modification time can repeat within a clock tick). A vault
// syncs its copy once a batch is stored: its old block files, never
// written again, then cost a stat, not an fsync.
type treeSyncer struct {
	root   string
	synced map[string]fileMark
}

// fileMark is what a file's stat said before it was synced.
type fileMark struct {
	size int64
	mod  time.Time
}

// recentlyModified is how close to a sync a file's modification time
// makes it synced again whatever its mark.
const recentlyModified = 2 * time.Second

func (t *treeSyncer) sync() error {
	if t.synced == nil {
		t.synced = map[string]fileMark{}
	}
	now := time.Now()
	return filepath.WalkDir(t.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !(d.IsDir() || d.Type().IsRegular()) {
			// A file the server renamed or removed since it was
			// listed holds nothing to sync.
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		var mark fileMark
		if !d.IsDir() {
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			mark = fileMark{size: info.Size(), mod: info.ModTime()}
			if was, ok := t.synced[path]; ok && was.size == mark.size && was.mod.Equal(mark.mod) && now.Sub(mark.mod) > recentlyModified {
				return nil
			}
		}
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := errors.Join(f.Sync(), f.Close()); err != nil {
			return err
		}
		if !d.IsDir() {
			t.synced[path] = mark
		}
		return nil
	})
}

// restoreRequestTimeout bounds each request of a restore, a batch's commit
// included: a batch of the largest size on a busy disk.
const restoreRequestTimeout = 30 * time.Second

// finish removes the restore's mark, writes the high-water mark of the
// writer's chain at the restored head (so that a later start refuses a
// stream shorter than what was restored, and a cluster's mark from a lost
// stream is replaced), and closes the stream.
func (t *restoreTarget) finish(ctx context.Context, cfg *Config, head eventstore.Head) error {
	if err := t.st.store.FinishRestore(ctx); err != nil {
		return err
	}
	if head.Sequence != 0 {
		hw, err := t.st.openHighWater(ctx, cfg)
		if err != nil {
			return err
		}
		hw.Advance(head)
	}
	err := t.st.Close()
	t.st = nil
	return err
}

// abandon removes what a failed restore made: the marked stream and the
// data keys it put back, and on the embedded default the directory it was
// made in.
func (t *restoreTarget) abandon(ctx context.Context) error {
	var err error
	if t.st != nil {
		if t.made == "" {
			ctx := context.WithoutCancel(ctx)
			err = t.st.store.AbandonRestore(ctx)
			for _, name := range t.keyNames {
				err = errors.Join(err, t.keys.Erase(ctx, name))
			}
			err = errors.Join(err, t.deleteLogs(ctx))
		}
		err = errors.Join(err, t.st.Close())
		t.st = nil
	}
	if t.made != "" {
		err = errors.Join(err, os.RemoveAll(t.made))
	}
	return err
}
