package domain

import (
	"errors"
	"slices"
	"testing"
)

// Short names for hand-written boards.
const (
	xx = Cross
	ch = Chandelier
	mo = Monkey
	sa = Sapphire
	sk = Skull
)

// TestEvaluateEveryTier: given the symbols of the opened chests, when
// Article 4.5 is applied, then the tier is the one the rules name, and it is
// the only tier matched.
func TestEvaluateEveryTier(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opened []Symbol
		want   Tier
	}{
		{"three chandeliers", []Symbol{ch, ch, ch}, ChandelierX3},
		{"three chandeliers and a cross", []Symbol{ch, xx, ch, ch}, ChandelierX3},
		{"three chandeliers and a skull", []Symbol{ch, ch, sk, ch}, ChandelierX3},
		{"three monkeys", []Symbol{mo, mo, mo}, MonkeyX3},
		{"three monkeys and a sapphire", []Symbol{sa, mo, mo, mo}, MonkeyX3},
		{"three sapphires and a cross", []Symbol{sa, sa, xx, sa}, SapphireX3},
		{"three skulls", []Symbol{sk, sk, sk}, SkullX3},
		{"two chandeliers", []Symbol{ch, ch}, ChandelierX2},
		{"two chandeliers, a monkey, a cross", []Symbol{mo, ch, xx, ch}, ChandelierX2},
		{"two monkeys", []Symbol{mo, mo}, MonkeyX2},
		{"two monkeys, a sapphire, a skull", []Symbol{mo, sa, mo, sk}, MonkeyX2},
		{"two sapphires and two crosses", []Symbol{xx, sa, xx, sa}, SapphireX2},
		{"two skulls and a monkey", []Symbol{sk, mo, sk}, SkullX2},
		{"one chandelier", []Symbol{ch}, ChandelierX1},
		{"one chandelier and three others", []Symbol{mo, ch, sa, sk}, ChandelierX1},
		{"nothing opened", nil, TierNone},
		{"four crosses: empty chests never pair", []Symbol{xx, xx, xx, xx}, TierNone},
		{"one of each but the chandelier", []Symbol{mo, sa, sk, xx}, TierNone},
		{"a single monkey", []Symbol{mo}, TierNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Evaluate(tc.opened)
			if err != nil || got != tc.want {
				t.Fatalf("Evaluate(%v) = %s, %v; want %s", tc.opened, got, err, tc.want)
			}
			if m := Matches(tc.opened); !slices.Equal(m, []Tier{tc.want}) {
				t.Fatalf("Matches(%v) = %v; want only %s", tc.opened, m, tc.want)
			}
		})
	}
}

// TestEvaluateAmbiguousSets: given symbols that would win two prizes, when
// they are evaluated, then Evaluate gives the better tier, Matches lists
// every tier, and a scenario opening them is refused whatever tier it claims
// ("one prize at most").
func TestEvaluateAmbiguousSets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opened  []Symbol
		best    Tier
		matches []Tier
	}{
		{"two chandeliers and two monkeys", []Symbol{ch, mo, ch, mo}, ChandelierX2, []Tier{ChandelierX2, MonkeyX2}},
		{"one chandelier and two skulls", []Symbol{sk, ch, sk}, SkullX2, []Tier{SkullX2, ChandelierX1}},
		{"three monkeys and a chandelier", []Symbol{mo, mo, ch, mo}, MonkeyX3, []Tier{MonkeyX3, ChandelierX1}},
		{"two sapphires and two skulls", []Symbol{sa, sk, sk, sa}, SapphireX2, []Tier{SapphireX2, SkullX2}},
		{"two monkeys and two sapphires", []Symbol{mo, sa, mo, sa}, MonkeyX2, []Tier{MonkeyX2, SapphireX2}},
		{"three skulls and a chandelier", []Symbol{sk, ch, sk, sk}, SkullX3, []Tier{SkullX3, ChandelierX1}},
		{"a chandelier and two monkeys and a cross", []Symbol{ch, mo, xx, mo}, MonkeyX2, []Tier{MonkeyX2, ChandelierX1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Evaluate(tc.opened)
			if err != nil || got != tc.best {
				t.Fatalf("Evaluate(%v) = %s, %v; want %s", tc.opened, got, err, tc.best)
			}
			if m := Matches(tc.opened); !slices.Equal(m, tc.matches) {
				t.Fatalf("Matches(%v) = %v; want %v", tc.opened, m, tc.matches)
			}
			s := handScenario(tc.opened...)
			for _, tier := range Tiers {
				err := ValidateScenario(s, tier)
				if se := scenarioErrors(err); len(se) != 1 || se[0].Field != "opened" {
					t.Fatalf("ValidateScenario(%v, %s) = %v; want one violation on opened", tc.opened, tier, err)
				}
			}
		})
	}
}

// TestEvaluateRefusesWhatTheRulesDoNotCover: given more than 4 symbols,
// unknown codes or four identical symbols, when evaluated, then a
// *ScenarioError names the problem; a scenario opening four identical
// symbols is refused too.
func TestEvaluateRefusesWhatTheRulesDoNotCover(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opened []Symbol
		field  string
	}{
		{"five chests", []Symbol{xx, xx, xx, xx, xx}, "opened"},
		{"unknown code", []Symbol{mo, Symbol(5)}, "opened[1]"},
		{"four monkeys", []Symbol{mo, mo, mo, mo}, "opened"},
		{"four chandeliers", []Symbol{ch, ch, ch, ch}, "opened"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Evaluate(tc.opened)
			var se *ScenarioError
			if !errors.As(err, &se) || se.Field != tc.field || !errors.Is(err, ErrInvalidScenario) {
				t.Fatalf("Evaluate(%v) error = %v; want a ScenarioError on %s", tc.opened, err, tc.field)
			}
		})
	}
	s := handScenario(mo, mo, mo, mo)
	if err := ValidateScenario(s, MonkeyX3); err == nil {
		t.Fatal("ValidateScenario accepted four monkeys")
	}
}

// TestEvaluateMatchesIgnoresUnknownCodes: given an unknown code among the symbols,
// when Matches lists the tiers, then the code counts as no symbol at all.
func TestEvaluateMatchesIgnoresUnknownCodes(t *testing.T) {
	if m := Matches([]Symbol{Symbol(200), Symbol(200), ch}); !slices.Equal(m, []Tier{ChandelierX1}) {
		t.Fatalf("Matches = %v; want [chandelier_x1]", m)
	}
}
