package eventstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/internal/bench"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// benchPayload is the size of a typical Tresor event body.
var benchPayload = json.RawMessage(`{"player":"p-000123","block":"b-0042","unit":314159,"stake_cents":200,"tier":"sapphire_x2","prize_cents":600}`)

// benchMessageBytes is the size of a stored event (headers and payload), so
// that the raw yardsticks move the same bytes as Tresor.
const benchMessageBytes = 560

// BenchmarkAppend measures, in one run on one embedded sync-always server:
// the raw JetStream yardstick (1 000-message atomic batches), raw async
// publish, Tresor's committer under 1, 64 and 1 024 concurrent writers
// and one pipelined single-threaded writer (events/s, ratio to the
// yardstick, latency percentiles), and ordered reads. Each sub-benchmark does
// a fixed amount of work per iteration; run it with -benchtime 1x.
func BenchmarkAppend(b *testing.B) {
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	ctx := context.Background()
	store, err := srv.Open(ctx, eventstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	var yardstick float64

	b.Run("yardstick_atomic_batch_1000", func(b *testing.B) {
		var rate float64
		for b.Loop() {
			r, err := bench.MeasureAtomicBatches(ctx, store.Conn(), bench.Yardstick{
				Batches: 100, BatchSize: eventstore.BatchEventsMax, MessageBytes: benchMessageBytes, Replicas: 1})
			if err != nil {
				b.Fatal(err)
			}
			rate = r
		}
		yardstick = rate
		b.ReportMetric(rate, "events/s")
	})

	b.Run("raw_async_publish", func(b *testing.B) {
		const msgs = 6000
		var rate float64
		for b.Loop() {
			rate = rawAsyncPublish(b, store.Conn(), msgs)
		}
		b.ReportMetric(rate, "events/s")
	})

	for _, writers := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("committer_writers_%d", writers), func(b *testing.B) {
			events := 100_000
			if writers == 1 {
				events = 600 // one commit per event: a few seconds
			}
			var rate float64
			var lat []time.Duration
			for b.Loop() {
				rate, lat = committerWriters(b, store, fmt.Sprintf("w%d", writers), writers, events, eventstore.CommitterConfig{})
			}
			reportRate(b, rate, yardstick, lat)
		})
	}

	b.Run("committer_pipelined_single_writer", func(b *testing.B) {
		var rate float64
		var lat []time.Duration
		for b.Loop() {
			rate, lat = committerPipelined(b, store, "pipelined", 200_000)
		}
		reportRate(b, rate, yardstick, lat)
	})

	b.Run("ordered_read", func(b *testing.B) {
		var rate float64
		for b.Loop() {
			n := 0
			start := time.Now()
			if _, err := store.ReadFrom(ctx, 1, func(eventstore.RecordedEvent) error { n++; return nil }); err != nil {
				b.Fatal(err)
			}
			rate = float64(n) / time.Since(start).Seconds()
		}
		b.ReportMetric(rate, "events/s")
	})
}

// BenchmarkHighWater measures what the high-water mark of acknowledged
// commits costs the write path: the committer under 64 writers without
// and with it, in rounds alternating ABBA on one embedded sync-always server,
// each mode on a chain of its own. It reports each mode's events/s and
// commands' 99th latency percentile over all its rounds, and the
// ratios with over without.
//
//	go test -run '^$' -bench HighWater -benchtime 1x ./eventstore/
func BenchmarkHighWater(b *testing.B) {
	const rounds, writers, events = 8, 64, 24_000
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	store, err := srv.Open(context.Background(), eventstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	hw, err := eventstore.OpenHighWaterFile(filepath.Join(b.TempDir(), "high-water"))
	if err != nil {
		b.Fatal(err)
	}
	defer hw.Close()
	var took [2]time.Duration
	var lat [2][]time.Duration
	for b.Loop() {
		for r := range 2 * rounds {
			// ABBA: the first of a pair runs faster, and each mode is
			// first in half of them.
			on := (r%2 == 1) == (r/2%2 == 0)
			cfg, mode, chain := eventstore.CommitterConfig{}, 0, "off"
			if on {
				cfg, mode, chain = eventstore.CommitterConfig{HighWater: hw}, 1, "on"
			}
			rate, l := committerWriters(b, store, chain, writers, events, cfg)
			took[mode] += time.Duration(float64(events) / rate * float64(time.Second))
			lat[mode] = append(lat[mode], l...)
		}
	}
	p99 := func(l []time.Duration) float64 {
		slices.Sort(l)
		return float64(l[len(l)*99/100].Microseconds()) / 1000
	}
	total := float64(rounds * events)
	off, on := total/took[0].Seconds(), total/took[1].Seconds()
	b.ReportMetric(off, "off_events/s")
	b.ReportMetric(on, "on_events/s")
	b.ReportMetric(on/off, "on/off_rate")
	b.ReportMetric(p99(lat[0]), "off_p99_ms")
	b.ReportMetric(p99(lat[1]), "on_p99_ms")
	b.ReportMetric(p99(lat[1])/p99(lat[0]), "on/off_p99")
}

func reportRate(b *testing.B, rate, yardstick float64, lat []time.Duration) {
	b.ReportMetric(rate, "events/s")
	if yardstick > 0 {
		b.ReportMetric(rate/yardstick, "x_yardstick")
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
	}
}

// rawAsyncPublish publishes msgs single messages asynchronously into a
// scratch stream like Tresor's and returns messages/s.
func rawAsyncPublish(b *testing.B, nc *nats.Conn, msgs int) float64 {
	ctx := context.Background()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		b.Fatal(err)
	}
	name := fmt.Sprintf("ASYNC_%d", time.Now().UnixNano())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"},
		Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	defer js.DeleteStream(ctx, name)
	payload := make([]byte, benchMessageBytes)
	start := time.Now()
	for i := range msgs {
		if _, err := js.PublishAsync(fmt.Sprintf("%s.%d", name, i%64), payload, jetstream.WithStallWait(10*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("async publishes not acknowledged within a minute")
	}
	return float64(msgs) / time.Since(start).Seconds()
}

func benchEvent(i int) eventstore.Event {
	return eventstore.Event{Type: "bench.StakePlaced", SchemaVersion: 1,
		Aggregate: eventstore.Aggregate{Kind: "player", ID: fmt.Sprintf("p%d", i%10_000)}, Payload: benchPayload}
}

// committerWriters has writers goroutines each submit one-event requests
// and wait for each answer, until events are appended.
func committerWriters(b *testing.B, store eventstore.Store, chain string, writers, events int, cfg eventstore.CommitterConfig) (float64, []time.Duration) {
	ctx := context.Background()
	c, err := store.NewCommitter(ctx, chain, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var next atomic.Int64
	lat := make([][]time.Duration, writers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > events {
					return
				}
				t0 := time.Now()
				r := <-c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{benchEvent(i)}})
				if r.Err != nil {
					b.Error(r.Err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	return float64(events) / time.Since(start).Seconds(), slices.Concat(lat...)
}

// committerPipelined is the settlement writer's shape: one goroutine
// submits without waiting, a second collects answers in order.
func committerPipelined(b *testing.B, store eventstore.Store, chain string, events int) (float64, []time.Duration) {
	ctx := context.Background()
	c, err := store.NewCommitter(ctx, chain, eventstore.CommitterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	type inflight struct {
		ch <-chan eventstore.AppendResult
		t0 time.Time
	}
	pending := make(chan inflight, 8192)
	lat := make([]time.Duration, 0, events)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for p := range pending {
			if r := <-p.ch; r.Err != nil {
				b.Error(r.Err)
			}
			lat = append(lat, time.Since(p.t0))
		}
	}()
	start := time.Now()
	for i := range events {
		pending <- inflight{ch: c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{benchEvent(i)}}), t0: time.Now()}
	}
	close(pending)
	<-done
	return float64(events) / time.Since(start).Seconds(), lat
}
