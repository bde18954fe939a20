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
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// backupOptions are backup's own flags.
type backupOptions struct {
	out         string
	publicKey   string
	inboxPrefix string
	keys        keyFlags
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
			"the stream is checked to hold the backup's last event at its position. --keys also writes the master,\n" +
			"seal and token keys, encrypted with age to --recipient or to the passphrase of --passphrase-file.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(&cfg); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return backup(ctx, &cfg, o, cmd.ErrOrStderr())
		},
	}
	bindStreamFlags(cmd, &cfg)
	f := cmd.Flags()
	f.StringVar(&o.out, "out", "", "backup directory: created if missing, continued if it holds a backup (required)")
	f.StringVar(&o.publicKey, "public-key", "", "the seal public key to record in the manifest for restores (default: derived from --seal-key-file when it exists)")
	f.StringVar(&o.inboxPrefix, "inbox-prefix", nats.InboxPrefix[:len(nats.InboxPrefix)-1],
		"reply subject prefix with --nats: the one the NATS user may subscribe to (docs/export.md)")
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
	part    *backupPart // nil when nothing was new
	keys    bool
	elapsed time.Duration
}

// String is the one-line summary printed at the end.
func (s backupSummary) String() string {
	keys := ""
	if s.keys {
		keys = ", and the keys"
	}
	if s.part == nil {
		return fmt.Sprintf("backup: nothing new since its last part%s, in %s", keys, s.elapsed.Round(time.Millisecond))
	}
	p := s.part
	rate := float64(p.Events) / max(s.elapsed.Seconds(), 1e-3) // float-ok: a rate
	return fmt.Sprintf("backup: %s holds %d events, sequences %d to %d, head %s%s, in %s, %.0f events/s",
		p.File, p.Events, p.FirstSequence, p.LastSequence, p.LastHash, keys, s.elapsed.Round(time.Millisecond), rate)
}

// backup writes the next part of the backup in o.out, and the keys.
func backup(ctx context.Context, cfg *Config, o backupOptions, stderr io.Writer) error {
	start := time.Now()
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
	if err := o.recordKey(cfg, m); err != nil {
		return err
	}
	st, err := openStreamReadOnly(ctx, cfg, nats.CustomInboxPrefix(o.inboxPrefix))
	if err != nil {
		return err
	}
	defer st.Close()
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
	if o.keys.on {
		if m.Keys, err = writeBackupKeys(o.out, cfg, o.keys); err != nil {
			return err
		}
		sum.keys = true
	}
	if sum.part != nil || sum.keys {
		if err := writeManifest(o.out, m); err != nil {
			return err
		}
	}
	sum.elapsed = time.Since(start)
	fmt.Fprintln(stderr, sum)
	return nil
}

// recordKey records in the manifest the seal public key a restore checks
// the seals with: --public-key, or the one of the seal key file.
func (o *backupOptions) recordKey(cfg *Config, m *backupManifest) error {
	var pub ed25519.PublicKey
	switch {
	case o.publicKey != "":
		var err error
		if pub, err = parsePublicKey(o.publicKey); err != nil {
			return err
		}
	case fileExists(cfg.SealKeyFile):
		priv, err := cfg.sealKey()
		if err != nil {
			return fmt.Errorf("seal key: %w", err)
		}
		pub = priv.Public().(ed25519.PublicKey)
	default:
		return nil
	}
	key := hex.EncodeToString(pub)
	if m.SealPublicKey != "" && m.SealPublicKey != key {
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
	w.export = eventstore.NewExportWriter(io.MultiWriter(f, w.sha, (*byteCounter)(&p.Bytes)))
	w.export.SetSubjectPrefix(m.SubjectPrefix)
	whole, _ := eventstore.WholeAppends(w.write, nil)
	// A stream that ends inside an append (its writer not yet restarted
	// to void it) is backed up to the append before: WholeAppends never
	// hands on an append it has not read whole.
	err = store.ReadStored(ctx, from, to, whole)
	err = errors.Join(err, w.export.Flush(), f.Sync(), f.Close())
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
	export *eventstore.ExportWriter
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
