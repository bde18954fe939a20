package snapshot_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/snapshot"
	"github.com/nats-io/nats.go"
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
	snaps, seq := oneStoredSnapshot(t, s)
	c.Stop(1)
	c.Stop(2)
	back := c.StartAfter(t, 1500*time.Millisecond, 1, 2)
	got, data, skipped, err := snaps.Slot("writer", "c1", 1, "r").Load(ctx)
	back()
	if err != nil || got != seq || string(data) != "state" || len(skipped) != 0 {
		t.Fatalf("load through a passing outage: sequence %d, %q, skipped %v: %v", got, data, skipped, err)
	}
}

// A connection that buffers nothing while it reconnects (a cluster's
// serve: a publish must not land after another node took over) fails every
// request of that moment at once: that is a passing error too, and a load
// that meets it waits for the connection rather than give its snapshot up
// (a standby would then replay the whole history).
func TestASnapshotLoadWaitsForItsConnectionToReconnect(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	c := eventstoretest.StartCluster(t)
	ctx := eventstoretest.Ctx(t, 2*time.Minute)
	cfg := eventstore.Config{Stream: "RECONNECT", SubjectPrefix: "reconnect", Replicas: 3, RequestTimeout: time.Second}
	var s *eventstore.NATSStore
	eventstoretest.Eventually(t, 30*time.Second, func() error {
		var err error
		// Node 0 alone, so that the connection has nowhere to go while it
		// is down.
		s, err = eventstore.Connect(eventstoretest.Ctx(t, 15*time.Second), c.URL(0), cfg,
			nats.ReconnectBufSize(-1), nats.IgnoreDiscoveredServers())
		return err
	})
	t.Cleanup(func() { s.Close() })
	snaps, seq := oneStoredSnapshot(t, s)
	c.Stop(0)
	eventstoretest.Eventually(t, 10*time.Second, func() error {
		if !s.Conn().IsReconnecting() {
			return errors.New("the connection has not noticed its server is gone")
		}
		return nil
	})
	back := c.StartAfter(t, 1500*time.Millisecond, 0)
	got, data, skipped, err := snaps.Slot("writer", "c1", 1, "r").Load(ctx)
	back()
	if err != nil || got != seq || string(data) != "state" || len(skipped) != 0 {
		t.Fatalf("load while the connection reconnects: sequence %d, %q, skipped %v: %v", got, data, skipped, err)
	}
}

// oneStoredSnapshot stores a writer snapshot "state" of chain c1 at the
// one event of s, and returns its bucket and sequence.
func oneStoredSnapshot(t *testing.T, s *eventstore.NATSStore) (*snapshot.Bucket, uint64) {
	t.Helper()
	ctx := eventstoretest.Ctx(t, time.Minute)
	seq, head := oneEventHead(t, s)
	snaps, err := snapshot.Open(ctx, s, snapshot.Config{Key: snapKey})
	if err != nil {
		t.Fatal(err)
	}
	meta := snapshot.Meta{Kind: "writer", Chain: "c1", Sequence: seq, ChainSeq: head.ChainSeq, Head: head.Hash, Format: 1, RuleSet: "r",
		CreatedAt: time.Now().UTC()}
	eventstoretest.Eventually(t, 10*time.Second, func() error { return snaps.Put(ctx, meta, []byte("state")) })
	return snaps, seq
}
