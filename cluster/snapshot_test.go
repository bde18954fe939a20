package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/projections/projectionstest"
	"github.com/fdj/tresor/settlement"
	"github.com/fdj/tresor/snapshot"
)

// snapWorld is one nats-server whose nodes decide under small blocks (12
// units) and share the writer snapshot bucket.
type snapWorld struct {
	url   string
	store *eventstore.NATSStore
	snaps *snapshot.Bucket
	rules *domain.RuleSet
}

func startSnapWorld(t testing.TB, keep int) *snapWorld {
	t.Helper()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: t.TempDir(), ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	w := &snapWorld{url: srv.ClientURL(), rules: projectionstest.SmallRules(t)}
	w.store = openStore(t, w.url, 1)
	cfg := writerConfig(t)
	w.snaps, err = snapshot.Open(eventstoretest.Ctx(t, time.Minute), w.store, snapshot.Config{Key: cfg.Sealer.SnapshotKey(), Keep: keep})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// config is a node's writer configuration: snapshots every `every` events
// (none when every is 0), its log into log.
func (w *snapWorld) config(t testing.TB, every int, log *eventstoretest.LogBuffer) settlement.Config {
	cfg := writerConfig(t)
	cfg.Rules = w.rules
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	if every > 0 {
		cfg.Snapshots = settlement.WriterSnapshots(w.snaps, w.rules)
		cfg.SnapshotEvery = every
	}
	return cfg
}

// node runs a node named name on its own connection.
func (w *snapWorld) node(t *testing.T, name string, every int, log *eventstoretest.LogBuffer) *testNode {
	t.Helper()
	return runNode(t, openStore(t, w.url, 1), name, 1, w.config(t, every, log), nil)
}

// latest returns the sequence of the newest writer snapshot, 0 for none.
// A read that a writer's save prunes away under it fails: it is read again.
func (w *snapWorld) latest(t testing.TB) uint64 {
	t.Helper()
	var seq uint64
	eventstoretest.Eventually(t, 30*time.Second, func() error {
		meta, _, err := w.snaps.Latest(eventstoretest.Ctx(t, 3*time.Second), settlement.SnapshotKind, settlement.Chain)
		if errors.Is(err, snapshot.ErrNotFound) {
			seq = 0
			return nil
		}
		seq = meta.Sequence
		return err
	})
	return seq
}

// replayed replays the whole stream into a fresh ledger and encodes it.
func (w *snapWorld) replayed(t *testing.T) []byte {
	t.Helper()
	cfg := w.config(t, 0, &eventstoretest.LogBuffer{})
	l := cfg.NewLedger()
	if l.IdempotencyWindow == 0 {
		l.IdempotencyWindow = domain.IdempotencyWindowDefault
	}
	_, err := w.store.ReadFrom(eventstoretest.Ctx(t, time.Minute), 1, func(r eventstore.RecordedEvent) error {
		if r.Type == eventstore.SealType {
			return nil
		}
		e, err := domain.DecodeEvent(r.Type, r.Payload)
		if err != nil {
			return err
		}
		return l.Evolve(r.RecordedAt, e)
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := domain.EncodeLedger(l)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writerState encodes the ledger of n's writer.
func writerState(t *testing.T, n *testNode) []byte {
	t.Helper()
	w := n.localWriter()
	if w == nil {
		t.Fatal("the node has no writer")
	}
	var b []byte
	var err error
	if ierr := w.Inspect(eventstoretest.Ctx(t, time.Minute), func(l *domain.Ledger) { b, err = domain.EncodeLedger(l) }); ierr != nil {
		t.Fatal(ierr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// caughtUp waits until n's follower has applied the stream to its head.
func caughtUp(t *testing.T, w *snapWorld, n *testNode) {
	t.Helper()
	eventstoretest.Eventually(t, 30*time.Second, func() error {
		head, err := w.store.LastSequence(eventstoretest.Ctx(t, time.Minute))
		if err != nil {
			return err
		}
		if at := n.Status().FollowerSeq; at < head {
			return fmt.Errorf("the standby is at %d of %d", at, head)
		}
		return nil
	})
}

// settled waits until the follower of n, the writer, has applied the
// stream to its head and any snapshot it took is stored, and returns the
// newest snapshot's sequence.
func settled(t *testing.T, w *snapWorld, n *testNode) uint64 {
	t.Helper()
	eventstoretest.Eventually(t, 10*time.Second, func() error {
		n.mu.Lock()
		f := n.follower
		n.mu.Unlock()
		if at, head := f.position(), n.LastSeq(); at < head {
			return fmt.Errorf("follower at %d of %d", at, head)
		}
		return nil
	})
	// A snapshot due is encoded and stored within milliseconds here: the
	// newest is the one that stays.
	last := w.latest(t)
	for range 50 {
		time.Sleep(200 * time.Millisecond)
		now := w.latest(t)
		if now == last {
			return now
		}
		last = now
	}
	t.Fatal("the newest snapshot keeps moving")
	return 0
}

// followerProgress returns where n's follower started and what it applied.
func followerProgress(n *testNode) (uint64, int) {
	n.mu.Lock()
	f := n.follower
	n.mu.Unlock()
	return f.progress()
}

// play places a stake of 1.00 for p with key and makes its first throw;
// the play stays in progress.
func play(t *testing.T, ctx context.Context, n *testNode, p, key string) string {
	t.Helper()
	r, err := n.Execute(ctx, domain.PlaceStake{Player: p, Stake: 100, Key: key})
	if err != nil {
		t.Fatalf("stake %s: %v", key, err)
	}
	id := r.Events[0].(*domain.StakePlaced).Play
	if _, err := n.Execute(ctx, domain.MakeThrow{Player: p, Play: id, Throw: 1}); err != nil {
		t.Fatalf("throw of %s: %v", key, err)
	}
	return id
}

// answer is what a command got: its result, or its refusal.
type answer struct {
	Res settlement.Result
	Err string
}

func ask(ctx context.Context, w interface {
	Execute(context.Context, domain.Command) (settlement.Result, error)
}, cmds []domain.Command) []answer {
	out := make([]answer, len(cmds))
	for i, c := range cmds {
		r, err := w.Execute(ctx, c)
		// A replay's At is the writer's position when it answered, which
		// grows with the stream (the reference writer answers after the
		// other's closing seal), not part of what was decided.
		r.At = 0
		out[i].Res = r
		if err != nil {
			out[i].Err = err.Error()
		}
	}
	return out
}

// TestAStandbyFromASnapshotReplaysOnlyTheTail: a writer that took over a
// standby's ledger takes writer snapshots; a standby started later follows
// from the newest one and applies only the events after it; when it takes
// over, its ledger is the one a full replay of the stream gives, and it
// answers retries, throws and stakes as a writer that replayed everything.
func TestAStandbyFromASnapshotReplaysOnlyTheTail(t *testing.T) {
	w := startSnapWorld(t, 3)
	ctx := eventstoretest.Ctx(t, 3*time.Minute)
	var la, lb, lc eventstoretest.LogBuffer
	a := w.node(t, "a", 10, &la)
	waitRole(t, a, RoleWriter, 20*time.Second)
	b := w.node(t, "b", 10, &lb)
	// given a history: an emission of two small blocks, funded players, a
	// play in progress and remembered keys
	if _, err := a.Execute(ctx, domain.CreateEmission{Price: 100, Blocks: 2}); err != nil {
		t.Fatal(err)
	}
	var retries []domain.Command
	for i := range 6 {
		p, key := fmt.Sprint("p", i%3), fmt.Sprint("fund-", i)
		if _, err := deposit(ctx, b, p, 1000, key); err != nil {
			t.Fatalf("deposit through the standby: %v", err)
		}
		retries = append(retries, domain.Deposit{Player: p, Amount: 1000, Key: key, By: operator})
	}
	early := play(t, ctx, a, "p0", "early")
	caughtUp(t, w, b)

	// when the writer stops and b takes over from its follower's ledger
	a.stop()
	<-a.done
	waitRole(t, b, RoleWriter, 10*time.Second)
	if !strings.Contains(lb.String(), "the writer opens from the standby's ledger") {
		t.Fatalf("b did not take its follower's ledger over:\n%s", lb.String())
	}
	// and its next follower (its standby ledger after a step-down) starts
	// from a's snapshot, not the first event
	// (it loads it in the background: on a busy machine, after the role
	// changed; seen once in CI)
	before := w.latest(t)
	if before == 0 {
		t.Fatal("a took no snapshot")
	}
	deadline := time.Now().Add(20 * time.Second)
	for from, _ := followerProgress(b); from == 0; from, _ = followerProgress(b) {
		if time.Now().After(deadline) {
			t.Fatalf("b's new follower starts after %d (newest snapshot %d): want a snapshot\n%s", from, before, lb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 12 {
		p, key := fmt.Sprint("q", i%4), fmt.Sprint("q-", i)
		if _, err := deposit(ctx, b, p, 500, key); err != nil {
			t.Fatal(err)
		}
		retries = append(retries, domain.Deposit{Player: p, Amount: 500, Key: key, By: operator})
	}
	// then its node takes writer snapshots as it goes
	eventstoretest.Eventually(t, 20*time.Second, func() error {
		if at := w.latest(t); at <= before || at+20 < b.LastSeq() {
			return fmt.Errorf("newest snapshot at %d (%d before b wrote), b at %d", at, before, b.LastSeq())
		}
		return nil
	})
	mid := play(t, ctx, b, "q1", "mid")
	if _, err := deposit(ctx, b, "late", 700, "late-1"); err != nil {
		t.Fatal(err)
	}
	// and events past the newest snapshot: deposits until one took none
	var snapSeq uint64
	for i := 0; ; i++ {
		if _, err := deposit(ctx, b, "tail", 100, fmt.Sprint("tail-", i)); err != nil {
			t.Fatal(err)
		}
		snapSeq = settled(t, w, b)
		if snapSeq < b.LastSeq() {
			break
		}
	}

	// when a standby starts after all that
	c := w.node(t, "c", 10, &lc)
	caughtUp(t, w, c)
	// then it starts from the newest snapshot and applies only the tail
	from, applied := followerProgress(c)
	pos := c.Status().FollowerSeq
	t.Logf("standby started from the snapshot at %d and applied %d records to reach %d", from, applied, pos)
	if from == 0 || from < snapSeq || applied == 0 || uint64(applied) != pos-from || uint64(applied) >= pos/2 {
		t.Fatalf("standby from %d (newest snapshot %d) applied %d to reach %d: want only the tail", from, snapSeq, applied, pos)
	}
	if !strings.Contains(lc.String(), "starting from a snapshot") {
		t.Fatalf("the standby logs no start from a snapshot:\n%s", lc.String())
	}

	// when b stops and c takes over
	b.stop()
	<-b.done
	waitRole(t, c, RoleWriter, 10*time.Second)
	if !strings.Contains(lc.String(), fmt.Sprintf("follower_from=%d", from)) {
		t.Fatalf("c did not take over its snapshot-started ledger:\n%s", lc.String())
	}
	// then its ledger is the full replay's
	if got, want := writerState(t, c), w.replayed(t); !bytes.Equal(got, want) {
		t.Fatalf("the writer from the standby's snapshot holds %d bytes of state, the full replay %d, and they differ", len(got), len(want))
	}
	// and it decides on what came before the snapshot and after it
	cmds := append(retries,
		domain.MakeThrow{Player: "p0", Play: early, Throw: 2},
		domain.MakeThrow{Player: "q1", Play: mid, Throw: 2},
		domain.PlaceStake{Player: "p1", Stake: 100, Key: "after"},
		domain.Deposit{Player: "late", Amount: 300, Key: "late-2", By: operator},
	)
	got := ask(ctx, c, cmds)
	for i, a := range got {
		if a.Err != "" {
			t.Fatalf("command %d (%T) on the new writer: %s", i, cmds[i], a.Err)
		}
	}
	if bal := got[len(got)-1].Res.Events[0].(*domain.FundsDeposited).Balance; bal != 1000 {
		t.Fatalf("late's balance %s, want 10.00", bal)
	}
	// and a writer that replays everything has the same state and gives
	// the same answers when the same commands come again (retries, a
	// throw already made)
	mine := ask(ctx, c, cmds)
	stateC := writerState(t, c)
	c.stop()
	<-c.done
	ref := openWriterWith(t, w.store, w.config(t, 0, &eventstoretest.LogBuffer{}))
	var stateRef []byte
	if err := ref.Inspect(ctx, func(l *domain.Ledger) { stateRef, _ = domain.EncodeLedger(l) }); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stateRef, stateC) {
		t.Fatal("the writer that replayed everything holds another state than the one from the standby's snapshot")
	}
	if want := ask(ctx, ref, cmds); !reflect.DeepEqual(mine, want) {
		t.Fatalf("answers differ:\nfrom the standby's snapshot %+v\nfrom the full replay %+v", mine, want)
	}
}

// TestAStandbyIgnoresABadSnapshot: a snapshot forged without the key, one
// naming another head or written for another rule set is ignored with its
// reason, and the standby follows from the first event to the stream's
// state.
func TestAStandbyIgnoresABadSnapshot(t *testing.T) {
	for _, c := range []struct {
		name, reason string
		tamper       func(t *testing.T, w *snapWorld, meta snapshot.Meta, data []byte) error
	}{
		{"forged", "authentication fails", func(t *testing.T, w *snapWorld, meta snapshot.Meta, data []byte) error {
			forged := bytes.Replace(data, []byte(`"balance":"`), []byte(`"balance":"9`), 1)
			if bytes.Equal(forged, data) {
				t.Fatal("no balance to change")
			}
			snaps, err := snapshot.Open(eventstoretest.Ctx(t, time.Minute), w.store, snapshot.Config{Key: bytes.Repeat([]byte{1}, 32)})
			if err != nil {
				return err
			}
			return snaps.Put(eventstoretest.Ctx(t, time.Minute), meta, forged)
		}},
		{"wrong head", "the snapshot names", func(t *testing.T, w *snapWorld, meta snapshot.Meta, data []byte) error {
			meta.Head[0] ^= 1
			return w.snaps.Put(eventstoretest.Ctx(t, time.Minute), meta, data)
		}},
		{"another rule set", "rule set", func(t *testing.T, w *snapWorld, meta snapshot.Meta, data []byte) error {
			meta.RuleSet = "another-rule-set"
			return w.snaps.Put(eventstoretest.Ctx(t, time.Minute), meta, data)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// given one snapshot (the bucket keeps one) of a history,
			// taken by a cluster writer
			w := startSnapWorld(t, 1)
			ctx := eventstoretest.Ctx(t, 2*time.Minute)
			var la, lb, lc eventstoretest.LogBuffer
			a := w.node(t, "a", 5, &la)
			waitRole(t, a, RoleWriter, 20*time.Second)
			for i := range 8 {
				if _, err := deposit(ctx, a, fmt.Sprint("p", i%3), 1000, fmt.Sprint("k-", i)); err != nil {
					t.Fatal(err)
				}
			}
			a.stop()
			<-a.done
			if w.latest(t) == 0 {
				t.Fatal("the writer took no snapshot")
			}
			// and a writer without snapshots in place, and the snapshot
			// altered
			b := w.node(t, "b", 0, &lb)
			waitRole(t, b, RoleWriter, 20*time.Second)
			meta, data, err := w.snaps.Latest(ctx, settlement.SnapshotKind, settlement.Chain)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.tamper(t, w, meta, data); err != nil {
				t.Fatal(err)
			}
			if _, err := deposit(ctx, b, "p1", 100, "after"); err != nil {
				t.Fatal(err)
			}
			// when a standby starts
			s := w.node(t, "s", 5, &lc)
			caughtUp(t, w, s)
			// then it names why it ignores the snapshot and follows from
			// the first event
			logged := lc.String()
			if !strings.Contains(logged, "snapshot ignored: replaying the whole stream") || !strings.Contains(logged, c.reason) {
				t.Fatalf("the standby's log names no reason %q:\n%s", c.reason, logged)
			}
			if from, applied := followerProgress(s); from != 0 || uint64(applied) != s.Status().FollowerSeq {
				t.Fatalf("standby from %d applied %d: want the whole stream", from, applied)
			}
			// and, taking over, holds the stream's state
			b.stop()
			<-b.done
			waitRole(t, s, RoleWriter, 10*time.Second)
			if !bytes.Equal(writerState(t, s), w.replayed(t)) {
				t.Fatal("the writer's state differs from the stream's")
			}
		})
	}
}
