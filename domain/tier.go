// Package domain is Tresor's pure core: the rules of « L'île au trésor »
// (Articles 2–4 of the 2015 regulation), the deck of a block, the scenario a
// player sees, and the decisions of the write side. It imports only the
// standard library and shopspring/decimal, so replay logic stays pure.
package domain

import "fmt"

// Symbol is what a chest holds (Article 4.3): a chandelier, a monkey, a
// sapphire, a skull, or a cross when the chest is empty.
type Symbol uint8

// The symbols, with stable codes: they are part of the scenario encoding
// documented in docs/deck-format.md and must never be renumbered.
const (
	Cross      Symbol = 0
	Chandelier Symbol = 1
	Monkey     Symbol = 2
	Sapphire   Symbol = 3
	Skull      Symbol = 4
)

// symbolNames are the symbols' stable names, in code order.
var symbolNames = [...]string{"cross", "chandelier", "monkey", "sapphire", "skull"}

// Symbols lists every symbol in code order.
var Symbols = []Symbol{Cross, Chandelier, Monkey, Sapphire, Skull}

// String returns the symbol's stable name ("chandelier", "cross", …).
func (s Symbol) String() string {
	if int(s) < len(symbolNames) {
		return symbolNames[s]
	}
	return fmt.Sprintf("symbol(%d)", uint8(s))
}

// Known says whether the rules know the symbol, that is whether it has a
// stable name: the encoders outside the package (domain/codec) refuse one
// they do not, as MarshalText does.
func (s Symbol) Known() bool { return int(s) < len(symbolNames) }

// ParseSymbol reads a symbol from its stable name.
func ParseSymbol(name string) (Symbol, error) {
	for i, n := range symbolNames {
		if n == name {
			return Symbol(i), nil
		}
	}
	return 0, fmt.Errorf("unknown symbol %q", name)
}

// MarshalText writes the symbol's stable name, so JSON shows "monkey", not 2.
func (s Symbol) MarshalText() ([]byte, error) {
	if int(s) >= len(symbolNames) {
		return nil, fmt.Errorf("unknown symbol code %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads a symbol's stable name.
func (s *Symbol) UnmarshalText(b []byte) error {
	v, err := ParseSymbol(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Tier is a prize tier of Article 4.5, or TierNone for a losing unit.
// Tier codes are ordered from the best prize to none; the code is part of the
// leaf encoding of the block's Merkle tree and must never be renumbered.
type Tier uint8

// The tiers, best first. Their ids are the contract used by the API, the
// deck CSV, simulate's report and the regulators' tooling.
const (
	ChandelierX3 Tier = 0
	MonkeyX3     Tier = 1
	SapphireX3   Tier = 2
	SkullX3      Tier = 3
	ChandelierX2 Tier = 4
	MonkeyX2     Tier = 5
	SapphireX2   Tier = 6
	SkullX2      Tier = 7
	ChandelierX1 Tier = 8
	TierNone     Tier = 9
)

// TierCount is the number of tiers, TierNone included.
const TierCount = 10

// tierSpecs gives each tier its id, the symbol it needs and how many.
var tierSpecs = [TierCount]struct {
	id     string
	symbol Symbol
	count  int
}{
	{"chandelier_x3", Chandelier, 3},
	{"monkey_x3", Monkey, 3},
	{"sapphire_x3", Sapphire, 3},
	{"skull_x3", Skull, 3},
	{"chandelier_x2", Chandelier, 2},
	{"monkey_x2", Monkey, 2},
	{"sapphire_x2", Sapphire, 2},
	{"skull_x2", Skull, 2},
	{"chandelier_x1", Chandelier, 1},
	{"none", Cross, 0},
}

// Tiers lists every tier, best first, TierNone last.
var Tiers = []Tier{ChandelierX3, MonkeyX3, SapphireX3, SkullX3, ChandelierX2, MonkeyX2, SapphireX2, SkullX2, ChandelierX1, TierNone}

// ID returns the tier's stable id ("chandelier_x3", …, "none").
func (t Tier) ID() string {
	if t < TierCount {
		return tierSpecs[t].id
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// String returns the tier's stable id.
func (t Tier) String() string { return t.ID() }

// Symbol returns the symbol the tier is made of (Cross for TierNone).
func (t Tier) Symbol() Symbol { return tierSpecs[t].symbol }

// SymbolCount returns how many of the tier's symbol win it (0 for TierNone).
func (t Tier) SymbolCount() int { return tierSpecs[t].count }

// Valid reports whether t is one of the ten tiers.
func (t Tier) Valid() bool { return t < TierCount }

// ParseTier reads a tier from its stable id.
func ParseTier(id string) (Tier, error) {
	for i := range tierSpecs {
		if tierSpecs[i].id == id {
			return Tier(i), nil
		}
	}
	return 0, fmt.Errorf("unknown tier %q", id)
}

// MarshalText writes the tier's stable id.
func (t Tier) MarshalText() ([]byte, error) {
	if !t.Valid() {
		return nil, fmt.Errorf("unknown tier code %d", uint8(t))
	}
	return []byte(t.ID()), nil
}

// UnmarshalText reads a tier's stable id.
func (t *Tier) UnmarshalText(b []byte) error {
	v, err := ParseTier(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}
