package snapshot_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/snapshot"
)

// BenchmarkCommitLatencyWhileStoring measures the latency of atomic
// appends made at a fixed rate on an embedded sync-always server while a
// snapshot of 48 MiB is stored again and again, against none stored, in
// one run: p50, p99 and max of the appends scheduled while a store was
// under way and of those scheduled outside one. An append's latency runs
// from its scheduled time, so that a stall also counts against the appends
// that waited behind it. Run it with -benchtime 1x; the environment
// overrides what is measured: TRESOR_BENCH_CHUNK (the Object Store chunk
// in bytes), TRESOR_BENCH_PACE (bytes a second, -1 unpaced),
// TRESOR_BENCH_OWNCONN=1 (the snapshots on a connection of their own,
// not the appends'),
// TRESOR_BENCH_SECONDS (each sub-benchmark's length, default 20).
func BenchmarkCommitLatencyWhileStoring(b *testing.B) {
	secs := envInt(b, "TRESOR_BENCH_SECONDS", 20)
	cfg := snapshot.Config{Key: snapKey, ChunkBytes: envInt(b, "TRESOR_BENCH_CHUNK", 0)}
	pace := snapshot.DefaultPace
	if n := envInt(b, "TRESOR_BENCH_PACE", 0); n != 0 {
		pace = snapshot.Pace{BytesPerSecond: n}
	}
	for _, storing := range []bool{false, true} {
		b.Run(fmt.Sprintf("storing=%v", storing), func(b *testing.B) {
			for b.Loop() {
				during, outside := commitLatencies(b, cfg, pace, storing, os.Getenv("TRESOR_BENCH_OWNCONN") == "1", time.Duration(secs)*time.Second)
				report(b, "during", during)
				report(b, "outside", outside)
			}
		})
	}
}

// eventPayload is the size of a typical Tresor event body.
var eventPayload = json.RawMessage(`{"player":"p-000123","block":"b-0042","unit":314159,"stake_cents":200,"tier":"sapphire_x2","prize_cents":600}`)

func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return n
}

// report logs and reports the p50, p99 and max of lat in ms.
func report(b *testing.B, what string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	stalls := 0
	for _, l := range lat {
		if l >= 100*time.Millisecond {
			stalls++
		}
	}
	b.ReportMetric(q(0.5), what+"-p50-ms")
	b.ReportMetric(q(0.99), what+"-p99-ms")
	b.ReportMetric(q(1), what+"-max-ms")
	b.ReportMetric(float64(stalls), what+"-over100ms")
	b.Logf("%s: %d appends, p50 %.1f ms, p99 %.1f ms, max %.1f ms, %d at 100 ms or more", what, len(lat), q(0.5), q(0.99), q(1), stalls)
}

// commitLatencies appends batches of 20 events every 20 ms for d, storing a
// 48 MiB snapshot at pace over and over meanwhile when storing (on a connection of
// its own when ownConn), and returns the latencies of the appends
// scheduled during a store and outside one.
func commitLatencies(b *testing.B, cfg snapshot.Config, pace snapshot.Pace, storing, ownConn bool, d time.Duration) (during, outside []time.Duration) {
	srv := eventstoretest.RunEmbedded(b, b.TempDir())
	store := eventstoretest.OpenEmbedded(b, srv, eventstore.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	events := make([]eventstore.Event, 20)
	for i := range events {
		events[i] = eventstoretest.Ev("T", fmt.Sprintf("a%d", i), "x", i)
		events[i].Payload = eventPayload
	}
	seqs, err := store.Append(ctx, "c1", eventstore.AppendRequest{Events: events})
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var spans [][2]time.Time
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if storing {
		on := store
		if ownConn {
			on = eventstoretest.OpenEmbedded(b, srv, eventstore.Config{})
		}
		snaps, err := snapshot.Open(ctx, on, cfg)
		if err != nil {
			b.Fatal(err)
		}
		slot := snaps.Slot("writer", "c1", 1, "r").Paced(pace)
		data := pattern(48<<20, 3)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(500 * time.Millisecond):
				}
				start := time.Now()
				if err := slot.Save(ctx, seqs[0], data); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				spans = append(spans, [2]time.Time{start, time.Now()})
				mu.Unlock()
			}
		}()
	}
	type sample struct {
		at  time.Time
		lat time.Duration
	}
	var samples []sample
	const every = 20 * time.Millisecond
	begin := time.Now()
	for next := begin; next.Sub(begin) < d; next = next.Add(every) {
		if wait := time.Until(next); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := store.Append(ctx, "c1", eventstore.AppendRequest{Events: events}); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, sample{next, time.Since(next)})
	}
	close(stop)
	wg.Wait()
	for _, s := range samples {
		in := false
		for _, sp := range spans {
			if !s.at.Before(sp[0]) && s.at.Before(sp[1]) {
				in = true
				break
			}
		}
		if in {
			during = append(during, s.lat)
		} else {
			outside = append(outside, s.lat)
		}
	}
	b.Logf("%d stores", len(spans))
	return during, outside
}
