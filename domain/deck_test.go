package domain

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/bits"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// updateDeckVectors regenerates testdata/deck-vectors.json from the code:
// go test ./domain -run Vectors -update.
var updateDeckVectors = flag.Bool("update", false, "rewrite testdata/deck-vectors.json from the code")

// deckVectorsPath is the golden file, shared with regulators' tools.
const deckVectorsPath = "../testdata/deck-vectors.json"

// article3Lots are the lots of one block at every price (Article 3).
var article3Lots = [TierCount]int{1, 3, 100, 1000, 500, 2000, 26000, 38000, 52000, 330396}

// article3Units is the size of a block (Article 2).
const article3Units = 450_000

// seedA is the seed 000102…1f of the golden vectors.
var seedA = func() Seed {
	var s Seed
	for i := range s {
		s[i] = byte(i)
	}
	return s
}()

// seedB is a second fixed seed: SHA-256 of the game's name.
var seedB = Seed(sha256.Sum256([]byte("L'île au trésor")))

// seedN returns the k-th seed of a deterministic family of test seeds.
func seedN(k uint64) Seed {
	var s Seed
	copy(s[:], "tresor test seed")
	binary.BigEndian.PutUint64(s[24:], k)
	return s
}

// article3Deck is the Article 3 deck of seedA, built once for the tests that
// only read it.
var article3Deck = sync.OnceValue(func() *Deck { return BuildDeck(article3Lots, seedA) })

// countTiers counts the units of each tier in a deck.
func countTiers(deck []Tier) [TierCount]int {
	var counts [TierCount]int
	for _, t := range deck {
		counts[t]++
	}
	return counts
}

// spreadLots spreads n units over the tiers, round-robin from the best, so
// small decks hold several tiers.
func spreadLots(n int) [TierCount]int {
	var lots [TierCount]int
	for i := range n {
		lots[i%TierCount]++
	}
	return lots
}

func TestParseSeed(t *testing.T) {
	lower := "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	tests := []struct {
		name, in string
		want     Seed
		err      string
	}{
		{"lowercase", lower, seedA, ""},
		{"uppercase", strings.ToUpper(lower), seedA, ""},
		{"empty", "", Seed{}, "parse seed: want 64 hex digits, got 0 characters"},
		{"63 digits", lower[:63], Seed{}, "parse seed: want 64 hex digits, got 63 characters"},
		{"65 digits", lower + "0", Seed{}, "parse seed: want 64 hex digits, got 65 characters"},
		{"not hex", "zz" + lower[2:], Seed{}, "parse seed: want 64 hex digits: encoding/hex: invalid byte"},
		{"0x prefix", "0x" + lower[2:], Seed{}, "parse seed: want 64 hex digits: encoding/hex: invalid byte"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSeed(tt.in)
			if tt.err == "" {
				if err != nil || got != tt.want {
					t.Fatalf("ParseSeed = %x, %v; want %x, nil", got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.err) {
				t.Fatalf("ParseSeed error = %v, want one starting %q", err, tt.err)
			}
		})
	}
}

func TestSeedJSONIsHex(t *testing.T) {
	// Given a seed, when it is marshalled in an event,
	b, err := json.Marshal(struct {
		Seed Seed `json:"seed"`
	}{seedA})
	if err != nil {
		t.Fatal(err)
	}
	// then it is 64 lowercase hex digits and reads back.
	want := `{"seed":"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"}`
	if string(b) != want {
		t.Fatalf("marshalled %s, want %s", b, want)
	}
	var back struct {
		Seed Seed `json:"seed"`
	}
	if err := json.Unmarshal(b, &back); err != nil || back.Seed != seedA {
		t.Fatalf("read back %x, %v; want %x", back.Seed, err, seedA)
	}
	if err := json.Unmarshal([]byte(`{"seed":"00"}`), &back); err == nil {
		t.Fatal("a 2-digit seed was accepted")
	}
}

func TestGenerateSeedDrawsFreshSeeds(t *testing.T) {
	a, errA := GenerateSeed()
	b, errB := GenerateSeed()
	if errA != nil || errB != nil {
		t.Fatalf("GenerateSeed: %v, %v", errA, errB)
	}
	if a == b || a == (Seed{}) {
		t.Fatalf("GenerateSeed gave %x then %x", a, b)
	}
}

func TestDeckKeysAndSalts(t *testing.T) {
	// Given seedA, when its keys are derived, then they are HMAC-SHA256 of
	// the labels keyed by the seed, and the salt of unit u is HMAC-SHA256 of
	// uint32be(u) keyed by the leaf key, computed here with crypto/hmac.
	mac := func(key []byte, msg []byte) [32]byte {
		m := hmac.New(sha256.New, key)
		m.Write(msg)
		return [32]byte(m.Sum(nil))
	}
	keys := DeriveKeys(seedA)
	if want := mac(seedA[:], []byte("tresor/v1/shuffle")); keys.Shuffle != want {
		t.Errorf("Shuffle key = %x, want %x", keys.Shuffle, want)
	}
	if want := mac(seedA[:], []byte("tresor/v1/leaf")); keys.Leaf != want {
		t.Errorf("Leaf key = %x, want %x", keys.Leaf, want)
	}
	if keys.Shuffle == keys.Leaf {
		t.Error("the shuffle and leaf keys are equal")
	}
	for _, u := range []uint32{0, 1, 0x01020304, math.MaxUint32} {
		want := mac(keys.Leaf[:], []byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)})
		if got := keys.UnitSalt(u); got != want {
			t.Errorf("UnitSalt(%d) = %x, want %x", u, got, want)
		}
	}
}

func TestShuffleDeckHasExactlyTheLots(t *testing.T) {
	tests := []struct {
		name string
		lots [TierCount]int
	}{
		{"Article 3 block", article3Lots},
		{"empty", [TierCount]int{}},
		{"one unit", [TierCount]int{TierNone: 1}},
		{"one tier", [TierCount]int{SkullX2: 17}},
		{"spread", spreadLots(53)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Given lots, when they are shuffled,
			deck := ShuffleDeck(tt.lots, seedA)
			// then the deck holds exactly those lots.
			if got := countTiers(deck); got != tt.lots {
				t.Fatalf("deck counts %v, want %v", got, tt.lots)
			}
		})
	}
	if n := len(ShuffleDeck(article3Lots, seedB)); n != article3Units {
		t.Fatalf("an Article 3 deck has %d units, want %d", n, article3Units)
	}
}

func TestShuffleDeckIsDeterministic(t *testing.T) {
	// Given the same seed twice, the deck is the same;
	a1, a2 := ShuffleDeck(article3Lots, seedA), ShuffleDeck(article3Lots, seedA)
	if !slices.Equal(a1, a2) {
		t.Fatal("two shuffles with the same seed differ")
	}
	if !slices.Equal(a1, article3Deck().Tiers) {
		t.Fatal("ShuffleDeck and BuildDeck disagree on the same seed")
	}
	// given another seed, the deck differs in about 44 % of the positions
	// (1 - Σ p_t² for the Article 3 proportions); a third is a floor that a
	// correct shuffle cannot miss.
	b := ShuffleDeck(article3Lots, seedB)
	differ := 0
	for i := range a1 {
		if a1[i] != b[i] {
			differ++
		}
	}
	if differ < article3Units/3 {
		t.Fatalf("decks of two seeds differ in %d positions, want at least %d", differ, article3Units/3)
	}
}

// chiSquare is Pearson's statistic of counts against a uniform expectation.
func chiSquare(counts []int, expected float64) float64 {
	var x float64
	for _, c := range counts {
		d := float64(c) - expected
		x += d * d / expected
	}
	return x
}

func TestShuffleDeckPutsAnItemAnywhereUniformly(t *testing.T) {
	// Given a deck of 10 units with one jackpot, shuffled with 20 000 fixed
	// seeds,
	const n, trials = 10, 20_000
	lots := [TierCount]int{ChandelierX3: 1, TierNone: n - 1}
	counts := make([]int, n)
	for k := range uint64(trials) {
		counts[slices.Index(ShuffleDeck(lots, seedN(k)), ChandelierX3)]++
	}
	// then the jackpot's position is uniform: with 9 degrees of freedom,
	// P(χ² > 45) < 1e-6, and the seeds are fixed so the test cannot flake.
	if x := chiSquare(counts, trials/n); x > 45 {
		t.Fatalf("χ² = %.1f over positions %v, want at most 45", x, counts)
	}
}

func TestShuffleDeckDrawsEveryPermutationUniformly(t *testing.T) {
	// Given four distinct tiers shuffled with 24 000 fixed seeds,
	const trials = 24_000
	lots := [TierCount]int{ChandelierX3: 1, MonkeyX3: 1, SapphireX3: 1, SkullX3: 1}
	seen := map[[4]Tier]int{}
	for k := range uint64(trials) {
		seen[[4]Tier(ShuffleDeck(lots, seedN(k)))]++
	}
	// then all 24 orders appear (an off-by-one such as Sattolo's variant
	// reaches only 6) with uniform frequencies: with 23 degrees of freedom,
	// P(χ² > 75) < 1e-6.
	if len(seen) != 24 {
		t.Fatalf("%d of the 24 orders appeared", len(seen))
	}
	counts := make([]int, 0, len(seen))
	for _, c := range seen {
		counts = append(counts, c)
	}
	if x := chiSquare(counts, trials/24); x > 75 {
		t.Fatalf("χ² = %.1f over the 24 orders %v, want at most 75", x, counts)
	}
}

func TestShuffleDeckPanicsOnBadLots(t *testing.T) {
	tests := []struct {
		name string
		lots [TierCount]int
		want string
	}{
		{"negative", [TierCount]int{SapphireX2: -1, TierNone: 3}, "tier sapphire_x2 has -1 lots, want 0 or more"},
		{"too many", [TierCount]int{TierNone: deckUnitsMax, ChandelierX1: 1}, "the lots make more than 16777216 units"},
		{"overflow", [TierCount]int{TierNone: math.MaxInt, ChandelierX1: math.MaxInt}, "the lots make more than 16777216 units"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), tt.want) {
					t.Fatalf("panic %v, want one containing %q", r, tt.want)
				}
			}()
			ShuffleDeck(tt.lots, seedA)
		})
	}
}

// proofUnits are the units whose proofs a block of n units is checked on:
// the first and last, both sides of every power of two, and 1 000 drawn from
// a fixed stream.
func proofUnits(n int) []uint32 {
	units := []uint32{0, 1, 2, 3, uint32(n - 3), uint32(n - 2), uint32(n - 1)}
	for p := 2; p < n; p *= 2 {
		units = append(units, uint32(p-1), uint32(p), uint32(p+1))
	}
	s := NewStream([]byte("deck test units"))
	for range 1000 {
		units = append(units, uint32(s.Below(uint64(n))))
	}
	return units
}

func TestArticle3DeckProofsVerify(t *testing.T) {
	// Given the Article 3 deck of seedA,
	d := article3Deck()
	c := d.Commitment
	if c.Units != article3Units || c.SeedHash != seedA.Hash() || c.Root != d.Tree.Root() {
		t.Fatalf("commitment %+v, want %d units, seed hash %x, root %x", c, article3Units, seedA.Hash(), d.Tree.Root())
	}
	if got := countTiers(d.Tiers); got != article3Lots {
		t.Fatalf("deck counts %v, want %v", got, article3Lots)
	}
	for _, u := range proofUnits(article3Units) {
		// when unit u's proof is served and travels as JSON,
		p := d.Proof(u)
		if p.Unit != u || p.Tier != d.Tiers[u] || p.Salt != d.Keys.UnitSalt(u) {
			t.Fatalf("Proof(%d) = unit %d tier %s salt %x, want unit %d tier %s salt %x",
				u, p.Unit, p.Tier, p.Salt, u, d.Tiers[u], d.Keys.UnitSalt(u))
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var back UnitProof
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("read proof %s: %v", b, err)
		}
		// then it verifies against the commitment.
		if err := VerifyUnitProof(c.Root, c.Units, back); err != nil {
			t.Fatalf("unit %d: %v", u, err)
		}
	}
}

func TestSmallDeckProofsVerify(t *testing.T) {
	for n := 1; n <= 70; n++ {
		// Given a deck of every size from 1 to 70,
		d := BuildDeck(spreadLots(n), seedN(uint64(n)))
		leaves := make([][32]byte, n)
		for i := range n {
			salt := d.Keys.UnitSalt(uint32(i))
			leaves[i] = unitLeafHash(&salt, uint32(i), d.Tiers[i])
		}
		// its root is the RFC 6962 MTH of its leaves,
		if d.Commitment.Root != refMTH(leaves) || d.Commitment.Units != n {
			t.Fatalf("size %d: commitment %x over %d units, want the MTH %x", n, d.Commitment.Root, d.Commitment.Units, refMTH(leaves))
		}
		// and the proof of every unit verifies.
		for i := range uint32(n) {
			if err := VerifyUnitProof(d.Commitment.Root, n, d.Proof(i)); err != nil {
				t.Fatalf("size %d: %v", n, err)
			}
		}
	}
}

func TestVerifyUnitProofRefusesTampering(t *testing.T) {
	// Given unit 37 of a deck of 70 units (its path has 7 hashes),
	d := BuildDeck(spreadLots(70), seedA)
	root := d.Commitment.Root
	other := BuildDeck(spreadLots(70), seedB).Commitment.Root
	good := d.Proof(37)
	if len(good.Path) != 7 {
		t.Fatalf("unit 37 of 70 has %d hashes, the test expects 7", len(good.Path))
	}
	wantRoot := fmt.Sprintf("want the committed root %x", root)
	otherTier := (good.Tier + 1) % (TierCount - 1)
	tests := []struct {
		name   string
		root   [32]byte
		size   int
		mutate func(p *UnitProof)
		want   []string
	}{
		{"first path hash flipped", root, 70, func(p *UnitProof) { p.Path[0][0] ^= 1 }, []string{"unit 37 (", "of a block of 70 units: the proof leads to root", wantRoot}},
		{"last path hash flipped", root, 70, func(p *UnitProof) { p.Path[6][31] ^= 0x80 }, []string{"the proof leads to root", wantRoot}},
		{"two path hashes swapped", root, 70, func(p *UnitProof) { p.Path[1], p.Path[2] = p.Path[2], p.Path[1] }, []string{wantRoot}},
		{"salt changed", root, 70, func(p *UnitProof) { p.Salt[5] ^= 1 }, []string{wantRoot}},
		{"tier changed", root, 70, func(p *UnitProof) { p.Tier = otherTier }, []string{fmt.Sprintf("unit 37 (%s)", otherTier), wantRoot}},
		{"tier code unknown", root, 70, func(p *UnitProof) { p.Tier = 10 }, []string{"unit 37 has tier code 10, want a code below 10"}},
		{"unit moved to a neighbour", root, 70, func(p *UnitProof) { p.Unit = 36 }, []string{"unit 36 (", wantRoot}},
		{"unit moved far", root, 70, func(p *UnitProof) { p.Unit = 5 }, []string{"unit 5 (", wantRoot}},
		{"unit outside the block", root, 70, func(p *UnitProof) { p.Unit = 70 }, []string{"unit 70 is outside a block of 70 units"}},
		{"path truncated", root, 70, func(p *UnitProof) { p.Path = p.Path[:6] }, []string{"the path of unit 37 in a block of 70 units has 6 hashes, want 7"}},
		{"path extended", root, 70, func(p *UnitProof) { p.Path = append(p.Path, root) }, []string{"has 8 hashes, want 7"}},
		{"path empty", root, 70, func(p *UnitProof) { p.Path = nil }, []string{"has 0 hashes, want 7"}},
		{"block size changed", root, 64, func(*UnitProof) {}, []string{"in a block of 64 units has 7 hashes, want 6"}},
		{"empty block", root, 0, func(*UnitProof) {}, []string{"unit 37 is outside a block of 0 units"}},
		{"another block's root", other, 70, func(*UnitProof) {}, []string{fmt.Sprintf("want the committed root %x", other)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := good
			p.Path = slices.Clone(good.Path)
			tt.mutate(&p)
			err := VerifyUnitProof(tt.root, tt.size, p)
			if !errors.Is(err, ErrInvalidProof) {
				t.Fatalf("VerifyUnitProof = %v, want an error wrapping ErrInvalidProof", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	if err := VerifyUnitProof(root, 70, good); err != nil {
		t.Fatalf("the untouched proof is refused: %v", err)
	}
}

func TestDeckVerifyReveal(t *testing.T) {
	lots := spreadLots(25)
	c := BuildDeck(lots, seedA).Commitment
	moved := lots
	moved[ChandelierX3]--
	moved[TierNone]++
	tests := []struct {
		name string
		seed Seed
		lots [TierCount]int
		c    Commitment
		want string
	}{
		{"the committed seed", seedA, lots, c, ""},
		{"another seed", seedB, lots, c, fmt.Sprintf("the seed hashes to %x, want the committed seed hash %x", seedB.Hash(), c.SeedHash)},
		{"another root", seedA, lots, Commitment{SeedHash: c.SeedHash, Root: seedB.Hash(), Units: 25}, fmt.Sprintf("the seed's deck has root %x, want the committed root %x", c.Root, seedB.Hash())},
		{"a lot moved to another tier", seedA, moved, c, fmt.Sprintf("want the committed root %x", c.Root)},
		{"another size", seedA, spreadLots(26), c, "the lots make 26 units, want the committed 25"},
		{"negative lots", seedA, [TierCount]int{TierNone: -1}, c, "tier none has -1 lots, want 0 or more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Given a commitment, when a seed is revealed with the lots,
			err := VerifyReveal(tt.seed, tt.lots, tt.c)
			// then it matches, or the error says what differs.
			if tt.want == "" {
				if err != nil {
					t.Fatalf("VerifyReveal = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrRevealMismatch) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("VerifyReveal = %v, want ErrRevealMismatch saying %q", err, tt.want)
			}
		})
	}
	if err := VerifyReveal(seedA, article3Lots, article3Deck().Commitment); err != nil {
		t.Fatalf("the Article 3 deck's own seed is refused: %v", err)
	}
}

func TestProofAndCommitmentJSON(t *testing.T) {
	// Given a one-unit deck, its proof has an empty path, written [].
	d := BuildDeck([TierCount]int{MonkeyX2: 1}, seedA)
	p := d.Proof(0)
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"unit":0,"tier":"monkey_x2","salt":"%x","path":[]}`, p.Salt)
	if string(b) != want {
		t.Fatalf("proof JSON %s, want %s", b, want)
	}
	// A commitment is written with hex hashes and snake_case names.
	c := article3Deck().Commitment
	b, err = json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want = fmt.Sprintf(`{"seed_hash":"%x","root":"%x","units":450000}`, c.SeedHash, c.Root)
	if string(b) != want {
		t.Fatalf("commitment JSON %s, want %s", b, want)
	}
	var back Commitment
	if err := json.Unmarshal(b, &back); err != nil || back != c {
		t.Fatalf("commitment read back as %+v, %v; want %+v", back, err, c)
	}
	// Malformed hex is refused with the reason.
	bad := []struct{ in, want string }{
		{`{"seed_hash":"abc","root":"` + strings.Repeat("0", 64) + `","units":1}`, "want 64 hex digits, got 3 characters"},
		{`{"unit":1,"tier":"none","salt":"` + strings.Repeat("g", 64) + `","path":[]}`, "invalid byte"},
		{`{"unit":1,"tier":"jackpot","salt":"` + strings.Repeat("0", 64) + `","path":[]}`, `unknown tier "jackpot"`},
	}
	for _, tt := range bad {
		var err error
		if strings.Contains(tt.in, "seed_hash") {
			err = json.Unmarshal([]byte(tt.in), new(Commitment))
		} else {
			err = json.Unmarshal([]byte(tt.in), new(UnitProof))
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("reading %s: error %v, want one saying %q", tt.in, err, tt.want)
		}
	}
}

func TestDeckProofPanicsOutsideTheDeck(t *testing.T) {
	d := BuildDeck(spreadLots(4), seedA)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "proof of unit 4 of a deck of 4 units") {
			t.Fatalf("panic %v, want one naming unit 4 of 4", r)
		}
	}()
	d.Proof(4)
}

// deckVectors is the layout of testdata/deck-vectors.json, documented in
// docs/deck-format.md §13.
type deckVectors struct {
	Comment   []string     `json:"comment"`
	TierOrder []Tier       `json:"tier_order"`
	Cases     []deckVector `json:"cases"`
}

// deckVector is one golden case: a seed, lots and what they make.
type deckVector struct {
	Name         string         `json:"name"`
	Seed         Seed           `json:"seed"`
	Prices       []Amount       `json:"prices,omitempty"`
	Lots         [TierCount]int `json:"lots"`
	ShuffleKey   HexHash        `json:"shuffle_key"`
	LeafKey      HexHash        `json:"leaf_key"`
	ShuffleDraws []uint64       `json:"shuffle_draws"`
	Commitment   Commitment     `json:"commitment"`
	FirstTiers   []Tier         `json:"first_tiers,omitempty"`
	Deck         []Tier         `json:"deck,omitempty"`
	Proofs       []proofVector  `json:"proofs"`
}

// proofVector is one unit's proof with its leaf data and leaf hash spelled
// out, for implementers to check each step.
type proofVector struct {
	LeafData string    `json:"leaf_data"`
	LeafHash HexHash   `json:"leaf_hash"`
	Proof    UnitProof `json:"proof"`
}

// shuffleDrawsShown is how many first draws of an Article 3 shuffle the
// vectors list; a small deck lists all of them.
const shuffleDrawsShown = 8

// tinyLots is the small deck of the vectors: 19 units, every tier present.
var tinyLots = [TierCount]int{1, 1, 1, 1, 1, 1, 2, 2, 3, 6}

// makeDeckVectors computes the golden vectors with the code under test.
func makeDeckVectors(tb testing.TB) deckVectors {
	tb.Helper()
	rules, err := DefaultRules()
	if err != nil {
		tb.Fatal(err)
	}
	var prices []Amount
	for _, table := range rules.Tables {
		prices = append(prices, table.Price)
	}
	v := deckVectors{
		Comment: []string{
			"Golden vectors of the Tresor deck format v1: see docs/deck-format.md.",
			"Generated by go test ./domain -run Vectors -update; checked by hand in TestDeckVectorsByHand.",
			"lots are counts per tier in tier code order (tier_order); shuffle_draws are the first values j of the Fisher-Yates loop, i = n-1 downwards.",
		},
		TierOrder: Tiers,
	}
	last := uint32(article3Units - 1)
	article3Proofs := []uint32{0, 1, 19, 262143, 262144, last - 1, last}
	tinyProofs := make([]uint32, 0, 19)
	for u := range uint32(19) {
		tinyProofs = append(tinyProofs, u)
	}
	cases := []struct {
		name   string
		seed   Seed
		prices []Amount
		lots   [TierCount]int
		units  []uint32
		full   bool
	}{
		{"article3-seed-000102", seedA, prices, article3Lots, article3Proofs, false},
		{"article3-seed-sha256-name", seedB, prices, article3Lots, article3Proofs, false},
		{"tiny-seed-000102", seedA, nil, tinyLots, tinyProofs, true},
	}
	for _, c := range cases {
		d := BuildDeck(c.lots, c.seed)
		n := len(d.Tiers)
		draws := min(n-1, shuffleDrawsShown)
		if c.full {
			draws = n - 1
		}
		s := NewStream(d.Keys.Shuffle[:])
		vc := deckVector{
			Name: c.name, Seed: c.seed, Prices: c.prices, Lots: c.lots,
			ShuffleKey: d.Keys.Shuffle, LeafKey: d.Keys.Leaf,
			ShuffleDraws: make([]uint64, draws),
			Commitment:   d.Commitment,
		}
		for k := range vc.ShuffleDraws {
			vc.ShuffleDraws[k] = s.Below(uint64(n - k))
		}
		if c.full {
			vc.Deck = d.Tiers
		} else {
			vc.FirstTiers = d.Tiers[:20]
		}
		for _, u := range c.units {
			p := d.Proof(u)
			data := append(p.Salt[:], 0, 0, 0, 0, byte(p.Tier))
			binary.BigEndian.PutUint32(data[32:], u)
			vc.Proofs = append(vc.Proofs, proofVector{
				LeafData: hex.EncodeToString(data),
				LeafHash: unitLeafHash(&p.Salt, u, p.Tier),
				Proof:    p,
			})
		}
		v.Cases = append(v.Cases, vc)
	}
	return v
}

// readDeckVectors reads the golden file.
func readDeckVectors(tb testing.TB) deckVectors {
	tb.Helper()
	b, err := os.ReadFile(deckVectorsPath)
	if err != nil {
		tb.Fatalf("read golden vectors (regenerate with -update): %v", err)
	}
	var v deckVectors
	if err := json.Unmarshal(b, &v); err != nil {
		tb.Fatalf("parse %s: %v", deckVectorsPath, err)
	}
	return v
}

func TestDeckVectors(t *testing.T) {
	got := makeDeckVectors(t)
	if *updateDeckVectors {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(deckVectorsPath, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", deckVectorsPath)
	}
	// Given the golden file, when the code recomputes it, then every field
	// of every case is unchanged: the format is a contract with regulators.
	want := readDeckVectors(t)
	if len(got.Cases) != len(want.Cases) || !slices.Equal(got.TierOrder, want.TierOrder) {
		t.Fatalf("the code makes %d cases in tier order %v, the file has %d in %v",
			len(got.Cases), got.TierOrder, len(want.Cases), want.TierOrder)
	}
	for i, g := range got.Cases {
		w := want.Cases[i]
		fields := []struct {
			name      string
			got, want any
		}{
			{"name", g.Name, w.Name}, {"seed", g.Seed, w.Seed}, {"prices", g.Prices, w.Prices},
			{"lots", g.Lots, w.Lots}, {"shuffle_key", g.ShuffleKey, w.ShuffleKey},
			{"leaf_key", g.LeafKey, w.LeafKey}, {"shuffle_draws", g.ShuffleDraws, w.ShuffleDraws},
			{"commitment", g.Commitment, w.Commitment}, {"first_tiers", g.FirstTiers, w.FirstTiers},
			{"deck", g.Deck, w.Deck}, {"proofs", g.Proofs, w.Proofs},
		}
		for _, f := range fields {
			gb, _ := json.Marshal(f.got)
			wb, _ := json.Marshal(f.want)
			if !bytes.Equal(gb, wb) {
				t.Errorf("case %q: %s is %s, the golden file has %s", w.Name, f.name, gb, wb)
			}
		}
		for _, p := range w.Proofs {
			if err := VerifyUnitProof(w.Commitment.Root, w.Commitment.Units, p.Proof); err != nil {
				t.Errorf("case %q: golden proof refused: %v", w.Name, err)
			}
		}
	}
}

func TestDeckVectorsCoverEveryPrice(t *testing.T) {
	// Given the rule set in force, every price's table has the lots of the
	// Article 3 cases, so their vectors hold for blocks of every price.
	rules, err := DefaultRules()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range readDeckVectors(t).Cases {
		if c.Prices == nil {
			continue
		}
		if len(c.Prices) != len(rules.Tables) {
			t.Errorf("case %q lists %d prices, the rules have %d", c.Name, len(c.Prices), len(rules.Tables))
		}
		for _, price := range c.Prices {
			table, err := rules.Table(price)
			if err != nil {
				t.Fatalf("case %q: %v", c.Name, err)
			}
			if table.LotCounts() != c.Lots {
				t.Errorf("case %q: the %s table has lots %v, the vector %v", c.Name, price, table.LotCounts(), c.Lots)
			}
		}
	}
}

// handStream is the random stream of docs/deck-format.md §5 written again
// from the text, independently of drbg.go: block j is
// HMAC-SHA256(key, uint64be(j)), read as four big-endian words.
type handStream struct {
	key   []byte
	block uint64
	words []uint64
}

func (s *handStream) next() uint64 {
	if len(s.words) == 0 {
		var j [8]byte
		binary.BigEndian.PutUint64(j[:], s.block)
		s.block++
		m := hmac.New(sha256.New, s.key)
		m.Write(j[:])
		out := m.Sum(nil)
		for k := 0; k < 32; k += 8 {
			s.words = append(s.words, binary.BigEndian.Uint64(out[k:]))
		}
	}
	w := s.words[0]
	s.words = s.words[1:]
	return w
}

// below draws in [0, n) by rejecting words at or above the largest multiple
// of n not above 2^64, computed here with 128-bit arithmetic.
func (s *handStream) below(n uint64) uint64 {
	rem := bits.Rem64(1, 0, n) // 2^64 mod n
	for {
		if x := s.next(); x <= math.MaxUint64-rem {
			return x % n
		}
	}
}

func TestDeckVectorsByHand(t *testing.T) {
	// Given the golden file, when each case is recomputed from the text of
	// docs/deck-format.md with crypto primitives only, then it matches: the
	// golden file is not merely the code's own output.
	mac := func(key, msg []byte) []byte {
		m := hmac.New(sha256.New, key)
		m.Write(msg)
		return m.Sum(nil)
	}
	for _, c := range readDeckVectors(t).Cases {
		t.Run(c.Name, func(t *testing.T) {
			shuffleKey := mac(c.Seed[:], []byte("tresor/v1/shuffle"))
			leafKey := mac(c.Seed[:], []byte("tresor/v1/leaf"))
			if sh := sha256.Sum256(c.Seed[:]); sh != c.Commitment.SeedHash {
				t.Errorf("seed hash %x, the file has %x", sh, c.Commitment.SeedHash)
			}
			if !bytes.Equal(shuffleKey, c.ShuffleKey[:]) || !bytes.Equal(leafKey, c.LeafKey[:]) {
				t.Errorf("keys %x %x, the file has %x %x", shuffleKey, leafKey, c.ShuffleKey, c.LeafKey)
			}
			// The deck: tiers in code order, then Fisher–Yates from the end.
			var deck []Tier
			for code, count := range c.Lots {
				for range count {
					deck = append(deck, Tier(code))
				}
			}
			if len(deck) != c.Commitment.Units {
				t.Fatalf("the lots make %d units, the commitment says %d", len(deck), c.Commitment.Units)
			}
			s := &handStream{key: shuffleKey}
			var draws []uint64
			for i := len(deck) - 1; i >= 1; i-- {
				j := s.below(uint64(i + 1))
				draws = append(draws, j)
				deck[i], deck[j] = deck[j], deck[i]
			}
			if !slices.Equal(draws[:len(c.ShuffleDraws)], c.ShuffleDraws) {
				t.Errorf("first draws %v, the file has %v", draws[:len(c.ShuffleDraws)], c.ShuffleDraws)
			}
			if c.Deck != nil && !slices.Equal(deck, c.Deck) {
				t.Errorf("deck %v, the file has %v", deck, c.Deck)
			}
			if c.FirstTiers != nil && !slices.Equal(deck[:len(c.FirstTiers)], c.FirstTiers) {
				t.Errorf("first tiers %v, the file has %v", deck[:len(c.FirstTiers)], c.FirstTiers)
			}
			// The leaves and the root, by the recursive MTH.
			leaves := make([][32]byte, len(deck))
			for i, tier := range deck {
				var u [4]byte
				binary.BigEndian.PutUint32(u[:], uint32(i))
				data := append(mac(leafKey, u[:]), u[0], u[1], u[2], u[3], byte(tier))
				leaves[i] = refLeaf(data)
			}
			if root := refMTH(leaves); root != c.Commitment.Root {
				t.Errorf("root %x, the file has %x", root, c.Commitment.Root)
			}
			// Each proof: its leaf data, leaf hash, and its path folded by
			// the recursive definition of PATH.
			for _, p := range c.Proofs {
				u := int(p.Proof.Unit)
				var ub [4]byte
				binary.BigEndian.PutUint32(ub[:], p.Proof.Unit)
				data := append(mac(leafKey, ub[:]), ub[0], ub[1], ub[2], ub[3], byte(deck[u]))
				if got := hex.EncodeToString(data); got != p.LeafData || p.Proof.Tier != deck[u] {
					t.Errorf("unit %d: leaf data %s tier %s, the file has %s tier %s", u, got, deck[u], p.LeafData, p.Proof.Tier)
				}
				if !bytes.Equal(data[:32], p.Proof.Salt[:]) || refLeaf(data) != p.LeafHash || leaves[u] != p.LeafHash {
					t.Errorf("unit %d: salt or leaf hash differ from the file's %x, %x", u, p.Proof.Salt, p.LeafHash)
				}
				root, ok := refRootFromPath(refLeaf(data), u, len(deck), p.Proof.Path)
				if !ok || root != c.Commitment.Root {
					t.Errorf("unit %d: its path folds to %x (well formed: %v), the root is %x", u, root, ok, c.Commitment.Root)
				}
			}
		})
	}
}
