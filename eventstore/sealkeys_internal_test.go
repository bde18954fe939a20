package eventstore

import "testing"

// A key's list of seals stays within its bound: the older half goes, and
// the position it reached is kept for a revocation to say so.
func TestAKeysSealsStayWithinTheirBound(t *testing.T) {
	var k sealKey
	for pos := uint64(1); pos <= sealRefsMax+1; pos++ {
		k.remember(SealRef{Sequence: pos, ChainSeq: pos})
	}
	if len(k.seals) != sealRefsMax/2+1 || k.forgottenTo != sealRefsMax/2 || k.seals[0].ChainSeq != sealRefsMax/2+1 {
		t.Fatalf("%d seals kept from %d, forgotten up to %d", len(k.seals), k.seals[0].ChainSeq, k.forgottenTo)
	}
}
