package domain

import "strconv"

// Evaluate applies Article 4.5 to the symbols of the chests a unit opened:
// three identical symbols, two identical symbols or one chandelier win, and
// the best tier matched is the prize. Crosses are empty chests and never
// pair. It refuses what the rules do not cover: more than 4 opened chests,
// an unknown symbol code, or four identical symbols. Evaluate does not
// refuse a set that matches two tiers (it returns the better one): the
// validator does, with Matches.
func Evaluate(opened []Symbol) (Tier, error) {
	if len(opened) > ThrowCount {
		return TierNone, &ScenarioError{Field: "opened", Reason: "more chests opened than throws", Expected: "at most " + strconv.Itoa(ThrowCount), Found: strconv.Itoa(len(opened))}
	}
	var count [len(symbolNames)]int
	for i, sym := range opened {
		if !knownSymbol(sym) {
			return TierNone, &ScenarioError{Field: indexed("opened", i, ""), Reason: "unknown symbol", Expected: "cross, chandelier, monkey, sapphire or skull", Found: sym.String()}
		}
		count[sym]++
	}
	for sym := Chandelier; sym <= Skull; sym++ {
		if count[sym] > boardSymbolMax {
			return TierNone, &ScenarioError{Field: "opened", Reason: "Article 4.5 does not cover " + strconv.Itoa(count[sym]) + " identical symbols", Expected: "at most 3 " + sym.String(), Found: strconv.Itoa(count[sym])}
		}
	}
	var matched [TierCount]Tier
	matchesInto(opened, &matched)
	return matched[0], nil
}

// Matches lists, best first, every tier of Article 4.5 the opened symbols
// match: for each of chandelier, monkey, sapphire and skull, 3 or more
// identical symbols match its x3 tier, exactly 2 its x2 tier, and a single
// chandelier matches chandelier_x1. A set matching no winning tier matches
// TierNone alone. Unknown symbol codes match nothing. A valid scenario's
// opened chests match exactly one tier ("one prize at most"); more than one
// is what ValidateScenario refuses.
func Matches(opened []Symbol) []Tier {
	var matched [TierCount]Tier
	n := matchesInto(opened, &matched)
	return append([]Tier(nil), matched[:n]...)
}

// matchesInto is Matches without allocation: it writes the tiers matched,
// best first, into out and returns how many (at least 1).
func matchesInto(opened []Symbol, out *[TierCount]Tier) int {
	var count [len(symbolNames)]int
	for _, sym := range opened {
		if knownSymbol(sym) {
			count[sym]++
		}
	}
	n := 0
	for _, t := range Tiers[:TierNone] {
		have, want := count[t.Symbol()], t.SymbolCount()
		if have == want || (want == boardSymbolMax && have > want) {
			out[n] = t
			n++
		}
	}
	if n == 0 {
		out[0] = TierNone
		n = 1
	}
	return n
}

// knownSymbol reports whether sym is one of the five symbols of Article 4.3.
func knownSymbol(sym Symbol) bool { return int(sym) < len(symbolNames) }
