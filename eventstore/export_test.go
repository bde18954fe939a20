package eventstore_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
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
	tampered := strings.Replace(good, `{"cents":200}`, `{"cents":900}`, 1)
	got := readExport(t, []byte(tampered+"\n"))
	if len(got) != 1 || eventstore.ComputeHash(&got[0]) == got[0].Hash {
		t.Fatalf("a tampered payload must be read as is, its hash left to the auditor: %+v", got)
	}
}
