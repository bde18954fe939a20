package eventstore

import (
	"testing"
	"time"
)

// TestUnsealedCoversEventsInFlightAtTheSeal pins the rule that decides
// whether a seal is needed. The case that once went wrong: the interval
// fires while a batch is in flight, the seal covers the head acknowledged
// before it and lands after the batch; the batch's events must still get a
// seal, or the chain's last events stay unsealed until more arrive (even
// across Close).
func TestUnsealedCoversEventsInFlightAtTheSeal(t *testing.T) {
	for _, c := range []struct {
		name                    string
		sealedAt, sealPos, head uint64
		want                    bool
	}{
		{"fresh chain, nothing written", 0, 0, 0, false},
		{"events after the last seal", 4, 5, 7, true},
		{"seal right after the head it seals", 4, 5, 5, false},
		{"seal made while event 3 was in flight: 1 2 3 seal(2)", 2, 4, 4, true},
		{"then a seal of that seal: 1 2 3 seal(2) seal(4)", 4, 5, 5, false},
		{"seal still in flight", 2, 4, 3, false},
	} {
		st := &loopState{sealedAt: c.sealedAt, sealPos: c.sealPos, acked: Head{ChainSeq: c.head}}
		if got := st.unsealed(); got != c.want {
			t.Errorf("%s: unsealed %t, want %t", c.name, got, c.want)
		}
	}
}

// TestSpanFullKeepsSealsWithinWhatAVerifierAccepts pins the rule that
// holds a batch back: full batches of 1 000 at depth 8 go three at a time
// behind the acknowledged head, not eight, so a seal made at any moment
// names a head fewer than recentMax positions back (the verifier refuses
// recentMax and more); a batch alone in flight always goes.
func TestSpanFullKeepsSealsWithinWhatAVerifierAccepts(t *testing.T) {
	st := &loopState{acked: Head{ChainSeq: 10}, tentative: Head{ChainSeq: 10}}
	sent := 0
	for sent < 8 {
		st.tentative.ChainSeq += BatchEventsMax // the next full batch, built
		if st.spanFull() {
			break
		}
		st.inFlightN++
		sent++
	}
	if sent != 3 {
		t.Fatalf("%d full batches in flight before one is held, want 3", sent)
	}
	if span := st.tentative.ChainSeq - BatchEventsMax - st.acked.ChainSeq; span >= recentMax {
		t.Fatalf("a seal now would point %d positions back, the verifier accepts fewer than %d", span, recentMax)
	}
	st.inFlightN = 0
	st.tentative.ChainSeq = st.acked.ChainSeq + CommitBatchEventsMax
	if st.spanFull() {
		t.Fatal("a batch alone was held")
	}
}

// The loop's one decision, batch by batch: given the loop's state, when
// the batch being built goes, waits for an acknowledgement, or lingers for
// the writers expected.
func TestSendNow(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name  string
		s     sendState
		depth int
		want  sendDecision
		wait  time.Duration
	}{
		{"pipeline full", sendState{events: 5, full: true, inFlight: 1, wait: 5 * ms}, 1, holdBatch, 0},
		{"pipeline full at depth 4", sendState{events: 5, full: true, inFlight: 4}, 4, holdBatch, 0},
		{"a seal would point back too far", sendState{events: 5, full: true, spanFull: true}, 4, holdBatch, 0},
		{"full batch, room in the pipeline", sendState{events: 1000, full: true, inFlight: 1}, 4, sendBatch, 0},
		{"closing sends what it holds", sendState{events: 1, closing: true, expected: 50, wait: 5 * ms}, 1, sendBatch, 0},
		{"partial batch behind one in flight waits", sendState{events: 10, expected: 5, inFlight: 1}, 4, holdBatch, 0},
		{"the writers expected are there", sendState{events: 45, expected: 45, wait: 5 * ms}, 1, sendBatch, 0},
		{"linger over", sendState{events: 3, expected: 45, wait: 0}, 1, sendBatch, 0},
		{"linger for the writers expected", sendState{events: 3, expected: 45, wait: 4 * ms}, 1, lingerBatch, 4 * ms},
		{"a lone writer goes at once", sendState{events: 1, expected: 1, wait: 10 * ms}, 1, sendBatch, 0},
	} {
		if got, wait := sendNow(tc.s, tc.depth); got != tc.want || wait != tc.wait {
			t.Errorf("%s: %d (linger %s), want %d (linger %s)", tc.name, got, wait, tc.want, tc.wait)
		}
	}
}
