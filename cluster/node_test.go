package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/settlement"
	"github.com/nats-io/nats.go"
)

// testNode is a Node running on its own connection to a cluster.
type testNode struct {
	*Node
	store *eventstore.NATSStore
	stop  context.CancelFunc
	done  chan struct{} // closed when Run has returned
}

// startNode runs a node named name on cluster c, stopped at cleanup.
func startNode(tb testing.TB, c *eventstoretest.Cluster, name string) *testNode {
	tb.Helper()
	return runNode(tb, openStore(tb, c.URLs(), 3, nats.ReconnectBufSize(-1)), name, 3, writerConfig(tb), nil)
}

// runNode runs a node named name on store, with streams and buckets of
// replicas and its writer configured by wcfg (its logger is the node's)
// and its committer by ccfg (nil: seals only), stopped at cleanup.
func runNode(tb testing.TB, store *eventstore.NATSStore, name string, replicas int, wcfg settlement.Config, ccfg *eventstore.CommitterConfig) *testNode {
	tb.Helper()
	lease, err := eventstore.OpenLease(eventstoretest.Ctx(tb, 30*time.Second), store.Conn(), "s0",
		eventstore.LeaseConfig{Holder: name, Replicas: replicas})
	if err != nil {
		tb.Fatal(err)
	}
	committer := eventstore.CommitterConfig{SealKey: testSealKey}
	if ccfg != nil {
		committer = *ccfg
	}
	n, err := NewNode(NodeConfig{Store: store, Lease: lease, Writer: wcfg, Committer: committer, Logger: wcfg.Logger})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tn := &testNode{Node: n, store: store, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(tn.done)
		if err := n.Run(ctx); err != nil {
			tb.Errorf("node %s: %v", name, err)
		}
	}()
	tb.Cleanup(func() {
		cancel()
		<-tn.done
	})
	return tn
}

// waitRole waits until n has role r.
func waitRole(tb testing.TB, n *testNode, r Role, within time.Duration) {
	tb.Helper()
	eventstoretest.Eventually(tb, within, func() error {
		if s := n.Status(); s.Role != r {
			return fmt.Errorf("role %s, want %s", s.Role, r)
		}
		return nil
	})
}

// firstSuccess deposits through n until a deposit is acknowledged and
// returns how long it took and how many attempts failed.
func firstSuccess(tb testing.TB, n *testNode, key string, within time.Duration) (time.Duration, int) {
	tb.Helper()
	start := time.Now()
	failed := 0
	for time.Since(start) < within {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := deposit(ctx, n, "p1", 100, key)
		cancel()
		if err == nil {
			return time.Since(start), failed
		}
		failed++
		time.Sleep(20 * time.Millisecond) // a client's pause between retries
	}
	tb.Fatalf("no deposit acknowledged through the standby within %s", within)
	return 0, 0
}

// writerAndStandby starts a 3-node cluster (skipped in -short), node a
// on it, once a is the writer node b.
func writerAndStandby(t *testing.T) (*eventstoretest.Cluster, *testNode, *testNode) {
	t.Helper()
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	c := eventstoretest.StartCluster(t)
	a := startNode(t, c, "a")
	waitRole(t, a, RoleWriter, 20*time.Second)
	return c, a, startNode(t, c, "b")
}

// TestNodeTakeover: the first node becomes the writer, the second stays a
// standby that forwards; a graceful stop of the writer hands the lease over
// at once, and when the new writer then loses NATS, the other takes over
// after the TTL. Every acknowledged deposit is in the balance.
func TestNodeTakeover(t *testing.T) {
	c, a, b := writerAndStandby(t)
	ctx := eventstoretest.Ctx(t, 2*time.Minute)
	acked := 0
	for i := range 5 {
		if _, err := deposit(ctx, b, "p1", 100, fmt.Sprintf("fwd-%d", i)); err != nil {
			t.Fatalf("deposit through the standby: %v", err)
		}
		acked++
	}
	if s := b.Status(); s.Role != RoleStandby || s.Holder != "a" || s.Term == 0 {
		t.Fatalf("standby's status %+v, want standby with holder a", s)
	}
	if s, sb := a.Status(), b.Status(); s.Role != RoleWriter || s.Holder != "a" || s.Term != sb.Term {
		t.Fatalf("writer's status %+v, want the writer naming itself at the standby's term %d", s, sb.Term)
	}

	// Graceful stop: the lease is released at once.
	stopped := time.Now()
	a.stop()
	<-a.done
	took, failed := firstSuccess(t, b, "after-stop", 10*time.Second)
	acked++
	t.Logf("graceful handover: first command acknowledged by the new writer %s after the stop returned, %s after it began (%d failed attempts)", took, time.Since(stopped), failed)
	if took > 2*time.Second {
		t.Errorf("graceful handover took %s, want well under the TTL", took)
	}
	waitRole(t, b, RoleWriter, time.Second)

	// The writer loses NATS: another node takes over once the lease
	// expires, and the old writer steps down.
	d := startNode(t, c, "d")
	waitRole(t, d, RoleStandby, 5*time.Second)
	eventstoretest.Eventually(t, 10*time.Second, func() error {
		if d.Status().FollowerSeq < b.LastSeq() {
			return errors.New("standby behind")
		}
		return nil
	})
	before := b.LastSeq()
	// The position d's reads wait for (min_seq) never goes back, not
	// while it swaps its follower for a writer.
	watching, backwards := make(chan struct{}), make(chan string, 1)
	go func() {
		defer close(backwards)
		var last uint64
		for {
			select {
			case <-watching:
				return
			default:
			}
			seq := d.LastSeq()
			if seq < last {
				backwards <- fmt.Sprintf("d's LastSeq went back from %d to %d", last, seq)
				return
			}
			last = seq
		}
	}()
	b.store.Conn().Close()
	took, failed = firstSuccess(t, d, "after-cut", 15*time.Second)
	close(watching)
	if msg, ok := <-backwards; ok {
		t.Error(msg)
	}
	acked++
	t.Logf("writer cut off from NATS: first command acknowledged by the new writer %s after the cut (%d failed attempts)", took, failed)
	if took > 5*time.Second {
		t.Errorf("takeover after a lost writer took %s, want about the TTL (2s)", took)
	}
	waitRole(t, b, RoleStandby, 5*time.Second)
	// Its fresh follower starts from the first event; the position its
	// reads wait for does not go back with it.
	if got := b.LastSeq(); got < before {
		t.Errorf("the old writer's LastSeq went back from %d to %d as it stepped down", before, got)
	}

	// Every acknowledged deposit is there, once.
	res, err := deposit(ctx, d, "p1", 100, "last")
	if err != nil {
		t.Fatal(err)
	}
	acked++
	if bal := res.Events[0].(*domain.FundsDeposited).Balance; bal != domain.Amount(acked*100) {
		t.Fatalf("balance %s after %d acknowledged deposits of 1.00", bal, acked)
	}
}

// TestForwardGivesUpWhenTheLeaseMoves: a writer that holds the lease, takes
// a forwarded command and dies before answering (here: a ghost that never
// answers and stops renewing) costs its client the lease's TTL, not
// ForwardWaitMax: the standby's forward gives up when the lease expires,
// with 503's retry-with-the-key error, and the retry is executed by the
// next writer.
func TestForwardGivesUpWhenTheLeaseMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	c := eventstoretest.StartCluster(t)
	ghostStore := openStore(t, c.URLs(), 3)
	ctx := eventstoretest.Ctx(t, 2*time.Minute)
	ghost, err := eventstore.OpenLease(ctx, ghostStore.Conn(), "s0", eventstore.LeaseConfig{Holder: "ghost", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	term, err := ghost.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The ghost renews until the command reaches it, then dies.
	swallowing := make(chan struct{})
	go func() {
		tick := time.NewTicker(ghost.TTL() / 4)
		defer tick.Stop()
		for {
			select {
			case <-swallowing:
				return
			case <-tick.C:
				if err := ghost.Renew(ctx); err != nil {
					t.Errorf("ghost's renewal: %v", err)
					return
				}
			}
		}
	}()
	swallowed := make(chan struct{}, 16)
	var once sync.Once
	sub, err := ghostStore.Conn().Subscribe(TermSubject("s0", term), func(*nats.Msg) {
		once.Do(func() { close(swallowing) })
		swallowed <- struct{}{}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	b := startNode(t, c, "b")
	eventstoretest.Eventually(t, 10*time.Second, func() error {
		if s := b.Status(); s.Holder != "ghost" {
			return fmt.Errorf("standby sees holder %q", s.Holder)
		}
		return nil
	})

	start := time.Now()
	_, err = b.Execute(ctx, domain.ConfigureAccount{Player: "p1", By: operator})
	took := time.Since(start)
	select {
	case <-swallowed:
	default:
		t.Fatal("the command never reached the ghost writer")
	}
	if !errors.Is(err, api.ErrNotReady) {
		t.Fatalf("forward to a writer that died: %v, want api.ErrNotReady", err)
	}
	t.Logf("forward to a dead writer gave up after %s (lease TTL %s, ForwardWaitMax %s)", took, ghost.TTL(), ForwardWaitMax)
	if took >= ForwardWaitMax {
		t.Fatalf("forward gave up after %s: it waited out ForwardWaitMax instead of the lease", took)
	}
	sub.Unsubscribe()
	waitRole(t, b, RoleWriter, 10*time.Second)
	if _, err := deposit(ctx, b, "p1", 100, "retry"); err != nil {
		t.Fatalf("the retry on the new writer: %v", err)
	}
}

// TestAStandbyThatCannotSeeTheLeaseRenewedSaysSo: a standby reads the
// lease every half TTL. With two NATS nodes of three stopped (no quorum:
// nothing is written, and a replica still answers reads as of before), it
// no longer says that a writer holds the lease once it has gone
// leaseUnseenTTLs TTLs without seeing it renewed, and says why (before, it
// named the last holder and stayed ready for the whole outage while every
// command answered 503), and the writer, which stepped down, never says
// ready meanwhile; with the nodes back the standby is ready again and a
// deposit through it is acknowledged.
func TestAStandbyThatCannotSeeTheLeaseRenewedSaysSo(t *testing.T) {
	c, a, b := writerAndStandby(t)
	eventstoretest.Eventually(t, 10*time.Second, b.Err)
	// Both at once: one after the other, a node connected to the first
	// may lose its lease to the other meanwhile.
	lost := time.Now()
	var stopping sync.WaitGroup
	for _, i := range []int{1, 2} {
		stopping.Go(func() { c.Stop(i) })
	}
	stopping.Wait()
	// The writer steps down within the TTL; once a standby, it must not
	// say ready either (the last value of its watch, its own renewal,
	// named it holder again for seconds).
	eventstoretest.Eventually(t, 20*time.Second, func() error {
		if s := a.Status(); s.Role == RoleStandby && a.Err() == nil {
			t.Fatalf("the writer that stepped down %s after the quorum was lost says ready, holder %q", time.Since(lost).Round(time.Millisecond), s.Holder)
		}
		if err := b.Err(); err == nil || !errors.Is(err, api.ErrNotReady) || !strings.Contains(err.Error(), "the writer lease of a has not been seen renewed for") {
			return fmt.Errorf("the standby %s after the quorum was lost: %v", time.Since(lost).Round(time.Millisecond), err)
		}
		return nil
	})
	t.Logf("the standby said so %s after the quorum was lost: %v", time.Since(lost).Round(time.Millisecond), b.Err())
	c.Start(t, 1)
	c.Start(t, 2)
	eventstoretest.Eventually(t, time.Minute, b.Err)
	firstSuccess(t, b, "back", time.Minute)
}

// TestAStandbyWhoseForwardFindsNoWriterSaysSo: a holder that renews its
// lease but serves nothing (its service gone: a writer stepping down, or
// dead with its lease not yet expired) makes a forwarded command find no
// writer; the standby's readiness then says so at once, where it said
// ready until the lease had gone unrenewed for two TTLs, and ready again
// once the lease moves on (here: the holder renews it).
func TestAStandbyWhoseForwardFindsNoWriterSaysSo(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	c := eventstoretest.StartCluster(t)
	ctx := eventstoretest.Ctx(t, 2*time.Minute)
	ghost, err := eventstore.OpenLease(ctx, openStore(t, c.URLs(), 3).Conn(), "s0", eventstore.LeaseConfig{Holder: "ghost", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ghost.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	renew := func() {
		if err := ghost.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	b := startNode(t, c, "b")
	eventstoretest.Eventually(t, 10*time.Second, func() error {
		renew()
		return b.Err()
	})
	// Without renewals now (the last one's watch value may still be on
	// its way, and a newer revision clears what a forward found).
	eventstoretest.Eventually(t, 10*time.Second, func() error {
		if _, err := b.Execute(ctx, domain.ConfigureAccount{Player: "p1", By: operator}); !errors.Is(err, ErrNoWriter) {
			t.Fatalf("a command forwarded to a holder that serves nothing: %v", err)
		}
		if err := b.Err(); err == nil || !strings.Contains(err.Error(), "the writer lease is ghost's, but no writer answers its term") {
			return fmt.Errorf("the standby's readiness after its forward found no writer: %v", err)
		}
		return nil
	})
	eventstoretest.Eventually(t, 10*time.Second, func() error {
		renew()
		return b.Err()
	})
}

// failingMark is a high-water mark whose first loads fail as a read of a
// cluster that times out does: the committer's start, and so the
// writer's open, fails before it touches the standby's ledger.
type failingMark struct {
	mu    sync.Mutex
	fails int
}

func (m *failingMark) Load(context.Context) (eventstore.Head, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fails > 0 {
		m.fails--
		return eventstore.Head{}, false, fmt.Errorf("read high-water mark of chain s0: %w", context.DeadlineExceeded)
	}
	return eventstore.Head{}, false, nil
}

func (*failingMark) Advance(eventstore.Head) {}
func (*failingMark) Close() error            { return nil }

// A writer whose open failed on a passing error tries again from the
// standby's ledger it had taken, replaying only what followed it, never
// from a fresh follower's nearly empty one.
func TestAWriterRetryKeepsTheStandbysLedger(t *testing.T) {
	c, a, b := writerAndStandby(t)
	b.stop()
	<-b.done
	ctx := eventstoretest.Ctx(t, 2*time.Minute)
	for i := range 50 {
		if _, err := deposit(ctx, a, "p1", 100, fmt.Sprintf("k-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var log eventstoretest.LogBuffer
	wcfg := writerConfig(t)
	wcfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	e := runNode(t, openStore(t, c.URLs(), 3, nats.ReconnectBufSize(-1)), "e", 3, wcfg,
		&eventstore.CommitterConfig{SealKey: testSealKey, HighWater: &failingMark{fails: 1}})
	eventstoretest.Eventually(t, 20*time.Second, func() error {
		if s := e.Status(); s.Role != RoleStandby || s.FollowerSeq < a.LastSeq() {
			return fmt.Errorf("standby e at %d of %d", s.FollowerSeq, a.LastSeq())
		}
		return nil
	})
	caughtUp := e.Status().FollowerSeq
	a.stop()
	<-a.done
	eventstoretest.Eventually(t, 20*time.Second, func() error {
		if !strings.Contains(log.String(), "writer ready") {
			return errors.New("e has not opened a writer")
		}
		return nil
	})
	logs := log.String()
	if !strings.Contains(logs, "could not open the writer; trying again") ||
		!strings.Contains(logs, "the writer opens from the ledger its last try kept") {
		t.Fatalf("e's writer did not open again from the ledger it kept:\n%s", logs)
	}
	var kept, replayed uint64
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "the writer opens from the ledger its last try kept") {
			fmt.Sscanf(line[strings.Index(line, " seq=")+1:], "seq=%d", &kept)
		}
		if strings.Contains(line, "ledger rebuilt") {
			fmt.Sscanf(line[strings.Index(line, " replayed=")+1:], "replayed=%d", &replayed)
		}
	}
	if kept < caughtUp || replayed > 10 {
		t.Fatalf("the retry opened from sequence %d (the standby had reached %d) and replayed %d events:\n%s", kept, caughtUp, replayed, logs)
	}
}

// Only a caught-up standby competes for a free lease at once; one further
// behind competes once no caught-up node has taken it for a TTL.
func TestOnlyACaughtUpStandbyCompetesAtOnce(t *testing.T) {
	const ttl = 2 * time.Second
	for _, tc := range []struct {
		lag     uint64
		freeFor time.Duration
		want    bool
	}{
		{0, 0, true},
		{CaughtUpLagMax, 0, true},
		{CaughtUpLagMax + 1, 0, false},
		{100_000, ttl, false},
		{100_000, ttl + time.Millisecond, true},
	} {
		if got := competes(tc.lag, tc.freeFor, ttl); got != tc.want {
			t.Errorf("lag %d, lease free for %s: competes %t, want %t", tc.lag, tc.freeFor, got, tc.want)
		}
	}
}
