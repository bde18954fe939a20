package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
)

// The domain-separation prefixes of RFC 6962 §2.1: a leaf hash can never be
// mistaken for an interior node, so no one can pass a subtree off as a unit.
const (
	leafPrefix byte = 0x00
	nodePrefix byte = 0x01
)

// ErrInvalidProof is wrapped by every error of VerifyUnitProof, so callers
// can tell a refused proof from a malformed request with errors.Is.
var ErrInvalidProof = errors.New("unit proof refused")

// MerkleTree is the RFC 6962 Merkle tree of a block's leaves. It keeps every
// level in memory (about 2 × 32 bytes a leaf, 29 MB for a block of 450 000
// units) because the writer serves an inclusion proof with every play, and a
// proof read from stored levels costs O(log n) instead of rehashing the block.
type MerkleTree struct {
	// levels[0] holds the leaf hashes, levels[k+1] the parents of levels[k]
	// paired left to right, an odd last node promoted unchanged; the last
	// level holds the root. An empty tree has one empty level.
	levels [][][32]byte
}

// NewMerkleTree builds the tree over the given leaf hashes, in order. It
// copies them, so the caller may reuse its slice.
func NewMerkleTree(leaves [][32]byte) *MerkleTree {
	nodes := make([][32]byte, merkleNodes(len(leaves)))
	copy(nodes, leaves)
	return buildMerkleTree(nodes, len(leaves))
}

// merkleNodes is the number of nodes of all the levels of a tree of n leaves.
func merkleNodes(n int) int {
	total := n
	for n > 1 {
		n = (n + 1) / 2
		total += n
	}
	return total
}

// buildMerkleTree hashes the levels above the n leaves held at the start of
// nodes, which must have room for merkleNodes(n) nodes: one allocation holds
// the whole tree.
func buildMerkleTree(nodes [][32]byte, n int) *MerkleTree {
	t := &MerkleTree{levels: make([][][32]byte, 0, bits.Len(uint(n))+1)}
	level := nodes[:n:n]
	t.levels = append(t.levels, level)
	next := n
	for len(level) > 1 {
		m := (len(level) + 1) / 2
		parent := nodes[next : next+m : next+m]
		for k := 0; k+1 < len(level); k += 2 {
			parent[k/2] = nodeHash(&level[k], &level[k+1])
		}
		if len(level)%2 == 1 {
			parent[m-1] = level[len(level)-1]
		}
		t.levels = append(t.levels, parent)
		level = parent
		next += m
	}
	return t
}

// nodeHash is the interior node hash SHA-256(0x01 || left || right).
func nodeHash(left, right *[32]byte) [32]byte {
	var b [1 + 2*sha256.Size]byte
	b[0] = nodePrefix
	copy(b[1:], left[:])
	copy(b[1+sha256.Size:], right[:])
	return sha256.Sum256(b[:])
}

// Size returns the number of leaves, which a verifier needs with the root.
func (t *MerkleTree) Size() int { return len(t.levels[0]) }

// Root returns the Merkle Tree Hash of RFC 6962 §2.1, the value committed in
// BlockOpened. The root of an empty tree is SHA-256 of the empty string.
func (t *MerkleTree) Root() [32]byte {
	top := t.levels[len(t.levels)-1]
	if len(top) == 0 {
		return sha256.Sum256(nil)
	}
	return top[0]
}

// Proof returns the RFC 6962 audit path of leaf i, from the leaf's sibling up
// to the root's child, which VerifyUnitProof folds back into the root. It
// panics if i is not a leaf of the tree: the writer only asks for units it
// holds.
func (t *MerkleTree) Proof(i int) [][32]byte {
	if i < 0 || i >= t.Size() {
		panic(fmt.Sprintf("domain: Merkle proof for leaf %d of a tree of %d leaves", i, t.Size()))
	}
	path := make([][32]byte, 0, len(t.levels)-1)
	for _, level := range t.levels[:len(t.levels)-1] {
		if sibling := i ^ 1; sibling < len(level) {
			path = append(path, level[sibling])
		}
		i >>= 1
	}
	return path
}

// rootFromPath is the inclusion verification of RFC 9162 §2.1.3.2: it folds
// the audit path of the leaf with hash leaf, at index in a tree of size
// leaves, into the root it proves. It fails if the path has the wrong length
// for that index and size; the caller compares the result with the root.
func rootFromPath(leaf [32]byte, index, size uint64, path [][32]byte) ([32]byte, error) {
	fn, sn := index, size-1
	r := leaf
	for _, p := range path {
		if sn == 0 {
			return r, pathLenErr(index, size, len(path))
		}
		if fn&1 == 1 || fn == sn {
			r = nodeHash(&p, &r)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			r = nodeHash(&r, &p)
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 {
		return r, pathLenErr(index, size, len(path))
	}
	return r, nil
}

// pathLenErr says how many hashes the path of leaf index in a tree of size
// leaves should have had, and how many it had.
func pathLenErr(index, size uint64, got int) error {
	return fmt.Errorf("%w: the path of unit %d in a block of %d units has %d hashes, want %d",
		ErrInvalidProof, index, size, got, auditPathLen(index, size))
}

// auditPathLen is the length of the audit path of leaf index in a tree of
// size leaves: one hash per level where the node on the way up has a sibling.
func auditPathLen(index, size uint64) int {
	n := 0
	for ; size > 1; size = (size + 1) / 2 {
		if index^1 < size {
			n++
		}
		index >>= 1
	}
	return n
}

// HexHash is a 32-byte hash, key or salt written in JSON as 64 lowercase
// hex digits, the form regulators' tools and sha256sum print.
type HexHash [32]byte

// MarshalText writes the hash as 64 lowercase hex digits.
func (h HexHash) MarshalText() ([]byte, error) { return hex.AppendEncode(nil, h[:]), nil }

// UnmarshalText reads 64 hex digits.
func (h *HexHash) UnmarshalText(b []byte) error { return decodeHex32((*[32]byte)(h), b) }

// decodeHex32 reads exactly 64 hex digits into dst. Its errors never quote
// the input, because the same code reads secret seeds.
func decodeHex32(dst *[32]byte, b []byte) error {
	if len(b) != hex.EncodedLen(len(dst)) {
		return fmt.Errorf("want %d hex digits, got %d characters", hex.EncodedLen(len(dst)), len(b))
	}
	if _, err := hex.Decode(dst[:], b); err != nil {
		return fmt.Errorf("want %d hex digits: %w", hex.EncodedLen(len(dst)), err)
	}
	return nil
}
