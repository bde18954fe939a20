package vault

import (
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
)

// TestLinked: a batch is linked when each event follows the one before it
// in its chain, the copy's head or a pending event; anything else asks
// for a comparison with the source before the batch is copied.
func TestLinked(t *testing.T) {
	h := func(b byte) eventstore.Hash { return eventstore.Hash{b} }
	ev := func(chain string, seq, chainSeq uint64, prev, hash byte) eventstore.RecordedEvent {
		return eventstore.RecordedEvent{Chain: chain, Sequence: seq, ChainSeq: chainSeq, PrevHash: h(prev), Hash: h(hash)}
	}
	heads := map[string]eventstore.Head{"s0": {Sequence: 10, ChainSeq: 10, Hash: h(10)}}
	for _, c := range []struct {
		name    string
		pending []eventstore.RecordedEvent
		want    bool
	}{
		{"one event after the head", []eventstore.RecordedEvent{ev("s0", 11, 11, 10, 11)}, true},
		{"a run of the chain", []eventstore.RecordedEvent{ev("s0", 11, 11, 10, 11), ev("s0", 12, 12, 11, 12), ev("s0", 13, 13, 12, 13)}, true},
		{"a new chain beside it", []eventstore.RecordedEvent{ev("s1", 11, 1, 0, 50), ev("s0", 12, 11, 10, 11), ev("s1", 13, 2, 50, 51)}, true},
		{"another predecessor", []eventstore.RecordedEvent{ev("s0", 11, 11, 9, 11)}, false},
		{"a position skipped", []eventstore.RecordedEvent{ev("s0", 11, 12, 10, 11)}, false},
		{"broken inside the batch", []eventstore.RecordedEvent{ev("s0", 11, 11, 10, 11), ev("s0", 12, 12, 10, 12)}, false},
	} {
		v := &Vault{heads: heads, pending: c.pending}
		if got := v.linked(); got != c.want {
			t.Errorf("%s: linked %t, want %t", c.name, got, c.want)
		}
	}
}

// TestLag: the lag is the age of the first sequence seen past the verified
// one, and memory of the sequences seen stays bounded without losing it.
func TestLag(t *testing.T) {
	v := &Vault{}
	start := time.Now()
	if got := v.lag(start); got != 0 {
		t.Fatalf("nothing seen: lag %s", got)
	}
	v.sawSource(5)
	first := v.seen[0].at
	for seq := uint64(6); seq < 3*seenMax; seq++ {
		v.sawSource(seq)
	}
	if len(v.seen) > seenMax || v.seen[0].at != first {
		t.Fatalf("%d sequences kept, the first at %s (want %s)", len(v.seen), v.seen[0].at, first)
	}
	now := time.Now()
	if got := v.lag(now); got != now.Sub(first) {
		t.Fatalf("lag %s, want the first's age %s", got, now.Sub(first))
	}
	v.verified = v.sourceSeq
	if got := v.lag(now); got != 0 || len(v.seen) != 0 {
		t.Fatalf("all verified: lag %s, %d kept", got, len(v.seen))
	}
}

// TestBatchEnd: a batch of the copy is the longest run of whole appends
// from the first event that its server takes, and none when the first
// append alone is longer.
func TestBatchEnd(t *testing.T) {
	appends := func(sizes ...int) []eventstore.RecordedEvent {
		var events []eventstore.RecordedEvent
		for _, n := range sizes {
			for i := range n {
				events = append(events, eventstore.RecordedEvent{Sequence: uint64(len(events) + 1), AppendRemaining: n - 1 - i})
			}
		}
		return events
	}
	for _, c := range []struct {
		name   string
		events []eventstore.RecordedEvent
		max    int
		want   int
	}{
		{"all of them fit", appends(2, 3, 1), 10, 6},
		{"exactly the most", appends(2, 3, 1), 6, 6},
		{"the append that would not fit waits", appends(2, 3, 1), 4, 2},
		{"single events up to the most", appends(1, 1, 1, 1), 3, 3},
		{"the first append alone is longer", appends(5, 1), 4, 0},
		{"an append cut short, then a whole one", append(appends(3)[:1], appends(2)...), 3, 3},
	} {
		if got := batchEnd(c.events, c.max); got != c.want {
			t.Errorf("%s: %d events, want %d", c.name, got, c.want)
		}
	}
}
