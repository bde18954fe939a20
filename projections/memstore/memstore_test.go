package memstore_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
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
	// given a store that applied half the stream, frozen, then applying
	// the rest while its copy encodes
	first := memstore.New(rules)
	projectionstest.Project(t, first, w.Events[:half], 7)
	frozen := first.Freeze()
	var buf bytes.Buffer
	encoded := make(chan error, 1)
	go func() {
		_, err := frozen.WriteTo(&buf)
		encoded <- err
	}()
	projectionstest.Project(t, first, w.Events, 7)
	if err := <-encoded; err != nil || frozen.Checkpoint() != uint64(half) {
		t.Fatalf("encode at %d: %v", frozen.Checkpoint(), err)
	}
	b := buf.Bytes()
	// when a fresh store restores it and a runner resumes from there
	restored := memstore.New(rules)
	if err := restored.Restore(bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	if got, _ := restored.Checkpoint(context.Background()); got != uint64(half) {
		t.Fatalf("restored checkpoint %d, want %d", got, half)
	}
	projectionstest.Project(t, restored, w.Events, 7)
	// then every row agrees with a store that applied the whole stream
	whole := memstore.New(rules)
	projectionstest.Project(t, whole, w.Events, 7)
	projectionstest.SameSnapshot(t, "restored", projectionstest.TakeSnapshot(t, restored), projectionstest.TakeSnapshot(t, whole))
	projectionstest.SameSnapshot(t, "applied after the freeze", projectionstest.TakeSnapshot(t, first), projectionstest.TakeSnapshot(t, whole))
	// and a snapshot of another rule set, of another format, cut short or
	// followed by more bytes is refused, leaving the store empty
	format1 := []byte(`{"Format":1,"Checkpoint":3}`)
	unknown := bytes.Clone(b)
	unknown[len("tresor-read-models\x00")] = 3
	for name, c := range map[string]struct {
		b      []byte
		reason string
	}{
		"another rule set": {b, "rule set"},
		"format 1":         {format1, "format version 1 (JSON), this build reads 2"},
		"format 3":         {unknown, "format version 3, this build reads 2"},
		"cut short":        {b[:len(b)/2], "unexpected EOF"},
		"cut at its end":   {b[:len(b)-1], "unexpected EOF"},
		"followed by more": {append(bytes.Clone(b), 0), "bytes after the end"},
	} {
		s := memstore.New(rules)
		if name == "another rule set" {
			s = memstore.New(projectionstest.SeventyRules(t))
		}
		if err := s.Restore(bytes.NewReader(c.b)); !errors.Is(err, memstore.ErrSnapshotFormat) || !strings.Contains(err.Error(), c.reason) {
			t.Fatalf("%s: %v, want %q", name, err, c.reason)
		}
		if got, _ := s.Checkpoint(context.Background()); got != 0 {
			t.Fatalf("%s: a refused snapshot left checkpoint %d", name, got)
		}
	}
	if err := restored.Restore(bytes.NewReader(b)); !errors.Is(err, memstore.ErrSnapshotFormat) {
		t.Fatalf("restored into a store in use: %v", err)
	}
}
