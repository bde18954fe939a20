package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fdj/tresor/eventstore"
)

// A backup directory (docs/backup.md): parts, each an export of a range of
// the stream (events-000001.ndjson, ...), the keys encrypted with age
// (keys.age), the data keys (datakeys-<hash>.ndjson), the snapshots, and
// manifest.json, which says what each file holds and
// where the backup ends. The manifest is replaced whole, after the files
// it names are on disk, so that a backup killed midway leaves the one
// before it as it was.
const (
	backupManifestFile = "manifest.json"
	backupKeysFile     = "keys.age"
	// backupFormat names the manifest's format; a reader refuses another.
	backupFormat = "tresor-backup-1"
	// backupPartsMax bounds the parts of one directory: a backup every
	// ten minutes for a year stays below it, and a directory past it is
	// begun anew with a full backup.
	backupPartsMax = 100_000
)

// backupManifest is manifest.json. Its JSON keys are a contract
// (docs/backup.md).
type backupManifest struct {
	Format        string `json:"format"`
	Stream        string `json:"stream"`
	SubjectPrefix string `json:"subject_prefix"`
	// SealPublicKey is the key the seals verify with, when the backup
	// knew it (hex); a restore uses it unless given --public-key.
	SealPublicKey string       `json:"seal_public_key,omitempty"`
	Parts         []backupPart `json:"parts"`
	// Chains are the chains at the end of the last part.
	Chains map[string]*backupChain `json:"chains"`
	// Settings are the jurisdiction settings in force at the end of the
	// last part: the payload of the newest SettingsAdopted.
	Settings json.RawMessage `json:"settings,omitempty"`
	// Keys is the encrypted key file, when a backup wrote one.
	Keys *backupKeys `json:"keys,omitempty"`
	// Snapshots are the newest snapshots of each kind at or before the
	// last part's end, when the backup could copy them.
	Snapshots []backupSnapshot `json:"snapshots,omitempty"`
	// DataKeys are the entries of the stream's data keys bucket, or why
	// the last run carried none.
	DataKeys *backupDataKeys `json:"data_keys,omitempty"`
	// Logs are the bounded logs beside the stream, by name
	// ("significant", "access"), or why the last run copied none.
	Logs map[string]*backupLog `json:"logs,omitempty"`
}

// backupPart is one export file of the backup: the stream from
// FirstSequence to LastSequence, whole appends only.
type backupPart struct {
	File          string    `json:"file"`
	SHA256        string    `json:"sha256"`
	Bytes         int64     `json:"bytes"`
	FirstSequence uint64    `json:"first_sequence"`
	LastSequence  uint64    `json:"last_sequence"`
	Events        uint64    `json:"events"`
	LastHash      string    `json:"last_hash"`
	TakenAt       time.Time `json:"taken_at"`
}

// backupChain is what the backup holds of one chain.
type backupChain struct {
	Head   eventstore.SavedHead `json:"head"`
	Events uint64               `json:"events"`
	// LastSeal is the position of the chain's newest Seal event.
	LastSeal *eventstore.SavedHead `json:"last_seal,omitempty"`
}

// backupKeys is the encrypted key file and when it was written.
type backupKeys struct {
	File    string    `json:"file"`
	SHA256  string    `json:"sha256"`
	TakenAt time.Time `json:"taken_at"`
}

// lastSequence is the last sequence the backup holds, 0 when empty.
func (m *backupManifest) lastSequence() uint64 {
	if len(m.Parts) == 0 {
		return 0
	}
	return m.Parts[len(m.Parts)-1].LastSequence
}

// readManifest reads dir's manifest; ok is false when there is none.
func readManifest(dir string) (m *backupManifest, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, backupManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read the backup's manifest: %w", err)
	}
	m = &backupManifest{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, false, fmt.Errorf("%s: %w", filepath.Join(dir, backupManifestFile), err)
	}
	if m.Format != backupFormat {
		return nil, false, fmt.Errorf("%s: format %q, this binary reads %q", filepath.Join(dir, backupManifestFile), m.Format, backupFormat)
	}
	if err := m.checkParts(); err != nil {
		return nil, false, fmt.Errorf("%s: %w", filepath.Join(dir, backupManifestFile), err)
	}
	return m, true, nil
}

// checkParts checks that the parts follow one another from sequence 1
// without a gap or an overlap.
func (m *backupManifest) checkParts() error {
	if len(m.Parts) > backupPartsMax {
		return fmt.Errorf("%d parts, at most %d", len(m.Parts), backupPartsMax)
	}
	next := uint64(1)
	for _, p := range m.Parts {
		if p.FirstSequence != next || p.LastSequence < p.FirstSequence || p.Events != p.LastSequence-p.FirstSequence+1 {
			return fmt.Errorf("part %s holds sequences %d to %d (%d events), want a range from %d: a gap or an overlap",
				p.File, p.FirstSequence, p.LastSequence, p.Events, next)
		}
		if filepath.Base(p.File) != p.File {
			return fmt.Errorf("part %q: not a file of the backup directory", p.File)
		}
		next = p.LastSequence + 1
	}
	return nil
}

// writeManifest replaces dir's manifest with m: written to a temporary
// file, synced, renamed over the old one, and the directory synced.
func writeManifest(dir string, m *backupManifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(dir, backupManifestFile, append(b, '\n'))
}

// writeFileAtomic writes name in dir whole or not at all.
func writeFileAtomic(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, name+".partial")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	_, err = f.Write(data)
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return syncDir(dir)
}

// syncDir syncs a directory, so that a rename in it is on disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// fileSHA256 returns the SHA-256 of a file of dir, hex, and its size.
func fileSHA256(dir, name string) (string, int64, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// checkFiles recomputes the SHA-256 of every file the manifest names,
// parts, snapshots, data keys, logs and, with keys, the key file, and names the
// first that does not match. Every part is checked, those past a point to
// restore to included: the restore reads their erasures.
func (m *backupManifest) checkFiles(dir string, keys bool) error {
	check := func(name, want string, size int64) error {
		if filepath.Base(name) != name {
			return fmt.Errorf("backup file %q: not a file of the backup directory", name)
		}
		got, n, err := fileSHA256(dir, name)
		switch {
		case err != nil:
			return fmt.Errorf("backup file %s: %w", name, err)
		case got != want || (size >= 0 && n != size):
			return fmt.Errorf("backup file %s: SHA-256 %s (%d bytes), the manifest says %s (%d bytes): the file was changed or cut", name, got, n, want, size)
		}
		return nil
	}
	for _, p := range m.Parts {
		if err := check(p.File, p.SHA256, p.Bytes); err != nil {
			return err
		}
	}
	for _, s := range m.Snapshots {
		if err := check(s.File, s.SHA256, s.Bytes); err != nil {
			return err
		}
	}
	if dk := m.DataKeys; dk != nil && dk.File != "" {
		if err := check(dk.File, dk.SHA256, dk.Bytes); err != nil {
			return err
		}
	}
	if err := m.checkLogFiles(check); err != nil {
		return err
	}
	if keys {
		if m.Keys == nil {
			return usagef("--keys: the backup holds no keys (tresor backup --keys writes them)")
		}
		return check(m.Keys.File, m.Keys.SHA256, -1)
	}
	return nil
}
