package domain

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// The labels of the key derivation (docs/deck-format.md §3): ASCII, no
// terminator. The version in them lets a future format change its keys
// without ever colliding with a v1 block.
const (
	shuffleLabel = "tresor/v1/shuffle"
	leafLabel    = "tresor/v1/leaf"
)

// deckUnitsMax bounds the size of a deck: unit numbers are 32-bit in the leaf
// encoding, and a block holds 450 000 units; 2^24 leaves room for any future
// rule set while bounding a deck's memory (about 65 bytes a unit).
const deckUnitsMax = 1 << 24

// unitLeafSize is the length of a unit's leaf data: salt, unit, tier code.
const unitLeafSize = sha256.Size + 4 + 1

// Seed is a block's 32-byte secret. It alone determines the block's deck,
// every unit's salt and so every scenario; it stays secret (sealed) until
// BlockClosed reveals it, and its SHA-256 is committed in BlockOpened.
type Seed [32]byte

// ParseSeed reads a seed written as exactly 64 hex digits (either case), the
// form BlockClosed and the regulators' tools use. Its errors never quote the
// input, which may be a secret.
func ParseSeed(s string) (Seed, error) {
	var seed Seed
	if err := decodeHex32((*[32]byte)(&seed), []byte(s)); err != nil {
		return Seed{}, fmt.Errorf("parse seed: %w", err)
	}
	return seed, nil
}

// GenerateSeed draws a fresh seed from the operating system's CSPRNG, as a
// block is opened: anything less would let someone predict a block's deck.
func GenerateSeed() (Seed, error) {
	var seed Seed
	if _, err := rand.Read(seed[:]); err != nil {
		return Seed{}, fmt.Errorf("generate seed: %w", err)
	}
	return seed, nil
}

// Hash returns SHA-256(seed), the half of the commitment that lets anyone
// check, when BlockClosed reveals the seed, that it is the one committed to.
func (s Seed) Hash() [32]byte { return sha256.Sum256(s[:]) }

// MarshalText writes the seed as 64 lowercase hex digits, for BlockClosed.
// Only a closed block's seed may ever be marshalled.
func (s Seed) MarshalText() ([]byte, error) { return hex.AppendEncode(nil, s[:]), nil }

// UnmarshalText reads a seed written by MarshalText.
func (s *Seed) UnmarshalText(b []byte) error {
	v, err := ParseSeed(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// DeckKeys are the two keys derived from a seed. Separate keys keep the
// shuffle's random stream and the units' salts independent: revealing salts
// with proofs tells nothing about the shuffle, and the reverse.
type DeckKeys struct {
	// Shuffle keys the random stream of the Fisher–Yates shuffle.
	Shuffle [32]byte
	// Leaf keys the per-unit salts of the Merkle leaves.
	Leaf [32]byte
}

// DeriveKeys derives the deck keys from a seed: HMAC-SHA256 keyed by the seed
// over the ASCII labels "tresor/v1/shuffle" and "tresor/v1/leaf".
func DeriveKeys(seed Seed) DeckKeys {
	return DeckKeys{
		Shuffle: hmacSHA256(seed[:], []byte(shuffleLabel)),
		Leaf:    hmacSHA256(seed[:], []byte(leafLabel)),
	}
}

// UnitSalt returns HMAC-SHA256(Leaf, uint32be(unit)), the salt of the unit's
// leaf and the only input of its scenario. A PRF output, it reveals nothing
// about any other unit's salt, tier or scenario when published with a proof.
func (k DeckKeys) UnitSalt(unit uint32) [32]byte {
	var msg [4]byte
	binary.BigEndian.PutUint32(msg[:], unit)
	return hmacSHA256(k.Leaf[:], msg[:])
}

// ShuffleDeck returns the block's deck: unit i of the block carries deck[i].
// It lays out lots[t] units of each tier t in tier code order, then shuffles
// them with Fisher–Yates driven by the stream keyed by the seed's Shuffle
// key, so the deck holds exactly the lots of Article 3 in an order nobody can
// predict without the seed. It panics if a count is negative or the deck
// would exceed 2^24 units: lots come from a validated rule set.
func ShuffleDeck(lots [TierCount]int, seed Seed) []Tier {
	return shuffleTiers(lots, DeriveKeys(seed).Shuffle)
}

// shuffleTiers is ShuffleDeck with the shuffle key already derived.
func shuffleTiers(lots [TierCount]int, key [32]byte) []Tier {
	n, err := deckSize(lots)
	if err != nil {
		panic("domain: shuffle deck: " + err.Error())
	}
	deck := make([]Tier, 0, n)
	for t, count := range lots {
		for range count {
			deck = append(deck, Tier(t))
		}
	}
	stream := NewStream(key[:])
	for i := n - 1; i >= 1; i-- {
		j := stream.Below(uint64(i) + 1)
		deck[i], deck[j] = deck[j], deck[i]
	}
	return deck
}

// deckSize returns the number of units the lots make, refusing negative
// counts and decks above deckUnitsMax.
func deckSize(lots [TierCount]int) (int, error) {
	n := 0
	for t, count := range lots {
		if count < 0 {
			return 0, fmt.Errorf("tier %s has %d lots, want 0 or more", Tier(t), count)
		}
		if count > deckUnitsMax-n {
			return 0, fmt.Errorf("the lots make more than %d units", deckUnitsMax)
		}
		n += count
	}
	return n, nil
}

// unitLeafHash is the Merkle leaf hash of a unit: SHA-256(0x00 || leaf data),
// where the leaf data is salt || uint32be(unit) || tier code (37 bytes).
func unitLeafHash(salt *[32]byte, unit uint32, tier Tier) [32]byte {
	var b [1 + unitLeafSize]byte
	b[0] = leafPrefix
	copy(b[1:], salt[:])
	binary.BigEndian.PutUint32(b[1+sha256.Size:], unit)
	b[unitLeafSize] = byte(tier)
	return sha256.Sum256(b[:])
}

// Commitment is what BlockOpened publishes before any sale: it binds the
// operator to one seed and one deck without revealing either, so no unit's
// outcome can be changed once the block is on sale.
type Commitment struct {
	// SeedHash is SHA-256 of the block's seed.
	SeedHash [32]byte
	// Root is the Merkle root of the block's unit leaves.
	Root [32]byte
	// Units is the number of units of the block, the tree's size.
	Units int
}

// commitmentJSON is the JSON form of a Commitment, hashes in hex.
type commitmentJSON struct {
	SeedHash HexHash `json:"seed_hash"`
	Root     HexHash `json:"root"`
	Units    int     `json:"units"`
}

// MarshalJSON writes {"seed_hash": hex, "root": hex, "units": n}.
func (c Commitment) MarshalJSON() ([]byte, error) {
	return json.Marshal(commitmentJSON{SeedHash: c.SeedHash, Root: c.Root, Units: c.Units})
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (c *Commitment) UnmarshalJSON(b []byte) error {
	var v commitmentJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("read commitment: %w", err)
	}
	*c = Commitment{SeedHash: v.SeedHash, Root: v.Root, Units: v.Units}
	return nil
}

// UnitProof is everything a player or an auditor needs to check one unit
// against its block's committed root offline: the unit's leaf data (unit,
// tier, salt) and its audit path. It reveals no other unit.
type UnitProof struct {
	// Unit is the unit's index in its block, from 0.
	Unit uint32
	// Tier is the unit's predetermined tier.
	Tier Tier
	// Salt is the unit's salt, from which its scenario is derived.
	Salt [32]byte
	// Path is the RFC 6962 audit path, from the leaf's sibling upwards.
	Path [][32]byte
}

// unitProofJSON is the JSON form of a UnitProof: tier by stable id, hashes
// in hex.
type unitProofJSON struct {
	Unit uint32    `json:"unit"`
	Tier Tier      `json:"tier"`
	Salt HexHash   `json:"salt"`
	Path []HexHash `json:"path"`
}

// MarshalJSON writes {"unit": n, "tier": id, "salt": hex, "path": [hex…]};
// an empty path is written [], never null.
func (p UnitProof) MarshalJSON() ([]byte, error) {
	v := unitProofJSON{Unit: p.Unit, Tier: p.Tier, Salt: p.Salt, Path: make([]HexHash, len(p.Path))}
	for i, h := range p.Path {
		v.Path[i] = h
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads the form MarshalJSON writes. A proof without its
// tier (absent or null) is refused: read as the tier whose code is zero,
// it would give its unit the best prize.
func (p *UnitProof) UnmarshalJSON(b []byte) error {
	var v struct {
		unitProofJSON
		Tier *Tier `json:"tier"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("read unit proof: %w", err)
	}
	if v.Tier == nil {
		return fmt.Errorf("read unit proof: unit %d has no tier", v.Unit)
	}
	*p = UnitProof{Unit: v.Unit, Tier: *v.Tier, Salt: v.Salt, Path: make([][32]byte, len(v.Path))}
	for i, h := range v.Path {
		p.Path[i] = h
	}
	return nil
}

// VerifyUnitProof checks that p proves its unit, tier and salt against the
// committed root of a block of size units (RFC 9162 §2.1.3.2). It returns an
// error wrapping ErrInvalidProof that says what was expected and found when
// the unit is outside the block, the tier code is unknown, the path has the
// wrong length, or the path leads to another root.
func VerifyUnitProof(root [32]byte, size int, p UnitProof) error {
	if int64(p.Unit) >= int64(size) {
		return fmt.Errorf("%w: unit %d is outside a block of %d units", ErrInvalidProof, p.Unit, size)
	}
	if !p.Tier.Valid() {
		return fmt.Errorf("%w: unit %d has tier code %d, want a code below %d", ErrInvalidProof, p.Unit, uint8(p.Tier), TierCount)
	}
	got, err := rootFromPath(unitLeafHash(&p.Salt, p.Unit, p.Tier), uint64(p.Unit), uint64(size), p.Path)
	if err != nil {
		return err
	}
	if got != root {
		return fmt.Errorf("%w: unit %d (%s) of a block of %d units: the proof leads to root %x, want the committed root %x",
			ErrInvalidProof, p.Unit, p.Tier, size, got, root)
	}
	return nil
}

// Deck is a block's secret state as the writer holds it while the block is
// on sale: every unit's tier, the keys, the Merkle tree and the commitment.
// Everything but Commitment is secret until BlockClosed: never log or
// publish a Deck.
type Deck struct {
	// Tiers holds unit i's tier at index i.
	Tiers []Tier
	// Keys are the seed's derived keys; Keys.UnitSalt gives a unit's salt.
	Keys DeckKeys
	// Tree is the Merkle tree over the units' leaves, for proofs.
	Tree *MerkleTree
	// Commitment is what BlockOpened publishes.
	Commitment Commitment
}

// BuildDeck shuffles the lots with the seed and builds the Merkle tree of
// the units' salted leaves, giving the commitment to publish and the state
// to serve proofs from. It panics on lots ShuffleDeck refuses.
func BuildDeck(lots [TierCount]int, seed Seed) *Deck {
	keys := DeriveKeys(seed)
	tiers := shuffleTiers(lots, keys.Shuffle)
	nodes := make([][32]byte, merkleNodes(len(tiers)))
	// One HMAC state, reset per unit, computes every salt: the 450 000 salts
	// dominate the build, and hmac.New per unit would double its cost.
	mac := hmac.New(sha256.New, keys.Leaf[:])
	var msg [4]byte
	var salt [32]byte
	for i, tier := range tiers {
		binary.BigEndian.PutUint32(msg[:], uint32(i))
		mac.Reset()
		mac.Write(msg[:])
		mac.Sum(salt[:0])
		nodes[i] = unitLeafHash(&salt, uint32(i), tier)
	}
	tree := buildMerkleTree(nodes, len(tiers))
	return &Deck{
		Tiers: tiers,
		Keys:  keys,
		Tree:  tree,
		Commitment: Commitment{
			SeedHash: seed.Hash(),
			Root:     tree.Root(),
			Units:    tree.Size(),
		},
	}
}

// Proof returns the proof of one unit that UnitAssigned records, so its
// player can check the unit against the commitment. It panics if the unit is
// not in the deck: the writer only assigns units of its blocks.
func (d *Deck) Proof(unit uint32) UnitProof {
	if int64(unit) >= int64(len(d.Tiers)) {
		panic(fmt.Sprintf("domain: proof of unit %d of a deck of %d units", unit, len(d.Tiers)))
	}
	return UnitProof{
		Unit: unit,
		Tier: d.Tiers[unit],
		Salt: d.Keys.UnitSalt(unit),
		Path: d.Tree.Proof(int(unit)),
	}
}

// ErrRevealMismatch is wrapped by every error of VerifyReveal: a revealed
// seed that does not match its block's commitment is the one failure that
// means the operator changed a deck after selling it.
var ErrRevealMismatch = errors.New("revealed seed does not match the commitment")

// VerifyReveal is the check made when BlockClosed reveals a block's seed: the
// seed must hash to the committed SeedHash, and the deck it builds from the
// block's lots must have the committed size and root. Its errors wrap
// ErrRevealMismatch and give the expected and found values.
func VerifyReveal(seed Seed, lots [TierCount]int, c Commitment) error {
	if h := seed.Hash(); h != c.SeedHash {
		return fmt.Errorf("%w: the seed hashes to %x, want the committed seed hash %x", ErrRevealMismatch, h, c.SeedHash)
	}
	n, err := deckSize(lots)
	if err != nil {
		return fmt.Errorf("%w: block lots: %w", ErrRevealMismatch, err)
	}
	if n != c.Units {
		return fmt.Errorf("%w: the lots make %d units, want the committed %d", ErrRevealMismatch, n, c.Units)
	}
	if root := BuildDeck(lots, seed).Commitment.Root; root != c.Root {
		return fmt.Errorf("%w: the seed's deck has root %x, want the committed root %x", ErrRevealMismatch, root, c.Root)
	}
	return nil
}

// String hides the seed: a block's seed is secret until BlockClosed, so
// printing one by mistake (%v, %s, %x in a log line) shows only its public
// hash. MarshalText, used on purpose for BlockClosed, writes it whole.
func (s Seed) String() string { return fmt.Sprintf("seed(sha256:%x…)", s.Hash()) }

// GoString hides the seed from %#v as String does.
func (s Seed) GoString() string { return s.String() }
