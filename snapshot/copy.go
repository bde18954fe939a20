package snapshot

import (
	"bytes"
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/fdj/tresor/eventstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Copy is a snapshot as the bucket stores it, to be kept outside the
// bucket (a backup) and put back into another one (a restore) unchanged:
// its manifest as stored, with the MAC that authenticates it, beside its
// parts' bytes, which Export writes and Import reads. The copy keeps the
// original's authentication, so that a restored snapshot is trusted only
// under the key that wrote it, and checked at its load like any other.
type Copy struct {
	// Name is the snapshot's object name (kind.chain.sequence).
	Name string `json:"name"`
	// Manifest is the manifest's bytes as stored, and MAC its
	// authentication.
	Manifest []byte `json:"manifest"`
	MAC      string `json:"mac"`
	// Meta is what the manifest says of the snapshot, for the caller.
	Meta Meta `json:"-"`
}

// Export writes to w the parts of the newest snapshot of kind and chain
// at or before stream sequence upTo, in order, each authenticated as it
// is read, and returns its Copy. It returns ErrNotFound when there is no
// such snapshot, an error wrapping ErrRefused when the newest fails its
// authentication, or the read or write error.
func (b *Bucket) Export(ctx context.Context, kind, chain string, upTo uint64, w io.Writer) (Copy, error) {
	names, err := b.names(ctx, kind, chain)
	if err != nil {
		return Copy{}, err
	}
	for i := len(names) - 1; i >= 0; i-- {
		info, err := b.info(ctx, names[i])
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			continue
		}
		if err != nil {
			return Copy{}, refused(err, "get snapshot %s", names[i])
		}
		mb, m, err := b.manifestBytes(ctx, names[i], info)
		if err != nil {
			return Copy{}, err
		}
		if m.Sequence > upTo {
			continue
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch := make(chan partResult, prefetch-1)
		go b.fetchParts(ctx, names[i], m, 0, 0, len(m.Parts), ch)
		if _, err := io.Copy(w, &partReader{parts: ch, cancel: cancel}); err != nil {
			return Copy{}, fmt.Errorf("export snapshot %s: %w", names[i], err)
		}
		return Copy{Name: names[i], Manifest: mb, MAC: info.Metadata[macKey], Meta: m.Meta}, nil
	}
	return Copy{}, fmt.Errorf("%s snapshot of chain %s at or before sequence %d: %w", kind, chain, upTo, ErrNotFound)
}

// Import stores the snapshot c, its parts read from r as Export wrote
// them, unpaced: each part is authenticated before it is stored, and the
// manifest is stored last, so that a snapshot cut short is never named.
// It returns an error wrapping ErrRefused when the manifest or a part
// fails its authentication (altered, or written under another key), the
// read error, or the server's.
func (b *Bucket) Import(ctx context.Context, c Copy, r io.Reader) error {
	m, err := b.checkManifest(c.Name, c.Manifest, c.MAC)
	if err != nil {
		return err
	}
	if want := snapshotName(m.Kind, m.Chain, m.Sequence); c.Name != want {
		return fmt.Errorf("%w: %s: its manifest describes %s", ErrRefused, c.Name, want)
	}
	var buf []byte
	for i, p := range m.Parts {
		if p.Bytes < 0 || p.Bytes > PartBytesMax {
			return fmt.Errorf("%w: %s: part %d of %d bytes", ErrRefused, c.Name, i, p.Bytes)
		}
		buf = slices.Grow(buf[:0], p.Bytes)[:p.Bytes]
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("import snapshot %s: part %d of %d: %w", c.Name, i, len(m.Parts), err)
		}
		if !hmac.Equal([]byte(b.partMAC(c.Name, m.ID, i, buf)), []byte(p.MAC)) {
			return fmt.Errorf("%w: %s: part %d of %d: authentication fails (altered, of another snapshot or written under another key)", ErrRefused, c.Name, i, len(m.Parts))
		}
		name := partName(c.Name, m.ID, i)
		meta := jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(b.cfg.ChunkBytes)}}
		if _, err := b.os.Put(ctx, meta, bytes.NewReader(buf)); err != nil {
			return fmt.Errorf("import snapshot part %s: %w", name, err)
		}
	}
	om := jetstream.ObjectMeta{Name: c.Name, Metadata: map[string]string{manifestKey: manifestVersion, macKey: c.MAC}}
	if _, err := b.os.Put(ctx, om, bytes.NewReader(c.Manifest)); err != nil {
		return fmt.Errorf("import snapshot manifest %s: %w", c.Name, err)
	}
	return nil
}

// Exists reports whether the snapshot bucket of that name (BucketDefault
// when empty) is there beside store's stream, without creating it: a
// reader that only copies snapshots (a backup) leaves a server without
// one as it found it.
func Exists(ctx context.Context, store *eventstore.NATSStore, bucket string) (bool, error) {
	if bucket == "" {
		bucket = BucketDefault
	}
	js, err := jetstream.New(store.Conn(), jetstream.WithDefaultTimeout(store.Config().RequestTimeout))
	if err != nil {
		return false, err
	}
	_, err = js.Stream(ctx, objectStreamPrefix+bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil
	}
	return err == nil, err
}
