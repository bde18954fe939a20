package eventstore

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"
)

// TestAppendMarkerHeader checks the marker's stored form: absent on the
// last event of an append, a decimal count otherwise, and a value no
// append can have (none following, more than a batch holds, not a number)
// is a malformed envelope.
func TestAppendMarkerHeader(t *testing.T) {
	subj := subjects{prefix: "tresor"}
	ev := RecordedEvent{Event: Event{ID: "ev-1", Type: "test.A", SchemaVersion: 1, Aggregate: Aggregate{Kind: "acct", ID: "a"},
		Payload: json.RawMessage(`{}`)}, Chain: "s0", ChainSeq: 1, RecordedAt: time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC), Sequence: 9}
	ev.Hash = ComputeHash(&ev)
	for _, n := range []int{0, 1, BatchEventsMax - 1} {
		ev.AppendRemaining = n
		m := subj.encodeMsg(&ev)
		if _, ok := m.Header[HeaderAppendRemaining]; ok != (n > 0) {
			t.Fatalf("%d following: header present %t", n, ok)
		}
		got, err := subj.decode(m.Subject, ev.Sequence, m.Header, m.Data)
		if err != nil || got.AppendRemaining != n {
			t.Fatalf("%d following: decoded %d, %v", n, got.AppendRemaining, err)
		}
	}
	for _, v := range []string{"0", strconv.Itoa(BatchEventsMax), "-1", "x", ""} {
		m := subj.encodeMsg(&ev)
		m.Header[HeaderAppendRemaining] = []string{v}
		var ie *IntegrityError
		if _, err := subj.decode(m.Subject, ev.Sequence, m.Header, m.Data); !errors.As(err, &ie) || ie.What != "header "+HeaderAppendRemaining {
			t.Errorf("marker %q: %v, want an IntegrityError on the header", v, err)
		}
	}
}
