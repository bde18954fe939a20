package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/projections/pgstore"
	"github.com/fdj/tresor/projections/projectionstest"
)

func TestConformance(t *testing.T) {
	projectionstest.Run(t, func(tb testing.TB, rules *domain.RuleSet, name string) projections.Store {
		return openStore(tb, rules, name)
	})
}

// TestSameRowsAsMemory projects one generated stream into both stores and
// compares every row they serve.
func TestSameRowsAsMemory(t *testing.T) {
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	// A second emission sold out by the same players, to cover several
	// emissions and blocks.
	w.Emission(200, 1)
	for i := range rules.BlockUnits {
		w.Advance(time.Minute)
		play := w.Stake([]string{"p1", "p2"}[i%2], 200)
		w.Must(domain.CompletePlay{Play: play})
	}
	mem := memstore.New(rules)
	projectionstest.Project(t, mem, w.Events, 11)
	pg := openStore(t, rules, "pg")
	projectionstest.Project(t, pg, w.Events, 11)
	want := projectionstest.TakeSnapshot(t, mem)
	projectionstest.SameSnapshot(t, "PostgreSQL against memory", projectionstest.TakeSnapshot(t, pg), want)
	// Reconciliation differences are zero in both.
	for _, rows := range want.Reconciliation {
		for _, r := range rows {
			if r.Difference != 0 {
				t.Errorf("%s %s: difference %s", r.Scope, r.Key, r.Difference)
			}
		}
	}
}

// TestRebuildSwitchesReaders rebuilds a live projection from the first event
// while the stream grows: readers keep reading, the live runner follows the
// switch (back to the new copy's checkpoint when it was ahead of it), and
// the rebuilt copy ends identical to a projection that never stopped.
func TestRebuildSwitchesReaders(t *testing.T) {
	// The live store learns of the switch either from a read (readers look
	// for a new generation) or from its own next batch.
	t.Run("ReadFirst", func(t *testing.T) { testRebuild(t, true) })
	t.Run("BatchFirst", func(t *testing.T) { testRebuild(t, false) })
}

func testRebuild(t *testing.T, readFirst bool) {
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	// The stream is cut where a real one can end: at the end of an append.
	half := len(projectionstest.WholeAppends(w.Events, len(w.Events)/2))
	log := projectionstest.NewLog(w.Events[:half])
	ns := namespace(t, "live")
	// With readFirst the live store looks for a new generation at every
	// read, so that a read after the switch moves it before its runner's
	// next batch; otherwise it looks only once an hour.
	refresh := time.Hour
	if readFirst {
		refresh = time.Nanosecond
	}
	live, err := pgstore.Open(context.Background(), testPool, pgstore.Config{Rules: rules, Namespace: ns, RefreshEvery: refresh})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- projections.NewRunner(log, live, projections.WithBatchMax(9)).Run(ctx) }()
	if err := live.WaitFor(ctx, uint64(half)); err != nil {
		t.Fatal(err)
	}
	// The rebuild reads a stream a few events behind the live projection
	// (as when the stream grows between its last round and the switch):
	// the live runner must go back to the new copy's checkpoint.
	behind := len(projectionstest.WholeAppends(w.Events, half-5))
	var reports []pgstore.Progress
	gen, err := pgstore.Rebuild(ctx, testPool, pgstore.Config{Rules: rules, Namespace: ns}, projectionstest.NewLog(w.Events[:behind]),
		func(p pgstore.Progress) { reports = append(reports, p) })
	if err != nil {
		t.Fatal(err)
	}
	if gen != 2 || len(reports) == 0 || !reports[len(reports)-1].Switched || reports[len(reports)-1].Applied != uint64(behind) {
		t.Fatalf("rebuild: generation %d, reports %+v", gen, reports)
	}
	// The stream goes on and the live runner follows the switch.
	if _, err := live.Account(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	log.Append(w.Events[half:]...)
	reader, err := pgstore.Open(ctx, testPool, pgstore.Config{Rules: rules, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if reader.Generation() != 2 {
		t.Fatalf("a new reader opens generation %d, want 2", reader.Generation())
	}
	if err := reader.WaitFor(ctx, uint64(len(w.Events))); err != nil {
		t.Fatalf("the rebuilt copy does not follow the stream: %v", err)
	}
	mem := memstore.New(rules)
	projectionstest.Project(t, mem, w.Events, 50)
	projectionstest.SameSnapshot(t, "rebuilt copy", projectionstest.TakeSnapshot(t, reader), projectionstest.TakeSnapshot(t, mem))
	if live.Generation() != 2 {
		t.Fatalf("the live store is on generation %d, want 2", live.Generation())
	}
	cancel()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("live runner: %v", err)
	}
	// A second rebuild drops generation 1 and retires 2.
	if gen, err := pgstore.Rebuild(context.Background(), testPool, pgstore.Config{Rules: rules, Namespace: ns}, log, nil); err != nil || gen != 3 {
		t.Fatalf("second rebuild: %d, %v", gen, err)
	}
	var schemas int
	if err := testPool.QueryRow(context.Background(), `SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE $1`, ns+"_g%").Scan(&schemas); err != nil || schemas != 2 {
		t.Fatalf("%d generation schemas after two rebuilds, want 2 (current and retired): %v", schemas, err)
	}
}

// fromRecorder is a source that remembers where each read started.
type fromRecorder struct {
	*projectionstest.Log
	froms []uint64
}

func (r *fromRecorder) Read(ctx context.Context, from uint64, fn func(projections.Envelope) error) error {
	r.froms = append(r.froms, from)
	return r.Log.Read(ctx, from, fn)
}

// TestAReopenedStoreResumesFromItsCheckpoint: PostgreSQL keeps its rows
// and checkpoint, so a restart reads only what follows (no snapshot is
// needed, unlike the in-memory store).
func TestAReopenedStoreResumesFromItsCheckpoint(t *testing.T) {
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	first := projectionstest.WholeAppends(w.Events, len(w.Events)/2)
	s := openStore(t, rules, "resume")
	projectionstest.Project(t, s, first, 7)
	s.Close()
	// when the store is reopened and a runner follows the whole stream
	s = openStore(t, rules, "resume")
	src := &fromRecorder{Log: projectionstest.NewLog(w.Events)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := projections.NewRunner(src, s, projections.WithBatchMax(7)).RunTo(ctx, uint64(len(w.Events))); err != nil {
		t.Fatal(err)
	}
	// then it read from the event after its checkpoint, not from the first
	if len(src.froms) != 1 || src.froms[0] != uint64(len(first))+1 {
		t.Fatalf("reads started at %v, want only %d", src.froms, len(first)+1)
	}
	whole := memstore.New(rules)
	projectionstest.Project(t, whole, w.Events, 7)
	projectionstest.SameSnapshot(t, "resumed", projectionstest.TakeSnapshot(t, s), projectionstest.TakeSnapshot(t, whole))
}
