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
