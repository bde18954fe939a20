package domain

import (
	"encoding/json"
	"slices"
	"testing"
)

// fuzzBoardBytes is the length of a board encoded by encodeFuzzBoard: rows,
// cols, start (2), 9 chests (3 each) and 4 throws (2 each).
const fuzzBoardBytes = 2 + 2 + 3*ChestCount + 2*ThrowCount

// decodeFuzzBoard reads a scenario from arbitrary bytes, missing bytes
// reading as zero. Coordinates span -1..7 and codes one past the last valid
// one, so that most boards are nearly valid and every check gets exercised;
// rows and cols are 7 unless their byte is 0xff.
func decodeFuzzBoard(data []byte) Scenario {
	at := func(i int) byte {
		if i < len(data) {
			return data[i]
		}
		return 0
	}
	dim := func(b byte) int {
		if b == 0xff {
			return int(b)
		}
		return MapRows
	}
	coord := func(b byte) int { return int(b%9) - 1 }
	s := Scenario{Rows: dim(at(0)), Cols: dim(at(1)), Start: Cell{coord(at(2)), coord(at(3))}}
	p := 4
	for i := range s.Chests {
		s.Chests[i] = Chest{Cell: Cell{coord(at(p)), coord(at(p + 1))}, Symbol: Symbol(at(p+2) % 6)}
		p += 3
	}
	for i := range s.Throws {
		s.Throws[i] = Throw{Direction: Direction(at(p) % 9), Steps: int(at(p+1) % 5)}
		p += 2
	}
	return s
}

// encodeFuzzBoard is the inverse of decodeFuzzBoard for valid scenarios, to
// seed the corpus with generated boards.
func encodeFuzzBoard(s Scenario) []byte {
	coord := func(c int) byte { return byte(c + 1) }
	b := []byte{0, 0, coord(s.Start.Row), coord(s.Start.Col)}
	for _, c := range s.Chests {
		b = append(b, coord(c.Cell.Row), coord(c.Cell.Col), byte(c.Symbol))
	}
	for _, t := range s.Throws {
		b = append(b, byte(t.Direction), byte(t.Steps))
	}
	return b
}

// FuzzValidateScenario: given any board and claimed tier, when validated,
// then nothing panics, and whatever is accepted plays without error, opens
// chests that evaluate to the claimed tier and match no other, and survives
// a JSON round trip unchanged.
func FuzzValidateScenario(f *testing.F) {
	for i, tier := range Tiers {
		f.Add(encodeFuzzBoard(GenerateScenario(testSalt(uint64(i)), tier)), byte(tier))
	}
	f.Add(encodeFuzzBoard(handScenario(ch, mo, ch, mo)), byte(ChandelierX2))
	f.Add(encodeFuzzBoard(handScenario(mo, mo, mo, mo)), byte(MonkeyX3))
	f.Add(make([]byte, fuzzBoardBytes), byte(TierNone))
	f.Add([]byte{0xff, 0xff, 9, 9}, byte(200))
	f.Fuzz(func(t *testing.T, data []byte, tierCode byte) {
		s, tier := decodeFuzzBoard(data), Tier(tierCode%(TierCount+1))
		err := ValidateScenario(s, tier)
		res, playErr := s.Play()
		if err != nil {
			for _, e := range scenarioErrors(err) {
				if e.Field == "" || e.Reason == "" {
					t.Fatalf("violation without field or reason: %+v", e)
				}
			}
			return
		}
		if playErr != nil {
			t.Fatalf("valid scenario does not play: %v", playErr)
		}
		var opened []Symbol
		for _, r := range res {
			if r.Chest != NoChest {
				opened = append(opened, r.Symbol)
			}
		}
		if got, err := Evaluate(opened); err != nil || got != tier {
			t.Fatalf("accepted for %s but opened %v evaluates to %s, %v", tier, opened, got, err)
		}
		if m := Matches(opened); !slices.Equal(m, []Tier{tier}) {
			t.Fatalf("accepted for %s but opened %v matches %v", tier, opened, m)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back Scenario
		if err := json.Unmarshal(b, &back); err != nil || back != s {
			t.Fatalf("JSON round trip: %v", err)
		}
	})
}

// FuzzEvaluate: given any list of symbol codes, when evaluated, then
// nothing panics, and an accepted list evaluates to the best tier Matches
// lists, which agrees with a plain count of Article 4.5.
func FuzzEvaluate(f *testing.F) {
	for _, seed := range [][]byte{{}, {1}, {1, 1, 2, 2}, {2, 2, 2, 1}, {2, 2, 2, 2}, {0, 0, 0, 0}, {3, 4, 0, 5}, {1, 1, 1, 1, 1}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		opened := make([]Symbol, len(data))
		for i, b := range data {
			opened[i] = Symbol(b % 7)
		}
		got, err := Evaluate(opened)
		m := Matches(opened)
		if len(m) == 0 || !slices.IsSorted(m) {
			t.Fatalf("Matches(%v) = %v: want at least one tier, best first", opened, m)
		}
		if err != nil {
			return
		}
		if got != m[0] {
			t.Fatalf("Evaluate(%v) = %s, Matches = %v", opened, got, m)
		}
		var count [len(symbolNames)]int
		for _, s := range opened {
			count[s]++
		}
		want := TierNone
		switch {
		case count[Chandelier] == 3:
			want = ChandelierX3
		case count[Monkey] == 3:
			want = MonkeyX3
		case count[Sapphire] == 3:
			want = SapphireX3
		case count[Skull] == 3:
			want = SkullX3
		case count[Chandelier] == 2:
			want = ChandelierX2
		case count[Monkey] == 2:
			want = MonkeyX2
		case count[Sapphire] == 2:
			want = SapphireX2
		case count[Skull] == 2:
			want = SkullX2
		case count[Chandelier] == 1:
			want = ChandelierX1
		}
		if got != want {
			t.Fatalf("Evaluate(%v) = %s, want %s", opened, got, want)
		}
	})
}
