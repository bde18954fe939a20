package memstore_test

import (
	"context"
	"errors"
	"testing"

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
	// given a store that applied half the stream, encoded
	first := memstore.New(rules)
	projectionstest.Project(t, first, w.Events[:half], 7)
	cp, b, err := first.Encode()
	if err != nil || cp != uint64(half) {
		t.Fatalf("encode at %d: %v", cp, err)
	}
	// when a fresh store restores it and a runner resumes from there
	restored := memstore.New(rules)
	if err := restored.Restore(b); err != nil {
		t.Fatal(err)
	}
	if got, _ := restored.Checkpoint(context.Background()); got != cp {
		t.Fatalf("restored checkpoint %d, want %d", got, cp)
	}
	projectionstest.Project(t, restored, w.Events, 7)
	// then every row agrees with a store that applied the whole stream
	whole := memstore.New(rules)
	projectionstest.Project(t, whole, w.Events, 7)
	projectionstest.SameSnapshot(t, "restored", projectionstest.TakeSnapshot(t, restored), projectionstest.TakeSnapshot(t, whole))
	// and a snapshot of another rule set, of another format or cut short is
	// refused, leaving the store empty
	if err := memstore.New(projectionstest.SeventyRules(t)).Restore(b); !errors.Is(err, memstore.ErrSnapshotFormat) {
		t.Fatalf("another rule set: %v", err)
	}
	empty := memstore.New(rules)
	if err := empty.Restore(b[:len(b)/2]); !errors.Is(err, memstore.ErrSnapshotFormat) {
		t.Fatalf("truncated: %v", err)
	}
	if got, _ := empty.Checkpoint(context.Background()); got != 0 {
		t.Fatalf("a refused snapshot left checkpoint %d", got)
	}
	if err := restored.Restore(b); !errors.Is(err, memstore.ErrSnapshotFormat) {
		t.Fatalf("restored into a store in use: %v", err)
	}
}
