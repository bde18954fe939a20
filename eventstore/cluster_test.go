package eventstore_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// TestClusterLeaderLoss stops the stream leader of an R3 stream while
// writers append through a committer. Appends resume on a new committer
// after the election; every acknowledged event is still there; every
// request that was not acknowledged is either fully present or fully
// absent; the chain still verifies (no fork).
func TestClusterLeaderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	c := startCluster(t)
	cfg := eventstore.Config{Stream: "LEADERLOSS", SubjectPrefix: "ll", RequestTimeout: 4 * time.Second}
	s := c.open(t, cfg)
	ctx := eventstoretest.Ctx(t, 90*time.Second)

	var (
		mu         sync.Mutex
		committer  eventstore.Committer
		acked      = map[string]uint64{} // event id -> sequence
		failed     [][]string            // event ids of requests not acknowledged
		generation int
	)
	newCommitter := func() {
		eventstoretest.Eventually(t, 30*time.Second, func() error {
			cm, err := s.NewCommitter(ctx, "c1", eventstore.CommitterConfig{})
			if err != nil {
				return err
			}
			committer = cm
			generation++
			return nil
		})
	}
	newCommitter()

	const writers, perWriter = 8, 150
	stopLeader := make(chan struct{})
	var stopOnce sync.Once
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				ids := []string{fmt.Sprintf("w%d-%d-a", w, i), fmt.Sprintf("w%d-%d-b", w, i), fmt.Sprintf("w%d-%d-c", w, i)}
				req := eventstore.AppendRequest{}
				for j, id := range ids {
					ev := eventstoretest.Ev("test.A", "acct", fmt.Sprintf("w%d", w), i*3+j)
					ev.ID = id
					req.Events = append(req.Events, ev)
				}
				mu.Lock()
				cm, gen := committer, generation
				mu.Unlock()
				r := <-cm.Submit(ctx, req)
				mu.Lock()
				if r.Err == nil {
					for j, id := range ids {
						acked[id] = r.Sequences[j]
					}
					if len(acked) > 600 {
						stopOnce.Do(func() { close(stopLeader) })
					}
				} else {
					failed = append(failed, ids)
					if gen == generation { // first to notice rebuilds
						t.Logf("writer %d: committer %d stopped: %v", w, gen, r.Err)
						cm.Close()
						newCommitter()
					}
				}
				mu.Unlock()
				if ctx.Err() != nil {
					return
				}
			}
		})
	}

	<-stopLeader
	info, err := s.Stream().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := info.Cluster.Leader
	for i, n := range c.nodes {
		if n != nil && n.Name() == leader {
			t.Logf("stopping stream leader %s with %d events acknowledged", leader, len(acked))
			c.stop(i)
		}
	}
	ackedBefore := len(acked)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	committer.Close()
	if len(acked) <= ackedBefore {
		t.Fatalf("no append acknowledged after the leader stopped (%d before)", ackedBefore)
	}
	t.Logf("%d events acknowledged (%d after the leader stopped), %d requests not acknowledged", len(acked), len(acked)-ackedBefore, len(failed))

	found := map[string]uint64{}
	eventstoretest.Eventually(t, 30*time.Second, func() error {
		clear(found)
		_, err := s.ReadFrom(ctx, 1, func(ev eventstore.RecordedEvent) error {
			found[ev.ID] = ev.Sequence
			return nil
		})
		return err
	})
	for id, seq := range acked {
		if found[id] != seq {
			t.Fatalf("acknowledged event %s at %d lost (found at %d)", id, seq, found[id])
		}
	}
	for _, ids := range failed {
		n := 0
		for _, id := range ids {
			if _, ok := found[id]; ok {
				n++
			}
		}
		if n != 0 && n != len(ids) {
			t.Fatalf("request %v partially written: %d of %d events", ids, n, len(ids))
		}
	}
	if _, err := eventstore.VerifyStore(ctx, s, eventstore.NewVerifier(nil), 1); err != nil {
		t.Fatalf("chain after failover: %v", err)
	}
}
