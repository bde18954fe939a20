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
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// updateScenarios rewrites testdata/scenario-vectors.json from the current
// generator. Use it only for a deliberate change of the scenario format.
var updateScenarios = flag.Bool("update-scenarios", false, "rewrite testdata/scenario-vectors.json")

// handLandings are the cells the pawn of handScenario lands on, in order.
var handLandings = [ThrowCount]Cell{{3, 4}, {4, 4}, {4, 3}, {2, 3}}

// handScenario is a hand-written scenario, not from the generator, whose
// four throws land on four distinct cells and open, in order, one chest per
// symbol given; the other chests sit away from the path and hold crosses.
func handScenario(opened ...Symbol) Scenario {
	s := Scenario{
		Rows: MapRows, Cols: MapCols, Start: Cell{3, 3},
		Throws: [ThrowCount]Throw{{East, 1}, {South, 1}, {West, 1}, {North, 2}},
	}
	away := []Cell{{0, 0}, {0, 2}, {0, 4}, {0, 6}, {6, 0}, {6, 2}, {6, 4}, {6, 6}, {1, 1}}
	for i := range s.Chests {
		if i < len(opened) {
			s.Chests[i] = Chest{Cell: handLandings[i], Symbol: opened[i]}
		} else {
			s.Chests[i] = Chest{Cell: away[i], Symbol: Cross}
		}
	}
	return s
}

// scenarioErrors unpacks the *ScenarioError violations of a joined error.
func scenarioErrors(err error) []*ScenarioError {
	if err == nil {
		return nil
	}
	var out []*ScenarioError
	var se *ScenarioError
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, scenarioErrors(e)...)
		}
	} else if errors.As(err, &se) {
		out = append(out, se)
	}
	return out
}

// testSalt is the deterministic salt number i of the tests: SHA-256 of i as
// a big-endian uint64.
func testSalt(i uint64) [32]byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], i)
	return sha256.Sum256(b[:])
}

// TestValidateScenario: given a hand-written scenario with one defect, when
// it is validated against its tier, then each violation is reported with
// the field, the expected and the found value; a sound scenario not made by
// the generator is accepted.
func TestValidateScenario(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Scenario)
		tier   Tier
		fields []string // fields of the violations, in order; none means valid
		found  string   // Found of the first violation
	}{
		{"a monkey pair", func(*Scenario) {}, MonkeyX2, nil, ""},
		{"the pawn returns to opened chests, which open once", func(s *Scenario) {
			s.Throws[2], s.Throws[3] = Throw{North, 1}, Throw{South, 1}
		}, MonkeyX2, nil, ""},
		{"passing over a chest opens nothing", func(s *Scenario) {
			s.Chests[2] = Chest{Cell: Cell{4, 3}, Symbol: Monkey}
			s.Throws[2], s.Throws[3] = Throw{West, 2}, Throw{North, 1} // over (4,3) to (4,2), then (3,2)
		}, MonkeyX2, nil, ""},
		{"wrong dimensions", func(s *Scenario) { s.Rows, s.Cols = 8, 6 }, MonkeyX2, []string{"rows", "cols"}, "8"},
		{"start off the map", func(s *Scenario) { s.Start = Cell{-1, 3} }, MonkeyX2, []string{"start"}, "(-1,3)"},
		{"chest off the map", func(s *Scenario) { s.Chests[5].Cell = Cell{7, 0} }, MonkeyX2, []string{"chests[5].cell"}, "(7,0)"},
		{"chest on the start", func(s *Scenario) { s.Chests[6].Cell = Cell{3, 3} }, MonkeyX2, []string{"chests[6].cell"}, "(3,3)"},
		{"two chests on one cell", func(s *Scenario) { s.Chests[8].Cell = Cell{0, 4} }, MonkeyX2, []string{"chests[8].cell"}, "(0,4)"},
		{"unknown symbol", func(s *Scenario) { s.Chests[7].Symbol = Symbol(9) }, MonkeyX2, []string{"chests[7].symbol"}, "symbol(9)"},
		{"unknown direction", func(s *Scenario) { s.Throws[1].Direction = Direction(8) }, MonkeyX2, []string{"throws[1].direction"}, "direction(8)"},
		{"counter zero and four", func(s *Scenario) { s.Throws[0].Steps, s.Throws[3].Steps = 0, 4 }, MonkeyX2, []string{"throws[0].steps", "throws[3].steps"}, "0"},
		{"the pawn leaves the map", func(s *Scenario) { s.Throws[3] = Throw{North, 3}; s.Throws[2] = Throw{NorthWest, 3} }, MonkeyX2, []string{"throws[3]"}, "(-2,1)"},
		{"wrong tier", func(*Scenario) {}, SapphireX2, []string{"tier"}, "monkey_x2"},
		{"unknown tier", func(*Scenario) {}, Tier(10), []string{"tier"}, "tier(10)"},
		{"several defects at once", func(s *Scenario) {
			s.Cols = 9
			s.Chests[0].Cell = Cell{3, 3}
			s.Throws[2].Steps = 7
		}, MonkeyX2, []string{"cols", "chests[0].cell", "throws[2].steps"}, "9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := handScenario(mo, mo)
			tc.mutate(&s)
			err := ValidateScenario(s, tc.tier)
			got := scenarioErrors(err)
			var fields []string
			for _, e := range got {
				fields = append(fields, e.Field)
			}
			if !slices.Equal(fields, tc.fields) {
				t.Fatalf("violations on %v, want %v: %v", fields, tc.fields, err)
			}
			if len(got) > 0 && (got[0].Found != tc.found || got[0].Expected == "" || !errors.Is(err, ErrInvalidScenario)) {
				t.Fatalf("first violation %+v, want found %q and an expected value", got[0], tc.found)
			}
		})
	}
}

// TestScenarioPlay: given a hand-written scenario, when it is played, then each
// throw shows the pawn's cell and the chest it opens, once.
func TestScenarioPlay(t *testing.T) {
	s := handScenario(sa, mo)
	s.Throws[2], s.Throws[3] = Throw{North, 1}, Throw{West, 3}
	got, err := s.Play()
	if err != nil {
		t.Fatal(err)
	}
	want := [ThrowCount]ThrowResult{
		{East, 1, Cell{3, 4}, 0, sa},
		{South, 1, Cell{4, 4}, 1, mo},
		{North, 1, Cell{3, 4}, NoChest, 0}, // back on chest 0: already open
		{West, 3, Cell{3, 1}, NoChest, 0},  // passes over the start
	}
	if got != want {
		t.Fatalf("Play = %+v\nwant %+v", got, want)
	}
	s.Throws[3] = Throw{West, 3}
	s.Throws[1] = Throw{SouthEast, 3}
	if _, err := s.Play(); err == nil || scenarioErrors(err)[0].Field != "throws[1]" {
		t.Fatalf("Play off the map: %v", err)
	}
}

// TestScenarioJSON: given a scenario and its results, when encoded, then
// keys are snake_case, directions and symbols are names, a throw that opens
// nothing has null chest and symbol, and decoding gives the same values
// back; a list of chests or throws of the wrong length is refused.
func TestScenarioJSON(t *testing.T) {
	s := handScenario(ch)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	wantPrefix := `{"rows":7,"cols":7,"start":{"row":3,"col":3},"chests":[{"cell":{"row":3,"col":4},"symbol":"chandelier"},{"cell":{"row":0,"col":2},"symbol":"cross"}`
	if !strings.HasPrefix(string(b), wantPrefix) || !strings.HasSuffix(string(b), `"throws":[{"direction":"E","steps":1},{"direction":"S","steps":1},{"direction":"W","steps":1},{"direction":"N","steps":2}]}`) {
		t.Fatalf("JSON %s", b)
	}
	var back Scenario
	if err := json.Unmarshal(b, &back); err != nil || back != s {
		t.Fatalf("round trip: %v\n%+v", err, back)
	}
	res, _ := s.Play()
	rb, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"direction":"E","steps":1,"pawn":{"row":3,"col":4},"chest":0,"symbol":"chandelier"},{"direction":"S","steps":1,"pawn":{"row":4,"col":4},"chest":null,"symbol":null},`
	if !strings.HasPrefix(string(rb), want) {
		t.Fatalf("results JSON %s", rb)
	}
	var resBack [ThrowCount]ThrowResult
	if err := json.Unmarshal(rb, &resBack); err != nil || resBack != res {
		t.Fatalf("results round trip: %v\n%+v", err, resBack)
	}
	for _, tc := range []struct{ name, json string }{
		{"eight chests", strings.Replace(string(b), `{"cell":{"row":3,"col":4},"symbol":"chandelier"},`, "", 1)},
		{"five throws", strings.Replace(string(b), `"throws":[`, `"throws":[{"direction":"E","steps":1},`, 1)},
		{"unknown direction", strings.Replace(string(b), `"E"`, `"ENE"`, 1)},
		{"unknown symbol", strings.Replace(string(b), `"chandelier"`, `"parrot"`, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v Scenario
			if err := json.Unmarshal([]byte(tc.json), &v); err == nil {
				t.Fatalf("decoded %s", tc.json)
			}
		})
	}
	for _, bad := range []string{
		`{"direction":"N","steps":1,"pawn":{"row":0,"col":0},"chest":2,"symbol":null}`,
		`{"direction":"N","steps":1,"pawn":{"row":0,"col":0},"chest":null,"symbol":"cross"}`,
		`{"direction":"N","steps":1,"pawn":{"row":0,"col":0},"chest":9,"symbol":"cross"}`,
	} {
		var r ThrowResult
		if err := json.Unmarshal([]byte(bad), &r); err == nil {
			t.Errorf("decoded %s", bad)
		}
	}
}

// TestGenerateScenarioProperty: given many salts and every tier, when the
// scenario is generated, then it is valid, its opened chests match exactly
// its tier, the same salt gives the same scenario, and the boards vary like
// real ones: the number of chests opened ranges over what the tier allows,
// losing boards hold game symbols, winning boards hide near misses.
func TestGenerateScenarioProperty(t *testing.T) {
	salts := uint64(3000)
	if testing.Short() {
		salts = 300
	}
	for _, tier := range Tiers {
		t.Run(tier.String(), func(t *testing.T) {
			var openedHist [ThrowCount + 1]int
			var noGameSymbol, nearMiss, unopenedChandelier int
			for i := range salts {
				salt := testSalt(i)
				s := GenerateScenario(salt, tier)
				if err := ValidateScenario(s, tier); err != nil {
					t.Fatalf("salt %d: %v\n%+v", i, err, s)
				}
				if again := GenerateScenario(salt, tier); again != s {
					t.Fatalf("salt %d: not deterministic", i)
				}
				res, err := s.Play()
				if err != nil {
					t.Fatal(err)
				}
				var opened []Symbol
				isOpened := [ChestCount]bool{}
				for _, r := range res {
					if r.Chest != NoChest {
						opened = append(opened, r.Symbol)
						isOpened[r.Chest] = true
					}
				}
				if m := Matches(opened); !slices.Equal(m, []Tier{tier}) {
					t.Fatalf("salt %d: opened %v matches %v", i, opened, m)
				}
				openedHist[len(opened)]++
				var board, unopened [len(symbolNames)]int
				for c, chest := range s.Chests {
					board[chest.Symbol]++
					if !isOpened[c] {
						unopened[chest.Symbol]++
					}
					if c > 0 && chest.Cell.index() <= s.Chests[c-1].Cell.index() {
						t.Fatalf("salt %d: chests not in row-major order", i)
					}
				}
				if board[Cross] == ChestCount {
					noGameSymbol++
				}
				for sym := Chandelier; sym <= Skull; sym++ {
					if board[sym] > boardSymbolMax {
						t.Fatalf("salt %d: %d %s on the board", i, board[sym], sym)
					}
				}
				if tier != TierNone && unopened[tier.Symbol()] > 0 {
					nearMiss++
				}
				if unopened[Chandelier] > 0 {
					unopenedChandelier++
				}
			}
			for k := tier.SymbolCount(); k <= ThrowCount; k++ {
				if openedHist[k]*20 < int(salts) { // each allowed count at least 5 %
					t.Errorf("%d chests opened in %d of %d boards: %v", k, openedHist[k], salts, openedHist)
				}
			}
			if noGameSymbol*100 > int(salts) {
				t.Errorf("%d of %d boards are all crosses", noGameSymbol, salts)
			}
			if tier.SymbolCount() < boardSymbolMax && tier != TierNone && nearMiss*10 < int(salts) {
				t.Errorf("only %d of %d boards hide another %s", nearMiss, salts, tier.Symbol())
			}
			if tier.Symbol() != Chandelier && unopenedChandelier*4 < int(salts) {
				t.Errorf("only %d of %d boards hide a chandelier", unopenedChandelier, salts)
			}
			t.Logf("opened counts %v, near misses %d, hidden chandeliers %d", openedHist, nearMiss, unopenedChandelier)
		})
	}
}

// scenarioVector is one pinned (salt, tier) → scenario of
// testdata/scenario-vectors.json.
type scenarioVector struct {
	Salt      string                  `json:"salt"`
	Tier      Tier                    `json:"tier"`
	StreamKey string                  `json:"stream_key"`
	Scenario  Scenario                `json:"scenario"`
	Play      [ThrowCount]ThrowResult `json:"play"`
	Opened    []Symbol                `json:"opened"`
	Draws     [][2]uint64             `json:"draws"`
}

// scenarioVectorsFile is the shape of testdata/scenario-vectors.json.
type scenarioVectorsFile struct {
	Comment string           `json:"comment"`
	Vectors []scenarioVector `json:"vectors"`
}

// TestScenarioVectors: given the pinned salts and tiers, when the scenarios
// are generated, then they are byte for byte those of the vectors file that
// docs/scenario.md describes. Run with -update-scenarios to rewrite it.
func TestScenarioVectors(t *testing.T) {
	file := scenarioVectorsFile{Comment: "Scenario test vectors: see docs/scenario.md. salt is the unit's 32-byte salt, stream_key = HMAC-SHA256(salt, \"tresor/v1/scenario\"), salt of vector i = SHA-256(uint64be(i))."}
	tiers := append(slices.Clone(Tiers), TierNone, TierNone, MonkeyX2)
	for i, tier := range tiers {
		salt := testSalt(uint64(i))
		key := hmacSHA256(salt[:], scenarioKeyLabel)
		s := GenerateScenario(salt, tier)
		res, err := s.Play()
		if err != nil {
			t.Fatal(err)
		}
		opened := []Symbol{}
		for _, r := range res {
			if r.Chest != NoChest {
				opened = append(opened, r.Symbol)
			}
		}
		ref, draws := referenceScenario(salt, tier)
		if ref != s {
			t.Fatalf("vector %d: the generator and docs/scenario.md disagree", i)
		}
		file.Vectors = append(file.Vectors, scenarioVector{
			Salt: hex.EncodeToString(salt[:]), Tier: tier, StreamKey: hex.EncodeToString(key[:]),
			Scenario: s, Play: res, Opened: opened, Draws: draws,
		})
	}
	got, err := encodeScenarioVectors(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "scenario-vectors.json")
	if *updateScenarios {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update-scenarios to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("generated scenarios differ from %s: the scenario format changed", path)
	}
	var back scenarioVectorsFile
	if err := json.Unmarshal(want, &back); err != nil {
		t.Fatal(err)
	}
	for i, v := range back.Vectors {
		if err := ValidateScenario(v.Scenario, v.Tier); err != nil || v.Scenario != file.Vectors[i].Scenario {
			t.Fatalf("vector %d does not decode to a valid scenario: %v", i, err)
		}
	}
}

// encodeScenarioVectors writes the vectors file with one field per line and
// each value compact, so a scenario reads as a few lines, not a hundred.
func encodeScenarioVectors(file scenarioVectorsFile) ([]byte, error) {
	var b bytes.Buffer
	comment, err := json.Marshal(file.Comment)
	if err != nil {
		return nil, err
	}
	b.WriteString("{\n  \"comment\": " + string(comment) + ",\n  \"vectors\": [\n")
	for i, v := range file.Vectors {
		fields := []struct {
			name  string
			value any
		}{{"salt", v.Salt}, {"tier", v.Tier}, {"stream_key", v.StreamKey}, {"scenario", v.Scenario}, {"play", v.Play}, {"opened", v.Opened}, {"draws", v.Draws}}
		b.WriteString("    {\n")
		for j, f := range fields {
			value, err := json.Marshal(f.value)
			if err != nil {
				return nil, err
			}
			b.WriteString("      \"" + f.name + "\": " + string(value))
			if j < len(fields)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString("    }")
		if i < len(file.Vectors)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("  ]\n}\n")
	return b.Bytes(), nil
}

// referenceStream is the random stream of docs/scenario.md written again
// with crypto/hmac alone, recording every draw as (n, value), so that the
// reference generator below checks Stream as well as GenerateScenario.
type referenceStream struct {
	key     []byte
	counter uint64
	words   []uint64
	draws   [][2]uint64
}

// below is the documented unbiased draw in [0, n).
func (r *referenceStream) below(n uint64) uint64 {
	limit := -((-n) % n) // 2^64 - (2^64 mod n), as uint64; 0 means 2^64
	for {
		if len(r.words) == 0 {
			m := hmac.New(sha256.New, r.key)
			var c [8]byte
			binary.BigEndian.PutUint64(c[:], r.counter)
			m.Write(c[:])
			block := m.Sum(nil)
			r.counter++
			for i := 0; i < 4; i++ {
				r.words = append(r.words, binary.BigEndian.Uint64(block[8*i:]))
			}
		}
		x := r.words[0]
		r.words = r.words[1:]
		if limit == 0 || x < limit {
			r.draws = append(r.draws, [2]uint64{n, x % n})
			return x % n
		}
	}
}

// referenceScenario follows docs/scenario.md step by step, as a regulator
// would write it: plain lists, no bit tricks, no shared code with the
// generator but the tier table.
func referenceScenario(salt [32]byte, tier Tier) (Scenario, [][2]uint64) {
	m := hmac.New(sha256.New, salt[:])
	m.Write([]byte("tresor/v1/scenario"))
	r := &referenceStream{key: m.Sum(nil)}
	deltas := map[Direction][2]int{North: {-1, 0}, NorthEast: {-1, 1}, East: {0, 1}, SouthEast: {1, 1}, South: {1, 0}, SouthWest: {1, -1}, West: {0, -1}, NorthWest: {-1, -1}}
	onMap := func(row, col int) bool { return row >= 0 && row < 7 && col >= 0 && col < 7 }

	s := Scenario{Rows: 7, Cols: 7}
	start := int(r.below(49))
	s.Start = Cell{start / 7, start % 7}
	visited := []Cell{s.Start}
	pawn := s.Start
	for i := 0; i < 4; i++ {
		var moves []Throw
		for d := Direction(0); d < 8; d++ {
			for steps := 1; steps <= 3; steps++ {
				to := Cell{pawn.Row + deltas[d][0]*steps, pawn.Col + deltas[d][1]*steps}
				if onMap(to.Row, to.Col) && !slices.Contains(visited, to) {
					moves = append(moves, Throw{d, steps})
				}
			}
		}
		s.Throws[i] = moves[r.below(uint64(len(moves)))]
		d := deltas[s.Throws[i].Direction]
		pawn = Cell{pawn.Row + d[0]*s.Throws[i].Steps, pawn.Col + d[1]*s.Throws[i].Steps}
		visited = append(visited, pawn)
	}

	need := tier.SymbolCount()
	weights := []uint64{1, 2, 3, 3, 2}
	var ks []int
	for k := need; k <= 4; k++ {
		for range weights[k] {
			ks = append(ks, k)
		}
	}
	k := ks[r.below(uint64(len(ks)))]

	var opened []Symbol
	for range need {
		opened = append(opened, tier.Symbol())
	}
	for len(opened) < k {
		allowed := []Symbol{Cross}
		for _, sym := range []Symbol{Monkey, Sapphire, Skull} {
			if !slices.Contains(opened, sym) {
				allowed = append(allowed, sym)
			}
		}
		opened = append(opened, allowed[r.below(uint64(len(allowed)))])
	}
	slots := []int{-1, -1, -1, -1}
	for i, sym := range opened {
		slots[i] = int(sym)
	}
	for i := 3; i > 0; i-- {
		j := int(r.below(uint64(i + 1)))
		slots[i], slots[j] = slots[j], slots[i]
	}
	var chests []Chest
	for i, sym := range slots {
		if sym >= 0 {
			chests = append(chests, Chest{visited[i+1], Symbol(sym)})
		}
	}

	var free []Cell
	for row := 0; row < 7; row++ {
		for col := 0; col < 7; col++ {
			if !slices.Contains(visited, Cell{row, col}) {
				free = append(free, Cell{row, col})
			}
		}
	}
	unopened := 9 - k
	for i := 0; i < unopened; i++ {
		j := i + int(r.below(uint64(len(free)-i)))
		free[i], free[j] = free[j], free[i]
	}

	onBoard := func(sym Symbol) int {
		n := 0
		for _, c := range chests {
			if c.Symbol == sym {
				n++
			}
		}
		return n
	}
	for i := 0; i < unopened; i++ {
		var bag []Symbol
		for sym, w := range []uint64{3, 1, 2, 2, 2} {
			if Symbol(sym) == Cross || onBoard(Symbol(sym)) < 3 {
				for range w {
					bag = append(bag, Symbol(sym))
				}
			}
		}
		chests = append(chests, Chest{free[i], bag[r.below(uint64(len(bag)))]})
	}
	slices.SortFunc(chests, func(a, b Chest) int {
		return (a.Cell.Row*7 + a.Cell.Col) - (b.Cell.Row*7 + b.Cell.Col)
	})
	copy(s.Chests[:], chests)
	return s, r.draws
}

// TestScenarioFollowsTheDocument: given many salts and every tier, when
// the generator and the reference written from docs/scenario.md both run,
// then they build the same scenario: the document is the algorithm.
func TestScenarioFollowsTheDocument(t *testing.T) {
	salts := uint64(1000)
	if testing.Short() {
		salts = 100
	}
	for _, tier := range Tiers {
		for i := range salts {
			salt := testSalt(i)
			if got, _ := referenceScenario(salt, tier); got != GenerateScenario(salt, tier) {
				t.Fatalf("%s, salt %d: the generator and docs/scenario.md disagree", tier, i)
			}
		}
	}
}
