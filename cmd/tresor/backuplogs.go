package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/nats-io/nats.go"
)

// A backup carries the two compliance logs beside the stream, the
// significant-event log and the access log (docs/compliance.md): a
// ledger restored after the loss of its cluster must bring back who was
// refused and which staff read whose data. Each run copies the entries
// after the last one it holds, as stored (subject, headers, bytes: sealed
// fields stay sealed), into a file of its own: a log is bounded (by
// --significant-max-bytes), too much to copy whole every run, and its
// entries are never changed once stored. A log deleted and created again
// (its stream's creation time changed) numbers its entries anew: it is
// copied whole and replaces the earlier files.

// backupLogPattern matches the backup's log files, each named by its
// log and its content's SHA-256, so that no run overwrites a file the
// manifest names.
const backupLogPattern = "log-*.ndjson"

// backupLogTimeout bounds each request reading a log: a user that may not
// read it is told by the server at once (deniedWatch), this is for a
// server that does not answer.
const backupLogTimeout = 10 * time.Second

// backupLogKind is one of the logs a backup carries: its manifest name,
// what the backup's line calls it, its stream and how serve configures it.
type backupLogKind struct {
	name, title, stream string
	config              func(cfg *Config, maxAge time.Duration) eventstore.SignificantConfig
}

// backupLogKinds are the logs a backup carries.
var backupLogKinds = []backupLogKind{
	{name: "significant", title: "significant-event log", stream: eventstore.SignificantStream,
		config: func(cfg *Config, maxAge time.Duration) eventstore.SignificantConfig {
			return significantConfig(cfg, maxAge, nil)
		}},
	{name: "access", title: "access log", stream: eventstore.AccessLogStream,
		config: func(cfg *Config, maxAge time.Duration) eventstore.SignificantConfig {
			return accessLogConfig(cfg, maxAge, nil)
		}},
}

// backupLog is the manifest's record of one log. Its JSON keys are a
// contract (docs/backup.md).
type backupLog struct {
	Stream string `json:"stream"`
	// Created is when the log's stream was created: another time means
	// a log created anew since, copied whole.
	Created time.Time `json:"created,omitzero"`
	// MaxAgeSeconds is how long the log kept an entry: a restore leaves
	// out those older, and keeps the others as long.
	MaxAgeSeconds int64           `json:"max_age_seconds,omitempty"`
	Parts         []backupLogPart `json:"parts,omitempty"`
	// Missing says why the last run copied nothing of the log (the parts,
	// if any, are earlier runs').
	Missing string `json:"missing,omitempty"`
}

// backupLogPart is one file of a log: its entries from FirstSequence to
// LastSequence of the stream it was read from (fewer than the range when
// some had expired or gone past the log's bounds).
type backupLogPart struct {
	File          string    `json:"file"`
	SHA256        string    `json:"sha256"`
	Bytes         int64     `json:"bytes"`
	FirstSequence uint64    `json:"first_sequence"`
	LastSequence  uint64    `json:"last_sequence"`
	Entries       int       `json:"entries"`
	TakenAt       time.Time `json:"taken_at"`
}

// lastSequence is the last sequence the log's parts hold, 0 for none.
func (l *backupLog) lastSequence() uint64 {
	if l == nil || len(l.Parts) == 0 {
		return 0
	}
	return l.Parts[len(l.Parts)-1].LastSequence
}

// entries counts the entries the log's parts hold.
func (l *backupLog) entries() int {
	n := 0
	for _, p := range l.Parts {
		n += p.Entries
	}
	return n
}

// logFiles are the files of the backup's logs.
func (m *backupManifest) logFiles() []string {
	var files []string
	for _, l := range m.Logs {
		for _, p := range l.Parts {
			files = append(files, p.File)
		}
	}
	return files
}

// errLogDenied says that the NATS user may not read a log.
func errLogDenied(k backupLogKind) error {
	return fmt.Errorf("the NATS user may not read the stream %s (a regulator's read-only user, or the keeper of an older serve): "+
		"back up with the operator's credentials to carry the %s", k.stream, k.title)
}

// copyLogs copies into the backup what is new in each log and records it
// in m; it returns the sentence of the backup's line, and whether the
// manifest changed.
func (w *deniedWatch) copyLogs(ctx context.Context, nc *nats.Conn, dir string, m *backupManifest) (string, bool, error) {
	if m.Logs == nil {
		m.Logs = map[string]*backupLog{}
	}
	var said []string
	changed := false
	for _, k := range backupLogKinds {
		line, ch, err := w.copyLog(ctx, nc, dir, m, k)
		if err != nil {
			return "", false, fmt.Errorf("%s: %w", k.title, err)
		}
		said, changed = append(said, line), changed || ch
	}
	return "logs: " + strings.Join(said, "; "), changed, nil
}

// copyLog copies what is new in one log. A log that cannot be read keeps
// the backup's earlier parts, and the manifest says why.
func (w *deniedWatch) copyLog(ctx context.Context, nc *nats.Conn, dir string, m *backupManifest, k backupLogKind) (string, bool, error) {
	old := m.Logs[k.name]
	var r *eventstore.LogReader
	err := w.during(ctx, deniedLog(k.stream), errLogDenied(k), func(ctx context.Context) error {
		var err error
		r, err = eventstore.OpenLogReader(ctx, nc, k.stream, backupLogTimeout)
		return err
	})
	switch {
	case errors.Is(err, eventstore.ErrNoLog):
		return fmt.Sprintf("no %s (no serve has run on the stream)", k.title), false, nil
	case err != nil:
		l := &backupLog{Stream: k.stream}
		if old != nil {
			*l = *old
		}
		l.Missing = err.Error()
		m.Logs[k.name] = l
		return fmt.Sprintf("no %s: %v (the backup keeps %d entries of earlier runs)", k.title, err, l.entries()), old == nil || old.Missing != l.Missing, nil
	}
	l := &backupLog{Stream: k.stream, Created: r.State.Created, MaxAgeSeconds: int64(r.State.MaxAge / time.Second)}
	anew := ""
	if old != nil && old.Created.Equal(l.Created) {
		l.Parts = old.Parts
	} else if old != nil && len(old.Parts) > 0 {
		anew = ", copied whole: created anew since the last run"
	}
	p, err := writeLogPart(ctx, r, dir, k.name, l.lastSequence())
	if err != nil {
		return "", false, err
	}
	if p != nil {
		l.Parts = append(l.Parts, *p)
	}
	changed := old == nil || p != nil || old.Missing != "" || !old.Created.Equal(l.Created) || old.MaxAgeSeconds != l.MaxAgeSeconds
	m.Logs[k.name] = l
	if p == nil {
		return fmt.Sprintf("%s: nothing new, %d entries held", k.title, l.entries()), changed, nil
	}
	return fmt.Sprintf("%s: %d new entries (sequences %d to %d)%s, %d held", k.title, p.Entries, p.FirstSequence, p.LastSequence, anew, l.entries()), changed, nil
}

// writeLogPart writes the log's entries after sequence after into a file
// of dir, one JSON line each, and returns its record: nil when there is
// none.
func writeLogPart(ctx context.Context, r *eventstore.LogReader, dir, name string, after uint64) (*backupLogPart, error) {
	tmp := filepath.Join(dir, "log-"+name+".ndjson.partial")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp) // gone once renamed
	sum := sha256.New()
	bw := bufio.NewWriter(io.MultiWriter(f, sum))
	p := &backupLogPart{TakenAt: time.Now().UTC()}
	enc := json.NewEncoder(io.MultiWriter(bw, (*byteCounter)(&p.Bytes)))
	err = r.Read(ctx, after, func(e eventstore.StoredLogEntry) error {
		if p.Entries == 0 {
			p.FirstSequence = e.Seq
		}
		p.LastSequence, p.Entries = e.Seq, p.Entries+1
		return enc.Encode(e)
	})
	if err = errors.Join(err, bw.Flush(), f.Sync(), f.Close()); err != nil || p.Entries == 0 {
		return nil, err
	}
	p.SHA256 = hex.EncodeToString(sum.Sum(nil))
	p.File = fmt.Sprintf("log-%s-%s.ndjson", name, p.SHA256[:16])
	if err := os.Rename(tmp, filepath.Join(dir, p.File)); err != nil {
		return nil, err
	}
	return p, syncDir(dir)
}

// checkLogFiles checks the SHA-256 and size of every log file.
func (m *backupManifest) checkLogFiles(check func(name, want string, size int64) error) error {
	for _, k := range backupLogKinds {
		l := m.Logs[k.name]
		if l == nil {
			continue
		}
		for _, p := range l.Parts {
			if err := check(p.File, p.SHA256, p.Bytes); err != nil {
				return err
			}
		}
	}
	return nil
}

// targetLogs opens the logs the restore puts back beside the restored
// stream, each of which must be empty, like the stream: the backup's are
// the log's whole history. --logs=false leaves them as they are.
func (o *restoreOptions) targetLogs(ctx context.Context, cfg *Config, t *restoreTarget, m *backupManifest) error {
	if !o.logs {
		return nil
	}
	for _, k := range backupLogKinds {
		bl := m.Logs[k.name]
		if bl == nil || len(bl.Parts) == 0 {
			continue
		}
		l, err := eventstore.OpenSignificantLog(ctx, t.st.store.Conn(), k.config(cfg, time.Duration(bl.MaxAgeSeconds)*time.Second))
		if err != nil {
			return err
		}
		held, err := l.Held(ctx)
		switch {
		case err != nil:
			return err
		case held > 0:
			return usagef("the %s %s holds %d entries already: a restore puts the backup's into an empty one "+
				"(--logs=false keeps the logs as they are, for a restore beside the live ones)", k.title, k.stream, held)
		}
		t.logs = append(t.logs, targetLog{kind: k, log: l, backup: bl})
	}
	return nil
}

// targetLog is a log the restore puts back.
type targetLog struct {
	kind   backupLogKind
	log    *eventstore.SignificantLog
	backup *backupLog
}

// restoreLogs puts the backup's logs back, in order, each entry with its
// first time; those older than the log kept an entry are left out (they
// would have expired). It returns the sentence of the restore's line.
func (o *restoreOptions) restoreLogs(ctx context.Context, t *restoreTarget, m *backupManifest) (string, error) {
	if !o.logs {
		return "no logs (--logs=false)", nil
	}
	var said []string
	for _, tl := range t.logs {
		line, err := o.restoreLog(ctx, tl)
		if err != nil {
			return "", err
		}
		said = append(said, line)
	}
	for _, k := range backupLogKinds {
		if bl := m.Logs[k.name]; bl == nil || len(bl.Parts) == 0 {
			said = append(said, fmt.Sprintf("no %s in the backup%s", k.title, missingWhy(bl)))
		}
	}
	return "logs: " + strings.Join(said, "; "), nil
}

// missingWhy says why the backup holds none of a log, when it knows.
func missingWhy(bl *backupLog) string {
	if bl == nil || bl.Missing == "" {
		return ""
	}
	return ": " + bl.Missing
}

// restoreLog puts one log back.
func (o *restoreOptions) restoreLog(ctx context.Context, tl targetLog) (string, error) {
	var expired int
	since := time.Time{}
	if tl.backup.MaxAgeSeconds > 0 {
		since = time.Now().Add(-time.Duration(tl.backup.MaxAgeSeconds) * time.Second)
	}
	n, err := tl.log.Restore(ctx, func(yield func(eventstore.StoredLogEntry, error) bool) {
		for e, err := range readLogParts(o.from, tl.backup) {
			if err == nil && e.Time.Before(since) {
				expired++
				continue
			}
			if !yield(e, err) || err != nil {
				return
			}
		}
	})
	if err != nil {
		return "", fmt.Errorf("%s: %w", tl.kind.title, err)
	}
	return fmt.Sprintf("%s: %d entries put back, %d past its max age left out", tl.kind.title, n, expired), nil
}

// readLogParts reads the entries of a log's parts, oldest first; an entry
// that does not follow the one before is refused.
func readLogParts(dir string, bl *backupLog) iter.Seq2[eventstore.StoredLogEntry, error] {
	return func(yield func(eventstore.StoredLogEntry, error) bool) {
		var last uint64
		for _, p := range bl.Parts {
			f, err := os.Open(filepath.Join(dir, p.File))
			if err != nil {
				yield(eventstore.StoredLogEntry{}, fmt.Errorf("backup file %s: %w", p.File, err))
				return
			}
			dec := json.NewDecoder(bufio.NewReader(f))
			for i := 1; dec.More(); i++ {
				var e eventstore.StoredLogEntry
				if err = dec.Decode(&e); err == nil && e.Seq <= last {
					err = fmt.Errorf("sequence %d after %d: out of order", e.Seq, last)
				}
				if err != nil {
					err = fmt.Errorf("backup file %s, entry %d: %w", p.File, i, err)
				}
				if last = e.Seq; !yield(e, err) || err != nil {
					f.Close()
					return
				}
			}
			f.Close()
		}
	}
}

// deleteLogs deletes the logs a failed restore wrote into.
func (t *restoreTarget) deleteLogs(ctx context.Context) error {
	var err error
	for _, tl := range t.logs {
		err = errors.Join(err, tl.log.Delete(ctx))
	}
	return err
}
