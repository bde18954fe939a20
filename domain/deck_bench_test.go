package domain

import "testing"

// BenchmarkBuildDeck measures opening a block: the shuffle of 450 000 units,
// their salts and leaves, and the Merkle tree. The target is 1 s on one core.
func BenchmarkBuildDeck(b *testing.B) {
	for b.Loop() {
		BuildDeck(article3Lots, seedA)
	}
}

// BenchmarkShuffleDeck measures the shuffle alone, BuildDeck's first step.
func BenchmarkShuffleDeck(b *testing.B) {
	for b.Loop() {
		ShuffleDeck(article3Lots, seedA)
	}
}

// BenchmarkProof measures what the writer adds to every play: a unit's salt
// and its audit path in a block of 450 000 units.
func BenchmarkProof(b *testing.B) {
	d := article3Deck()
	u := uint32(0)
	for b.Loop() {
		d.Proof(u)
		u = (u + 7919) % article3Units
	}
}

// BenchmarkVerifyUnitProof measures a player's or an auditor's check of one
// unit against its block's root.
func BenchmarkVerifyUnitProof(b *testing.B) {
	d := article3Deck()
	proofs := make([]UnitProof, 64)
	for i := range proofs {
		proofs[i] = d.Proof(uint32(i * 7019))
	}
	i := 0
	for b.Loop() {
		if err := VerifyUnitProof(d.Commitment.Root, d.Commitment.Units, proofs[i%len(proofs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
