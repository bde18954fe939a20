package cluster

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/settlement"
)

// BenchmarkStandbyWarm measures the time from a standby's start to warm
// (its follower at the stream's head, decks of open blocks built) on a
// stream of TRESOR_BENCH_PLAYS plays (default 30 000: a stake and four
// throws each, under the default rules at 2.00 €) whose writer took a
// snapshot as it closed: from that snapshot, and from the first event.
//
//	TRESOR_BENCH_PLAYS=30000 go test -run '^$' -bench StandbyWarm -benchtime 3x ./cluster/
func BenchmarkStandbyWarm(b *testing.B) {
	plays := 30_000
	if v := os.Getenv("TRESOR_BENCH_PLAYS"); v != "" {
		var err error
		if plays, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	w := startSnapWorld(b, 3)
	w.rules = writerConfig(b).Rules
	cfg := w.config(b, 1<<30, &eventstoretest.LogBuffer{})
	ctx := eventstoretest.Ctx(b, 30*time.Minute)
	writer := openWriterWith(b, w.store, cfg)
	if _, err := settlement.Simulate(ctx, writer, settlement.SimConfig{Price: 200, Plays: plays, Players: min(plays, 2000)}); err != nil {
		b.Fatal(err)
	}
	writer.Close() // its closing snapshot, at the head
	head, err := w.store.LastSequence(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if at := w.latest(b); at != head {
		b.Fatalf("newest snapshot at %d, head at %d", at, head)
	}
	for _, mode := range []struct {
		name  string
		snaps bool
	}{{"from-snapshot", true}, {"from-first-event", false}} {
		b.Run(fmt.Sprintf("%s/events=%d", mode.name, head), func(b *testing.B) {
			fcfg := w.config(b, 0, &eventstoretest.LogBuffer{})
			if mode.snaps {
				fcfg = cfg
			}
			if err := fcfg.Validate(); err != nil {
				b.Fatal(err)
			}
			var applied int
			for b.Loop() {
				f := startFollower(&fcfg, w.store, slog.New(slog.DiscardHandler), func() bool { return false })
				for f.position() < head {
					time.Sleep(time.Millisecond)
				}
				_, applied = f.progress()
				f.stop()
			}
			b.ReportMetric(float64(applied), "records-applied")
		})
	}
}
