package bench_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/internal/bench"
	"github.com/nats-io/nats.go/jetstream"
)

// TestMeasureCommandLatency runs the latency yardstick with puts on an
// embedded server: every command due within the duration is answered and
// timed, the commands are split by whether they arrived while an object
// was being put (none before the first put is due, some during each), and
// the scratch stream and bucket are gone afterwards.
func TestMeasureCommandLatency(t *testing.T) {
	s := openStore(t)
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	y := bench.LatencyYardstick{CommandsPerSecond: 400, Duration: 1500 * time.Millisecond, EventsPerCommand: 1.45,
		MessageBytes: 400, Replicas: 1, PutBytes: 3 << 20, PutEvery: 500 * time.Millisecond}
	f, err := bench.MeasureCommandLatency(ctx, s, y)
	if err != nil {
		t.Fatal(err)
	}
	const commands = 600 // 1.5 s at one every 2.5 ms
	if len(f.Latencies) != commands || !slices.IsSorted(f.Latencies) || f.Latencies[0] <= 0 {
		t.Fatalf("%d latencies from %v: want %d, sorted, all above 0", len(f.Latencies), f.Latencies[:min(3, len(f.Latencies))], commands)
	}
	if f.Batches < 1 || f.Batches > commands {
		t.Fatalf("%d batches for %d commands", f.Batches, commands)
	}
	// A put of 3 MiB at 16 MiB/s takes at least 187 ms: the puts due at
	// 250, 750 and 1 250 ms (the middle of each half second) all begin
	// within the commands, and the commands before the first are outside.
	if f.Puts != 3 || len(f.DuringPut) == 0 || len(f.OutsidePut) < 250*commands/1500 ||
		len(f.DuringPut)+len(f.OutsidePut) != commands || !slices.IsSorted(f.DuringPut) || !slices.IsSorted(f.OutsidePut) {
		t.Fatalf("%d puts, %d commands during them, %d outside: want 3, some during, the first 250 ms outside, %d in all",
			f.Puts, len(f.DuringPut), len(f.OutsidePut), commands)
	}
	js, err := jetstream.New(s.Conn())
	if err != nil {
		t.Fatal(err)
	}
	for name := range js.StreamNames(ctx).Name() {
		if strings.Contains(name, "YARDSTICK") {
			t.Fatalf("stream %s left behind", name)
		}
	}
	for _, bad := range []bench.LatencyYardstick{
		{},
		{CommandsPerSecond: 400, Duration: time.Second, EventsPerCommand: 0.5, MessageBytes: 400, Replicas: 1},
		{CommandsPerSecond: 400, Duration: time.Second, EventsPerCommand: 1, MessageBytes: 400, Replicas: 1, PutBytes: 1},
		{CommandsPerSecond: 0.5, Duration: time.Second, EventsPerCommand: 1, MessageBytes: 400, Replicas: 1},
	} {
		if _, err := bench.MeasureCommandLatency(ctx, s, bad); !errors.Is(err, eventstore.ErrInvalid) {
			t.Fatalf("%+v: got %v, want ErrInvalid", bad, err)
		}
	}
}

// BenchmarkCommandLatencyFloor measures what the embedded server gives a
// writer that does nothing (the latency yardstick): batches of 1 and 150
// messages every 9 ms and of 999 every 20 ms (one command each, due at
// those intervals); commands of 1.45 messages at 13 000 a second (2 600
// plays' worth); and at 4 000 a second (800 plays) with puts every 5 s of
// 11.5 MB and of a tenth of that at the read models' pace (snapshot.DefaultPace), and of 11.5 MB at
// 4 MiB/s and, every 30 s, at the writer's snapshots' pace (1 MiB/s), the
// 99th latency percentile while a put runs over the one outside. Run it with -benchtime 1x.
func BenchmarkCommandLatencyFloor(b *testing.B) {
	s := openStore(b)
	each := func(perSecond, events float64, d time.Duration) bench.LatencyYardstick {
		return bench.LatencyYardstick{CommandsPerSecond: perSecond, Duration: d, EventsPerCommand: events, MessageBytes: 400, Replicas: 1}
	}
	withPuts := func(bytes, pace int, every time.Duration) bench.LatencyYardstick {
		y := each(4000, 1.45, 6*every)
		y.PutBytes, y.PutEvery, y.PutPace = bytes, every, pace
		return y
	}
	for _, v := range []struct {
		name string
		y    bench.LatencyYardstick
	}{
		{"batch=1", each(111, 1, 10*time.Second)},
		{"batch=150", each(111, 150, 10*time.Second)},
		{"batch=999", each(50, 999, 10*time.Second)}, // every 20 ms: one commits in more than 9
		{"commands=13000", each(13000, 1.45, 15*time.Second)},
		{"commands=4000/puts=11.5MB", withPuts(11_500_000, 0, 5*time.Second)},
		{"commands=4000/puts=11.5MB/pace=4MiB", withPuts(11_500_000, 4<<20, 5*time.Second)},
		{"commands=4000/puts=11.5MB/pace=1MiB", withPuts(11_500_000, 1<<20, 30*time.Second)},
		{"commands=4000/puts=1.15MB", withPuts(1_150_000, 0, 5*time.Second)},
	} {
		b.Run(v.name, func(b *testing.B) {
			for b.Loop() {
				f, err := bench.MeasureCommandLatency(eventstoretest.Ctx(b, 5*time.Minute), s, v.y)
				if err != nil {
					b.Fatal(err)
				}
				ms := func(l []time.Duration, p int) float64 { return float64(l[(len(l)-1)*p/100].Microseconds()) / 1000 }
				b.ReportMetric(ms(f.Latencies, 50), "p50_ms")
				b.ReportMetric(ms(f.Latencies, 99), "p99_ms")
				if len(f.DuringPut) > 0 && len(f.OutsidePut) > 0 {
					b.ReportMetric(ms(f.DuringPut, 99)/ms(f.OutsidePut, 99), "p99_during_over_outside")
				}
			}
		})
	}
}

// openStore opens a store on an embedded sync-always server on a temporary
// directory; both are closed when tb ends.
func openStore(tb testing.TB) *eventstore.NATSStore {
	tb.Helper()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Shutdown)
	s, err := srv.Open(eventstoretest.Ctx(tb, 30*time.Second), eventstore.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}
