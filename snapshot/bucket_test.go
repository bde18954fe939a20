package snapshot_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/snapshot"
	"github.com/nats-io/nats.go/jetstream"
)

var snapKey = bytes.Repeat([]byte{7}, 32)

func TestSnapshotsKeepTheNewestAuthenticated(t *testing.T) {
	store := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	ctx := eventstoretest.Ctx(t, time.Minute)
	seq, head := oneEventHead(t, store)
	snaps, err := snapshot.Open(ctx, store, snapshot.Config{Key: snapKey, Keep: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := snaps.Latest(ctx, "writer", "c1"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("empty bucket: %v", err)
	}
	// given three snapshots, the bucket keeping two
	for i := uint64(1); i <= 3; i++ {
		meta := snapshot.Meta{Kind: "writer", Chain: "c1", Sequence: i, Head: head.Hash, Format: 1, RuleSet: "r", CreatedAt: time.Now().UTC()}
		if err := snaps.Put(ctx, meta, bytes.Repeat([]byte{byte(i)}, 300_000)); err != nil {
			t.Fatal(err)
		}
	}
	// then the newest comes back whole, with its metadata
	meta, data, err := snaps.Latest(ctx, "writer", "c1")
	if err != nil || meta.Sequence != 3 || meta.Head != head.Hash || meta.Bytes != 300_000 || data[0] != 3 || len(data) != 300_000 {
		t.Fatalf("latest: %+v, %d bytes, %v", meta, len(data), err)
	}
	// and the oldest was pruned, its part with it
	os := snapshotBucket(t, store)
	if names := objectNames(t, os); len(names) != 4 {
		t.Fatalf("objects kept %v, want 2 snapshots of one part each", names)
	}
	// when the newest's part is rewritten with other data
	part := partsOf(t, os, "writer.c1.00000000000000000003")[0]
	data[100] ^= 1
	if _, err := os.PutBytes(ctx, part, data); err != nil {
		t.Fatal(err)
	}
	data[100] ^= 1
	// then it is refused
	if _, _, err := snaps.Latest(ctx, "writer", "c1"); !errors.Is(err, snapshot.ErrRefused) {
		t.Fatalf("tampered snapshot: %v", err)
	}
	// and another key refuses an untouched one
	other, err := snapshot.Open(ctx, store, snapshot.Config{Key: bytes.Repeat([]byte{8}, 32), Bucket: "OTHER"})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Put(ctx, meta, data); err != nil {
		t.Fatal(err)
	}
	mine, err := snapshot.Open(ctx, store, snapshot.Config{Key: snapKey, Bucket: "OTHER"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := mine.Latest(ctx, "writer", "c1"); !errors.Is(err, snapshot.ErrRefused) {
		t.Fatalf("snapshot of another key: %v", err)
	}
	// and HeadAt refuses a sequence of another chain
	if _, err := store.HeadAt(ctx, "c2", seq); !errors.Is(err, eventstore.ErrInvalid) {
		t.Fatalf("head of another chain: %v", err)
	}
}

// TestASlotFallsBackToAnOlderSnapshot: when the newest snapshot fails its
// checks (here: altered after it was written), Load skips it, saying why,
// and returns the newest older one that passes; when none passes, it
// fails with the oldest's reason and the caller replays everything.
func TestASlotFallsBackToAnOlderSnapshot(t *testing.T) {
	store := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	ctx := eventstoretest.Ctx(t, time.Minute)
	seqs, err := store.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{
		eventstoretest.Ev("T", "a", "1", 1), eventstoretest.Ev("T", "a", "1", 2)}})
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.Open(ctx, store, snapshot.Config{Key: snapKey})
	if err != nil {
		t.Fatal(err)
	}
	slot := snaps.Slot("writer", "c1", 1, "r")
	for _, seq := range seqs {
		if err := slot.Save(ctx, seq, []byte{byte(seq)}); err != nil {
			t.Fatal(err)
		}
	}
	os := snapshotBucket(t, store)
	alter := func(seq uint64) {
		t.Helper()
		info, err := os.GetInfo(ctx, fmt.Sprintf("writer.c1.%020d", seq))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Put(ctx, jetstream.ObjectMeta{Name: info.Name, Metadata: info.Metadata}, bytes.NewReader([]byte{0xff})); err != nil {
			t.Fatal(err)
		}
	}
	alter(seqs[1])
	seq, data, skipped, err := slot.Load(ctx)
	if err != nil || seq != seqs[0] || !bytes.Equal(data, []byte{byte(seqs[0])}) {
		t.Fatalf("load with the newest altered: seq %d, data %v, %v; want the older at %d", seq, data, err, seqs[0])
	}
	if len(skipped) != 1 || !errors.Is(skipped[0], snapshot.ErrRefused) {
		t.Fatalf("skipped %v, want the newest refused", skipped)
	}
	alter(seqs[0])
	if _, _, skipped, err := slot.Load(ctx); !errors.Is(err, snapshot.ErrRefused) || len(skipped) != 1 {
		t.Fatalf("load with both altered: %v (skipped %v), want refused with the newer skipped", err, skipped)
	}
}

// snapshotBucket opens the default snapshot bucket directly, as someone
// with the stream's credentials could, to alter what it holds.
func snapshotBucket(t *testing.T, store *eventstore.NATSStore) jetstream.ObjectStore {
	t.Helper()
	js, err := jetstream.New(store.Conn())
	if err != nil {
		t.Fatal(err)
	}
	os, err := js.ObjectStore(eventstoretest.Ctx(t, time.Minute), snapshot.BucketDefault)
	if err != nil {
		t.Fatal(err)
	}
	return os
}

// TestASingleNodeSnapshotBucketIsNotSyncedChunkByChunk: on one node the
// bucket's stream is created with asynchronous persistence (its chunks are
// not flushed one by one on the disk the stream's commits flush to) while
// the stream of events keeps a sync before every answer; a snapshot still
// survives a clean restart of the server, and a bucket an earlier build
// created keeps the mode it has and still works.
func TestASingleNodeSnapshotBucketIsNotSyncedChunkByChunk(t *testing.T) {
	dir := t.TempDir()
	srv := eventstoretest.RunEmbedded(t, dir)
	store := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{})
	ctx := eventstoretest.Ctx(t, time.Minute)
	seq, head := oneEventHead(t, store)
	js, err := jetstream.New(store.Conn())
	if err != nil {
		t.Fatal(err)
	}
	persist := func(stream string) jetstream.PersistModeType {
		t.Helper()
		info, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		return info.CachedInfo().Config.PersistMode
	}
	meta := snapshot.Meta{Kind: "writer", Chain: "c1", Sequence: seq, Head: head.Hash, Format: 1, RuleSet: "r", CreatedAt: time.Now().UTC()}
	data := bytes.Repeat([]byte{5}, 3<<20)
	for range 2 { // created, then bound to as it is
		snaps, err := snapshot.Open(ctx, store, snapshot.Config{Key: snapKey})
		if err != nil {
			t.Fatal(err)
		}
		if err := snaps.Put(ctx, meta, data); err != nil {
			t.Fatal(err)
		}
	}
	if got := persist("OBJ_" + snapshot.BucketDefault); got != jetstream.AsyncPersistMode {
		t.Fatalf("snapshot bucket persist mode %v, want async", got)
	}
	if got := persist(store.StreamName()); got != jetstream.DefaultPersistMode {
		t.Fatalf("event stream persist mode %v, want the default (a sync before every answer)", got)
	}
	// a bucket as an earlier build created it
	if _, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "EARLIER", Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	earlier, err := snapshot.Open(ctx, store, snapshot.Config{Key: snapKey, Bucket: "EARLIER"})
	if err != nil {
		t.Fatal(err)
	}
	if err := earlier.Put(ctx, meta, data[:1000]); err != nil {
		t.Fatal(err)
	}
	if got := persist("OBJ_EARLIER"); got != jetstream.DefaultPersistMode {
		t.Fatalf("earlier bucket persist mode %v, want it kept", got)
	}
	// after a clean restart of the server, both snapshots are read back whole
	store.Close()
	srv.Shutdown()
	store = eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, dir), eventstore.Config{})
	for bucket, want := range map[string]int{snapshot.BucketDefault: len(data), "EARLIER": 1000} {
		snaps, err := snapshot.Open(ctx, store, snapshot.Config{Key: snapKey, Bucket: bucket})
		if err != nil {
			t.Fatal(err)
		}
		got, back, err := snaps.Latest(ctx, "writer", "c1")
		if err != nil || got.Sequence != seq || len(back) != want {
			t.Fatalf("%s after a restart: %+v, %d bytes, %v", bucket, got, len(back), err)
		}
	}
}

// oneEventHead appends one event to chain c1 of store and returns its
// sequence and the chain's head there.
func oneEventHead(tb testing.TB, store *eventstore.NATSStore) (uint64, eventstore.Head) {
	tb.Helper()
	return oneEventHeadOf(tb, store, "c1")
}

// oneEventHeadOf appends one event to chain of store and returns its
// sequence and the chain's head there.
func oneEventHeadOf(tb testing.TB, store *eventstore.NATSStore, chain string) (uint64, eventstore.Head) {
	tb.Helper()
	ctx := eventstoretest.Ctx(tb, time.Minute)
	seqs, err := store.Append(ctx, chain, eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("T", "a", "1", 1)}})
	if err != nil {
		tb.Fatal(err)
	}
	head, err := store.HeadAt(ctx, chain, seqs[0])
	if err != nil {
		tb.Fatal(err)
	}
	return seqs[0], head
}
