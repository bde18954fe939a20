package memstore_test

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/projections/projectionstest"
)

func TestConformance(t *testing.T) {
	stores := map[string]*memstore.Store{}
	projectionstest.Run(t, func(tb testing.TB, rules *domain.RuleSet, name string) projections.Store {
		// A restarted in-memory projection keeps its store: this store is
		// what survives while the process runs.
		key := tb.Name() + "/" + name
		if s := stores[key]; s != nil {
			return s
		}
		s := memstore.New(rules)
		stores[key] = s
		tb.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestARestoredStoreResumesFromItsCheckpointAsOneThatAppliedEverything(t *testing.T) {
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	half := len(projectionstest.WholeAppends(w.Events, len(w.Events)/2))
	ctx := context.Background()
	// given a store that applied half the stream, frozen, then applying
	// the rest while its copy encodes
	first := memstore.New(rules)
	projectionstest.Project(t, first, w.Events[:half], 7)
	frozen, err := first.Freeze(ctx)
	if err != nil {
		t.Fatal(err)
	}
	secs := &memstore.Sections{}
	encoded := make(chan error, 1)
	go func() {
		_, err := frozen.Encode(secs)
		encoded <- err
	}()
	projectionstest.Project(t, first, w.Events, 7)
	if err := <-encoded; err != nil || frozen.Checkpoint() != uint64(half) {
		t.Fatalf("encode at %d: %v", frozen.Checkpoint(), err)
	}
	halfway := memstore.New(rules)
	projectionstest.Project(t, halfway, w.Events[:half], 7)
	whole := memstore.New(rules)
	projectionstest.Project(t, whole, w.Events, 7)
	// when a fresh store restores it, it holds the checkpoint and has
	// opened no shard; a read of one player's history opens one
	restored := restore(t, rules, secs)
	if got, _ := restored.Checkpoint(ctx); got != uint64(half) || secs.Opened() != 0 {
		t.Fatalf("restored checkpoint %d, want %d; %d shards opened", got, half, secs.Opened())
	}
	someone := aPlayer(t, halfway)
	if _, err := restored.History(ctx, someone, "", 3); err != nil || secs.Opened() != 1 {
		t.Fatalf("history of %s: %v after %d shards opened, want 1", someone, err, secs.Opened())
	}
	// then every read answers as the store that applied the same half
	sameReads(t, "restored, read as its shards load", restored, halfway)
	// and a store restored then applying the rest (to players whose shard
	// is not loaded yet) answers as one that applied everything
	resumed := restore(t, rules, secs)
	projectionstest.Project(t, resumed, w.Events, 7)
	sameReads(t, "restored then resumed", resumed, whole)
	sameReads(t, "applied after the freeze", first, whole)
	// and a snapshot taken before any shard was read holds every row
	early := restore(t, rules, secs)
	again := encode(t, early)
	if !slices.EqualFunc(again.Secs, secs.Secs, bytes.Equal) {
		t.Fatal("a snapshot taken before the shards were loaded differs from the one restored")
	}
	fromEarly := restore(t, rules, again)
	projectionstest.Project(t, fromEarly, w.Events, 7)
	sameReads(t, "restored from a snapshot taken before the warm-up", fromEarly, whole)
	// and a snapshot of another rule set, of another format, cut short or
	// followed by more bytes is refused, leaving the store empty
	b := secs.Secs[0]
	format1 := []byte(`{"Format":1,"Checkpoint":3}`)
	format2, format7, format9 := bytes.Clone(b), bytes.Clone(b), bytes.Clone(b)
	format2[len("tresor-read-models\x00")] = 2
	format7[len("tresor-read-models\x00")] = 7
	format9[len("tresor-read-models\x00")] = 9
	for name, c := range map[string]struct {
		b      []byte
		reason string
	}{
		"another rule set": {b, "rule set"},
		"format 1":         {format1, "format version 1 (JSON), this build reads 8"},
		"format 2":         {format2, "format version 2, this build reads 8"},
		"format 7":         {format7, "format version 7, this build reads 8"},
		"format 9":         {format9, "format version 9, this build reads 8"},
		"cut short":        {b[:len(b)/2], "unexpected EOF"},
		"cut at its end":   {b[:len(b)-1], "unexpected EOF"},
		"followed by more": {append(bytes.Clone(b), 0), "bytes after the end"},
	} {
		s := memstore.New(rules)
		if name == "another rule set" {
			s = memstore.New(projectionstest.SeventyRules(t))
		}
		if err := s.Restore(bytes.NewReader(c.b), secs, nil); !errors.Is(err, memstore.ErrSnapshotFormat) || !strings.Contains(err.Error(), c.reason) {
			t.Fatalf("%s: %v, want %q", name, err, c.reason)
		}
		if got, _ := s.Checkpoint(ctx); got != 0 {
			t.Fatalf("%s: a refused snapshot left checkpoint %d", name, got)
		}
	}
	if err := restored.Restore(secs.Hot(), secs, nil); !errors.Is(err, memstore.ErrSnapshotFormat) {
		t.Fatalf("restored into a store in use: %v", err)
	}
}

// TestReadsAsShardsLoadAndBatchesApply: reads of players whose shard is
// loading, the warm-up and batches run at once (go test -race), and the
// store ends as one that applied everything.
func TestReadsAsShardsLoadAndBatchesApply(t *testing.T) {
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	half := len(projectionstest.WholeAppends(w.Events, len(w.Events)/2))
	halfway := memstore.New(rules)
	projectionstest.Project(t, halfway, w.Events[:half], 7)
	whole := memstore.New(rules)
	projectionstest.Project(t, whole, w.Events, 7)
	accounts, err := whole.Accounts(context.Background(), "", projections.PageMax)
	if err != nil {
		t.Fatal(err)
	}
	s := restore(t, rules, encode(t, halfway))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, len(accounts))
	for _, a := range accounts {
		go func() {
			var err error
			for ctx.Err() == nil && err == nil {
				_, err = s.History(ctx, a.Player, "", 5)
				if err == nil || errors.Is(err, projections.ErrNotFound) {
					_, err = s.Statement(ctx, projections.StatementQuery{Player: a.Player, Limit: 10})
				}
				if errors.Is(err, projections.ErrNotFound) {
					err = nil
				}
			}
			if ctx.Err() != nil {
				err = nil
			}
			errs <- err
		}()
	}
	go func() { _ = s.WarmUp(context.Background()) }()
	projectionstest.Project(t, s, w.Events, 7)
	cancel()
	for range accounts {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	sameReads(t, "read, warmed and applied at once", s, whole)
}

// TestAShardThatFailsToLoadAnswers503UntilTheStreamIsAppliedAgain: a
// shard missing or altered after the start fails, after its three
// attempts, the snapshot that needed it and every read after it
// (ErrNotReached: 503), never a part of the rows;
// the runner then applies the stream from the start and the store answers
// as one that applied everything.
func TestAShardThatFailsToLoadAnswers503UntilTheStreamIsAppliedAgain(t *testing.T) {
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	ctx := context.Background()
	whole := memstore.New(rules)
	projectionstest.Project(t, whole, w.Events, 7)
	someone := aPlayer(t, whole)
	k := memstore.PlayerShard(someone)
	for name, spoil := range map[string]func(*memstore.Sections){
		"missing":   func(s *memstore.Sections) { s.Fail = map[int]bool{k: true} },
		"cut short": func(s *memstore.Sections) { s.Secs[1+k] = s.Secs[1+k][:len(s.Secs[1+k])-2] },
	} {
		t.Run(name, func(t *testing.T) {
			secs := encode(t, whole)
			spoil(secs)
			s := memstore.New(rules)
			var failed []error
			if err := s.Restore(secs.Hot(), secs, func(err error) { failed = append(failed, err) }); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Account(ctx, someone); err != nil {
				t.Fatalf("account before the shard is read: %v", err)
			}
			// a snapshot taken then fails too, rather than hold a part
			if f, err := s.Freeze(ctx); !errors.Is(err, projections.ErrNotReached) || len(failed) != 1 {
				t.Fatalf("freeze with a %s shard: %v (%v), failures %v", name, err, f, failed)
			}
			if _, err := s.History(ctx, someone, "", 3); !errors.Is(err, projections.ErrNotReached) {
				t.Fatalf("history from a %s shard: %v", name, err)
			}
			if _, err := s.Account(ctx, someone); !errors.Is(err, projections.ErrNotReached) {
				t.Fatalf("account while rebuilding: %v", err)
			}
			if _, err := s.ReportData(ctx); !errors.Is(err, projections.ErrNotReached) || !s.Rebuilding() {
				t.Fatalf("report while rebuilding: %v", err)
			}
			projectionstest.Project(t, s, w.Events, 7)
			if s.Rebuilding() {
				t.Fatal("still rebuilding once the stream is applied again")
			}
			sameReads(t, "rebuilt", s, whole)
		})
	}
}

// TestAShardThatFailsUnderAnIdleRunnerIsAppliedAgainAtOnce: a Runner
// follows a restored store on a stream that brings nothing new; a shard
// that fails to load drops the rows, and the Runner applies the stream
// again without waiting for an event: the store soon answers as one that
// applied everything.
func TestAShardThatFailsUnderAnIdleRunnerIsAppliedAgainAtOnce(t *testing.T) {
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	whole := memstore.New(rules)
	projectionstest.Project(t, whole, w.Events, 7)
	// given a store restored from a snapshot missing a shard, and its
	// Runner at the stream's head
	secs := encode(t, whole)
	secs.Fail = map[int]bool{memstore.PlayerShard(aPlayer(t, whole)): true}
	s := memstore.New(rules)
	if err := s.Restore(secs.Hot(), secs, func(error) {}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- projections.NewRunner(projectionstest.NewLog(w.Events), s).Run(ctx) }()
	// when the shard fails to load, nothing new in the stream
	if err := s.LoadAll(); !errors.Is(err, projections.ErrNotReached) {
		t.Fatalf("load with a shard missing: %v", err)
	}
	// then the rows are applied again within seconds
	deadline, tick := time.After(5*time.Second), time.NewTicker(10*time.Millisecond)
	defer tick.Stop()
	for s.Rebuilding() {
		select {
		case err := <-ran:
			t.Fatalf("runner stopped while rebuilding: %v", err)
		case <-deadline:
			t.Fatal("still rebuilding 5s after the shard failed, the stream idle")
		case <-tick.C:
		}
	}
	sameReads(t, "rebuilt", s, whole)
	cancel()
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Fatalf("runner: %v", err)
	}
}

// aPlayer returns a player with a settled play.
func aPlayer(t *testing.T, s projections.Store) string {
	t.Helper()
	accounts, err := s.Accounts(context.Background(), "", projections.PageMax)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range accounts {
		if p, err := s.LastPlay(context.Background(), a.Player); err == nil && p.SettledAt != nil {
			return a.Player
		}
	}
	t.Fatal("no player with a settled play")
	return ""
}

func encode(t *testing.T, s *memstore.Store) *memstore.Sections {
	t.Helper()
	f, err := s.Freeze(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	secs := &memstore.Sections{}
	if _, err := f.Encode(secs); err != nil {
		t.Fatal(err)
	}
	return secs
}

func restore(t *testing.T, rules *domain.RuleSet, secs *memstore.Sections) *memstore.Store {
	t.Helper()
	s := memstore.New(rules)
	if err := s.Restore(secs.Hot(), secs, func(err error) { t.Errorf("shard failed: %v", err) }); err != nil {
		t.Fatal(err)
	}
	return s
}

// sameReads compares every read of two stores: those of
// projectionstest.TakeSnapshot, each player's last play and plays one by
// one, and the large wins.
func sameReads(t *testing.T, name string, got, want projections.Store) {
	t.Helper()
	projectionstest.SameSnapshot(t, name, projectionstest.TakeSnapshot(t, got), projectionstest.TakeSnapshot(t, want))
	if g, w := extraReads(t, got), extraReads(t, want); !reflect.DeepEqual(g, w) {
		t.Fatalf("%s: plays and wins differ:\n%+v\n%+v", name, g, w)
	}
}

func extraReads(t *testing.T, s projections.Store) []any {
	t.Helper()
	ctx := context.Background()
	var out []any
	accounts, err := s.Accounts(ctx, "", projections.PageMax)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range accounts {
		last, err := s.LastPlay(ctx, a.Player)
		out = append(out, last, errors.Is(err, projections.ErrNotFound))
		for _, p := range projectionstest.History(t, s, a.Player, 50) {
			play, err := s.Play(ctx, a.Player, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, play)
		}
	}
	wins, seq, more, err := s.LargeWins(ctx, projections.LargeWinsQuery{Threshold: 1, From: time.Unix(0, 0), To: time.Now().AddDate(10, 0, 0), Limit: projections.LargeWinsMax})
	if err != nil || len(wins) == 0 {
		t.Fatalf("large wins: %d, %v", len(wins), err)
	}
	return append(out, wins, seq, more)
}
