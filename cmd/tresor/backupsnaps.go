package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/settlement"
	"github.com/fdj/tresor/snapshot"
)

// A backup holds, beside the events, the newest snapshots of the writer
// and of the read models at or before its last event, so that serve on a
// restored ledger loads them and replays only the events after them, as
// it would have before the loss: without them, a restored ledger is ready
// only after a replay of the whole stream. They are copied as the bucket
// stores them (snapshot.Copy), authenticated under the key the master key
// derives, and a restore puts them back unchanged: serve checks them
// against the restored stream at their load like any other snapshot, and
// one it cannot trust costs a replay, never a fact.

// backupSnapshotKinds are the kinds of snapshot a backup copies.
var backupSnapshotKinds = []string{settlement.SnapshotKind, projectionSnapshotKind}

// backupSnapshot is one snapshot file of the backup: its parts' bytes as
// snapshot.Bucket.Export writes them; its manifest and MAC are in the
// backup's manifest.
type backupSnapshot struct {
	File     string `json:"file"`
	SHA256   string `json:"sha256"`
	Bytes    int64  `json:"bytes"`
	Kind     string `json:"kind"`
	Sequence uint64 `json:"sequence"`
	snapshot.Copy
}

// snapshotKey is the key the snapshots are authenticated with, derived
// from the master key; ok is false when there is no master key file.
func snapshotKey(path string) (key []byte, ok bool, err error) {
	if !fileExists(path) {
		return nil, false, nil
	}
	master, err := loadOrCreateKey(path, settlement.MasterKeySize, false)
	if err != nil {
		return nil, false, fmt.Errorf("master key: %w", err)
	}
	return snapshotKeyOf(master)
}

// snapshotKeyOf is the snapshot key of a master key.
func snapshotKeyOf(master []byte) ([]byte, bool, error) {
	s, err := settlement.NewSealer(master)
	if err != nil {
		return nil, false, err
	}
	return s.SnapshotKey(), true, nil
}

// copySnapshots copies into dir the newest snapshot of each kind at or
// before the backup's last event, in place of the one the backup held, and
// records them in m. It returns a sentence saying what it copied, or why
// none: without the master key or a snapshot bucket, a backup holds the
// events alone.
func copySnapshots(ctx context.Context, store *eventstore.NATSStore, key []byte, dir string, m *backupManifest) (string, error) {
	if ok, err := snapshot.Exists(ctx, store, ""); err != nil || !ok {
		return "no snapshot bucket beside the stream", err
	}
	b, err := snapshot.Open(ctx, store, snapshot.Config{Key: key, ReadOnly: true})
	if err != nil {
		return "", err
	}
	var copied []string
	for _, kind := range backupSnapshotKinds {
		s, err := copySnapshot(ctx, b, dir, kind, m)
		if errors.Is(err, snapshot.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", err
		}
		m.Snapshots = slices.DeleteFunc(m.Snapshots, func(old backupSnapshot) bool { return old.Kind == kind })
		m.Snapshots = append(m.Snapshots, *s)
		copied = append(copied, fmt.Sprintf("%s at %d", kind, s.Sequence))
	}
	if len(copied) == 0 {
		return "no snapshot at or before the backup's last event", nil
	}
	return "snapshots " + strings.Join(copied, ", "), nil
}

// copySnapshot writes the newest snapshot of kind at or before the
// backup's last event into a file of dir; the file is kept only once the
// manifest names it (removeUnnamed).
func copySnapshot(ctx context.Context, b *snapshot.Bucket, dir, kind string, m *backupManifest) (*backupSnapshot, error) {
	tmp, err := os.CreateTemp(dir, "snapshot-*.partial")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name()) // gone once renamed
	sha := sha256.New()
	s := &backupSnapshot{Kind: kind}
	s.Copy, err = b.Export(ctx, kind, settlement.Chain, m.lastSequence(), io.MultiWriter(tmp, sha, (*byteCounter)(&s.Bytes)))
	if err = errors.Join(err, tmp.Sync(), tmp.Close()); err != nil {
		return nil, err
	}
	s.Sequence, s.SHA256 = s.Meta.Sequence, hex.EncodeToString(sha.Sum(nil))
	s.File = fmt.Sprintf("snapshot-%s-%020d.bin", kind, s.Sequence)
	if err := os.Rename(tmp.Name(), filepath.Join(dir, s.File)); err != nil {
		return nil, fmt.Errorf("write %s: %w", s.File, err)
	}
	return s, syncDir(dir)
}

// snapshotFiles are the files of the backup's snapshots.
func (m *backupManifest) snapshotFiles() []string {
	var files []string
	for _, s := range m.Snapshots {
		files = append(files, s.File)
	}
	return files
}

// removeUnnamed removes the snapshot, data keys and log files of dir that
// the manifest no longer names: those replaced by newer ones, and the
// parts of a log created anew. It also removes the unfinished files a
// killed run left (*.partial, which no manifest names): the caller holds
// the directory's lock, so no other run is writing them.
func removeUnnamed(dir string, m *backupManifest) error {
	named := append(m.snapshotFiles(), m.logFiles()...)
	if m.DataKeys != nil {
		named = append(named, m.DataKeys.File)
	}
	for _, pattern := range []string{"snapshot-*.bin", backupDataKeysPattern, backupLogPattern, "*.partial"} {
		files, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			return err
		}
		for _, f := range files {
			if !slices.Contains(named, filepath.Base(f)) {
				if err := os.Remove(f); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// restoreSnapshots puts the backup's snapshots at or before the restored
// head into the snapshot bucket beside the restored stream, authenticated
// under key (the restored master key's). It returns a sentence saying
// what it restored, or why not: a snapshot written under another master
// key is left out, and serve replays the stream instead.
func restoreSnapshots(ctx context.Context, store *eventstore.NATSStore, replicas int, key []byte, dir string, m *backupManifest, head uint64) (string, error) {
	var todo []backupSnapshot
	for _, s := range m.Snapshots {
		if s.Sequence <= head {
			todo = append(todo, s)
		}
	}
	if len(todo) == 0 {
		return "no snapshot at or before the restored head", nil
	}
	if key == nil {
		return "no snapshot restored: no master key (--keys or --master-key-file) to check them with", nil
	}
	b, err := snapshot.Open(ctx, store, snapshot.Config{Key: key, Replicas: replicas})
	if err != nil {
		return "", err
	}
	var done []string
	for _, s := range todo {
		f, err := os.Open(filepath.Join(dir, s.File))
		if err != nil {
			return "", fmt.Errorf("backup file %s: %w", s.File, err)
		}
		err = b.Import(ctx, s.Copy, f)
		f.Close()
		if errors.Is(err, snapshot.ErrRefused) {
			return fmt.Sprintf("snapshot %s left out (serve replays the stream instead): %v", s.File, err), nil
		}
		if err != nil {
			return "", fmt.Errorf("restore snapshot %s: %w", s.File, err)
		}
		done = append(done, fmt.Sprintf("%s at %d", s.Kind, s.Sequence))
	}
	return "snapshots " + strings.Join(done, ", "), nil
}
