package domain

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// Stream is the deterministic random stream behind every shuffle and every
// scenario: HMAC-SHA256 in counter mode. Block j of the stream is
// HMAC-SHA256(key, uint64be(j)) for j = 0, 1, 2, …; each block yields four
// big-endian uint64 words, read in order. It is chosen over a faster generator
// because a regulator can re-implement it in a few lines with any crypto
// library, and it is a PRF, so without the key its output is unpredictable.
type Stream struct {
	counter uint64
	block   [sha256.Size]byte
	used    int // words of block already read; 4 means the block is spent
	in      [8]byte
	macSum  []byte
	hm      hash.Hash
}

// NewStream starts the stream keyed by key at block 0.
func NewStream(key []byte) *Stream {
	s := &Stream{used: 4}
	s.hm = hmac.New(sha256.New, key)
	s.macSum = make([]byte, 0, sha256.Size)
	return s
}

// Uint64 returns the next word of the stream.
func (s *Stream) Uint64() uint64 {
	if s.used == 4 {
		binary.BigEndian.PutUint64(s.in[:], s.counter)
		s.counter++
		s.hm.Reset()
		s.hm.Write(s.in[:])
		copy(s.block[:], s.hm.Sum(s.macSum[:0]))
		s.used = 0
	}
	w := binary.BigEndian.Uint64(s.block[8*s.used:])
	s.used++
	return w
}

// Below returns a uniform draw in [0, n) with no modulo bias: words at or
// above the largest multiple of n that fits in 2^64 are rejected and the next
// word is drawn. n must be at least 1.
func (s *Stream) Below(n uint64) uint64 {
	if n == 0 {
		panic("domain: Stream.Below(0)")
	}
	// rem = 2^64 mod n, computed as (2^64 - n) mod n in uint64 arithmetic;
	// the accepted words are those below 2^64 - rem.
	rem := (-n) % n
	for {
		x := s.Uint64()
		if rem == 0 || x < -rem {
			return x % n
		}
	}
}

// hmacSHA256 is HMAC-SHA256(key, msg), the key-derivation step of the deck
// format.
func hmacSHA256(key []byte, msg ...[]byte) [sha256.Size]byte {
	m := hmac.New(sha256.New, key)
	for _, p := range msg {
		m.Write(p)
	}
	var out [sha256.Size]byte
	m.Sum(out[:0])
	return out
}
