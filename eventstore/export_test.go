package eventstore_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/internal/bench"
	"github.com/nats-io/nats.go/jetstream"
)

// exportLines writes evs through an ExportWriter and returns the file.
func exportLines(tb testing.TB, evs ...eventstore.RecordedEvent) []byte {
	tb.Helper()
	var buf bytes.Buffer
	x := eventstore.NewExportWriter(&buf)
	for _, ev := range evs {
		if err := x.Write(ev); err != nil {
			tb.Fatal(err)
		}
	}
	if err := x.Flush(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// readExport reads an export back into records.
func readExport(tb testing.TB, file []byte) []eventstore.RecordedEvent {
	tb.Helper()
	var out []eventstore.RecordedEvent
	if err := eventstore.ReadExport(bytes.NewReader(file), func(r eventstore.RecordedEvent) error {
		out = append(out, r)
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	return out
}

// TestExportVectorLine pins the line of the worked example of
// docs/events.md, as quoted in docs/export.md: the format is a contract.
func TestExportVectorLine(t *testing.T) {
	ev := vectorEvent()
	ev.Sequence = 7
	ev.Hash = eventstore.ComputeHash(&ev)
	const want = `{"sequence":7,"subject":"tresor.s0.account.p42","id":"ev-1","type":"StakePlaced","schema_version":1,` +
		`"chain":"s0","chain_seq":1,"aggregate_kind":"account","aggregate_id":"p42","recorded_at":"2026-12-02T17:00:00.123456789Z",` +
		`"correlation_id":"c-9","causation_id":"","prev_hash":"0000000000000000000000000000000000000000000000000000000000000000",` +
		`"hash":"1379bf09e4152b088cd137ccfe66eba917bf1fcc6646e1bab16a60ab01f5c23c","payload":{"cents":200}}` + "\n"
	if got := string(exportLines(t, ev)); got != want {
		t.Fatalf("line\n got %s\nwant %s", got, want)
	}
}

// TestExportRoundTripsOddValues writes records whose strings need JSON
// escaping and whose payloads a JSON re-encoder would change (HTML
// characters, inner whitespace, unicode escapes, big numbers), and
// forged-looking ones that must go base64, and reads back the same
// records, hash for hash.
func TestExportRoundTripsOddValues(t *testing.T) {
	base := vectorEvent()
	var evs []eventstore.RecordedEvent
	for i, p := range []string{
		`{"html":"<a href='x'>&amp;</a>","n":1.50,"big":123456789012345678901234567890}`,
		`{ "spaced" :	[1, 2 ,3] }`,
		`"\u00e9\u2028 é \ud83d\ude00"`,
		`{"a":1}` + "\n",
		" {}",
		"not json",
		"",
		"{\"bad\":\"\xff\"}",
		`null`,
	} {
		ev := base
		ev.Sequence = uint64(i + 1)
		ev.ID = `id"with\back` + "\x01" + `slash`
		ev.CausationID = "é<>&"
		ev.RecordedAt = time.Date(2026, 12, 2, 17, 0, 0, i*100, time.FixedZone("CET", 3600)) // trailing zeros, another zone
		ev.Payload = json.RawMessage(p)
		ev.Hash = eventstore.ComputeHash(&ev)
		evs = append(evs, ev)
	}
	file := exportLines(t, evs...)
	if n := bytes.Count(file, []byte("\n")); n != len(evs) {
		t.Fatalf("%d lines for %d records:\n%s", n, len(evs), file)
	}
	for i, line := range strings.Split(strings.TrimSuffix(string(file), "\n"), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("line %d is not JSON: %s", i+1, line)
		}
	}
	got := readExport(t, file)
	if len(got) != len(evs) {
		t.Fatalf("read %d records, want %d", len(got), len(evs))
	}
	for i := range evs {
		if h := eventstore.ComputeHash(&got[i]); h != evs[i].Hash {
			t.Errorf("record %d: hash %s read back, want %s (payload %q, read %q)", i, h, evs[i].Hash, evs[i].Payload, got[i].Payload)
		}
		want := evs[i]
		want.RecordedAt = want.RecordedAt.UTC()
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, got[i], want)
		}
	}
}

// TestReadExportNamesTheMalformedLine checks that each malformed line is an
// error naming its line number and field, and that a bad hash is not one:
// it is the auditor's to report.
func TestReadExportNamesTheMalformedLine(t *testing.T) {
	ev := vectorEvent()
	ev.Sequence = 1
	ev.Hash = eventstore.ComputeHash(&ev)
	good := strings.TrimSuffix(string(exportLines(t, ev)), "\n")
	for _, tc := range []struct{ name, line, want string }{
		{"truncated", good[:len(good)-10], "not a JSON object"},
		{"not an object", `[1,2]`, "not a JSON object"},
		{"empty line", ``, "not a JSON object"},
		{"sequence zero", strings.Replace(good, `"sequence":1`, `"sequence":0`, 1), "sequence"},
		{"sequence text", strings.Replace(good, `"sequence":1`, `"sequence":"1"`, 1), "not a JSON object"},
		{"bad time", strings.Replace(good, `17:00:00.123456789Z`, `17:00:00.123456789`, 1), "recorded_at"},
		{"bad prev hash", strings.Replace(good, `"prev_hash":"00`, `"prev_hash":"zz`, 1), "prev_hash"},
		{"short hash", strings.Replace(good, `"hash":"13`, `"hash":"`, 1), "hash"},
		{"subject mismatch", strings.Replace(good, `tresor.s0.account.p42`, `tresor.s1.account.p42`, 1), "subject"},
		{"no payload", strings.Replace(good, `,"payload":{"cents":200}`, ``, 1), "payload"},
		{"both payloads", strings.Replace(good, `"payload":`, `"payload_base64":"e30=","payload":`, 1), "payload"},
		{"bad base64", strings.Replace(good, `"payload":{"cents":200}`, `"payload_base64":"%%"`, 1), "payload_base64"},
		{"append longer than a batch", strings.Replace(good, `,"payload":`, `,"append_remaining":1000,"payload":`, 1), "append_remaining"},
		{"append marker text", strings.Replace(good, `,"payload":`, `,"append_remaining":"1","payload":`, 1), "not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := good + "\n" + tc.line + "\n" + good + "\n"
			calls := 0
			err := eventstore.ReadExport(strings.NewReader(file), func(eventstore.RecordedEvent) error { calls++; return nil })
			if err == nil || !strings.Contains(err.Error(), "export line 2: ") || !strings.Contains(err.Error(), tc.want) ||
				!errors.Is(err, eventstore.ErrInvalid) || calls != 1 {
				t.Fatalf("err %v after %d records, want line 2 and %q", err, calls, tc.want)
			}
		})
	}
	var sink bytes.Buffer
	huge := ev
	huge.Payload = json.RawMessage(`"` + strings.Repeat("x", eventstore.ExportLineMax) + `"`)
	if err := eventstore.NewExportWriter(&sink).Write(huge); !errors.Is(err, eventstore.ErrInvalid) {
		t.Fatalf("a line longer than ExportLineMax: %v", err)
	}
	if err := eventstore.ReadExport(strings.NewReader(good+strings.Repeat(" ", eventstore.ExportLineMax)+"\n"), func(eventstore.RecordedEvent) error { return nil }); err == nil ||
		!strings.Contains(err.Error(), "line 1: line longer than") {
		t.Fatalf("reading a line longer than ExportLineMax: %v", err)
	}
	tampered := strings.Replace(good, `{"cents":200}`, `{"cents":900}`, 1)
	got := readExport(t, []byte(tampered+"\n"))
	if len(got) != 1 || eventstore.ComputeHash(&got[0]) == got[0].Hash {
		t.Fatalf("a tampered payload must be read as is, its hash left to the auditor: %+v", got)
	}
}

// oddPayloads are valid JSON bodies that a re-encoding JSON library would
// change: HTML characters, spacing, line breaks, escapes, big numbers.
var oddPayloads = []string{
	`{"html":"<b>&amp;</b>","n":1.50}`,
	`{ "spaced" :	[1, 2 ,3] }`,
	"{\n  \"pretty\": \"\\u00e9 \u00e9\"\n}",
	`{"big":123456789012345678901234567890,"esc":"\"\\\/"}`,
}

// writeRealStream writes n events in each of two chains through real
// committers that seal every 50 events, and returns the seal key.
func writeRealStream(tb testing.TB, store eventstore.Store, n int) ed25519.PublicKey {
	tb.Helper()
	ctx := eventstoretest.Ctx(tb, 60*time.Second)
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		tb.Fatal(err)
	}
	var chans []<-chan eventstore.AppendResult
	wait := func() {
		for _, ch := range chans {
			if r := <-ch; r.Err != nil {
				tb.Fatal(r.Err)
			}
		}
		chans = chans[:0]
	}
	var committers []eventstore.Committer
	for _, chain := range []string{"s0", "s1"} {
		c, err := store.NewCommitter(ctx, chain, eventstore.CommitterConfig{SealKey: key, SealEvery: 50})
		if err != nil {
			tb.Fatal(err)
		}
		committers = append(committers, c)
	}
	for i := range n {
		for j, c := range committers {
			ev := eventstoretest.Ev("test.Odd", "acct", fmt.Sprint(i%5), i)
			ev.Payload = json.RawMessage(oddPayloads[(i+j)%len(oddPayloads)])
			ev.CausationID = fmt.Sprintf("cmd-%d", i)
			chans = append(chans, c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{ev}}))
		}
		if i%20 == 19 { // let batches commit so that seals fall due
			wait()
		}
	}
	wait()
	for _, c := range committers {
		if err := c.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	return pub
}

// exportStored exports sequences from..to of store as a file.
func exportStored(tb testing.TB, store *eventstore.NATSStore, from, to uint64) []byte {
	tb.Helper()
	var buf bytes.Buffer
	x := eventstore.NewExportWriter(&buf)
	if err := store.ReadStored(eventstoretest.Ctx(tb, 30*time.Second), from, to, x.Write); err != nil {
		tb.Fatal(err)
	}
	if err := x.Flush(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// TestExportRoundTripOfARealStream exports a stream written by real
// committers (two chains, seals) through a read-only store, reads the file
// back and checks that every record is the event the store reads, that
// every hash recomputes and that a Verifier accepts the whole file, seals
// included; an export in two ranges is the same file.
func TestExportRoundTripOfARealStream(t *testing.T) {
	srv := eventstoretest.RunEmbedded(t, t.TempDir())
	pub := writeRealStream(t, eventstoretest.OpenEmbedded(t, srv, eventstore.Config{}), 300)
	reader := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{ReadOnly: true})
	want := eventstoretest.ReadAll(t, reader)
	last := want[len(want)-1].Sequence
	file := exportStored(t, reader, 1, last)
	if split := append(exportStored(t, reader, 0, 257), exportStored(t, reader, 258, last)...); !bytes.Equal(split, file) {
		t.Fatal("an export in two ranges differs from the one-shot export")
	}
	got := readExport(t, file)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %d records that differ from the %d stored", len(got), len(want))
	}
	v := eventstore.NewVerifier(pub)
	for i := range got {
		if h := eventstore.ComputeHash(&got[i]); h != got[i].Hash {
			t.Fatalf("sequence %d: hash %s recomputed, %s exported", got[i].Sequence, h, got[i].Hash)
		}
		if err := v.Check(got[i]); err != nil {
			t.Fatal(err)
		}
	}
	if st := v.Stats(); st.Events != uint64(len(want)) || st.Seals < 10 {
		t.Fatalf("verified %+v over %d records, want every one and >= 10 seals", st, len(want))
	}
	pretty := 0
	for _, ev := range want {
		if bytes.Contains(ev.Payload, []byte("\n")) {
			pretty++
		}
	}
	if n := bytes.Count(file, []byte(`"payload_base64"`)); n != pretty || n == 0 {
		t.Fatalf("%d base64 payloads, want the %d pretty-printed ones", n, pretty)
	}
}

// TestExportCarriesATamperedEventForTheAuditor forges an event behind the
// store's back: reading with verification stops at it, the export carries
// it as stored, and a Verifier over the file names its sequence.
func TestExportCarriesATamperedEventForTheAuditor(t *testing.T) {
	srv := eventstoretest.RunEmbedded(t, t.TempDir())
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	store := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{})
	if _, err := store.Append(ctx, "s0", eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("test.A", "acct", "a1", 1)}}); err != nil {
		t.Fatal(err)
	}
	orig := eventstoretest.ReadAll(t, store)[0]
	forged := forge(t, store, orig, []byte(`{"n":1000000}`))
	if _, err := store.ReadFrom(ctx, 1, func(eventstore.RecordedEvent) error { return nil }); !errors.Is(err, eventstore.ErrIntegrity) {
		t.Fatalf("verified read over a forgery: %v", err)
	}
	got := readExport(t, exportStored(t, store, 1, forged))
	v := eventstore.NewVerifier(nil)
	var ie *eventstore.IntegrityError
	if err := v.Check(got[0]); err != nil {
		t.Fatal(err)
	}
	if err := v.Check(got[1]); !errors.As(err, &ie) || ie.Sequence != forged || ie.What != "hash" {
		t.Fatalf("forgery at %d: verifier says %v", forged, err)
	}
}

// TestReadOnlyStoreCreatesAndWritesNothing opens a read-only store where
// no stream exists (an error, and still no stream), then on an existing
// stream, where every write is refused.
func TestReadOnlyStoreCreatesAndWritesNothing(t *testing.T) {
	srv := eventstoretest.RunEmbedded(t, t.TempDir())
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	for range 2 { // the second open proves that the first created nothing
		if _, err := srv.Open(ctx, eventstore.Config{ReadOnly: true}); !errors.Is(err, jetstream.ErrStreamNotFound) ||
			!strings.Contains(err.Error(), "read-only") {
			t.Fatalf("read-only open without a stream: %v", err)
		}
	}
	writer := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{})
	if _, err := writer.Append(ctx, "s0", eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("test.A", "acct", "a1", 1)}}); err != nil {
		t.Fatal(err)
	}
	reader := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{ReadOnly: true})
	if _, err := reader.Append(ctx, "s0", eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("test.A", "acct", "a1", 2)}}); !errors.Is(err, eventstore.ErrReadOnly) {
		t.Fatalf("read-only append: %v", err)
	}
	if _, err := reader.NewCommitter(ctx, "s0", eventstore.CommitterConfig{}); !errors.Is(err, eventstore.ErrReadOnly) {
		t.Fatalf("read-only committer: %v", err)
	}
	if last, err := reader.LastSequence(ctx); err != nil || last != 1 {
		t.Fatalf("last sequence %d, %v: want 1", last, err)
	}
	if err := reader.ReadStored(ctx, 1, 2, func(eventstore.RecordedEvent) error { return nil }); !errors.Is(err, eventstore.ErrInvalid) ||
		!strings.Contains(err.Error(), "ends at 1") {
		t.Fatalf("read past the end: %v", err)
	}
}

// BenchmarkExport measures, in one run on one embedded server holding
// 200 000 events written by the pipelined committer: the raw ordered
// consumer read of the whole stream (the yardstick: messages only, no
// decoding), the verified read (ReadFrom), the export (ReadStored into an
// ExportWriter, to memory), and the parse of that file (ReadExport). Rates
// are events/s and x_raw their ratio to the raw read. Run it with
// -benchtime 1x.
func BenchmarkExport(b *testing.B) {
	srv := eventstoretest.RunEmbedded(b, b.TempDir())
	store := eventstoretest.OpenEmbedded(b, srv, eventstore.Config{})
	committerPipelined(b, store, "s0", 200_000)
	ctx := context.Background()
	last, err := store.LastSequence(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var raw float64
	measure := func(name string, fn func() error) {
		b.Run(name, func(b *testing.B) {
			var rate float64
			for b.Loop() {
				start := time.Now()
				if err := fn(); err != nil {
					b.Fatal(err)
				}
				rate = float64(last) / time.Since(start).Seconds()
			}
			if raw == 0 {
				raw = rate
			}
			b.ReportMetric(rate, "events/s")
			b.ReportMetric(rate/raw, "x_raw")
		})
	}
	measure("raw_ordered_consumer", func() error {
		_, err := bench.MeasureOrderedRead(ctx, store, 1, last)
		return err
	})
	measure("read_from_verified", func() error {
		_, err := store.ReadFrom(ctx, 1, func(eventstore.RecordedEvent) error { return nil })
		return err
	})
	var file bytes.Buffer
	file.Grow(int(last) * 640) // a file's growth is not the export's cost
	measure("export", func() error {
		file.Reset()
		x := eventstore.NewExportWriter(&file)
		return errors.Join(store.ReadStored(ctx, 1, last, x.Write), x.Flush())
	})
	measure("read_export", func() error {
		return eventstore.ReadExport(bytes.NewReader(file.Bytes()), func(eventstore.RecordedEvent) error { return nil })
	})
}
