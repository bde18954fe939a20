package snapshot_test

import (
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/snapshot"
)

// A snapshot load that meets a passing error — the cluster without its
// quorum for a moment, every request timing out — tries again within its
// bound and loads the snapshot, instead of giving it up (a start would
// then replay the whole history).
func TestASnapshotLoadRidesThroughAPassingOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	c := eventstoretest.StartCluster(t)
	ctx := eventstoretest.Ctx(t, 2*time.Minute)
	s := eventstoretest.OpenOnCluster(t, c, eventstore.Config{Stream: "PASSING", SubjectPrefix: "passing", RequestTimeout: time.Second})
	seq, head := oneEventHead(t, s)
	snaps, err := snapshot.Open(ctx, s, snapshot.Config{Key: snapKey})
	if err != nil {
		t.Fatal(err)
	}
	meta := snapshot.Meta{Kind: "writer", Chain: "c1", Sequence: seq, ChainSeq: head.ChainSeq, Head: head.Hash, Format: 1, RuleSet: "r",
		CreatedAt: time.Now().UTC()}
	eventstoretest.Eventually(t, 10*time.Second, func() error { return snaps.Put(ctx, meta, []byte("state")) })
	c.Stop(1)
	c.Stop(2)
	back := c.StartAfter(t, 1500*time.Millisecond, 1, 2)
	got, data, skipped, err := snaps.Slot("writer", "c1", 1, "r").Load(ctx)
	back()
	if err != nil || got != seq || string(data) != "state" || len(skipped) != 0 {
		t.Fatalf("load through a passing outage: sequence %d, %q, skipped %v: %v", got, data, skipped, err)
	}
}
