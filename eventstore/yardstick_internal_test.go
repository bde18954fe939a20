package eventstore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// BenchmarkYardstickHeaders measures what header bytes cost the server's
// atomic-batch commit: the yardstick's 1 000-message batches of 400-byte
// payloads (as tresor simulate --yardstick), on one embedded sync-always
// server, with
//
//   - bare: no headers but the batch's own (the yardstick);
//   - envelope: the headers encodeMsg writes for a ThrowMade in the middle
//     of an append (a real stream's headers average 405 bytes, batch
//     headers included, docs/performance.md);
//   - compact: the same fields in 135 bytes (two-letter names, Unix
//     nanoseconds, base64url hash, no previous hash);
//   - one_header: the envelope's bytes as a single header;
//   - bigger_payload: no headers, the payload grown by the envelope's bytes.
//
// The variants alternate, so that the machine's load falls on all of them;
// the ratios to bare of the same round are what to quote. Run it with
// -benchtime 1x.
func BenchmarkYardstickHeaders(b *testing.B) {
	srv, err := RunEmbedded(EmbeddedConfig{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Conn()
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	envelope := benchEnvelopeHeader()
	envBytes := headerBytes(envelope)
	hash := ComputeHash(&RecordedEvent{})
	compact := nats.Header{
		"Ti": {nuid.Next()}, "Tt": {"ThrowMade"}, "Ts": {"1"}, "Tq": {"76652"},
		"Ta": {fmt.Sprint(time.Now().UnixNano())}, "Th": {base64.RawURLEncoding.EncodeToString(hash[:])},
	}
	oneHeader := nats.Header{"Tresor-E": {strings.Repeat("x", envBytes-len("Tresor-E: \r\n"))}}
	variants := []struct {
		name   string
		header nats.Header
		extra  int
	}{
		{"bare", nil, 0},
		{"envelope", envelope, 0},
		{"compact", compact, 0},
		{"one_header", oneHeader, 0},
		{"bigger_payload", nil, envBytes},
	}
	const rounds, batches = 40, 3
	ratios := make([][]float64, len(variants))
	// Process CPU (server and publisher) per variant, the scratch stream's
	// creation and deletion included: the same for every variant.
	cpu := make([]time.Duration, len(variants))
	for b.Loop() {
		// A first round warms the server (its first streams, its buffers)
		// and is not counted: it measured several times the later ones.
		for r := -1; r < rounds; r++ {
			rates := make([]float64, len(variants))
			for k := range variants {
				i := (k + r + 1) % len(variants) // each variant leads a round in turn
				v := variants[i]
				before := cpuTime(b)
				rate, err := MeasureAtomicBatches(context.Background(), nc, Yardstick{Batches: batches, BatchSize: BatchEventsMax,
					MessageBytes: 400 + v.extra, Replicas: 1, Header: v.header})
				if err != nil {
					b.Fatal(err)
				}
				if r >= 0 {
					cpu[i] += cpuTime(b) - before
				}
				rates[i] = rate
			}
			for i := range variants {
				if r >= 0 {
					ratios[i] = append(ratios[i], rates[i]/rates[0])
				}
			}
		}
	}
	b.ReportMetric(float64(envBytes), "envelope_header_bytes")
	b.ReportMetric(float64(headerBytes(compact)), "compact_header_bytes")
	msgs := float64(rounds * batches * BatchEventsMax)
	for i, v := range variants {
		b.ReportMetric(float64(cpu[i].Microseconds())/msgs, v.name+"_cpu_us/msg")
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
// of its append to follow, as encodeMsg writes it.
func benchEnvelopeHeader() nats.Header {
	ev := RecordedEvent{Event: Event{ID: nuid.Next(), Type: "ThrowMade", SchemaVersion: 1,
		Aggregate: Aggregate{Kind: "player", ID: "sim-5a2f4b43-593"}, Payload: json.RawMessage(`{}`)},
		Chain: "s0", ChainSeq: 76652, RecordedAt: time.Now(), AppendRemaining: 2}
	ev.PrevHash = ComputeHash(&ev)
	ev.Hash = ComputeHash(&ev)
	return subjects{prefix: "tresor"}.encodeMsg(&ev).Header
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
