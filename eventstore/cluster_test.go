package eventstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/snapshot"
	"github.com/nats-io/nats.go"
)

// TestClusterLeaderLoss stops the stream leader of an R3 stream while
// writers append through a committer: appends resume after the election.
// Then it stops the new leader too, so that the stream loses its quorum
// and batches in flight go unacknowledged, and restarts both nodes. Every
// acknowledged event is still there; every request that was not
// acknowledged is either fully present or fully absent; the chain still
// verifies (no fork).
func TestClusterLeaderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	c := eventstoretest.StartCluster(t)
	cfg := eventstore.Config{Stream: "LEADERLOSS", SubjectPrefix: "ll", RequestTimeout: 4 * time.Second}
	s := eventstoretest.OpenOnCluster(t, c, cfg)
	ctx := eventstoretest.Ctx(t, 90*time.Second)

	var (
		mu         sync.Mutex
		committer  eventstore.Committer
		acked      = map[string]uint64{} // event id -> sequence
		failed     [][]string            // event ids of requests not acknowledged
		generation int
	)
	// rebuild replaces the committer of generation gen, retrying until the
	// cluster answers again (bounded by ctx). Writers that notice the same
	// failure wait for the one rebuilding.
	var rebuildMu sync.Mutex
	rebuild := func(gen int) {
		rebuildMu.Lock()
		defer rebuildMu.Unlock()
		mu.Lock()
		old, current := committer, generation
		mu.Unlock()
		if current != gen {
			return
		}
		if old != nil {
			old.Close()
		}
		retry := time.NewTicker(100 * time.Millisecond)
		defer retry.Stop()
		for {
			cm, err := s.NewCommitter(ctx, "c1", eventstore.CommitterConfig{})
			if err == nil {
				mu.Lock()
				committer, generation = cm, gen+1
				mu.Unlock()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-retry.C:
			}
		}
	}
	rebuild(0)

	const writers, perWriter = 8, 200
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
					if cm.Err() != nil && gen == generation {
						t.Logf("writer %d: committer %d stopped: %v", w, gen, r.Err)
					}
				}
				mu.Unlock()
				if r.Err != nil && cm.Err() != nil {
					rebuild(gen)
				}
				if ctx.Err() != nil {
					return
				}
			}
		})
	}

	<-stopLeader
	stopStreamLeader := func() int {
		info, err := s.Stream().Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range c.Nodes {
			if n != nil && n.Name() == info.Cluster.Leader {
				mu.Lock()
				t.Logf("stopping stream leader %s with %d events acknowledged", info.Cluster.Leader, len(acked))
				mu.Unlock()
				c.Stop(i)
				return i
			}
		}
		t.Fatalf("stream leader %q not found", info.Cluster.Leader)
		return -1
	}
	first := stopStreamLeader()
	mu.Lock()
	ackedBefore := len(acked)
	mu.Unlock()
	// Appends resume after the election...
	eventstoretest.Eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(acked) < ackedBefore+300 {
			return fmt.Errorf("%d events acknowledged since the leader stopped", len(acked)-ackedBefore)
		}
		return nil
	})
	// ...then the new leader goes too: no quorum, batches in flight get
	// no acknowledgement, writers get errors until the nodes come back.
	second := stopStreamLeader()
	eventstoretest.Eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(failed) == 0 {
			return errors.New("no request failed without quorum")
		}
		return nil
	})
	c.Start(t, first)
	c.Start(t, second)
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

// TestOpenReplicatedStreamTakesAppendsAtOnce opens fresh R3 streams, each
// through one server of the cluster in turn (mostly not the leader the
// stream is about to elect), and appends the moment Open returns: Open
// waits until the stream answers on its subjects from that server, so the
// first append never meets "no responders" (an outcome the writer cannot
// tell, on which it stops). The stream holds exactly the appends: Open's
// probe stores nothing.
func TestOpenReplicatedStreamTakesAppendsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	c := eventstoretest.StartCluster(t)
	ctx := eventstoretest.Ctx(t, 2*time.Minute)
	for i := range 12 {
		cfg := eventstore.Config{Stream: fmt.Sprintf("FRESH%d", i), SubjectPrefix: fmt.Sprintf("fresh%d", i), Replicas: 3}
		s, err := eventstore.Connect(ctx, c.URL(i%len(c.Nodes)), cfg)
		if err != nil {
			t.Fatalf("open %s through node %d: %v", cfg.Stream, i%len(c.Nodes), err)
		}
		_, err = s.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("test.A", "acct", "a", i)}})
		if err != nil {
			s.Close()
			t.Fatalf("first append to %s through node %d: %v", cfg.Stream, i%len(c.Nodes), err)
		}
		if h, err := s.ChainHead(ctx, "c1"); err != nil || h.Sequence != 1 {
			s.Close()
			t.Fatalf("%s after one append: head %+v, %v; want sequence 1 (the probe stored nothing)", cfg.Stream, h, err)
		}
		s.Close()
	}
}

// TestAHungNodeIsLeftWithinSeconds connects a store to a cluster through a
// proxy in front of one node, then freezes the proxy: the node hangs with
// its connection open, as a stopped process or a partition leaves it. The
// store's pings notice and it reconnects to another node of its URL list:
// appends succeed again within seconds (nats.go's defaults took minutes).
func TestAHungNodeIsLeftWithinSeconds(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	c := eventstoretest.StartCluster(t)
	px := eventstoretest.StartProxy(t, strings.TrimPrefix(c.URL(0), "nats://"))
	ctx := eventstoretest.Ctx(t, time.Minute)
	cfg := eventstore.Config{Stream: "HUNG", SubjectPrefix: "hung", Replicas: 3, RequestTimeout: 2 * time.Second}
	s, err := eventstore.Connect(ctx, "nats://"+px.Addr+","+c.URL(1), cfg, nats.DontRandomize())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	appendOne := func(n int) error {
		_, err := s.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("test.A", "acct", "a", n)}})
		return err
	}
	if err := appendOne(0); err != nil {
		t.Fatal(err)
	}
	px.Freeze()
	hung := time.Now()
	n := 0
	eventstoretest.Eventually(t, 20*time.Second, func() error {
		n++
		return appendOne(n)
	})
	t.Logf("appends again %s after the node hung", time.Since(hung).Round(time.Millisecond))
}

// TestOpeningWaitsForTheClustersQuorum opens a writer's store, the
// snapshot bucket and the significant-event log of an R3 cluster while two
// of its nodes are down, as a node started on a cluster that is still
// restarting does: each open waits for its stream to answer instead of
// failing on its first request, and returns once the nodes are back; the
// snapshot stored before the outage is readable.
func TestOpeningWaitsForTheClustersQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	c := eventstoretest.StartCluster(t)
	ctx := eventstoretest.Ctx(t, 2*time.Minute)
	cfg := eventstore.Config{Stream: "QUORUM", SubjectPrefix: "quorum", RequestTimeout: time.Second}
	s := eventstoretest.OpenOnCluster(t, c, cfg)
	seqs, err := s.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("T", "a", "1", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	seq := seqs[0]
	head, err := s.HeadAt(ctx, "c1", seq)
	if err != nil {
		t.Fatal(err)
	}
	scfg := snapshot.Config{Key: bytes.Repeat([]byte{7}, 32)}
	snaps, err := snapshot.Open(ctx, s, scfg)
	if err != nil {
		t.Fatal(err)
	}
	meta := snapshot.Meta{Kind: "writer", Chain: "c1", Sequence: seq, Head: head.Hash, Format: 1, RuleSet: "r", CreatedAt: time.Now().UTC()}
	// (the bucket's stream was just created: its leader's interest may
	// not have reached this connection's server yet)
	eventstoretest.Eventually(t, 10*time.Second, func() error { return snaps.Put(ctx, meta, []byte("state")) })
	c.Stop(1)
	c.Stop(2)
	var (
		wg     sync.WaitGroup
		second *eventstore.NATSStore
		errs   = make([]error, 3)
	)
	wg.Go(func() {
		cfg.Replicas = 3
		second, errs[0] = eventstore.Connect(ctx, c.URLs(), cfg)
	})
	wg.Go(func() { snaps, errs[1] = snapshot.Open(ctx, s, scfg) })
	wg.Go(func() {
		_, errs[2] = eventstore.OpenSignificantLog(ctx, s.Conn(), eventstore.SignificantConfig{Replicas: 3, RequestTimeout: time.Second})
	})
	opened := make(chan struct{})
	go func() { wg.Wait(); close(opened) }()
	select {
	case <-opened:
		t.Fatalf("the opens did not wait for the quorum (%v): with one node of three nothing answers", errs)
	case <-time.After(3 * time.Second): // three request timeouts
	}
	c.Start(t, 1)
	c.Start(t, 2)
	<-opened
	for i, what := range []string{"the store", "the snapshot bucket", "the significant-event log"} {
		if errs[i] != nil {
			t.Errorf("open %s once the quorum is back: %v", what, errs[i])
		}
	}
	if t.Failed() {
		return
	}
	defer second.Close()
	if got, data, err := snaps.Latest(ctx, "writer", "c1"); err != nil || got.Sequence != seq || string(data) != "state" {
		t.Fatalf("latest after the outage: %+v %q, %v", got, data, err)
	}
	if h, err := second.ChainHead(ctx, "c1"); err != nil || h.Sequence != 1 {
		t.Fatalf("the store opened during the outage: head %+v, %v; want the one event", h, err)
	}
}

// TestAnAppendInFlightWhenTheLeaderMovesIsSettledBeforeItsTimeout appends
// one request after another through a committer whose request timeout is
// long, while the stream's leader steps down and while the server the
// committer is connected to stops: an answer lost with the old leader or
// the old connection must not hold the writer for the whole timeout. Each
// append is acknowledged or fails with its outcome unknown (the committer
// then replaced) well within the timeout, at least one of them was caught
// in flight by a move (the moves are repeated until one is), and every
// acknowledged event is on the stream once.
func TestAnAppendInFlightWhenTheLeaderMovesIsSettledBeforeItsTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	const timeout = 30 * time.Second
	ctx := eventstoretest.Ctx(t, 5*time.Minute)
	// The committer's server is not the stream's leader, and the leader
	// never steps down to it: stopping the committer's server costs its
	// connection, not an election.
	f := onAFollower(t, eventstore.Config{Stream: "MOVES", SubjectPrefix: "mv", RequestTimeout: timeout, Replicas: 3})
	c, admin, s, via := f.c, f.admin, f.s, f.via
	// target is the server the leader steps down to: neither the
	// committer's nor the leader itself.
	target := func() string {
		info, err := admin.Stream().Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.Nodes {
			if n := fmt.Sprintf("n%d", i); i != via && n != info.Cluster.Leader {
				return n
			}
		}
		return ""
	}
	var cm eventstore.Committer
	var err error
	acked := map[string]uint64{}
	sent, caught := 0, 0
	// appendSome appends n requests, one after another, and calls going
	// once appendsBeforeMove of them are answered (or it stops).
	const appendsBeforeMove = 20
	appendSome := func(n int, going func()) (slowest time.Duration) {
		defer going()
		for i := range n {
			if i == appendsBeforeMove {
				going()
			}
			if cm == nil || cm.Err() != nil {
				eventstoretest.Eventually(t, 30*time.Second, func() error {
					cm, err = s.NewCommitter(ctx, "c1", eventstore.CommitterConfig{})
					return err
				})
			}
			ev := eventstoretest.Ev("test.A", "acct", "a", sent)
			ev.ID = fmt.Sprintf("e%d", sent)
			sent++
			at := time.Now()
			r := <-cm.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{ev}})
			took := time.Since(at)
			slowest = max(slowest, took)
			// An append the move caught in flight fails with its outcome
			// unknown, or is found on the stream after the committer's
			// grace (a fraction of a second; an append takes milliseconds).
			if r.Err != nil || took > 150*time.Millisecond {
				caught++
			}
			switch {
			case r.Err == nil:
				acked[ev.ID] = r.Sequences[0]
			case !errors.Is(r.Err, eventstore.ErrOutcomeUnknown) && cm.Err() == nil:
				t.Fatalf("append: %v", r.Err)
			}
		}
		return slowest
	}
	move := func(what string, fn func()) {
		done, ready := make(chan time.Duration), make(chan struct{})
		go func() { done <- appendSome(200, sync.OnceFunc(func() { close(ready) })) }()
		<-ready // appends are flowing: one is in flight as it moves
		fn()
		if slowest := <-done; slowest >= timeout/3 {
			t.Fatalf("%s: an append took %s, its answer awaited for most of the %s timeout", what, slowest.Round(time.Millisecond), timeout)
		}
	}
	appendSome(appendsBeforeMove, func() {})
	for try := 0; caught == 0 && try < 5; try++ {
		move("the leader stepped down", func() {
			if err := stepDownTo(admin, target()); err != nil {
				t.Error(err)
			}
		})
		move("the committer's server restarted", func() {
			c.Stop(via)
			c.Start(t, via)
		})
	}
	if caught == 0 {
		t.Fatal("no append was in flight as the leader or the connection moved, in 5 tries")
	}

	got := map[string]int{}
	if _, err := admin.ReadFrom(ctx, 1, func(e eventstore.RecordedEvent) error {
		got[e.ID]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for id, seq := range acked {
		if got[id] != 1 {
			t.Errorf("acknowledged event %s at %d is on the stream %d times", id, seq, got[id])
		}
	}
}

// TestAnAppendFindingNoLeaderIsSettledOnceOneIsElected: an append published
// while the stream has no leader (its quorum lost, or between a leader's
// step-down and its successor's election) is answered at once that nobody
// serves the stream's subjects. Its outcome is then read from the leader
// elected next, as soon as JetStream announces it: a read sent into the
// election would get no answer, and hold the writer for the whole request
// timeout. The append fails with its outcome unknown (it was not stored).
func TestAnAppendFindingNoLeaderIsSettledOnceOneIsElected(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	const timeout = time.Minute
	ctx := eventstoretest.Ctx(t, 5*time.Minute)
	// The committer's server is a follower, which stays up; the two others
	// stop, taking the stream's leader and its quorum with them.
	f := onAFollower(t, eventstore.Config{Stream: "LEADERLESS", SubjectPrefix: "nl", RequestTimeout: timeout, Replicas: 3})
	c, s, leader := f.c, f.s, f.leader
	other := 3 - leader - f.via
	cm, err := s.NewCommitter(ctx, "c1", eventstore.CommitterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if r := <-cm.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("test.A", "acct", "a", 0)}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	c.Stop(leader)
	c.Stop(other)
	published := s.Conn().Stats().OutMsgs
	start := time.Now()
	answered := make(chan eventstore.AppendResult, 1)
	go func() {
		answered <- <-cm.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("test.A", "acct", "a", 1)}})
	}()
	eventstoretest.Eventually(t, 30*time.Second, func() error {
		if s.Conn().Stats().OutMsgs == published {
			return errors.New("the append is not published yet")
		}
		return nil
	})
	c.Start(t, leader)
	c.Start(t, other)
	r := <-answered
	if took := time.Since(start); !errors.Is(r.Err, eventstore.ErrOutcomeUnknown) || took >= timeout/2 {
		t.Fatalf("an append published without a leader: %v after %s, want its outcome unknown once a leader is elected, well before the %s timeout",
			r.Err, took.Round(time.Millisecond), timeout)
	}
}

// follower is a three-node cluster holding a stream, with a store on the
// whole cluster (admin) and one (s) connected only to via, a follower of
// the stream's leader: a connection that went on to another server as its
// own stopped would escape the stops of that server.
type follower struct {
	c           *eventstoretest.Cluster
	admin, s    *eventstore.NATSStore
	leader, via int
}

// onAFollower starts a cluster with cfg's stream and opens a follower's
// store on it.
func onAFollower(t *testing.T, cfg eventstore.Config) follower {
	t.Helper()
	f := follower{c: eventstoretest.StartCluster(t)}
	f.admin = eventstoretest.OpenOnCluster(t, f.c, cfg)
	info, err := f.admin.Stream().Info(eventstoretest.Ctx(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	f.leader = f.c.Index(info.Cluster.Leader)
	f.via = (f.leader + 1) % len(f.c.Nodes)
	eventstoretest.Eventually(t, 30*time.Second, func() error {
		f.s, err = eventstore.Connect(eventstoretest.Ctx(t, 15*time.Second), f.c.URL(f.via), cfg, nats.IgnoreDiscoveredServers())
		return err
	})
	t.Cleanup(func() { f.s.Close() })
	return f
}
