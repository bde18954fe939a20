package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/personal"
	"github.com/nats-io/nats.go"
)

// A backup carries the entries of its stream's data keys bucket
// (docs/privacy.md): without them a ledger restored after the loss of its
// cluster reads every personal field as erased. They are kept as the
// bucket holds them, each key wrapped by the master key (AES-256-GCM, the
// entry's name as additional data), so the file opens nothing without
// the master key, which a backup holds only in keys.age, encrypted with
// age; its names are player ids (in clear on the stream too), HMACs of
// staff subjects and random key ids. Encrypting the file to age as well
// would make every periodic run need a recipient and protect nothing the
// master key does not (docs/backup.md, "Personal data keys").

// backupDataKeysPattern matches the backup's data keys files: one at a
// time, named by its content's SHA-256, so that a run replacing it never
// overwrites the file the manifest names until the new manifest is on disk.
const backupDataKeysPattern = "datakeys-*.ndjson"

// backupDataKeys is the manifest's record of the data keys. Its JSON keys
// are a contract (docs/backup.md).
type backupDataKeys struct {
	File    string `json:"file,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
	Bytes   int64  `json:"bytes,omitempty"`
	Entries int    `json:"entries"`
	// Sequence is the backup's last sequence when they were read: they
	// hold the key of every person sealed up to it, but those erased
	// since.
	Sequence uint64    `json:"sequence,omitempty"`
	TakenAt  time.Time `json:"taken_at,omitzero"`
	// Missing says why the backup's last run carried no data keys (the
	// file, if any, is an earlier run's).
	Missing string `json:"missing,omitempty"`
}

// errDataKeysDenied says that the NATS user may not read the bucket.
var errDataKeysDenied = errors.New("the NATS user may not read the bucket " + eventstore.DataKeysBucket +
	" (a regulator's read-only user, or the reader of an older serve): back up with the operator's credentials to carry them")

// deniedWatch learns that the server refused a request on one of the
// streams a read-only user may not read (the data keys bucket, the
// bounded logs) for lack of permission: nats-server says so on the
// connection, not to the request, which would wait out its whole timeout.
type deniedWatch struct {
	// watched are the refusals watched for, by the text naming them.
	watched map[string]*denial
	stderr  io.Writer
}

// denial is closed once the server refused a request naming its text.
type denial struct {
	once sync.Once
	ch   chan struct{}
}

// deniedDataKeys is how a refusal on the data keys bucket is named; a
// log's is deniedLog's.
const deniedDataKeys = "KV_" + eventstore.DataKeysBucket

// deniedLog is how a refusal to read the log's stream is named: its
// first request, the stream's information (a user that may not delete
// the consumers it read with is refused that later, expectedly).
func deniedLog(stream string) string { return "STREAM.INFO." + stream }

func newDeniedWatch(stderr io.Writer) *deniedWatch {
	w := &deniedWatch{watched: map[string]*denial{}, stderr: stderr}
	for _, name := range []string{deniedDataKeys, deniedLog(eventstore.SignificantStream), deniedLog(eventstore.AccessLogStream)} {
		w.watched[name] = &denial{ch: make(chan struct{})}
	}
	return w
}

// option is the connection's error handler. A read-only user's other
// refusals are expected (it may not delete the consumers it read with:
// the server drops them once idle) and go unsaid; other errors are
// printed.
func (w *deniedWatch) option() nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if !errors.Is(err, nats.ErrPermissionViolation) {
			fmt.Fprintf(w.stderr, "backup: the NATS connection: %v\n", err)
			return
		}
		for name, d := range w.watched {
			if strings.Contains(err.Error(), name) {
				d.once.Do(func() { close(d.ch) })
			}
		}
	})
}

// during runs read with a context cancelled as soon as the server refuses
// the user a request named name, and returns denied then.
func (w *deniedWatch) during(ctx context.Context, name string, denied error, read func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-w.watched[name].ch:
			cancel(denied)
		case <-ctx.Done():
		}
	}()
	err := read(ctx)
	if errors.Is(context.Cause(ctx), denied) {
		return denied
	}
	return err
}

// readDataKeys reads the stream's data keys, none when there is no
// bucket, or errDataKeysDenied as soon as the server refuses the user.
func (w *deniedWatch) readDataKeys(ctx context.Context, store *eventstore.NATSStore) ([]eventstore.DataKeyEntry, error) {
	var entries []eventstore.DataKeyEntry
	err := w.during(ctx, deniedDataKeys, errDataKeysDenied, func(ctx context.Context) error {
		var err error
		entries, err = store.ReadDataKeys(ctx)
		return err
	})
	if errors.Is(err, eventstore.ErrNoDataKeys) {
		return nil, nil
	}
	return entries, err
}

// copyDataKeys writes the stream's data keys into the backup, in place of
// those it held, and records them in m; it returns the sentence of the
// backup's line, and whether the manifest changed. When they cannot be
// read, the manifest says why and keeps the earlier run's.
func (w *deniedWatch) copyDataKeys(ctx context.Context, store *eventstore.NATSStore, dir string, m *backupManifest) (string, bool, error) {
	old := m.DataKeys
	entries, err := w.readDataKeys(ctx, store)
	if err != nil {
		dk := &backupDataKeys{Missing: err.Error()}
		if old != nil {
			*dk = *old
			dk.Missing = err.Error()
		}
		m.DataKeys = dk
		if dk.File != "" {
			return fmt.Sprintf("no data keys: %v; the backup keeps those read at sequence %d", err, dk.Sequence), old == nil || *old != *dk, nil
		}
		return "no data keys: " + err.Error(), old == nil || *old != *dk, nil
	}
	dk, err := writeDataKeys(dir, entries)
	if err != nil {
		return "", false, err
	}
	dk.Sequence, dk.TakenAt = m.lastSequence(), time.Now().UTC()
	changed := old == nil || old.SHA256 != dk.SHA256 || old.Sequence != dk.Sequence || old.Missing != ""
	if changed {
		m.DataKeys = dk
	}
	return fmt.Sprintf("data keys: %d entries", dk.Entries), changed, nil
}

// writeDataKeys writes the entries into a file of dir, one JSON line each.
func writeDataKeys(dir string, entries []eventstore.DataKeyEntry) (*backupDataKeys, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, e := range entries {
		if err := enc.Encode(e); err != nil {
			return nil, err
		}
	}
	sum := sha256.Sum256(b.Bytes())
	dk := &backupDataKeys{SHA256: hex.EncodeToString(sum[:]), Bytes: int64(b.Len()), Entries: len(entries)}
	dk.File = strings.Replace(backupDataKeysPattern, "*", dk.SHA256[:16], 1)
	return dk, writeFileAtomic(dir, dk.File, b.Bytes())
}

// readDataKeysFile reads the backup's data keys.
func readDataKeysFile(dir string, dk *backupDataKeys) ([]eventstore.DataKeyEntry, error) {
	b, err := os.ReadFile(filepath.Join(dir, dk.File))
	if err != nil {
		return nil, fmt.Errorf("backup file %s: %w", dk.File, err)
	}
	var entries []eventstore.DataKeyEntry
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var e eventstore.DataKeyEntry
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("backup file %s, entry %d: %w", dk.File, len(entries)+1, err)
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// noteErasure adds the data key an erasure destroyed to erased.
func noteErasure(erased map[string]bool, ev eventstore.RecordedEvent) error {
	if ev.Type != domain.TypePersonalDataErased || !ev.LedgerFact() {
		return nil
	}
	var e domain.PersonalDataErased
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return fmt.Errorf("the erasure at sequence %d: %w", ev.Sequence, err)
	}
	if e.KeyID != "" {
		erased[e.KeyID] = true
	}
	return nil
}

// readErasures adds to erased the data keys of the erasures recorded after
// sequence after in an export file (a backup's part), each event's hash
// checked: an altered line is refused, never taken for an erasure.
func readErasures(file string, after uint64, erased map[string]bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	note, _ := eventstore.WholeAppends(func(ev eventstore.RecordedEvent) error {
		if ev.Sequence <= after {
			return nil
		}
		return noteErasure(erased, ev)
	}, nil)
	return eventstore.ReadExportHashed(f, func(ev eventstore.RecordedEvent, computed eventstore.Hash) error {
		if computed != ev.Hash {
			return fmt.Errorf("sequence %d: hash %s, its content hashes to %s: the line was changed", ev.Sequence, ev.Hash, computed)
		}
		return note(ev)
	})
}

// targetDataKeys opens the data keys bucket beside the restored stream:
// created and required to hold none of the stream's entries when the
// restore puts the backup's back (like a stream, a bucket is restored
// into empty), bound as it is otherwise (nil when there is none), for the
// erasures the backup holds.
func (o *restoreOptions) targetDataKeys(ctx context.Context, t *restoreTarget, m *backupManifest) error {
	var err error
	if !o.putsDataKeys(m) {
		t.keys, err = t.st.store.BindDataKeys(ctx)
		if errors.Is(err, eventstore.ErrNoDataKeys) {
			return nil
		}
		return err
	}
	if t.keys, err = t.st.store.OpenDataKeys(ctx); err != nil {
		return err
	}
	names, err := t.keys.Names(ctx)
	if err == nil && len(names) > 0 {
		err = usagef("the data keys bucket %s holds %d entries of this stream already: a restore puts the backup's into an empty one "+
			"(--data-keys=false keeps the bucket as it is, for a restore beside the live one)", eventstore.DataKeysBucket, len(names))
	}
	return err
}

// putsDataKeys reports whether the restore puts the backup's data keys
// back: --data-keys, and a backup that carries some.
func (o *restoreOptions) putsDataKeys(m *backupManifest) bool {
	return o.dataKeys && m.DataKeys != nil && m.DataKeys.File != ""
}

// restoreDataKeys puts the backup's data keys into the target's bucket,
// but those whose erasure the backup records (at or before the point
// restored to, or after it: a backup never brings back a key whose
// erasure it holds); without them, it destroys those keys in the target's
// bucket. It returns the sentence of the restore's line.
func (o *restoreOptions) restoreDataKeys(ctx context.Context, t *restoreTarget, m *backupManifest, r *restorer) (string, error) {
	if r.cut {
		for _, p := range m.Parts {
			if p.LastSequence <= r.last {
				continue
			}
			if err := readErasures(filepath.Join(o.from, p.File), r.last, r.erased); err != nil {
				return "", fmt.Errorf("backup file %s: %w", p.File, err)
			}
		}
	}
	if !o.putsDataKeys(m) {
		return o.eraseInTarget(ctx, t, m, r.erased)
	}
	entries, err := readDataKeysFile(o.from, m.DataKeys)
	if err != nil {
		return "", err
	}
	left := 0
	for _, e := range entries {
		if personal.OfErasedKey(e.Name, e.Value, r.erased) {
			left++
			continue
		}
		if err := t.keys.Create(ctx, e.Name, e.Value); err != nil {
			return "", err
		}
		t.keyNames = append(t.keyNames, e.Name)
	}
	line := fmt.Sprintf("data keys: %d entries put back, %d left out (their erasure is in the backup)", len(t.keyNames), left)
	if dk := m.DataKeys; dk.Sequence < r.last {
		line += fmt.Sprintf("; they were read at sequence %d, before the restored end at %d: a person first sealed after it reads %q",
			dk.Sequence, r.last, domain.ErasedText)
	}
	return line, nil
}

// eraseInTarget destroys, in the target's own bucket, the keys whose
// erasure the backup holds.
func (o *restoreOptions) eraseInTarget(ctx context.Context, t *restoreTarget, m *backupManifest, erased map[string]bool) (string, error) {
	why := "--data-keys=false"
	if o.dataKeys {
		why = "the backup carries none"
		if m.DataKeys != nil && m.DataKeys.Missing != "" {
			why += ": " + m.DataKeys.Missing
		}
	}
	if t.keys == nil {
		return fmt.Sprintf("no data keys (%s), and no bucket beside the restored stream: personal fields read %q", why, domain.ErasedText), nil
	}
	n, err := personal.DestroyErased(ctx, t.keys, erased)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("no data keys put back (%s): the target's bucket kept, %d entries of keys erased in the backup destroyed there", why, n), nil
}
