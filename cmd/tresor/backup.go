package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"syscall"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/settlement"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// backupOptions are backup's own flags.
type backupOptions struct {
	out         string
	publicKey   string
	inboxPrefix string
	snapshots   bool
	keys        keyFlags
	cpuProf     string
}

// newBackupCmd is the tresor backup command.
func newBackupCmd() *cobra.Command {
	var cfg Config
	var o backupOptions
	cmd := &cobra.Command{
		Use:   "backup --out DIR [--data DIR | --nats URL] [--keys --recipient AGE_KEY | --passphrase-file FILE]",
		Short: "Back the stream up into a directory, online: a full backup, then only what is new at each run",
		Long: "backup reads the stream read-only while serve runs (the embedded server on --data, or --nats URL)\n" +
			"and writes, into --out, the events up to the last whole append as an export (docs/export.md), with a\n" +
			"manifest: positions, head hashes, last seals, counts and the SHA-256 of every file (docs/backup.md).\n" +
			"Run again into the same directory, it adds a part holding only the events since the last one, once\n" +
			"the stream is checked to hold the backup's last event at its position. Each run also copies the\n" +
			"stream's personal data keys, wrapped by the master key, unless the NATS user may not read them (a\n" +
			"regulator's), which its line and the manifest then say; and what is new in the significant-event and access\n" +
			"logs, on the same terms. --keys also writes the master, seal and\n" +
			"token keys, encrypted with age to --recipient or to the passphrase of --passphrase-file.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(&cfg); err != nil {
				return err
			}
			return runProfiled(cmd, o.cpuProf, func(ctx context.Context) error {
				return backup(ctx, &cfg, o, cmd.ErrOrStderr())
			})
		},
	}
	bindStreamFlags(cmd, &cfg)
	f := cmd.Flags()
	f.StringVar(&o.out, "out", "", "backup directory: created if missing, continued if it holds a backup (required)")
	f.StringVar(&o.publicKey, "public-key", "", "the seal public key to record in the manifest for restores (default: derived from --seal-key-file when it exists)")
	f.StringVar(&o.inboxPrefix, "inbox-prefix", nats.InboxPrefix[:len(nats.InboxPrefix)-1],
		"reply subject prefix with --nats: the one the NATS user may subscribe to (docs/export.md)")
	f.BoolVar(&o.snapshots, "snapshots", true, "also copy the newest snapshots of the writer and of the read models, so that serve on a restore starts from them (needs the master key)")
	f.StringVar(&o.cpuProf, "cpuprofile", "", "write a CPU profile of the backup to this file (go tool pprof)")
	bindKeyFlags(cmd, &cfg, &o.keys, true)
	return cmd
}

// validate checks the flags before anything is opened.
func (o *backupOptions) validate(cfg *Config) error {
	switch {
	case o.out == "":
		return usagef("--out: required (the backup directory)")
	case cfg.NATSURL == "" && cfg.Data == "":
		return usagef("--data: empty data directory")
	}
	return o.keys.validate(cfg, true)
}

// backupSummary is what one run of backup did.
type backupSummary struct {
	part *backupPart // nil when nothing was new
	keys bool
	// snapshots says which snapshots the backup holds, or why none;
	// dataKeys how many data keys, or why none; logs what of the
	// bounded logs.
	snapshots, dataKeys, logs string
	elapsed                   time.Duration
}

// String is the one-line summary printed at the end.
func (s backupSummary) String() string {
	keys := ""
	if s.keys {
		keys = ", and the keys"
	}
	if s.part == nil {
		return fmt.Sprintf("backup: nothing new since its last part%s; %s; %s; %s; in %s", keys, s.snapshots, s.dataKeys, s.logs, s.elapsed.Round(time.Millisecond))
	}
	p := s.part
	rate := float64(p.Events) / max(s.elapsed.Seconds(), 1e-3) // float-ok: a rate
	return fmt.Sprintf("backup: %s holds %d events, sequences %d to %d, head %s%s; %s; %s; %s; in %s, %.0f events/s",
		p.File, p.Events, p.FirstSequence, p.LastSequence, p.LastHash, keys, s.snapshots, s.dataKeys, s.logs, s.elapsed.Round(time.Millisecond), rate)
}

// backup writes the next part of the backup in o.out, and the keys.
func backup(ctx context.Context, cfg *Config, o backupOptions, stderr io.Writer) error {
	start := time.Now()
	// A backup allocates for every event read (its headers decoded, its
	// line encoded) and keeps little alive, the chunks being encoded and
	// written: collecting less often leaves more of the cores to reading.
	debug.SetGCPercent(bulkGCPercent)
	if err := os.MkdirAll(o.out, 0o700); err != nil {
		return fmt.Errorf("backup directory: %w", err)
	}
	unlock, err := lockBackupDir(o.out)
	if err != nil {
		return err
	}
	defer unlock()
	m, ok, err := readManifest(o.out)
	if err != nil {
		return err
	}
	if !ok {
		m = &backupManifest{Format: backupFormat}
	}
	if m.Chains == nil {
		m.Chains = map[string]*backupChain{}
	}
	watch := newDeniedWatch(stderr)
	st, err := openStreamForBackup(ctx, cfg, nats.CustomInboxPrefix(o.inboxPrefix), watch.option())
	if err != nil {
		return err
	}
	defer st.Close()
	if err := o.recordKey(ctx, cfg, m, st.store); err != nil {
		return err
	}
	scfg := st.store.Config()
	if ok && (m.Stream != scfg.Stream || m.SubjectPrefix != scfg.SubjectPrefix) {
		return fmt.Errorf("backup directory %s holds stream %s (subjects %s.>), not %s (%s.>)", o.out, m.Stream, m.SubjectPrefix, scfg.Stream, scfg.SubjectPrefix)
	}
	m.Stream, m.SubjectPrefix = scfg.Stream, scfg.SubjectPrefix
	if err := checkContinues(ctx, st.store, m); err != nil {
		return err
	}
	sum := backupSummary{}
	if sum.part, err = writePart(ctx, st.store, o.out, m); err != nil {
		return err
	}
	before := m.snapshotFiles()
	sum.snapshots = o.copySnapshots(ctx, cfg, st, m)
	// After the part: the keys of every person sealed up to its end are
	// in the bucket by now, each made before the event sealed under it.
	var keysChanged bool
	if sum.dataKeys, keysChanged, err = watch.copyDataKeys(ctx, st.store, o.out, m); err != nil {
		return err
	}
	var logsChanged bool
	if sum.logs, logsChanged, err = watch.copyLogs(ctx, st.store.Conn(), o.out, m); err != nil {
		return err
	}
	if o.keys.on {
		if m.Keys, err = writeBackupKeys(o.out, cfg, o.keys); err != nil {
			return err
		}
		sum.keys = true
	}
	if sum.part != nil || sum.keys || keysChanged || logsChanged || !slices.Equal(before, m.snapshotFiles()) {
		if err := writeManifest(o.out, m); err != nil {
			return err
		}
	}
	if err := removeUnnamed(o.out, m); err != nil {
		return err
	}
	sum.elapsed = time.Since(start)
	fmt.Fprintln(stderr, sum)
	return nil
}

// copySnapshots copies the newest snapshots into the backup and says
// which, or why none: --snapshots=false, no master key to check them
// with, or a NATS user that may not read the snapshot bucket (the
// read-only user of eventstore.ReaderAccess may: beside a running serve,
// the backup reads through it). A backup without them is whole; serve on
// its restore replays the stream.
func (o *backupOptions) copySnapshots(ctx context.Context, cfg *Config, st *stream, m *backupManifest) string {
	if !o.snapshots {
		return "no snapshots (--snapshots=false)"
	}
	key, ok, err := snapshotKey(cfg.MasterKeyFile)
	if err == nil && !ok {
		return "no snapshots: no master key to check them with (--master-key-file)"
	}
	var copied string
	if err == nil {
		copied, err = copySnapshots(ctx, st.store, key, o.out, m)
	}
	if err != nil {
		return "no new snapshots: " + err.Error()
	}
	return copied
}

// recordKey records in the manifest the seal public key a restore checks
// the seals with: --public-key, or the one of the seal key file. The
// first run's key stays: a later run's may be a key the ledger's seals
// rotated to since, which the restore follows from the first.
func (o *backupOptions) recordKey(ctx context.Context, cfg *Config, m *backupManifest, store *eventstore.NATSStore) error {
	var pub ed25519.PublicKey
	switch {
	case o.publicKey != "":
		var err error
		if pub, err = parsePublicKey(o.publicKey); err != nil {
			return err
		}
	case fileExists(cfg.SealKeyFile):
		priv, err := cfg.sealKey(false)
		if err != nil {
			return fmt.Errorf("seal key: %w", err)
		}
		pub = priv.Public().(ed25519.PublicKey)
	default:
		return nil
	}
	key := hex.EncodeToString(pub)
	keys, err := store.SealKeys(ctx, settlement.Chain)
	if err != nil {
		return err
	}
	if m.SealPublicKey == "" && keys.First != "" && keys.First != eventstore.KeyID(pub) {
		return usagef("--public-key: the seals of chain %s start with key %s, not %s (a key it rotated to): give the first public key", settlement.Chain, keys.First, eventstore.KeyID(pub))
	}
	if m.SealPublicKey != "" && m.SealPublicKey != key {
		if keys.Has(eventstore.KeyID(pub)) {
			return nil
		}
		return fmt.Errorf("the backup's manifest records seal key %s, this run's is %s (key ids %s): a backup holds one ledger", m.SealPublicKey, key, eventstore.KeyID(pub))
	}
	m.SealPublicKey = key
	return nil
}

// fileExists reports whether path names an existing file.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return path != "" && err == nil
}

// checkContinues checks that the stream continues the backup m: it holds
// the backup's last event, with the same hash, at its sequence. Another
// stream, or one rewritten since, is refused at that position.
func checkContinues(ctx context.Context, store *eventstore.NATSStore, m *backupManifest) error {
	seq := m.lastSequence()
	if seq == 0 {
		return nil
	}
	last, err := store.LastSequence(ctx)
	if err != nil {
		return err
	}
	want := m.Parts[len(m.Parts)-1].LastHash
	if last < seq {
		return fmt.Errorf("the stream ends at sequence %d, before the backup's last event at %d (hash %s): a different or shortened history; begin a new backup directory",
			last, seq, want)
	}
	var found eventstore.RecordedEvent
	if err := store.ReadStored(ctx, seq, seq, func(r eventstore.RecordedEvent) error {
		found = r
		return nil
	}); err != nil {
		return fmt.Errorf("read the backup's last event at sequence %d: %w", seq, err)
	}
	if found.Hash.String() != want {
		return fmt.Errorf("at sequence %d the stream holds event %s with hash %s, the backup an event with hash %s: a different history; begin a new backup directory",
			seq, found.ID, found.Hash, want)
	}
	return nil
}

// writePart writes the events after the backup's last one, up to the last
// whole append of the stream now, as the backup's next part, and records
// it in m. It returns nil when nothing is new.
func writePart(ctx context.Context, store *eventstore.NATSStore, dir string, m *backupManifest) (*backupPart, error) {
	from := m.lastSequence() + 1
	to, err := store.LastSequence(ctx)
	if err != nil || to < from {
		return nil, err
	}
	if len(m.Parts) == backupPartsMax {
		return nil, fmt.Errorf("backup directory %s holds %d parts, the most one may: begin a new one with a full backup", dir, backupPartsMax)
	}
	p := &backupPart{File: fmt.Sprintf("events-%06d.ndjson", len(m.Parts)+1), TakenAt: time.Now().UTC()}
	tmp := filepath.Join(dir, p.File+".partial")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", p.File, err)
	}
	defer os.Remove(tmp) // gone once renamed
	w := &partWriter{sha: sha256.New(), m: m}
	// The lines are encoded on every core, and hashed and written on a
	// goroutine of their own, while this one reads the stream.
	w.export = eventstore.NewParallelExportWriter(io.MultiWriter(f, w.sha, (*byteCounter)(&p.Bytes)), m.SubjectPrefix)
	whole, _ := eventstore.WholeAppends(w.write, nil)
	// A stream that ends inside an append (its writer not yet restarted
	// to void it) is backed up to the append before: WholeAppends never
	// hands on an append it has not read whole.
	err = store.ReadStored(ctx, from, to, whole)
	err = errors.Join(err, w.export.Close(), f.Sync(), f.Close())
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", p.File, err)
	}
	if w.events == 0 {
		return nil, nil
	}
	p.FirstSequence, p.LastSequence, p.Events = from, w.last.Sequence, w.events
	p.LastHash, p.SHA256 = w.last.Hash.String(), hex.EncodeToString(w.sha.Sum(nil))
	if err := os.Rename(tmp, filepath.Join(dir, p.File)); err != nil {
		return nil, fmt.Errorf("write %s: %w", p.File, err)
	}
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	m.Parts = append(m.Parts, *p)
	return p, nil
}

// partWriter writes the whole appends of a part and keeps the manifest's
// figures as it goes.
type partWriter struct {
	export *eventstore.ParallelExportWriter
	sha    hash.Hash
	m      *backupManifest
	events uint64
	last   eventstore.RecordedEvent
}

// write writes one event and records it in the manifest's chains.
func (w *partWriter) write(r eventstore.RecordedEvent) error {
	if err := w.export.Write(r); err != nil {
		return err
	}
	w.events++
	w.last = r
	c := w.m.Chains[r.Chain]
	if c == nil {
		c = &backupChain{}
		w.m.Chains[r.Chain] = c
	}
	pos := eventstore.SavedHead{Sequence: r.Sequence, ChainSeq: r.ChainSeq, Hash: r.Hash.String()}
	c.Head = pos
	c.Events++
	switch {
	case r.Type == eventstore.SealType:
		c.LastSeal = &pos
	case r.Type == domain.TypeSettingsAdopted && !r.Voided:
		w.m.Settings = r.Payload
	}
	return nil
}

// byteCounter counts the bytes written through it.
type byteCounter int64

func (c *byteCounter) Write(p []byte) (int, error) {
	*c += byteCounter(len(p))
	return len(p), nil
}

// lockBackupDir takes an exclusive lock on the backup directory, so that
// two backups never write the same part; the kernel drops it when the
// process ends, however it ends.
func lockBackupDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the backup directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("backup directory %s: another backup is writing it: %w", dir, err)
	}
	return func() { f.Close() }, nil
}
