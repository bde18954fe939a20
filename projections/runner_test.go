package projections_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/projections/projectionstest"
)

// TestRunnerRefusesABrokenAppend feeds streams whose append markers no
// writer can produce: a record that does not continue the count of the one
// before it, and an append longer than AppendMax. The Runner stops with
// ErrInvalid and the checkpoint stays at the end of the last whole append
// before it: a broken stream never shows part of a command.
func TestRunnerRefusesABrokenAppend(t *testing.T) {
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	first := -1 // the first record of the first append of several
	for i, env := range w.Events {
		if env.AppendRemaining > 0 {
			first = i
			break
		}
	}
	if first < 0 {
		t.Fatal("the stream has no append of several records")
	}
	for name, broken := range map[string]func(events []projections.Envelope){
		"a count that does not go down": func(events []projections.Envelope) { events[first+1].AppendRemaining++ },
		"more said to follow than do":   func(events []projections.Envelope) { events[first].AppendRemaining++ },
		"an append longer than any":     func(events []projections.Envelope) { events[first].AppendRemaining = projections.AppendMax },
	} {
		t.Run(name, func(t *testing.T) {
			events := append([]projections.Envelope(nil), w.Events...)
			broken(events)
			s := memstore.New(rules)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := projections.NewRunner(projectionstest.NewLog(events), s, projections.WithBatchMax(1)).RunTo(ctx, uint64(len(events)))
			if !errors.Is(err, projections.ErrInvalid) {
				t.Fatalf("runner: %v, want ErrInvalid", err)
			}
			if cp, _ := s.Checkpoint(ctx); cp != uint64(first) {
				t.Fatalf("checkpoint %d, want %d: the end of the last whole append", cp, first)
			}
		})
	}
}

// TestRunnerTellsTheLastSeal: a Seal record is where the chain was last
// signed; the Runner tells its sequence, and a record without a domain
// event that is no seal (a Void) does not count.
func TestRunnerTellsTheLastSeal(t *testing.T) {
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	n := uint64(len(w.Events))
	events := append(append([]projections.Envelope(nil), w.Events...), projections.Envelope{Seq: n + 1, At: w.Now, Seal: true},
		projections.Envelope{Seq: n + 2, At: w.Now})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := projections.NewRunner(projectionstest.NewLog(events), memstore.New(rules))
	if r.LastSeal() != 0 {
		t.Fatalf("last seal %d before any record", r.LastSeal())
	}
	if err := r.RunTo(ctx, n+2); err != nil {
		t.Fatal(err)
	}
	if r.LastSeal() != n+1 {
		t.Fatalf("last seal %d, want %d", r.LastSeal(), n+1)
	}
}
