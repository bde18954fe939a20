package eventstore

import "testing"

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
