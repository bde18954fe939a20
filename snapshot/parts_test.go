package snapshot_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/snapshot"
	"github.com/nats-io/nats.go/jetstream"
)

// partsConfig stores snapshots in parts of 1 000 bytes, so that a few KB
// make several.
var partsConfig = snapshot.Config{Key: snapKey, PartBytes: 1000, Keep: 10}

// TestASnapshotWithABadPartOrManifestFallsBackToTheOlderOne: whatever
// happened to the newest snapshot's parts or manifest, Load names why it
// skips it and returns the older one whole.
func TestASnapshotWithABadPartOrManifestFallsBackToTheOlderOne(t *testing.T) {
	ctx := eventstoretest.Ctx(t, 2*time.Minute)
	store, snaps := partsBucket(t)
	os := snapshotBucket(t, store)
	older, newer := pattern(3500, 1), pattern(3500, 2)
	for i, c := range []struct {
		name, reason string
		alter        func(t *testing.T, manifest string, parts, olderParts []string)
	}{
		{"a part altered", "part 1 of 4: authentication fails", func(t *testing.T, _ string, parts, _ []string) {
			b := getBytes(t, os, parts[1])
			b[10] ^= 1
			putBytes(t, os, parts[1], b)
		}},
		{"a part cut short", "part 2 of 4 holds 500 bytes, the manifest says 1000", func(t *testing.T, _ string, parts, _ []string) {
			putBytes(t, os, parts[2], getBytes(t, os, parts[2])[:500])
		}},
		{"a part missing", "part 3 of 4: nats: object not found", func(t *testing.T, _ string, parts, _ []string) {
			if err := os.Delete(ctx, parts[3]); err != nil {
				t.Fatal(err)
			}
		}},
		{"a part of another snapshot", "part 0 of 4: authentication fails", func(t *testing.T, _ string, parts, olderParts []string) {
			putBytes(t, os, parts[0], getBytes(t, os, olderParts[0]))
		}},
		{"the manifest altered", "manifest authentication fails", func(t *testing.T, manifest string, _, _ []string) {
			info, err := os.GetInfo(ctx, manifest)
			if err != nil {
				t.Fatal(err)
			}
			b := bytes.Replace(getBytes(t, os, manifest), []byte(`"bytes":3500`), []byte(`"bytes":3000`), 1)
			if _, err := os.Put(ctx, jetstream.ObjectMeta{Name: manifest, Metadata: info.Metadata}, bytes.NewReader(b)); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// given two snapshots of four parts each
			chain := fmt.Sprint("c", i)
			slot, seqs := twoSnapshots(t, store, snaps, chain, older, newer)
			seq, data, skipped, err := slot.Load(ctx)
			if err != nil || seq != seqs[1] || !bytes.Equal(data, newer) || len(skipped) != 0 {
				t.Fatalf("untouched: seq %d, %d bytes, skipped %v, %v", seq, len(data), skipped, err)
			}
			manifest := fmt.Sprintf("writer.%s.%020d", chain, seqs[1])
			parts := partsOf(t, os, manifest)
			if len(parts) != 4 {
				t.Fatalf("parts %v, want 4", parts)
			}
			// when the newest is altered
			c.alter(t, manifest, parts, partsOf(t, os, fmt.Sprintf("writer.%s.%020d", chain, seqs[0])))
			// then Load skips it, saying why, for the older, whole
			seq, data, skipped, err = slot.Load(ctx)
			if err != nil || seq != seqs[0] || !bytes.Equal(data, older) {
				t.Fatalf("altered: seq %d, %d bytes, %v; want the older at %d", seq, len(data), err, seqs[0])
			}
			if len(skipped) != 1 || !errors.Is(skipped[0], snapshot.ErrRefused) || !strings.Contains(skipped[0].Error(), c.reason) {
				t.Fatalf("skipped %v, want one naming %q", skipped, c.reason)
			}
		})
	}
}

// TestLoadPartsReturnsTheDecodersOwnErrors: a snapshot whose parts all
// pass but whose data the decoder refuses, or does not read to its end, is
// not retried with an older one: the caller replays.
func TestLoadPartsReturnsTheDecodersOwnErrors(t *testing.T) {
	ctx := eventstoretest.Ctx(t, time.Minute)
	store, snaps := partsBucket(t)
	slot, _ := twoSnapshots(t, store, snaps, "c1", pattern(2500, 1), pattern(2500, 2))
	bad := errors.New("does not decode")
	calls := 0
	if _, skipped, err := slot.LoadParts(ctx, func(uint64, io.Reader) error { calls++; return bad }); !errors.Is(err, bad) || calls != 1 || len(skipped) != 0 {
		t.Fatalf("decoder's error: %v after %d calls, skipped %v", err, calls, skipped)
	}
	half := func(_ uint64, r io.Reader) error { _, err := io.ReadFull(r, make([]byte, 1200)); return err }
	if _, _, err := slot.LoadParts(ctx, half); err == nil || !strings.Contains(err.Error(), "goes on after its end") {
		t.Fatalf("data left unread: %v", err)
	}
}

// TestASnapshotStoredAsOneObjectIsSkipped: a snapshot an older build
// stored as one object, without a manifest, is no longer read: a load
// skips it, saying why, for an older snapshot, or refuses it (the stream
// is then replayed) when it is the only one; the tail's evidence ignores
// it. Nothing stops on it.
func TestASnapshotStoredAsOneObjectIsSkipped(t *testing.T) {
	ctx := eventstoretest.Ctx(t, time.Minute)
	store, snaps := partsBucket(t)
	os := snapshotBucket(t, store)
	putOneObject := func(chain string, seq uint64, head eventstore.Head) {
		t.Helper()
		meta, err := json.Marshal(snapshot.Meta{Kind: "writer", Chain: chain, Sequence: seq, ChainSeq: head.ChainSeq, Head: head.Hash, Format: 1, RuleSet: "r", Bytes: 5000})
		if err != nil {
			t.Fatal(err)
		}
		om := jetstream.ObjectMeta{Name: fmt.Sprintf("writer.%s.%020d", chain, seq), Metadata: map[string]string{"tresor-snapshot": string(meta), "tresor-hmac": "00"}}
		if _, err := os.Put(ctx, om, bytes.NewReader(pattern(5000, 3))); err != nil {
			t.Fatal(err)
		}
	}
	// alone: refused, the stream replayed
	seq, head := oneEventHead(t, store)
	putOneObject("c1", seq, head)
	slot := snaps.Slot("writer", "c1", 1, "r")
	if _, _, _, err := slot.Load(ctx); !errors.Is(err, snapshot.ErrRefused) || !strings.Contains(err.Error(), "stored as one object") {
		t.Fatalf("one-object snapshot alone: %v, want it refused", err)
	}
	if ev, err := snaps.Evidence(ctx, "c1"); err != nil || len(ev) != 0 {
		t.Fatalf("evidence of a one-object snapshot: %v, %v; want none", ev, err)
	}
	// newer than a snapshot with a manifest: skipped for it
	older := pattern(2500, 1)
	slot2, seqs := twoSnapshots(t, store, snaps, "c2", older, older)
	seq, head = oneEventHeadOf(t, store, "c2")
	putOneObject("c2", seq, head)
	got, data, skipped, err := slot2.Load(ctx)
	if err != nil || got != seqs[1] || !bytes.Equal(data, older) || len(skipped) != 1 || !errors.Is(skipped[0], snapshot.ErrRefused) {
		t.Fatalf("one-object snapshot newest: seq %d (want %d), %d bytes, skipped %v, %v", got, seqs[1], len(data), skipped, err)
	}
}

// TestASnapshotInSectionsReadsEachSectionAlone: LoadSections hands its
// reader the first section only; each other section opens alone later,
// its parts checked against the manifest authenticated at the load, so
// that one altered, missing or of another snapshot is refused then.
func TestASnapshotInSectionsReadsEachSectionAlone(t *testing.T) {
	ctx := eventstoretest.Ctx(t, time.Minute)
	store, snaps := partsBucket(t)
	os := snapshotBucket(t, store)
	sections := [][]byte{pattern(1500, 1), pattern(500, 2), pattern(2200, 3)}
	// given a snapshot of three sections (2, 1 and 3 parts) after an
	// older one of one section
	seqs, err := store.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{
		eventstoretest.Ev("T", "a", "1", 1), eventstoretest.Ev("T", "a", "1", 2)}})
	if err != nil {
		t.Fatal(err)
	}
	slot := snaps.Slot("writer", "c1", 1, "r")
	if err := slot.Save(ctx, seqs[0], pattern(2500, 9)); err != nil {
		t.Fatal(err)
	}
	err = slot.SaveParts(ctx, seqs[1], func(w *snapshot.PartWriter) error {
		for i, b := range sections {
			if i > 0 {
				if err := w.Cut(); err != nil {
					return err
				}
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// when it is loaded, its reader reads the first section
	var rest *snapshot.Sections
	seq, _, err := slot.LoadSections(ctx, func(_ uint64, r io.Reader, x *snapshot.Sections) error {
		first, err := io.ReadAll(r)
		if err == nil && !bytes.Equal(first, sections[0]) {
			err = fmt.Errorf("first section of %d bytes", len(first))
		}
		rest = x
		return err
	})
	if err != nil || seq != seqs[1] || rest.Len() != 2 {
		t.Fatalf("load: %v at %d, %d sections after the first", err, seq, rest.Len())
	}
	// then each other section reads alone, after the load
	read := func(i int) ([]byte, error) {
		r, err := rest.Open(ctx, i)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		return io.ReadAll(r)
	}
	for i, want := range sections[1:] {
		if got, err := read(i); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("section %d: %d bytes, %v", i+1, len(got), err)
		}
	}
	if _, err := rest.Open(ctx, 2); !errors.Is(err, snapshot.ErrRefused) {
		t.Fatalf("a section beyond the last: %v", err)
	}
	// and a part altered, of another snapshot or missing is refused
	manifest := fmt.Sprintf("writer.c1.%020d", seqs[1])
	parts, olderParts := partsOf(t, os, manifest), partsOf(t, os, fmt.Sprintf("writer.c1.%020d", seqs[0]))
	if len(parts) != 6 {
		t.Fatalf("parts %v, want 6", parts)
	}
	for _, c := range []struct {
		name, reason string
		part         int
		data         []byte
	}{
		// each before the last: the reader stops at the first refused
		{"missing", "part 5 of 6: nats: object not found", 5, nil},
		{"altered", "part 4 of 6: authentication fails", 4, append([]byte{0}, getBytes(t, os, parts[4])[1:]...)},
		{"of another snapshot", "part 3 of 6: authentication fails", 3, getBytes(t, os, olderParts[0])},
	} {
		if c.data == nil {
			if err := os.Delete(ctx, parts[c.part]); err != nil {
				t.Fatal(err)
			}
		} else {
			putBytes(t, os, parts[c.part], c.data)
		}
		if _, err := read(1); !errors.Is(err, snapshot.ErrRefused) || !strings.Contains(err.Error(), c.reason) {
			t.Fatalf("a part %s: %v, want %q", c.name, err, c.reason)
		}
	}
}

// TestPruningDeletesTheParts: the snapshots beyond Keep go with their
// parts, and so do parts without a manifest older than every snapshot kept
// (a store cut short); a newer one may be a store in progress and stays.
func TestPruningDeletesTheParts(t *testing.T) {
	ctx := eventstoretest.Ctx(t, time.Minute)
	_, snaps, os, seqs := keepingTwo(t, 3)
	below := fmt.Sprintf("part.writer.c1.%020d.cut.000000", seqs[0])
	above := fmt.Sprintf("part.writer.c1.%020d.inprogress.000000", seqs[2]+1)
	putBytes(t, os, below, []byte("orphan"))
	putBytes(t, os, above, []byte("orphan"))
	slot := snaps.Slot("writer", "c1", 1, "r")
	for i, seq := range seqs {
		if err := slot.Save(ctx, seq, pattern(2500, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	names := objectNames(t, os)
	want := []string{fmt.Sprintf("writer.c1.%020d", seqs[1]), fmt.Sprintf("writer.c1.%020d", seqs[2]), above}
	for _, m := range want[:2] {
		want = append(want, partsOf(t, os, m)...)
	}
	slices.Sort(want)
	if !slices.Equal(names, want) || len(want) != 9 {
		t.Fatalf("objects kept:\n%v\nwant:\n%v", names, want)
	}
}

// partsBucket opens a bucket under partsConfig beside a store on a new
// embedded server.
func partsBucket(t *testing.T) (*eventstore.NATSStore, *snapshot.Bucket) {
	t.Helper()
	store := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	snaps, err := snapshot.Open(eventstoretest.Ctx(t, time.Minute), store, partsConfig)
	if err != nil {
		t.Fatal(err)
	}
	return store, snaps
}

// twoSnapshots appends two events to chain and saves older at the first,
// newer at the second.
func twoSnapshots(t *testing.T, store *eventstore.NATSStore, snaps *snapshot.Bucket, chain string, older, newer []byte) (*snapshot.Slot, []uint64) {
	t.Helper()
	ctx := eventstoretest.Ctx(t, time.Minute)
	seqs, err := store.Append(ctx, chain, eventstore.AppendRequest{Events: []eventstore.Event{
		eventstoretest.Ev("T", "a", "1", 1), eventstoretest.Ev("T", "a", "1", 2)}})
	if err != nil {
		t.Fatal(err)
	}
	slot := snaps.Slot("writer", chain, 1, "r")
	for i, data := range [][]byte{older, newer} {
		if err := slot.Save(ctx, seqs[i], data); err != nil {
			t.Fatal(err)
		}
	}
	return slot, seqs
}

// pattern returns n bytes that differ with seed and position.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// objectNames lists the bucket's objects, sorted.
func objectNames(t *testing.T, os jetstream.ObjectStore) []string {
	t.Helper()
	infos, err := os.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range infos {
		names = append(names, in.Name)
	}
	slices.Sort(names)
	return names
}

// partsOf lists the parts of the snapshot manifest, in order.
func partsOf(t *testing.T, os jetstream.ObjectStore, manifest string) []string {
	t.Helper()
	var parts []string
	for _, n := range objectNames(t, os) {
		if strings.HasPrefix(n, "part."+manifest+".") {
			parts = append(parts, n)
		}
	}
	return parts
}

func getBytes(t *testing.T, os jetstream.ObjectStore, name string) []byte {
	t.Helper()
	b, err := os.GetBytes(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func putBytes(t *testing.T, os jetstream.ObjectStore, name string, b []byte) {
	t.Helper()
	if _, err := os.PutBytes(context.Background(), name, b); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSnapshotParts measures storing and loading a 128 MiB snapshot
// (8 parts of 16 MiB, about the read models' after a sold-out block) on
// an embedded server: what a start spends fetching it, beside its
// decoding.
func BenchmarkSnapshotParts(b *testing.B) {
	// Unpaced: what the server and disk take.
	slot, seq := oneEventSlot(b, snapshot.Config{Key: snapKey})
	slot = slot.Paced(snapshot.Unpaced)
	ctx := context.Background()
	data := pattern(128<<20, 5)
	var save, load time.Duration
	for b.Loop() {
		start := time.Now()
		if err := slot.Save(ctx, seq, data); err != nil {
			b.Fatal(err)
		}
		save += time.Since(start)
		start = time.Now()
		if _, _, err := slot.LoadParts(ctx, func(_ uint64, r io.Reader) error { _, err := io.Copy(io.Discard, r); return err }); err != nil {
			b.Fatal(err)
		}
		load += time.Since(start)
	}
	mb := float64(len(data)) / 1e6 * float64(b.N)
	b.ReportMetric(mb/save.Seconds(), "MB/s-save")
	b.ReportMetric(mb/load.Seconds(), "MB/s-load")
}

// TestASnapshotIsSentAtItsPace: a snapshot's bytes go no faster than its
// slot's pace (1 MiB at 4 MiB/s: at least the time of its bytes after the
// first chunk, 128 KiB), across its parts, and it reads back whole. A pace
// within a time (Pace.Within) goes faster when its rate would take longer:
// 1 MiB paced at 256 KiB/s within a quarter second goes at 4 MiB/s, not in
// 3.5 s.
func TestASnapshotIsSentAtItsPace(t *testing.T) {
	for _, c := range []struct {
		name string
		pace snapshot.Pace
	}{{"rate", snapshot.Pace{BytesPerSecond: 4 << 20}}, {"within", snapshot.Pace{BytesPerSecond: 256 << 10, Within: time.Second / 4}}} {
		t.Run(c.name, func(t *testing.T) {
			slot, seq := oneEventSlot(t, snapshot.Config{Key: snapKey, PartBytes: 300 << 10, ChunkBytes: 128 << 10})
			slot = slot.Paced(c.pace)
			ctx := context.Background()
			data := pattern(1<<20, 7)
			start := time.Now()
			if err := slot.Save(ctx, seq, data); err != nil {
				t.Fatal(err)
			}
			if took, least := time.Since(start), time.Duration(len(data)-128<<10)*time.Second/(4<<20); took < least {
				t.Errorf("1 MiB stored in %s at 4 MiB/s, want at least %s", took, least)
			} else if most := 2 * time.Second; c.pace.Within != 0 && took > most {
				t.Errorf("1 MiB stored in %s within %s, want at most %s (at its rate alone: 3.5 s)", took, c.pace.Within, most)
			}
			_, got, _, err := slot.Load(ctx)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("loaded %d bytes (%v), want the %d stored", len(got), err, len(data))
			}
		})
	}
}

// TestAnUnpacedSnapshotIsNotHeldToThePace: a slot's saves after
// Paced(Unpaced) (serve's closing snapshots) go as fast as the server
// takes them: 1 MiB at a pace of 16 KiB/s would take 64 s; it is stored
// in far less, and reads back whole.
func TestAnUnpacedSnapshotIsNotHeldToThePace(t *testing.T) {
	slot, seq := oneEventSlot(t, snapshot.Config{Key: snapKey, PartBytes: 300 << 10, ChunkBytes: 128 << 10})
	slot = slot.Paced(snapshot.Pace{BytesPerSecond: 16 << 10}).Paced(snapshot.Unpaced)
	ctx := context.Background()
	data := pattern(1<<20, 9)
	start := time.Now()
	err := slot.SaveParts(ctx, seq, func(w *snapshot.PartWriter) error {
		_, err := w.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if took, paced := time.Since(start), time.Duration(len(data))*time.Second/(16<<10); took > paced/4 {
		t.Errorf("1 MiB stored unpaced in %s, the pace would take %s", took, paced)
	}
	_, got, _, err := slot.Load(ctx)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("loaded %d bytes (%v), want the %d stored", len(got), err, len(data))
	}
}

// TestASnapshotIsSentInChunksOfAMebibyte: a part goes to the bucket in
// Object Store chunks of SnapshotChunkDefault (1 MiB), each one message
// of the bucket's stream and, on a server that syncs always, one fsync:
// 2.5 MiB are 3 chunks, not the 20 of the Object Store's default of
// 128 KiB; and the snapshot reads back whole.
func TestASnapshotIsSentInChunksOfAMebibyte(t *testing.T) {
	store, seq := oneEventStore(t)
	ctx := eventstoretest.Ctx(t, time.Minute)
	snaps, err := snapshot.Open(ctx, store, snapshot.Config{Key: snapKey})
	if err != nil {
		t.Fatal(err)
	}
	slot := snaps.Slot("writer", "c1", 1, "r").Paced(snapshot.Unpaced)
	data := pattern(5<<19, 9)
	if err := slot.Save(ctx, seq, data); err != nil {
		t.Fatal(err)
	}
	os := snapshotBucket(t, store)
	parts := partsOf(t, os, fmt.Sprintf("writer.c1.%020d", seq))
	if len(parts) != 1 {
		t.Fatalf("parts %v, want one", parts)
	}
	info, err := os.GetInfo(ctx, parts[0])
	if err != nil {
		t.Fatal(err)
	}
	if info.Opts == nil || info.Opts.ChunkSize != snapshot.ChunkBytesDefault || info.Chunks != 3 {
		t.Errorf("part of %d bytes stored as %d chunks (options %+v), want 3 of %d", info.Size, info.Chunks, info.Opts, snapshot.ChunkBytesDefault)
	}
	if _, got, _, err := slot.Load(ctx); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("loaded %d bytes (%v), want the %d stored", len(got), err, len(data))
	}
}

// oneEventSlot opens a slot under cfg on an embedded server whose stream
// holds one event of chain c1, and returns it with that event's sequence.
func oneEventSlot(tb testing.TB, cfg snapshot.Config) (*snapshot.Slot, uint64) {
	tb.Helper()
	store, seq := oneEventStore(tb)
	snaps, err := snapshot.Open(context.Background(), store, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return snaps.Slot("projections", "c1", 1, "r"), seq
}

// oneEventStore opens a store on a new embedded server and appends one
// event to chain c1, whose sequence it returns.
func oneEventStore(tb testing.TB) (*eventstore.NATSStore, uint64) {
	tb.Helper()
	store := eventstoretest.OpenEmbedded(tb, eventstoretest.RunEmbedded(tb, tb.TempDir()), eventstore.Config{})
	seqs, err := store.Append(context.Background(), "c1", eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("T", "a", "1", 1)}})
	if err != nil {
		tb.Fatal(err)
	}
	return store, seqs[0]
}

// TestPruningPurgesTheDeleteMarkers: the bucket's subjects, from which a
// load lists the snapshots without reading the bucket, name the objects
// kept and nothing else once pruned, even an object deleted by an older
// build (its delete marker left on its subject); a load skips such a
// deleted snapshot without calling it refused.
func TestPruningPurgesTheDeleteMarkers(t *testing.T) {
	ctx := eventstoretest.Ctx(t, time.Minute)
	store, snaps, os, seqs := keepingTwo(t, 4)
	slot := snaps.Slot("writer", "c1", 1, "r")
	for i, seq := range seqs[:3] {
		if err := slot.Save(ctx, seq, pattern(2500, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := metaSubjectNames(t, store), objectNames(t, os); !slices.Equal(got, want) || len(want) != 8 {
		t.Fatalf("after pruning, the subjects name\n%v\nthe objects are\n%v", got, want)
	}
	// given the newest deleted as the Object Store deletes (a marker left)
	newest := fmt.Sprintf("writer.c1.%020d", seqs[2])
	if err := os.Delete(ctx, newest); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(metaSubjectNames(t, store), newest) {
		t.Fatalf("%s: the Object Store purged its subject itself: this test no longer tests the marker", newest)
	}
	seq, data, skipped, err := slot.Load(ctx)
	if err != nil || seq != seqs[1] || !bytes.Equal(data, pattern(2500, 1)) || len(skipped) != 0 {
		t.Fatalf("newest deleted: seq %d (want %d), skipped %v, %v", seq, seqs[1], skipped, err)
	}
	// when the next snapshot is taken, its prune purges the marker too
	if err := slot.Save(ctx, seqs[3], pattern(2500, 3)); err != nil {
		t.Fatal(err)
	}
	got, want := metaSubjectNames(t, store), objectNames(t, os)
	kept := []string{fmt.Sprintf("writer.c1.%020d", seqs[1]), fmt.Sprintf("writer.c1.%020d", seqs[3])}
	if !slices.Equal(got, want) || slices.Contains(got, newest) || !slices.Equal(manifests(want), kept) {
		t.Fatalf("after the next prune, the subjects name\n%v\nthe objects are\n%v", got, want)
	}
}

// metaSubjectNames lists, sorted, the names the snapshot bucket's stream
// holds a description subject for, deleted objects' included.
func metaSubjectNames(t *testing.T, store *eventstore.NATSStore) []string {
	t.Helper()
	js, err := jetstream.New(store.Conn())
	if err != nil {
		t.Fatal(err)
	}
	ctx := eventstoretest.Ctx(t, time.Minute)
	s, err := js.Stream(ctx, "OBJ_"+snapshot.BucketDefault)
	if err != nil {
		t.Fatal(err)
	}
	prefix := "$O." + snapshot.BucketDefault + ".M."
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for subj := range info.State.Subjects {
		name, err := base64.URLEncoding.DecodeString(strings.TrimPrefix(subj, prefix))
		if err != nil {
			t.Fatalf("subject %s: %v", subj, err)
		}
		names = append(names, string(name))
	}
	slices.Sort(names)
	return names
}

// manifests keeps the names of snapshots among names, not of their parts.
func manifests(names []string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return strings.HasPrefix(n, "part.") })
}

// keepingTwo opens, on a new server, snapshots that keep two of each kind,
// in parts of 1 000 bytes, and appends n events to chain c1.
func keepingTwo(t *testing.T, n int) (*eventstore.NATSStore, *snapshot.Bucket, jetstream.ObjectStore, []uint64) {
	t.Helper()
	store := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	ctx := eventstoretest.Ctx(t, time.Minute)
	cfg := partsConfig
	cfg.Keep = 2
	snaps, err := snapshot.Open(ctx, store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var evs []eventstore.Event
	for i := range n {
		evs = append(evs, eventstoretest.Ev("T", "a", "1", i+1))
	}
	seqs, err := store.Append(ctx, "c1", eventstore.AppendRequest{Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	return store, snaps, snapshotBucket(t, store), seqs
}

// TestASnapshotCutShortLeavesNoChunkBehind: a store cancelled while it
// sends a part (the writer's close abandoning a paced store) ends with an
// error wrapping context.Canceled and leaves nothing in the bucket: no
// manifest, and none of the part's chunks, which would be under no name
// that a prune lists, kept for ever.
func TestASnapshotCutShortLeavesNoChunkBehind(t *testing.T) {
	store, seq := oneEventStore(t)
	snaps, err := snapshot.Open(context.Background(), store, snapshot.Config{Key: snapKey, ChunkBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	slot := snaps.Slot("writer", "c1", 1, "r").Paced(snapshot.Pace{BytesPerSecond: 256 << 10})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	if err := slot.Save(ctx, seq, pattern(1<<20, 3)); !errors.Is(err, context.Canceled) {
		t.Fatalf("a store cut short after 0.3 s of 4 s: %v, want context.Canceled", err)
	}
	js, err := jetstream.New(store.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(eventstoretest.Ctx(t, time.Minute), "OBJ_"+snapshot.BucketDefault)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(eventstoretest.Ctx(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Fatalf("the bucket holds %d messages (%d bytes) after a store cut short, want none", info.State.Msgs, info.State.Bytes)
	}
}

// TestAPruneSweepsTheChunksACrashLeft: the chunks a store cut short by a
// crash left (under a NUID that no object's description names) are purged
// by a prune once their newest is older than OrphanChunkAge, and not
// before (they may be a store in progress); the snapshots kept still load.
func TestAPruneSweepsTheChunksACrashLeft(t *testing.T) {
	ctx := eventstoretest.Ctx(t, time.Minute)
	store, seq := oneEventStore(t)
	age := 500 * time.Millisecond
	snaps, err := snapshot.Open(ctx, store, snapshot.Config{Key: snapKey, OrphanChunkAge: age})
	if err != nil {
		t.Fatal(err)
	}
	slot := snaps.Slot("writer", "c1", 1, "r")
	js, err := jetstream.New(store.Conn())
	if err != nil {
		t.Fatal(err)
	}
	orphan := "$O." + snapshot.BucketDefault + ".C.crashedstore0000000000"
	for range 3 {
		if _, err := js.Publish(ctx, orphan, pattern(64<<10, 5)); err != nil {
			t.Fatal(err)
		}
	}
	bucket, err := js.Stream(ctx, "OBJ_"+snapshot.BucketDefault)
	if err != nil {
		t.Fatal(err)
	}
	orphans := func() uint64 {
		info, err := bucket.Info(ctx, jetstream.WithSubjectFilter(orphan))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects[orphan]
	}
	data := pattern(300<<10, 9)
	// a prune while they are young keeps them
	if err := slot.Save(ctx, seq, data); err != nil {
		t.Fatal(err)
	}
	if n := orphans(); n != 3 {
		t.Fatalf("%d orphan chunks after a prune within %s of them, want the 3 kept", n, age)
	}
	// a prune once they are older purges them
	time.Sleep(age)
	if err := slot.Save(ctx, seq, data); err != nil {
		t.Fatal(err)
	}
	if n := orphans(); n != 0 {
		t.Fatalf("%d orphan chunks after a prune %s after them, want none", n, age)
	}
	if _, got, _, err := slot.Load(ctx); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the snapshot kept loads %d bytes (%v), want the %d stored", len(got), err, len(data))
	}
}
