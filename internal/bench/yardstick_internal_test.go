package bench

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// BenchmarkYardstickHeaders measures what header bytes cost the server's
// atomic-batch commit: the yardstick's 1 000-message batches of 400-byte
// payloads (as tresor simulate --yardstick), on one embedded sync-always
// server, with
//
//   - bare: no headers but the batch's own (the yardstick);
//   - envelope: the headers the store writes for a ThrowMade in the middle
//     of an append, about the weight of a real stream's headers, batch
//     headers included;
//   - compact: the same fields in 135 bytes (two-letter names, Unix
//     nanoseconds, base64url hash, no previous hash);
//   - one_header: the envelope's bytes as a single header;
//   - bigger_payload: no headers, the payload grown by the envelope's bytes.
//
// The variants alternate, so that the machine's load falls on all of them;
// the ratios to bare of the same round are what to quote. Run it with
// -benchtime 1x.
func BenchmarkYardstickHeaders(b *testing.B) {
	nc := yardstickServer(b)
	envelope := benchEnvelopeHeader(b, nc)
	envBytes := headerBytes(envelope)
	hash := eventstore.ComputeHash(&eventstore.RecordedEvent{})
	compact := nats.Header{
		"Ti": {nuid.Next()}, "Tt": {"ThrowMade"}, "Ts": {"1"}, "Tq": {"76652"},
		"Ta": {fmt.Sprint(time.Now().UnixNano())}, "Th": {base64.RawURLEncoding.EncodeToString(hash[:])},
	}
	oneHeader := nats.Header{"Tresor-E": {strings.Repeat("x", envBytes-len("Tresor-E: \r\n"))}}
	variants := []yardstickVariant{
		{"bare", Yardstick{}},
		{"envelope", Yardstick{Header: envelope}},
		{"compact", Yardstick{Header: compact}},
		{"one_header", Yardstick{Header: oneHeader}},
		{"bigger_payload", Yardstick{MessageBytes: 400 + envBytes}},
	}
	for b.Loop() {
		alternateYardsticks(b, nc, 40, variants)
	}
	b.ReportMetric(float64(envBytes), "envelope_header_bytes")
	b.ReportMetric(float64(headerBytes(compact)), "compact_header_bytes")
}

// yardstickPrefill is how many messages BenchmarkYardstickStream puts in
// its big streams before it measures: a whole 450 000-unit block is about
// 3.3 million events.
var yardstickPrefill = flag.Int("yardstick.prefill", 2_000_000, "messages in the big streams of BenchmarkYardstickStream before it measures")

// BenchmarkYardstickStream measures what the server's work on Tresor's
// stream costs beside the message format: the yardstick's 1 000-message
// batches of 400-byte payloads, with, one at a time,
//
//   - fence: the committer's fence on each batch's first message (the
//     expected last sequence of the wildcard subject of the whole stream);
//   - msg_id: a Nats-Msg-Id on each batch's first message;
//   - subjects_2000: the messages spread over 2 000 subjects as a
//     sell-out's 2 000 players' (runs of one and two messages per
//     subject), not the same 64 subjects in every batch;
//   - tresor_config: the stream created with Tresor's configuration;
//   - big_stream: into a stream that already holds -yardstick.prefill
//     messages;
//
// and together (all: every one of them, into a second big stream), and
// together with the envelope's headers (all_envelope, the same big stream
// as all). The variants alternate in rounds, and the ratios to bare of the
// same round are what to quote. It also reports the rate of the first and
// last 100 batches of each big stream's prefill, a yardstick as the stream
// grows. Run it with -benchtime 1x.
func BenchmarkYardstickStream(b *testing.B) {
	nc := yardstickServer(b)
	const players = 2000
	all := Yardstick{Subjects: players, Fence: true, MsgID: true, LikeTresor: true, Stream: "YARDSTICK_ALL"}
	big := Yardstick{Stream: "YARDSTICK_BIG"}
	var rates []float64 // b.Loop clears metrics reported before it
	for _, y := range []Yardstick{big, all} {
		first, last := prefill(b, nc, y, *yardstickPrefill/eventstore.BatchEventsMax)
		rates = append(rates, first, last)
	}
	allEnvelope := all
	allEnvelope.Header = benchEnvelopeHeader(b, nc)
	variants := []yardstickVariant{
		{"bare", Yardstick{}},
		{"fence", Yardstick{Fence: true}},
		{"msg_id", Yardstick{MsgID: true}},
		{"subjects_2000", Yardstick{Subjects: players}},
		{"tresor_config", Yardstick{LikeTresor: true}},
		{"big_stream", big},
		{"all", all},
		{"all_envelope", allEnvelope},
	}
	for b.Loop() {
		alternateYardsticks(b, nc, 40, variants)
	}
	for i, y := range []Yardstick{big, all} {
		b.ReportMetric(rates[2*i], strings.ToLower(y.Stream)+"_prefill_first_msgs/s")
		b.ReportMetric(rates[2*i+1], strings.ToLower(y.Stream)+"_prefill_last_msgs/s")
	}
}

// BenchmarkYardstickBatchSize measures what larger atomic batches buy on
// the embedded server (its max_batch_size raised to
// eventstore.CommitBatchEventsMax):
// the yardstick's batches of 400-byte payloads at 1 000, 2 000 and 3 000
// messages, bare and with the envelope's headers, alternated in rounds as
// the other yardstick benchmarks, each a ratio to the bare 1 000-message
// batch of its round. Run it with -benchtime 1x.
func BenchmarkYardstickBatchSize(b *testing.B) {
	nc := yardstickServer(b)
	envelope := benchEnvelopeHeader(b, nc)
	variants := []yardstickVariant{
		{"bare", Yardstick{}},
		{"batch_2000", Yardstick{BatchSize: 2 * eventstore.BatchEventsMax}},
		{"batch_3000", Yardstick{BatchSize: eventstore.CommitBatchEventsMax}},
		{"envelope", Yardstick{Header: envelope}},
		{"envelope_2000", Yardstick{Header: envelope, BatchSize: 2 * eventstore.BatchEventsMax}},
		{"envelope_3000", Yardstick{Header: envelope, BatchSize: eventstore.CommitBatchEventsMax}},
	}
	for b.Loop() {
		alternateYardsticks(b, nc, 30, variants)
	}
}

// prefill publishes batches of 1 000 bare 400-byte messages (with y's
// subjects, configuration, fence and ids) into y's stream, and returns the
// rates of its first and last 100 batches.
func prefill(b *testing.B, nc *nats.Conn, y Yardstick, batches int) (first, last float64) {
	b.Helper()
	const chunk = 100
	y.BatchSize, y.MessageBytes, y.Replicas = eventstore.BatchEventsMax, 400, 1
	for done := 0; done < batches; done += chunk {
		y.Batches = min(chunk, batches-done)
		rate, err := MeasureAtomicBatches(context.Background(), nc, y)
		if err != nil {
			b.Fatal(err)
		}
		if done == 0 {
			first = rate
		}
		last = rate
	}
	return first, last
}

// yardstickServer starts an embedded sync-always server on a temporary
// directory, stopped when tb ends, and returns a connection to it.
func yardstickServer(tb testing.TB) *nats.Conn {
	tb.Helper()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: tb.TempDir()})
	var nc *nats.Conn
	if err == nil {
		tb.Cleanup(srv.Shutdown)
		nc, err = srv.Conn()
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// yardstickVariant is one kind of batch a benchmark alternates with the
// bare yardstick; its zero sizes take the yardstick's (1 000 messages of
// 400 bytes, one replica).
type yardstickVariant struct {
	name string
	y    Yardstick
}

// alternateYardsticks publishes 3 batches of each variant per round, the
// variants in a different order each round so that the machine's load
// falls on all of them, and reports per variant the median and quartiles
// of its per-round ratio to the first variant (the bare yardstick), and
// the process's CPU per message (server and publisher, the scratch
// stream's creation and deletion included: the same for every variant).
func alternateYardsticks(b *testing.B, nc *nats.Conn, rounds int, variants []yardstickVariant) {
	b.Helper()
	const batches = 3
	ratios := make([][]float64, len(variants))
	cpu := make([]time.Duration, len(variants))
	msgs := make([]float64, len(variants))
	// Each round takes the variants in a new random order: rotating one
	// order left each variant after the same neighbour, and the variant
	// right after the bare yardstick (itself right after a big stream's)
	// came out above it every time, a bias of the order, not the variant.
	// The seed is fixed, so that runs repeat their orders.
	rng := rand.New(rand.NewPCG(1, 2))
	// A first round warms the server (its first streams, its buffers)
	// and is not counted: a cold server's round is far off the warm ones.
	for r := -1; r < rounds; r++ {
		rates := make([]float64, len(variants))
		for _, i := range rng.Perm(len(variants)) {
			y := variants[i].y
			y.Batches, y.Replicas = batches, 1
			if y.BatchSize == 0 {
				y.BatchSize = eventstore.BatchEventsMax
			}
			if y.MessageBytes == 0 {
				y.MessageBytes = 400
			}
			before := cpuTime(b)
			rate, err := MeasureAtomicBatches(context.Background(), nc, y)
			if err != nil {
				b.Fatal(err)
			}
			if r >= 0 {
				cpu[i] += cpuTime(b) - before
				msgs[i] += float64(batches * y.BatchSize)
			}
			rates[i] = rate
		}
		for i := range variants {
			if r >= 0 {
				ratios[i] = append(ratios[i], rates[i]/rates[0])
			}
		}
	}
	for i, v := range variants {
		b.ReportMetric(float64(cpu[i].Microseconds())/msgs[i], v.name+"_cpu_us/msg")
		if i > 0 {
			q := slices.Clone(ratios[i])
			slices.Sort(q)
			b.ReportMetric(q[len(q)/4], v.name+"/bare_q1")
			b.ReportMetric(q[len(q)/2], v.name+"/bare_median")
			b.ReportMetric(q[len(q)*3/4], v.name+"/bare_q3")
		}
	}
}

// cpuTime is the CPU time (user and system) of the process so far: the
// embedded server's and the publisher's.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchEnvelopeHeader is the envelope of a ThrowMade with two more events
// of its append to follow, as the store writes it: the Tresor headers of
// the first of three events appended on nc's server (into a stream
// deleted afterwards), read back raw, with
// the chain sequence of an event far into a sell-out.
func benchEnvelopeHeader(tb testing.TB, nc *nats.Conn) nats.Header {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "ENVELOPE_" + nuid.Next()
	s, err := eventstore.Open(ctx, nc, eventstore.Config{Stream: name})
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	// The stream goes, so that the yardsticks meet the server as before.
	defer func() {
		if js, err := jetstream.New(nc); err == nil {
			js.DeleteStream(context.Background(), name)
		}
	}()
	events := make([]eventstore.Event, 3)
	for i := range events {
		events[i] = eventstore.Event{ID: nuid.Next(), Type: "ThrowMade", SchemaVersion: 1,
			Aggregate: eventstore.Aggregate{Kind: "player", ID: "sim-5a2f4b43-593"}, Payload: json.RawMessage(`{}`)}
	}
	seqs, err := s.Append(ctx, "s0", eventstore.AppendRequest{Events: events})
	if err != nil {
		tb.Fatal(err)
	}
	raw, err := s.Stream().GetMsg(ctx, seqs[0])
	if err != nil {
		tb.Fatal(err)
	}
	h := nats.Header{}
	for k, v := range raw.Header {
		if strings.HasPrefix(k, "Tresor-") {
			h[k] = v
		}
	}
	h.Set(eventstore.HeaderChainSeq, "76652")
	return h
}

// headerBytes is the size of h's lines on the wire and in the store
// ("Name: value\r\n" each), without the NATS/1.0 line.
func headerBytes(h nats.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}

// TestYardstickOnAKeptStream publishes the yardstick with every option of
// Tresor's stream twice into one kept stream: the second run fences on
// where the first ended (a wrong fence is refused by the server and fails
// the run), and the stream holds every message, spread over subjects.
func TestYardstickOnAKeptStream(t *testing.T) {
	nc := yardstickServer(t)
	y := Yardstick{Batches: 2, BatchSize: 10, MessageBytes: 40, Replicas: 1, Subjects: 2000, Fence: true, MsgID: true,
		LikeTresor: true, Stream: "YARDSTICK_TEST"}
	for range 2 {
		if _, err := MeasureAtomicBatches(context.Background(), nc, y); err != nil {
			t.Fatal(err)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(context.Background(), y.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	// Each run spreads its 20 messages in runs of one or two per subject
	// (each run starts the spread afresh): at least 10 subjects.
	if info.State.Msgs != 40 || info.State.NumSubjects < 10 || !info.Config.DenyPurge {
		t.Fatalf("stream holds %d messages on %d subjects (deny purge %t): want 40 on at least 10, Tresor's configuration",
			info.State.Msgs, info.State.NumSubjects, info.Config.DenyPurge)
	}
}
