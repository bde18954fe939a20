package snapshot_test

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/snapshot"
)

// A snapshot exported (the newest at or before a sequence) and imported
// into another bucket under the same key loads there as the original, its
// sections included; its bytes altered, or a bucket with another key,
// refuse it.
func TestASnapshotExportedAndImportedLoadsAsTheOriginal(t *testing.T) {
	ctx := eventstoretest.Ctx(t, time.Minute)
	store, snaps := partsBucket(t)
	sections := [][]byte{pattern(1500, 1), pattern(2200, 3)}
	slot, seqs := twoSnapshots(t, store, snaps, "c1", pattern(700, 9), pattern(10, 8))
	if err := slot.SaveParts(ctx, seqs[1], func(w *snapshot.PartWriter) error {
		_, err := w.Write(sections[0])
		if err == nil {
			err = w.Cut()
		}
		if err == nil {
			_, err = w.Write(sections[1])
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	var older, newest bytes.Buffer
	if c, err := snaps.Export(ctx, "writer", "c1", seqs[0], &older); err != nil || c.Meta.Sequence != seqs[0] || older.Len() != 700 {
		t.Fatalf("export at or before %d: %+v, %d bytes, %v", seqs[0], c.Meta, older.Len(), err)
	}
	if _, err := snaps.Export(ctx, "writer", "c1", seqs[0]-1, io.Discard); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("export before every snapshot: %v", err)
	}
	c, err := snaps.Export(ctx, "writer", "c1", seqs[1], &newest)
	if err != nil || c.Meta.Sequence != seqs[1] || !bytes.Equal(newest.Bytes(), bytes.Join(sections, nil)) {
		t.Fatalf("export of the newest: %+v, %d bytes, %v", c.Meta, newest.Len(), err)
	}

	open := func(cfg snapshot.Config) *snapshot.Bucket {
		b, err := snapshot.Open(ctx, store, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	other := partsConfig
	other.Bucket, other.Key = "OTHER_KEY", bytes.Repeat([]byte{8}, 32)
	if err := open(other).Import(ctx, c, bytes.NewReader(newest.Bytes())); !errors.Is(err, snapshot.ErrRefused) {
		t.Fatalf("import under another key: %v", err)
	}
	cfg := partsConfig
	cfg.Bucket = "COPY"
	copied := open(cfg)
	altered := bytes.Clone(newest.Bytes())
	altered[2000] ^= 1
	if err := copied.Import(ctx, c, bytes.NewReader(altered)); !errors.Is(err, snapshot.ErrRefused) {
		t.Fatalf("import of altered bytes: %v", err)
	}
	if err := copied.Import(ctx, c, bytes.NewReader(newest.Bytes())); err != nil {
		t.Fatal(err)
	}
	var rest *snapshot.Sections
	seq, _, err := copied.Slot("writer", "c1", 1, "r").LoadSections(ctx, func(_ uint64, r io.Reader, x *snapshot.Sections) error {
		first, err := io.ReadAll(r)
		if err == nil && !bytes.Equal(first, sections[0]) {
			err = errors.New("another first section")
		}
		rest = x
		return err
	})
	if err != nil || seq != seqs[1] || rest.Len() != 1 {
		t.Fatalf("load of the imported snapshot: %v at %d", err, seq)
	}
	r, err := rest.Open(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if second, err := io.ReadAll(r); err != nil || !bytes.Equal(second, sections[1]) {
		t.Fatalf("its second section: %d bytes, %v", len(second), err)
	}
}
