package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/settlement"
	"github.com/spf13/cobra"
)

// restoreOptions are restore's own flags.
type restoreOptions struct {
	from      string
	toSeq     uint64
	toTime    string
	to        time.Time // toTime parsed
	publicKey string
	keys      keyFlags
}

// newRestoreCmd is the tresor restore command.
func newRestoreCmd() *cobra.Command {
	var cfg Config
	var o restoreOptions
	cmd := &cobra.Command{
		Use:   "restore --from DIR [--data DIR | --nats URL --replicas N] [--to-seq N | --to-time T] [--keys --identity FILE]",
		Short: "Restore a backup into an empty data directory or an empty stream, verifying it as it goes",
		Long: "restore re-appends every event of the backup in --from, byte for byte (same ids, payloads, hashes,\n" +
			"chain positions and stream sequences), into an empty data directory (--data) or an empty stream on a\n" +
			"NATS cluster (--nats, --replicas), checking the SHA-256 of every file, then every hash, chain link and\n" +
			"seal as it goes; a backup that fails a check is refused at its first bad position, and nothing of it\n" +
			"is left for serve to take for a ledger (docs/backup.md). --to-seq and --to-time stop at the last\n" +
			"whole append at or before the point given. --keys restores the keys too, opened with --identity or\n" +
			"--passphrase-file.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(cmd, &cfg); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return restore(ctx, &cfg, o, cmd.ErrOrStderr())
		},
	}
	bindStoreFlags(cmd, &cfg)
	f := cmd.Flags()
	f.StringVar(&o.from, "from", "", "backup directory (tresor backup --out) (required)")
	f.Uint64Var(&o.toSeq, "to-seq", 0, "restore up to this stream sequence, at the last whole append at or before it")
	f.StringVar(&o.toTime, "to-time", "", "restore up to this time (RFC 3339), at the last whole append recorded at or before it")
	f.StringVar(&o.publicKey, "public-key", "", "the seal public key the seals must verify with (default: the one the backup's manifest records)")
	bindKeyFlags(cmd, &cfg, &o.keys, false)
	return cmd
}

// validate checks the flags before anything is opened.
func (o *restoreOptions) validate(cmd *cobra.Command, cfg *Config) error {
	if err := cfg.validateStore(); err != nil {
		return err
	}
	switch {
	case o.from == "":
		return usagef("--from: required (the backup directory)")
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
	if err := m.checkFiles(o.from, o.toSeq, o.keys.on); err != nil {
		return err
	}
	var keys *backupKeySet
	if o.keys.on {
		if keys, err = openBackupKeys(o.from, o.keys); err != nil {
			return err
		}
		if err := keys.check(cfg, pub); err != nil {
			return err
		}
	}
	target, err := openRestoreTarget(ctx, cfg)
	if err != nil {
		return err
	}
	r := &restorer{store: target.st.store, verify: eventstore.NewVerifier(pub), batchMax: eventstore.BatchEventsMax,
		toSeq: o.toSeq, toTime: o.to, heads: map[string]eventstore.Head{}, next: 1}
	if cfg.NATSURL == "" {
		r.batchMax = eventstore.CommitBatchEventsMax // the embedded server allows it
	}
	err = r.run(ctx, o.from, m)
	if err == nil {
		err = target.finish(ctx, cfg, r.heads[settlement.Chain])
	}
	if err == nil && keys != nil {
		err = keys.write(cfg)
	}
	if err != nil {
		return errors.Join(err, target.abandon(ctx))
	}
	fmt.Fprintln(stderr, r.summary(m, time.Since(start)))
	return nil
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
	st, err := connectStream(ctx, cfg, eventstore.Config{Restore: true, Replicas: cfg.Replicas, RequestTimeout: restoreRequestTimeout})
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

// abandon removes what a failed restore made: the marked stream, and on
// the embedded default the directory it was made in.
func (t *restoreTarget) abandon(ctx context.Context) error {
	var err error
	if t.st != nil {
		if t.made == "" {
			err = t.st.store.AbandonRestore(context.WithoutCancel(ctx))
		}
		err = errors.Join(err, t.st.Close())
		t.st = nil
	}
	if t.made != "" {
		err = errors.Join(err, os.RemoveAll(t.made))
	}
	return err
}
