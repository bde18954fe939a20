package settlement

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/projections/projectionstest"
	"github.com/fdj/tresor/snapshot"
)

// loadRecorder is a snapshot.Store that remembers what its Load answered.
type loadRecorder struct {
	snapshot.Store
	seq uint64
	err error
}

func (r *loadRecorder) Load(ctx context.Context) (uint64, []byte, []error, error) {
	seq, data, skipped, err := r.Store.Load(ctx)
	r.seq, r.err = seq, err
	return seq, data, skipped, err
}

// snapshotWorld is a node of small blocks (12 units) whose writer runs on
// the test's clock, with or without snapshots.
type snapshotWorld struct {
	clock atomic.Int64
	log   eventstoretest.LogBuffer
	slot  *loadRecorder
	snaps *snapshot.Bucket
}

var snapT0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func (sw *snapshotWorld) at(t time.Time) { sw.clock.Store(t.UnixNano()) }

// start opens the node on dir; withSnapshots gives its writer the stream's
// snapshot bucket.
func (sw *snapshotWorld) start(t *testing.T, dir string, withSnapshots bool) *node {
	t.Helper()
	return startNodeWith(t, dir, func(n *node, c *Config) {
		c.Rules = projectionstest.SmallRules(t)
		c.AbandonAfter = 30 * 24 * time.Hour // plays settle when the test says
		c.Clock = func() time.Time { return time.Unix(0, sw.clock.Load()) }
		c.Logger = slog.New(slog.NewTextHandler(&sw.log, nil))
		if !withSnapshots {
			return
		}
		var err error
		sw.snaps, err = snapshot.Open(eventstoretest.Ctx(t, time.Minute), n.store, snapshot.Config{Key: c.Sealer.SnapshotKey()})
		if err != nil {
			t.Fatal(err)
		}
		sw.slot = &loadRecorder{Store: WriterSnapshots(sw.snaps, c.Rules)}
		c.Snapshots = sw.slot
	})
}

// beforeSnapshot records, at T0, what must carry across a snapshot: a
// stake limit nearly used, a raise not yet in force, plays in progress
// (one with two throws made), remembered keys, a block a quarter sold and
// a suspension of sales in force beside one resumed.
func beforeSnapshot(t *testing.T, w *Writer) {
	lim, low, high := domain.Amount(300), domain.Amount(100), domain.Amount(500)
	exec(t, w, domain.CreateEmission{Price: 100, Blocks: 1})
	for _, p := range []string{"lim", "raise", "p2", "p3"} {
		fundedPlayer(t, w, p, 10000)
	}
	exec(t, w, domain.ConfigureAccount{Player: "lim", StakeLimit: &lim})
	exec(t, w, domain.ConfigureAccount{Player: "raise", StakeLimit: &low})
	exec(t, w, domain.ConfigureAccount{Player: "raise", StakeLimit: &high})
	exec(t, w, domain.PlaceStake{Player: "lim", Stake: 100, Key: "l1"})
	exec(t, w, domain.PlaceStake{Player: "lim", Stake: 100, Key: "l2"})
	r := exec(t, w, domain.PlaceStake{Player: "p2", Stake: 100, Key: "p2-1"})
	play := r.Events[0].(*domain.StakePlaced).Play
	exec(t, w, domain.MakeThrow{Player: "p2", Play: play, Throw: 1})
	exec(t, w, domain.MakeThrow{Player: "p2", Play: play, Throw: 2})
	exec(t, w, domain.SuspendSales{Scope: "price:2.00", Reason: "screen fault", By: staff})
	exec(t, w, domain.SuspendSales{Scope: "price:0.50", Reason: "screen fault", By: staff})
	exec(t, w, domain.ResumeSales{Suspension: "S2", Reason: "fixed", By: staff})
}

// staff is the operator who suspends and resumes sales in the tests.
var staff = &domain.Actor{Role: domain.RoleOperator, Subject: "alice"}

// commandAnswer is what a command got: its events, the first result of a retried
// key, or its refusal.
type commandAnswer struct {
	Events []domain.Event
	Replay *domain.KeyRecord
	Err    string
}

// afterSnapshot drives the commands whose answers depend on what came
// before the snapshot, then sells out and settles the block, and returns
// every answer and the writer's final state.
func afterSnapshot(t *testing.T, sw *snapshotWorld, n *node) ([]commandAnswer, []byte) {
	var out []commandAnswer
	do := func(c domain.Command) {
		r, err := n.w.Execute(eventstoretest.Ctx(t, time.Minute), c)
		a := commandAnswer{Events: r.Events, Replay: r.Replay}
		if err != nil {
			a.Err = err.Error()
		}
		out = append(out, a)
	}
	var play string
	n.w.Inspect(context.Background(), func(l *domain.Ledger) {
		for id, p := range l.Plays {
			if p.Player == "p2" {
				play = id
			}
		}
	})
	sw.at(snapT0.Add(time.Hour))
	do(domain.Deposit{Player: "p3", Amount: 10000, Key: "fund-p3"}) // a retry: the first answer
	do(domain.Deposit{Player: "p3", Amount: 999, Key: "fund-p3"})   // the key with another request
	do(domain.PlaceStake{Player: "lim", Stake: 100, Key: "l2"})     // a retry
	do(domain.MakeThrow{Player: "p2", Play: play, Throw: 2})        // a throw already made
	do(domain.MakeThrow{Player: "p2", Play: play, Throw: 3})
	do(domain.PlaceStake{Player: "lim", Stake: 100, Key: "l3"}) // the limit's last euro
	do(domain.PlaceStake{Player: "lim", Stake: 100, Key: "l4"}) // refused: the window holds 3 €
	do(domain.PlaceStake{Player: "raise", Stake: 100, Key: "r1"})
	do(domain.PlaceStake{Player: "raise", Stake: 100, Key: "r2"}) // refused: the raise waits 24 h
	sw.at(snapT0.Add(25 * time.Hour))
	do(domain.PlaceStake{Player: "raise", Stake: 100, Key: "r3"}) // the raise is in force
	sw.at(snapT0.Add(7*24*time.Hour + time.Minute))
	do(domain.PlaceStake{Player: "lim", Stake: 100, Key: "l5"})                           // the window has rolled
	do(domain.PlaceStake{Player: "lim", Stake: 100, Key: "l1"})                           // a key forgotten: a new stake
	do(domain.PlaceStake{Player: "lim", Stake: 100, Key: "l5"})                           // a retry of a key recorded since
	do(domain.PlaceStake{Player: "p3", Stake: 200, Key: "p3-2€"})                         // refused: suspended
	do(domain.SuspendSales{Scope: "price:2", Reason: "screen fault", By: staff})          // a retry: S1
	do(domain.ResumeSales{Suspension: "S2", Reason: "again", By: staff})                  // refused: resumed already
	do(domain.SuspendSales{Scope: "price:0.50", Reason: "screen fault again", By: staff}) // S3
	for i := range 6 {                                                                    // the block sells out
		do(domain.PlaceStake{Player: "p3", Stake: 100, Key: fmt.Sprint("p3-", i)})
	}
	var plays []string
	n.w.Inspect(context.Background(), func(l *domain.Ledger) {
		for id := range l.Plays {
			plays = append(plays, id)
		}
	})
	slices.Sort(plays)
	for _, id := range plays {
		do(domain.CompletePlay{Play: id})
	}
	n.waitClosed(1)
	var state []byte
	n.w.Inspect(context.Background(), func(l *domain.Ledger) {
		var err error
		if state, err = domain.EncodeLedger(l); err != nil {
			t.Fatal(err)
		}
	})
	return out, state
}

// streamState replays the node's whole stream into a fresh ledger under
// the small rules, and encodes it.
func streamState(t *testing.T, n *node) ([]byte, *domain.Ledger) {
	t.Helper()
	l := domain.NewLedger(projectionstest.SmallRules(t))
	l.IdempotencyWindow = domain.IdempotencyWindowDefault
	_, err := n.log.Replay(eventstoretest.Ctx(t, time.Minute), 0, func(_ uint64, at time.Time, e domain.Event) error { return l.Evolve(at, e) })
	if err != nil {
		t.Fatal(err)
	}
	b, err := domain.EncodeLedger(l)
	if err != nil {
		t.Fatal(err)
	}
	return b, l
}

func TestAWriterFromASnapshotDecidesAsOneThatReplayedEverything(t *testing.T) {
	// given a stream whose writer took a snapshot as it closed
	dir := t.TempDir()
	var first snapshotWorld
	first.at(snapT0)
	n := first.start(t, dir, true)
	beforeSnapshot(t, n.w)
	n.stop()
	// and a copy of it
	copyDir := t.TempDir()
	if err := os.CopyFS(copyDir, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	// when one writer starts from the snapshot and another replays the
	// whole copy, and both are given the same commands
	var fromSnap, fromStream snapshotWorld
	fromSnap.at(snapT0)
	fromStream.at(snapT0)
	a := fromSnap.start(t, dir, true)
	if fromSnap.slot.err != nil || fromSnap.slot.seq == 0 || !strings.Contains(fromSnap.log.String(), "replayed=0") {
		t.Fatalf("the writer did not start from the snapshot: %v\n%s", fromSnap.slot.err, fromSnap.log.String())
	}
	answersA, stateA := afterSnapshot(t, &fromSnap, a)
	b := fromStream.start(t, copyDir, false)
	answersB, stateB := afterSnapshot(t, &fromStream, b)
	// then they answer alike, command for command, and end in one state
	refused := 0
	for i := range answersA {
		if !reflect.DeepEqual(answersA[i], answersB[i]) {
			t.Fatalf("command %d: from the snapshot %+v, from the stream %+v", i, answersA[i], answersB[i])
		}
		if answersA[i].Err != "" {
			refused++
		}
	}
	if refused != 7 || !bytes.Equal(stateA, stateB) {
		t.Fatalf("%d refusals (want 7: conflict, two limits, no block twice, suspended, resumed already); states of %d and %d bytes", refused, len(stateA), len(stateB))
	}
	// and the full replay of the snapshot's stream agrees with both
	if replayed, _ := streamState(t, a); !bytes.Equal(replayed, stateA) {
		t.Fatal("the stream replayed gives another state than the writer's")
	}
}

func TestATamperedSnapshotIsIgnoredForTheFullReplay(t *testing.T) {
	dir := t.TempDir()
	var sw snapshotWorld
	sw.at(snapT0)
	n := sw.start(t, dir, true)
	beforeSnapshot(t, n.w)
	n.stop()
	ctx := eventstoretest.Ctx(t, time.Minute)
	for _, c := range []struct {
		name, reason string
		tamper       func(meta *snapshot.Meta, data []byte) []byte
	}{
		{"changed balance", "authentication fails", nil},
		{"wrong head hash", "the snapshot names", func(m *snapshot.Meta, d []byte) []byte { m.Head[0] ^= 1; return d }},
		{"truncated", "ledger snapshot", func(_ *snapshot.Meta, d []byte) []byte { return d[:len(d)/2] }},
		{"unknown version", "format version 99", func(m *snapshot.Meta, d []byte) []byte { m.Format = 99; return d }},
	} {
		t.Run(c.name, func(t *testing.T) {
			// given a snapshot altered: by someone without the key (its
			// authentication fails), or written with the key but naming
			// another head, truncated or of an unknown version
			sw.log = eventstoretest.LogBuffer{}
			n := sw.start(t, dir, true)
			n.w.Close()
			meta, data, err := sw.snaps.Latest(ctx, SnapshotKind, Chain)
			if err != nil {
				t.Fatal(err)
			}
			if c.tamper == nil {
				forged := bytes.Replace(data, []byte(`"player":"p3","balance":"100.00"`), []byte(`"player":"p3","balance":"999.99"`), 1)
				if bytes.Equal(forged, data) {
					t.Fatal("no balance to change")
				}
				snaps, err := snapshot.Open(ctx, n.store, snapshot.Config{Key: bytes.Repeat([]byte{1}, 32)})
				if err != nil {
					t.Fatal(err)
				}
				err = snaps.Put(ctx, meta, forged)
			} else {
				err = sw.snaps.Put(ctx, meta, c.tamper(&meta, data))
			}
			if err != nil {
				t.Fatal(err)
			}
			n.stop()
			// when the writer starts, it names why it ignores it and
			// replays the whole stream, which gives the right state
			n = sw.start(t, dir, true)
			if logged := sw.log.String(); !strings.Contains(logged, "snapshot ignored") || !strings.Contains(logged, c.reason) {
				t.Fatalf("log names no reason %q:\n%s", c.reason, logged)
			}
			want, l := streamState(t, n)
			var got []byte
			n.w.Inspect(context.Background(), func(l *domain.Ledger) { got, _ = domain.EncodeLedger(l) })
			if !bytes.Equal(got, want) || l.Accounts["p3"].Balance != 10000 {
				t.Fatalf("the writer's state differs from the stream's (p3 holds %s)", l.Accounts["p3"].Balance)
			}
			n.stop()
		})
	}
}

func TestSnapshotsAreTakenEveryNEventsWhileTheWriterRuns(t *testing.T) {
	var sw snapshotWorld
	sw.at(snapT0)
	n := startNodeWith(t, t.TempDir(), func(n *node, c *Config) {
		c.Rules = projectionstest.SmallRules(t)
		c.SnapshotEvery = 10
		snaps, err := snapshot.Open(eventstoretest.Ctx(t, time.Minute), n.store, snapshot.Config{Key: c.Sealer.SnapshotKey(), Keep: 2})
		if err != nil {
			t.Fatal(err)
		}
		sw.snaps = snaps
		c.Snapshots = WriterSnapshots(snaps, c.Rules)
	})
	// given a running writer that snapshots every 10 events
	exec(t, n.w, domain.CreateEmission{Price: 100, Blocks: 1})
	for i := range 8 {
		fundedPlayer(t, n.w, fmt.Sprint("p", i), 1000)
	}
	// then snapshots follow it without a stop, the newest a few events
	// behind at most
	eventstoretest.Eventually(t, 10*time.Second, func() error {
		meta, _, err := sw.snaps.Latest(eventstoretest.Ctx(t, time.Minute), SnapshotKind, Chain)
		if err != nil {
			return err
		}
		if last := n.w.LastSeq(); meta.Sequence+10 < last {
			return fmt.Errorf("newest snapshot at %d, the writer at %d", meta.Sequence, last)
		}
		return nil
	})

}

func TestTheFollowerAppliesTheEventsReplayedAfterItsSnapshot(t *testing.T) {
	dir := t.TempDir()
	var sw snapshotWorld
	sw.at(snapT0)
	// given a snapshot, then events recorded by a writer without snapshots
	n := sw.start(t, dir, true)
	beforeSnapshot(t, n.w)
	n.stop()
	n = sw.start(t, dir, false)
	fundedPlayer(t, n.w, "late", 500)
	n.stop()
	// when a writer starts from the snapshot, replaying those events, and
	// stops
	n = sw.start(t, dir, true)
	first := sw.slot.seq
	n.stop()
	// then its follower applied them after decoding the snapshot: the
	// next start loads a snapshot of the stream's head, which holds them
	n = sw.start(t, dir, true)
	if sw.slot.err != nil || sw.slot.seq <= first {
		t.Fatalf("loaded %d after %d: %v", sw.slot.seq, first, sw.slot.err)
	}
	want, l := streamState(t, n)
	var got []byte
	n.w.Inspect(context.Background(), func(l *domain.Ledger) { got, _ = domain.EncodeLedger(l) })
	if !bytes.Equal(got, want) || l.Accounts["late"] == nil {
		t.Fatal("the writer's state from the follower's snapshot differs from the stream's")
	}
}

// saveRecorder is a snapshot.Store that counts its saves and remembers the
// sequence of the first and of the last.
type saveRecorder struct {
	snapshot.Store
	saves      atomic.Int32
	first, seq atomic.Uint64
}

func (r *saveRecorder) Save(ctx context.Context, seq uint64, data []byte) error {
	r.saves.Add(1)
	r.first.CompareAndSwap(0, seq)
	r.seq.Store(seq)
	return r.Store.Save(ctx, seq, data)
}

// TestTheClosingSnapshotGoesToItsOwnStore: with ClosingSnapshots set (the
// embedded default's unpaced slot), the snapshot taken as the writer
// closes is stored there, at the writer's last sequence, and not in
// Snapshots (the paced slot of the snapshots taken while it runs).
func TestTheClosingSnapshotGoesToItsOwnStore(t *testing.T) {
	var running, closing saveRecorder
	n := startNodeWith(t, t.TempDir(), func(n *node, c *Config) {
		c.Rules = projectionstest.SmallRules(t)
		snaps, err := snapshot.Open(eventstoretest.Ctx(t, time.Minute), n.store, snapshot.Config{Key: c.Sealer.SnapshotKey()})
		if err != nil {
			t.Fatal(err)
		}
		slot := WriterSnapshots(snaps, c.Rules)
		running.Store, closing.Store = slot, slot.Paced(snapshot.Unpaced)
		c.Snapshots, c.ClosingSnapshots = &running, &closing
	})
	exec(t, n.w, domain.CreateEmission{Price: 100, Blocks: 1})
	fundedPlayer(t, n.w, "p1", 1000)
	last := n.w.LastSeq()
	n.stop()
	if running.saves.Load() != 0 || closing.saves.Load() != 1 || closing.seq.Load() != last {
		t.Fatalf("saves while running %d, at the close %d at seq %d; want 0, and 1 at %d", running.saves.Load(), closing.saves.Load(), closing.seq.Load(), last)
	}
}

// followerTookItsQueue waits until w's snapshotter has taken every append
// queued for its follower.
func followerTookItsQueue(t *testing.T, w *Writer) {
	t.Helper()
	eventstoretest.Eventually(t, 10*time.Second, func() error {
		w.snap.mu.Lock()
		defer w.snap.mu.Unlock()
		if q := len(w.snap.queue); q > 0 {
			return fmt.Errorf("%d appends wait for the follower", q)
		}
		return nil
	})
}

// heldStore is a snapshot.Store whose first Save waits for release or its
// context's end, and which records the sequence of every save, in order,
// and whether it stored it.
type heldStore struct {
	snapshot.Store
	held, release chan struct{}
	mu            sync.Mutex
	seqs          []uint64
	stored        []bool
}

func (h *heldStore) Save(ctx context.Context, seq uint64, data []byte) (err error) {
	h.mu.Lock()
	h.seqs = append(h.seqs, seq)
	first := len(h.seqs) == 1
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.stored = append(h.stored, err == nil)
		h.mu.Unlock()
	}()
	if first {
		close(h.held)
		select {
		case <-h.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h.Store.Save(ctx, seq, data)
}

// TestTheFollowerAppliesTheAppendsWhileASnapshotIsStored: a store at the
// writer's pace takes seconds; meanwhile the follower applies the appends
// acknowledged (it would otherwise apply them all at once after it, a
// stretch the commands in flight wait for), and no second snapshot is
// taken over the first's bytes. The writer's close does not wait for a
// store at that pace: it abandons it and takes its closing snapshot, at
// its last sequence, in its place, whether or not anything came since.
func TestTheFollowerAppliesTheAppendsWhileASnapshotIsStored(t *testing.T) {
	for _, after := range []int{4, 0} {
		t.Run(fmt.Sprint("players funded after it ", after), func(t *testing.T) {
			store := heldStore{held: make(chan struct{}), release: make(chan struct{})}
			// Run after the node's stop (cleanups run last registered
			// first): a close that waited for the store would end then.
			t.Cleanup(func() { close(store.release) })
			n := startNodeWith(t, t.TempDir(), func(n *node, c *Config) {
				c.Rules = projectionstest.SmallRules(t)
				c.SnapshotEvery = 5
				snaps, err := snapshot.Open(eventstoretest.Ctx(t, time.Minute), n.store, snapshot.Config{Key: c.Sealer.SnapshotKey()})
				if err != nil {
					t.Fatal(err)
				}
				store.Store = WriterSnapshots(snaps, c.Rules).Paced(snapshot.Unpaced)
				c.Snapshots = &store
			})
			// given a snapshot whose store is held
			exec(t, n.w, domain.CreateEmission{Price: 100, Blocks: 1})
			held := func() bool {
				select {
				case <-store.held:
					return true
				case <-time.After(100 * time.Millisecond):
					return false
				}
			}
			for i := 0; !held(); i++ {
				if i == 6 {
					t.Fatal("no snapshot after 6 players funded, one every 5 events")
				}
				fundedPlayer(t, n.w, fmt.Sprint("before", i), 1000)
			}
			// when the writer goes on
			for i := range after {
				fundedPlayer(t, n.w, fmt.Sprint("after", i), 1000)
			}
			// then the follower applies its appends meanwhile
			followerTookItsQueue(t, n.w)
			// and the close abandons the store for the closing snapshot,
			// without waiting for it (held, it would wait snapshot.SaveMax)
			last := n.w.LastSeq()
			start := time.Now()
			n.stop()
			if took := time.Since(start); took > snapshot.SaveMax/2 {
				t.Fatalf("the close took %s: it waited for the store", took)
			}
			store.mu.Lock()
			defer store.mu.Unlock()
			if !slices.Equal(store.stored, []bool{false, true}) || store.seqs[0] > last || store.seqs[1] != last {
				t.Fatalf("snapshots saved at %v, stored %v; want one held at or before %d and abandoned, then the closing one at %d",
					store.seqs, store.stored, last, last)
			}
		})
	}
}

// replayedAfterASnapshot makes, in dir, a snapshot and then events
// recorded after it by a writer without snapshots; it returns a start of a
// writer with snapshots every `every` events whose saves go to saves, the
// head the events reach (a seal may follow it) and how many there are.
func replayedAfterASnapshot(t *testing.T, dir string, saves *saveRecorder) (start func(every int) *node, head uint64, events int) {
	start = func(every int) *node {
		return startNodeWith(t, dir, func(n *node, c *Config) {
			c.Rules = projectionstest.SmallRules(t)
			if every == 0 {
				return
			}
			c.SnapshotEvery = every
			snaps, err := snapshot.Open(eventstoretest.Ctx(t, time.Minute), n.store, snapshot.Config{Key: c.Sealer.SnapshotKey()})
			if err != nil {
				t.Fatal(err)
			}
			saves.Store = WriterSnapshots(snaps, c.Rules).Paced(snapshot.Unpaced)
			c.Snapshots = saves
		})
	}
	n := start(1000)
	exec(t, n.w, domain.CreateEmission{Price: 100, Blocks: 1})
	fundedPlayer(t, n.w, "early", 500)
	n.stop()
	n = start(0)
	lim := domain.Amount(1000)
	for i := range 3 {
		player := fmt.Sprint("late", i)
		events += len(exec(t, n.w, domain.ConfigureAccount{Player: player, DepositLimit: &lim}).Events)
		events += len(exec(t, n.w, domain.Deposit{Player: player, Amount: 500, Key: "fund-" + player}).Events)
	}
	head = n.w.LastSeq()
	n.stop()
	saves.saves.Store(0)
	saves.first.Store(0)
	return start, head, events
}

// firstSave waits for the first snapshot saved and returns its sequence.
func firstSave(t *testing.T, saves *saveRecorder) uint64 {
	eventstoretest.Eventually(t, 10*time.Second, func() error {
		if saves.saves.Load() == 0 {
			return errors.New("no snapshot taken yet")
		}
		return nil
	})
	return saves.first.Load()
}

// TestASnapshotDueAtAStartHoldsTheEventsReplayed: a writer that replayed
// more than SnapshotEvery events after the snapshot it started from takes
// one at once, of the state it replayed to, not the one it started from
// again; one that replayed fewer counts them once, and takes its first
// when as many more come as make SnapshotEvery.
func TestASnapshotDueAtAStartHoldsTheEventsReplayed(t *testing.T) {
	t.Run("more than SnapshotEvery", func(t *testing.T) {
		var saves saveRecorder
		start, head, _ := replayedAfterASnapshot(t, t.TempDir(), &saves)
		n := start(2)
		defer n.stop()
		if got := firstSave(t, &saves); got != head {
			t.Fatalf("first snapshot after the start at %d; want the replayed head %d", got, head)
		}
	})
	t.Run("one fewer than SnapshotEvery", func(t *testing.T) {
		var saves saveRecorder
		start, _, events := replayedAfterASnapshot(t, t.TempDir(), &saves)
		n := start(events + 1)
		defer n.stop()
		// once the follower has taken the events replayed
		followerTookItsQueue(t, n.w)
		lim := domain.Amount(300)
		exec(t, n.w, domain.ConfigureAccount{Player: "late0", StakeLimit: &lim})
		if got, want := firstSave(t, &saves), n.w.LastSeq(); got != want {
			t.Fatalf("first snapshot after the start at %d; want %d, once the one event more came", got, want)
		}
	})
}
