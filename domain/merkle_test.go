package domain

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"testing"
)

// The reference functions below follow RFC 6962 §2.1 word for word, with
// crypto/sha256 called directly, so that the level-by-level tree of
// merkle.go is checked against an independent reading of the RFC.

// refLeaf is RFC 6962's leaf hash SHA-256(0x00 || data).
func refLeaf(data []byte) [32]byte {
	return sha256.Sum256(append([]byte{0x00}, data...))
}

// refNode is RFC 6962's interior hash SHA-256(0x01 || left || right).
func refNode(left, right [32]byte) [32]byte {
	b := append([]byte{0x01}, left[:]...)
	return sha256.Sum256(append(b, right[:]...))
}

// refSplit is k, the largest power of two smaller than n (n > 1).
func refSplit(n int) int {
	k := 1
	for k*2 < n {
		k *= 2
	}
	return k
}

// refMTH is the recursive Merkle Tree Hash over leaf hashes.
func refMTH(leaves [][32]byte) [32]byte {
	switch len(leaves) {
	case 0:
		return sha256.Sum256(nil)
	case 1:
		return leaves[0]
	}
	k := refSplit(len(leaves))
	return refNode(refMTH(leaves[:k]), refMTH(leaves[k:]))
}

// refPath is the recursive audit path PATH(m, D[n]) of RFC 6962 §2.1.1.
func refPath(m int, leaves [][32]byte) [][32]byte {
	if len(leaves) <= 1 {
		return nil
	}
	k := refSplit(len(leaves))
	if m < k {
		return append(refPath(m, leaves[:k]), refMTH(leaves[k:]))
	}
	return append(refPath(m-k, leaves[k:]), refMTH(leaves[:k]))
}

// refRootFromPath folds an audit path back into a root by following the
// recursive definition of PATH from the top: the last hash of the path is the
// sibling of the subtree that holds leaf m. It reports false when the path
// does not have the length PATH would give.
func refRootFromPath(leaf [32]byte, m, n int, path [][32]byte) ([32]byte, bool) {
	if n == 1 {
		return leaf, len(path) == 0
	}
	if len(path) == 0 {
		return leaf, false
	}
	k := refSplit(n)
	top, rest := path[len(path)-1], path[:len(path)-1]
	if m < k {
		sub, ok := refRootFromPath(leaf, m, k, rest)
		return refNode(sub, top), ok
	}
	sub, ok := refRootFromPath(leaf, m-k, n-k, rest)
	return refNode(top, sub), ok
}

// testLeaves returns n distinct leaf hashes.
func testLeaves(n int) [][32]byte {
	leaves := make([][32]byte, n)
	for i := range leaves {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(i))
		leaves[i] = refLeaf(b[:])
	}
	return leaves
}

// merkleTestSizes are every size up to 70 and a few larger ones around and
// between powers of two, drawn once from a fixed stream.
func merkleTestSizes() []int {
	var sizes []int
	for n := 0; n <= 70; n++ {
		sizes = append(sizes, n)
	}
	sizes = append(sizes, 127, 128, 129, 255, 256, 257, 1023, 1024, 1025)
	s := NewStream([]byte("merkle test sizes"))
	for range 12 {
		sizes = append(sizes, 71+int(s.Below(4000)))
	}
	return sizes
}

func TestMerkleTreeMatchesRFC6962(t *testing.T) {
	for _, n := range merkleTestSizes() {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			// Given n leaves, when the level-by-level tree is built,
			leaves := testLeaves(n)
			tree := NewMerkleTree(leaves)
			// then its size and root are the recursive MTH's,
			if tree.Size() != n {
				t.Fatalf("Size() = %d, want %d", tree.Size(), n)
			}
			if got, want := tree.Root(), refMTH(leaves); got != want {
				t.Fatalf("Root() = %x, want the RFC 6962 MTH %x", got, want)
			}
			// and its audit paths are RFC 6962's PATH.
			units := []int{0, n - 1, n / 2}
			if n <= 70 {
				units = units[:0]
				for i := range n {
					units = append(units, i)
				}
			}
			for _, i := range units {
				if i < 0 {
					continue
				}
				got, want := tree.Proof(i), refPath(i, leaves)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("Proof(%d) has %d hashes %x, want PATH %x", i, len(got), got, want)
				}
				if auditPathLen(uint64(i), uint64(n)) != len(want) {
					t.Fatalf("auditPathLen(%d, %d) = %d, want %d", i, n, auditPathLen(uint64(i), uint64(n)), len(want))
				}
			}
		})
	}
}

func TestMerkleTreeCopiesItsLeaves(t *testing.T) {
	// Given a tree built from a slice, when the caller reuses the slice,
	leaves := testLeaves(5)
	tree := NewMerkleTree(leaves)
	root := tree.Root()
	leaves[2] = [32]byte{}
	// then the tree is unchanged.
	if tree.Root() != root {
		t.Fatalf("root changed from %x to %x after the caller changed its slice", root, tree.Root())
	}
}

func TestRootFromPathFoldsEveryProof(t *testing.T) {
	for n := 1; n <= 70; n++ {
		leaves := testLeaves(n)
		tree := NewMerkleTree(leaves)
		for i := range n {
			// Given the proof of leaf i, when RFC 9162's algorithm folds it,
			got, err := rootFromPath(leaves[i], uint64(i), uint64(n), tree.Proof(i))
			// then it gives the root.
			if err != nil || got != tree.Root() {
				t.Fatalf("size %d leaf %d: rootFromPath = %x, %v; want %x, nil", n, i, got, err, tree.Root())
			}
		}
	}
}

func TestMerkleProofPanicsOutsideTheTree(t *testing.T) {
	tree := NewMerkleTree(testLeaves(3))
	for _, i := range []int{-1, 3} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatalf("Proof(%d) of a tree of 3 leaves did not panic", i)
				}
			}()
			tree.Proof(i)
		})
	}
}
