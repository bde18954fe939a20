package eventstore_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestMeasureCommandLatency runs the latency yardstick with puts on an
// embedded server: every command due within the duration is answered and
// timed, the commands are split by whether they arrived while an object
// was being put (none before the first put is due, some during each), and
// the scratch stream and bucket are gone afterwards.
func TestMeasureCommandLatency(t *testing.T) {
	s := openStore(t, runEmbedded(t, t.TempDir()), eventstore.Config{})
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	y := eventstore.LatencyYardstick{CommandsPerSecond: 400, Duration: 1500 * time.Millisecond, EventsPerCommand: 1.45,
		MessageBytes: 400, Replicas: 1, PutBytes: 3 << 20, PutEvery: 500 * time.Millisecond}
	f, err := eventstore.MeasureCommandLatency(ctx, s, y)
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
	for _, bad := range []eventstore.LatencyYardstick{
		{},
		{CommandsPerSecond: 400, Duration: time.Second, EventsPerCommand: 0.5, MessageBytes: 400, Replicas: 1},
		{CommandsPerSecond: 400, Duration: time.Second, EventsPerCommand: 1, MessageBytes: 400, Replicas: 1, PutBytes: 1},
		{CommandsPerSecond: 0.5, Duration: time.Second, EventsPerCommand: 1, MessageBytes: 400, Replicas: 1},
	} {
		if _, err := eventstore.MeasureCommandLatency(ctx, s, bad); !errors.Is(err, eventstore.ErrInvalid) {
			t.Fatalf("%+v: got %v, want ErrInvalid", bad, err)
		}
	}
}
