package eventstore

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestWrittenLinesTakeTheFastPath checks that the lines ExportWriter
// writes are read by scanWrittenLine, to the same fields as encoding/json
// reads, and that other layouts of the same record, which only
// encoding/json reads, give the same record.
func TestWrittenLinesTakeTheFastPath(t *testing.T) {
	ev := RecordedEvent{Event: Event{ID: "ev-1", Type: "StakePlaced", SchemaVersion: 4_000_000_000,
		Aggregate: Aggregate{Kind: "account", ID: "p42"}, CausationID: "cmd-9",
		Payload: json.RawMessage(`{"a": [1, 2], "s":"<&>"}`)},
		Chain: "s0", ChainSeq: 1 << 40, RecordedAt: time.Date(2026, 12, 2, 17, 0, 0, 5, time.UTC), Sequence: 1<<64 - 1,
		AppendRemaining: BatchEventsMax - 1}
	ev.Hash = ComputeHash(&ev)
	var buf bytes.Buffer
	x := NewExportWriter(&buf)
	if err := x.Write(ev); err != nil {
		t.Fatal(err)
	}
	x.Flush()
	line := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	fast, ok := scanWrittenLine(line)
	var slow exportLine
	if err := json.Unmarshal(line, &slow); !ok || err != nil || !reflect.DeepEqual(fast, slow) {
		t.Fatalf("fast path %v:\n %+v\nencoding/json (%v):\n %+v", ok, fast, err, slow)
	}
	want, err := parseExportLine(line)
	if err != nil || !reflect.DeepEqual(want, ev) {
		t.Fatalf("parsed %+v, %v; want %+v", want, err, ev)
	}
	for _, other := range []string{
		strings.Replace(string(line), `"id":"ev-1"`, `"id":"ev\u002d1"`, 1),
		strings.Replace(string(line), `{"sequence":18446744073709551615,`, `{ "sequence" : 18446744073709551615 , `, 1),
		strings.Replace(string(line), `"type":"StakePlaced",`, ``, 1)[:len(line)-len(`"type":"StakePlaced",`)-1] + `,"type":"StakePlaced"}`,
	} {
		if _, ok := scanWrittenLine([]byte(other)); ok {
			t.Errorf("fast path took %s", other)
		}
		if got, err := parseExportLine([]byte(other)); err != nil || !reflect.DeepEqual(got, ev) {
			t.Errorf("%s:\n parsed %+v, %v", other, got, err)
		}
	}
}
