package eventstore

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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

// encodeMsg writes the envelope's headers with the values their plain
// formatting gives (the stored form docs/events.md describes), with and
// without the optional ones.
func TestEncodeMsgHeaders(t *testing.T) {
	subj := subjects{prefix: "tresor"}
	ev := RecordedEvent{Event: Event{ID: "ev-1", Type: "test.A", SchemaVersion: 3, Aggregate: Aggregate{Kind: "acct", ID: "a"},
		Payload: json.RawMessage(`{"x":1}`)}, Chain: "s0", ChainSeq: 123456789,
		RecordedAt: time.Date(2026, 12, 2, 17, 0, 0, 120, time.FixedZone("CET", 3600)), PrevHash: Hash{1, 2, 3}}
	for _, opt := range []struct {
		corr, cause string
		remaining   int
	}{{"", "", 0}, {"corr-1", "cause-1", 7}, {"", "cause-2", BatchEventsMax - 1}} {
		ev.CorrelationID, ev.CausationID, ev.AppendRemaining = opt.corr, opt.cause, opt.remaining
		ev.Hash = ComputeHash(&ev)
		m := subj.encodeMsg(&ev)
		want := nats.Header{
			HeaderID: {"ev-1"}, HeaderType: {"test.A"}, HeaderSchema: {"3"}, HeaderChainSeq: {"123456789"},
			HeaderRecordedAt: {ev.RecordedAt.UTC().Format(time.RFC3339Nano)}, HeaderPrevHash: {ev.PrevHash.String()},
			HeaderHash: {ev.Hash.String()},
		}
		if opt.corr != "" {
			want[HeaderCorrelation] = []string{opt.corr}
		}
		if opt.cause != "" {
			want[HeaderCausation] = []string{opt.cause}
		}
		if opt.remaining > 0 {
			want[HeaderAppendRemaining] = []string{strconv.Itoa(opt.remaining)}
		}
		if !reflect.DeepEqual(m.Header, want) || m.Subject != "tresor.s0.acct.a" || string(m.Data) != `{"x":1}` {
			t.Fatalf("%+v: %s %v %s, want headers %v", opt, m.Subject, m.Header, m.Data, want)
		}
		if got, err := subj.decode(m.Subject, 1, m.Header, m.Data); err != nil || got.Hash != ev.Hash {
			t.Fatalf("%+v: decoded %v", opt, err)
		}
	}
}

func BenchmarkEncodeMsg(b *testing.B) {
	subj := subjects{prefix: "tresor"}
	ev := RecordedEvent{Event: Event{ID: "ev-1", Type: "tresor.ThrowMade", SchemaVersion: 1, Aggregate: Aggregate{Kind: "player", ID: "p-1"},
		Payload: json.RawMessage(`{"x":1}`)}, Chain: "s0", ChainSeq: 1234567, RecordedAt: time.Now(), AppendRemaining: 2}
	ev.Hash = ComputeHash(&ev)
	ids, seq := []string{"batch"}, []string{"2"}
	for b.Loop() {
		// As publishBatch marks a message in the middle of a batch.
		m := subj.encodeMsg(&ev)
		m.Header["Nats-Batch-Id"], m.Header["Nats-Batch-Sequence"] = ids, seq
	}
}

// TestPayloadsMarshaledSkipsOnlyTheJSONCheck checks that a request whose
// payloads the caller marshaled is spared json.Valid and nothing else, and
// that any other request with a payload that is not JSON is refused.
func TestPayloadsMarshaledSkipsOnlyTheJSONCheck(t *testing.T) {
	s := &NATSStore{}
	ev := func(typ, payload string) Event {
		return Event{Type: typ, SchemaVersion: 1, Aggregate: Aggregate{Kind: "acct", ID: "a1"}, Payload: json.RawMessage(payload)}
	}
	notJSON := ev("test.Opened", `{"a":`)
	if err := s.validateRequest("c1", &AppendRequest{Events: []Event{ev("test.Opened", `{}`), notJSON}}, BatchEventsMax); !errors.Is(err, ErrInvalid) ||
		!strings.Contains(err.Error(), "event 1: event type \"test.Opened\": payload is not valid JSON") {
		t.Fatalf("payload not JSON: want ErrInvalid naming event 1, got %v", err)
	}
	if err := s.validateRequest("c1", &AppendRequest{Events: []Event{notJSON}, PayloadsMarshaled: true}, BatchEventsMax); err != nil {
		t.Fatalf("marshaled payloads: the JSON is the caller's word, got %v", err)
	}
	for name, bad := range map[string]Event{
		"bad type":          ev("test Opened", `{}`),
		"payload too large": ev("test.Opened", `"`+strings.Repeat("x", PayloadLenMax)+`"`),
		"no schema":         {Type: "test.Opened", Aggregate: Aggregate{Kind: "acct", ID: "a1"}, Payload: json.RawMessage(`{}`)},
	} {
		if err := s.validateRequest("c1", &AppendRequest{Events: []Event{bad}, PayloadsMarshaled: true}, BatchEventsMax); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s, payloads marshaled: want ErrInvalid, got %v", name, err)
		}
	}
}
