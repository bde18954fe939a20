package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// The dimensions of the game screen (Article 4.1 and 4.4). They are part of
// the scenario format of docs/scenario.md: changing one changes every
// scenario of every block, so it needs a new format version.
const (
	// MapRows and MapCols size the map: 7 × 7 cells, row 0 at the top (north).
	MapRows = 7
	MapCols = 7
	// ChestCount is the number of chests on the map (Article 4.3).
	ChestCount = 9
	// ThrowCount is the number of throws of a unit (Article 4.4).
	ThrowCount = 4
	// StepsMin and StepsMax bound the counter: the pawn moves 1 to 3 cells.
	StepsMin = 1
	StepsMax = 3
	// NoChest is ThrowResult.Chest when a throw opens no chest.
	NoChest = -1
)

// mapCells is the number of cells of the map.
const mapCells = MapRows * MapCols

// scenarioKeyLabel derives a unit's scenario stream key from its salt, so the
// scenario's draws are independent of every other use of the salt. It is a
// variable so that the generator does not convert it on every call.
var scenarioKeyLabel = []byte("tresor/v1/scenario")

// ErrInvalidScenario is wrapped by every *ScenarioError, so callers can test
// any scenario refusal with errors.Is and map it to one error code.
var ErrInvalidScenario = errors.New("invalid scenario")

// ScenarioError is one violation found in a scenario or a set of opened
// symbols. Field names the place in the JSON encoding ("throws[2].steps"),
// so a regulator's report points at the exact value; Expected and Found say
// what the rules want and what the scenario holds.
type ScenarioError struct {
	Field    string
	Reason   string
	Expected string
	Found    string
}

// Error returns "invalid scenario: field: reason: expected …, found …".
func (e *ScenarioError) Error() string {
	return fmt.Sprintf("%v: %s: %s: expected %s, found %s", ErrInvalidScenario, e.Field, e.Reason, e.Expected, e.Found)
}

// Unwrap lets errors.Is(err, ErrInvalidScenario) match any violation.
func (e *ScenarioError) Unwrap() error { return ErrInvalidScenario }

// Cell is a cell of the map, by row (0 at the top) and column (0 on the
// left). Its fields are plain ints so that a decoded scenario can hold any
// value and the validator, not the decoder, names what is wrong.
type Cell struct {
	Row int `json:"row"`
	Col int `json:"col"`
}

// OnMap reports whether the cell is one of the map's cells.
func (c Cell) OnMap() bool { return c.Row >= 0 && c.Row < MapRows && c.Col >= 0 && c.Col < MapCols }

// String writes the cell as "(row,col)" for error messages.
func (c Cell) String() string { return "(" + strconv.Itoa(c.Row) + "," + strconv.Itoa(c.Col) + ")" }

// index is the cell's row-major number, 0 to 48; only for cells on the map.
func (c Cell) index() int { return c.Row*MapCols + c.Col }

// cellAt is the cell of row-major number i.
func cellAt(i int) Cell { return Cell{Row: i / MapCols, Col: i % MapCols} }

// Direction is what the compass shows (Article 4.1): one of the eight
// points. Its codes are stable, because the generator draws moves in code
// order (docs/scenario.md).
type Direction uint8

// The eight compass points, clockwise from north.
const (
	North     Direction = 0
	NorthEast Direction = 1
	East      Direction = 2
	SouthEast Direction = 3
	South     Direction = 4
	SouthWest Direction = 5
	West      Direction = 6
	NorthWest Direction = 7
)

// directionCount is the number of compass points.
const directionCount = 8

// Directions lists the compass points in code order.
var Directions = []Direction{North, NorthEast, East, SouthEast, South, SouthWest, West, NorthWest}

// directionNames are the points' stable names, in code order.
var directionNames = [directionCount]string{"N", "NE", "E", "SE", "S", "SW", "W", "NW"}

// directionDeltas is the move of one step in each direction, as (row, col);
// north is up, so it decreases the row.
var directionDeltas = [directionCount][2]int{{-1, 0}, {-1, 1}, {0, 1}, {1, 1}, {1, 0}, {1, -1}, {0, -1}, {-1, -1}}

// Valid reports whether d is one of the eight points.
func (d Direction) Valid() bool { return d < directionCount }

// String returns the point's stable name ("N", "NE", …).
func (d Direction) String() string {
	if d.Valid() {
		return directionNames[d]
	}
	return "direction(" + strconv.Itoa(int(d)) + ")"
}

// ParseDirection reads a compass point from its stable name.
func ParseDirection(name string) (Direction, error) {
	for i, n := range directionNames {
		if n == name {
			return Direction(i), nil
		}
	}
	return 0, fmt.Errorf("unknown direction %q", name)
}

// MarshalText writes the point's stable name, so JSON shows "NE", not 1.
func (d Direction) MarshalText() ([]byte, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("unknown direction code %d", uint8(d))
	}
	return []byte(directionNames[d]), nil
}

// UnmarshalText reads a point's stable name.
func (d *Direction) UnmarshalText(b []byte) error {
	v, err := ParseDirection(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Chest is one of the nine chests (Article 4.3): where it stands and what it
// holds (Cross when it is empty).
type Chest struct {
	Cell   Cell   `json:"cell"`
	Symbol Symbol `json:"symbol"`
}

// Throw is one throw (Article 4.4): the compass's direction and the
// counter's number of cells.
type Throw struct {
	Direction Direction `json:"direction"`
	Steps     int       `json:"steps"`
}

// Scenario is everything a unit shows (Article 4.1–4.4): the map, the pawn's
// start, the nine chests with their contents and the four throws. It is
// derived from the unit's salt and tier by GenerateScenario, and anyone with
// the salt rebuilds it; ValidateScenario checks any scenario, generated or not.
// Chests are listed in row-major order of their cells, so a chest's index
// tells nothing about when, or whether, the pawn reaches it.
type Scenario struct {
	Rows   int               `json:"rows"`
	Cols   int               `json:"cols"`
	Start  Cell              `json:"start"`
	Chests [ChestCount]Chest `json:"chests"`
	Throws [ThrowCount]Throw `json:"throws"`
}

// scenarioJSON is Scenario's JSON shape with slices, so that decoding can
// refuse a list that is not exactly 9 chests or 4 throws instead of
// silently dropping or zero-filling entries as a Go array would.
type scenarioJSON struct {
	Rows   int     `json:"rows"`
	Cols   int     `json:"cols"`
	Start  Cell    `json:"start"`
	Chests []Chest `json:"chests"`
	Throws []Throw `json:"throws"`
}

// UnmarshalJSON reads a scenario and refuses any number of chests other than
// 9 or of throws other than 4; everything else is left to ValidateScenario.
func (s *Scenario) UnmarshalJSON(b []byte) error {
	var v scenarioJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	var errs []error
	if len(v.Chests) != ChestCount {
		errs = append(errs, &ScenarioError{Field: "chests", Reason: "wrong number of chests", Expected: strconv.Itoa(ChestCount), Found: strconv.Itoa(len(v.Chests))})
	}
	if len(v.Throws) != ThrowCount {
		errs = append(errs, &ScenarioError{Field: "throws", Reason: "wrong number of throws", Expected: strconv.Itoa(ThrowCount), Found: strconv.Itoa(len(v.Throws))})
	}
	if errs != nil {
		return errors.Join(errs...)
	}
	*s = Scenario{Rows: v.Rows, Cols: v.Cols, Start: v.Start}
	copy(s.Chests[:], v.Chests)
	copy(s.Throws[:], v.Throws)
	return nil
}

// ThrowResult is one throw as the player sees it: the compass and counter,
// the pawn's cell after the move, and the chest it opens. The settlement
// engine reveals one per ThrowMade event. Chest is NoChest, and Symbol is
// meaningless, when the pawn lands on a cell without a chest or on a chest
// already opened (a chest opens once; cells passed over open nothing).
type ThrowResult struct {
	Direction Direction
	Steps     int
	Pawn      Cell
	Chest     int
	Symbol    Symbol
}

// throwResultJSON is ThrowResult's JSON shape: chest and symbol are null
// when the throw opens nothing, so no reader mistakes a sentinel for a chest
// or a cross for an opened empty chest.
type throwResultJSON struct {
	Direction Direction `json:"direction"`
	Steps     int       `json:"steps"`
	Pawn      Cell      `json:"pawn"`
	Chest     *int      `json:"chest"`
	Symbol    *Symbol   `json:"symbol"`
}

// MarshalJSON writes the result with snake_case keys, and null chest and
// symbol when the throw opens nothing.
func (r ThrowResult) MarshalJSON() ([]byte, error) {
	v := throwResultJSON{Direction: r.Direction, Steps: r.Steps, Pawn: r.Pawn}
	if r.Chest != NoChest {
		chest, symbol := r.Chest, r.Symbol
		v.Chest, v.Symbol = &chest, &symbol
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads a result and refuses a chest without a symbol, a
// symbol without a chest, or a chest index outside 0–8.
func (r *ThrowResult) UnmarshalJSON(b []byte) error {
	var v throwResultJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	out := ThrowResult{Direction: v.Direction, Steps: v.Steps, Pawn: v.Pawn, Chest: NoChest}
	switch {
	case v.Chest == nil && v.Symbol == nil:
	case v.Chest == nil || v.Symbol == nil:
		return &ScenarioError{Field: "chest", Reason: "chest and symbol must be both null or both set", Expected: "both or neither", Found: "one"}
	case *v.Chest < 0 || *v.Chest >= ChestCount:
		return &ScenarioError{Field: "chest", Reason: "chest index out of range", Expected: "0.." + strconv.Itoa(ChestCount-1), Found: strconv.Itoa(*v.Chest)}
	default:
		out.Chest, out.Symbol = *v.Chest, *v.Symbol
	}
	*r = out
	return nil
}

// Play replays the throws from the start and returns what each one shows.
// It returns the violations of ValidateScenario that make the replay
// meaningless (dimensions, start, chests, throws, the pawn leaving the map),
// but not the tier: use ValidateScenario to check the outcome. On error the
// results stop at the first throw that could not be replayed.
func (s Scenario) Play() ([ThrowCount]ThrowResult, error) {
	var res [ThrowCount]ThrowResult
	var opened [ThrowCount]Symbol
	_, errs := s.replay(&res, &opened)
	return res, errors.Join(errs...)
}

// ValidateScenario checks a scenario against the rules and the unit's tier:
// a 7 × 7 map, the start on it, 9 chests on distinct cells of the map other
// than the start and holding known symbols, 4 throws with a known direction
// and a counter of 1 to 3 that keep the pawn on the map, and opened chests
// whose symbols match exactly one tier of Article 4.5, the claimed one. It
// accepts any such scenario, generated or not. The error joins one
// *ScenarioError (wrapping ErrInvalidScenario) per violation.
func ValidateScenario(s Scenario, tier Tier) error {
	var res [ThrowCount]ThrowResult
	var opened [ThrowCount]Symbol
	n, errs := s.replay(&res, &opened)
	if !tier.Valid() {
		errs = append(errs, &ScenarioError{Field: "tier", Reason: "unknown tier", Expected: "a tier of Article 4.5 or none", Found: tier.String()})
	}
	if errs != nil {
		return errors.Join(errs...)
	}
	got, err := Evaluate(opened[:n])
	if err != nil {
		return err
	}
	var matched [TierCount]Tier
	if matchesInto(opened[:n], &matched) > 1 {
		return &ScenarioError{Field: "opened", Reason: "the opened chests win more than one prize (Article 4.5: one prize at most)", Expected: "one tier", Found: fmt.Sprint(Matches(opened[:n]))}
	}
	if got != tier {
		return &ScenarioError{Field: "tier", Reason: "the opened chests do not evaluate to the unit's tier", Expected: tier.String(), Found: got.String()}
	}
	return nil
}

// replay checks everything but the tier and replays the throws into res,
// writing the symbols of the chests opened, in throw order, into opened and
// returning how many. errs stays nil when the scenario is sound, so a valid
// scenario costs no allocation.
func (s *Scenario) replay(res *[ThrowCount]ThrowResult, opened *[ThrowCount]Symbol) (int, []error) {
	var errs []error
	if s.Rows != MapRows {
		errs = append(errs, &ScenarioError{Field: "rows", Reason: "wrong map size", Expected: strconv.Itoa(MapRows), Found: strconv.Itoa(s.Rows)})
	}
	if s.Cols != MapCols {
		errs = append(errs, &ScenarioError{Field: "cols", Reason: "wrong map size", Expected: strconv.Itoa(MapCols), Found: strconv.Itoa(s.Cols)})
	}
	startOK := s.Start.OnMap()
	if !startOK {
		errs = append(errs, &ScenarioError{Field: "start", Reason: "the pawn starts off the map", Expected: onMapText, Found: s.Start.String()})
	}
	// chestAt maps a cell's index to 1 + the index of its chest, 0 for none.
	var chestAt [mapCells]int8
	for i, c := range s.Chests {
		if !knownSymbol(c.Symbol) {
			errs = append(errs, &ScenarioError{Field: indexed("chests", i, ".symbol"), Reason: "unknown symbol", Expected: "cross, chandelier, monkey, sapphire or skull", Found: c.Symbol.String()})
		}
		switch {
		case !c.Cell.OnMap():
			errs = append(errs, &ScenarioError{Field: indexed("chests", i, ".cell"), Reason: "chest off the map", Expected: onMapText, Found: c.Cell.String()})
		case startOK && c.Cell == s.Start:
			errs = append(errs, &ScenarioError{Field: indexed("chests", i, ".cell"), Reason: "chest on the start cell", Expected: "a cell other than " + s.Start.String(), Found: c.Cell.String()})
		case chestAt[c.Cell.index()] != 0:
			errs = append(errs, &ScenarioError{Field: indexed("chests", i, ".cell"), Reason: "two chests on one cell", Expected: "a cell without chests[" + strconv.Itoa(int(chestAt[c.Cell.index()])-1) + "]", Found: c.Cell.String()})
		default:
			chestAt[c.Cell.index()] = int8(i + 1)
		}
	}
	throwsOK := true
	for i, t := range s.Throws {
		if !t.Direction.Valid() {
			throwsOK = false
			errs = append(errs, &ScenarioError{Field: indexed("throws", i, ".direction"), Reason: "unknown compass direction", Expected: "N, NE, E, SE, S, SW, W or NW", Found: t.Direction.String()})
		}
		if t.Steps < StepsMin || t.Steps > StepsMax {
			throwsOK = false
			errs = append(errs, &ScenarioError{Field: indexed("throws", i, ".steps"), Reason: "counter out of range", Expected: strconv.Itoa(StepsMin) + ".." + strconv.Itoa(StepsMax), Found: strconv.Itoa(t.Steps)})
		}
	}
	if !startOK || !throwsOK {
		return 0, errs
	}
	var done [ChestCount]bool
	n := 0
	pawn := s.Start
	for i, t := range s.Throws {
		d := directionDeltas[t.Direction]
		next := Cell{Row: pawn.Row + d[0]*t.Steps, Col: pawn.Col + d[1]*t.Steps}
		if !next.OnMap() {
			errs = append(errs, &ScenarioError{Field: indexed("throws", i, ""), Reason: "the pawn leaves the map from " + pawn.String(), Expected: onMapText, Found: next.String()})
			return n, errs
		}
		pawn = next
		r := ThrowResult{Direction: t.Direction, Steps: t.Steps, Pawn: pawn, Chest: NoChest}
		if c := int(chestAt[pawn.index()]) - 1; c >= 0 && !done[c] {
			done[c] = true
			r.Chest, r.Symbol = c, s.Chests[c].Symbol
			opened[n] = r.Symbol
			n++
		}
		res[i] = r
	}
	return n, errs
}

// indexed names an element of a list in a violation: "throws[2].steps".
func indexed(list string, i int, suffix string) string {
	return list + "[" + strconv.Itoa(i) + "]" + suffix
}

// onMapText is the Expected text of a cell that must be on the map.
const onMapText = "a cell with row and col in 0..6"

// GenerateScenario derives the scenario of a unit from its 32-byte salt and
// its predetermined tier, as specified step by step in docs/scenario.md. It
// is a pure function: the same salt and tier always give the same scenario,
// so anyone holding a unit's inclusion proof rebuilds the player's screen.
// The opened chests evaluate to exactly tier and to no other tier, and the
// algorithm has no retry loop. It panics on an invalid tier, a
// programming error: tiers come from the deck.
func GenerateScenario(salt [32]byte, tier Tier) Scenario {
	key := hmacSHA256(salt[:], scenarioKeyLabel)
	d := scenarioDraw{st: NewStream(key[:])}
	var s Scenario
	s.Rows, s.Cols = MapRows, MapCols
	d.throws(&s)
	need := tier.SymbolCount()
	k := d.openedCount(need)
	slots := d.openedSymbols(tier, need, k)
	c := d.open(&s, slots)
	d.placeUnopened(&s, c)
	d.fillUnopened(&s, c)
	sortChests(&s)
	return s
}

// scenarioDraw is GenerateScenario's state between the steps of
// docs/scenario.md: the stream every draw comes from, the cells visited
// (bit i set: cell i is the start or a landing cell), the cell each throw
// lands on, and how many of each symbol the board holds so far.
type scenarioDraw struct {
	st      *Stream
	visited uint64
	landing [ThrowCount]int
	count   [len(symbolNames)]int
}

// throws draws steps 1 and 2: the start, uniform over the 49 cells, then
// each throw, uniform over the moves from the pawn's cell that stay on the
// map and land on a cell not visited yet, listed by direction code then
// steps.
func (d *scenarioDraw) throws(s *Scenario) {
	start := int(d.st.Below(mapCells))
	d.visited |= 1 << start
	s.Start = cellAt(start)
	pawn := s.Start
	for i := range s.Throws {
		var moves [directionCount * StepsMax]Throw
		var dests [directionCount * StepsMax]int
		m := 0
		for _, dir := range Directions {
			for steps := StepsMin; steps <= StepsMax; steps++ {
				next := Cell{Row: pawn.Row + directionDeltas[dir][0]*steps, Col: pawn.Col + directionDeltas[dir][1]*steps}
				if next.OnMap() && d.visited&(1<<next.index()) == 0 {
					moves[m], dests[m] = Throw{Direction: dir, Steps: steps}, next.index()
					m++
				}
			}
		}
		j := d.st.Below(uint64(m))
		s.Throws[i], d.landing[i] = moves[j], dests[j]
		d.visited |= 1 << dests[j]
		pawn = cellAt(dests[j])
	}
}

// openedCount draws step 3: how many chests the throws open, k in need..4,
// by weight.
func (d *scenarioDraw) openedCount(need int) int {
	total := uint64(0)
	for k := need; k <= ThrowCount; k++ {
		total += openedWeights[k]
	}
	r := d.st.Below(total)
	k := need
	for r >= openedWeights[k] {
		r -= openedWeights[k]
		k++
	}
	return k
}

// openedSymbols draws steps 4 and 5: the k-need other opened symbols, each
// uniform over the symbols that cannot add a prize (a cross, or a monkey,
// sapphire or skull not opened yet, so not the tier's symbol), then which
// throw opens which, a Fisher–Yates shuffle of the four slots. A slot
// holds the symbol code its throw opens, or -1.
func (d *scenarioDraw) openedSymbols(tier Tier, need, k int) [ThrowCount]int8 {
	var slots [ThrowCount]int8
	for i := range need {
		slots[i] = int8(tier.Symbol())
	}
	d.count[tier.Symbol()] = need
	for i := need; i < k; i++ {
		var allowed [len(symbolNames)]Symbol
		a := 0
		for _, sym := range Symbols {
			if sym == Cross || (sym != Chandelier && d.count[sym] == 0) {
				allowed[a] = sym
				a++
			}
		}
		sym := allowed[d.st.Below(uint64(a))]
		slots[i] = int8(sym)
		d.count[sym]++
	}
	for i := k; i < ThrowCount; i++ {
		slots[i] = -1
	}
	for i := ThrowCount - 1; i > 0; i-- {
		j := d.st.Below(uint64(i + 1))
		slots[i], slots[j] = slots[j], slots[i]
	}
	return slots
}

// open puts the opened chests on their throws' landing cells, and returns
// how many there are.
func (d *scenarioDraw) open(s *Scenario, slots [ThrowCount]int8) int {
	c := 0
	for i, sym := range slots {
		if sym >= 0 {
			s.Chests[c] = Chest{Cell: cellAt(d.landing[i]), Symbol: Symbol(sym)}
			c++
		}
	}
	return c
}

// placeUnopened draws step 6: the cells of the 9-c unopened chests, a
// partial Fisher–Yates over the 44 cells that are neither the start nor a
// landing cell, in row-major order.
func (d *scenarioDraw) placeUnopened(s *Scenario, c int) {
	var free [mapCells]int8
	f := 0
	for i := range mapCells {
		if d.visited&(1<<i) == 0 {
			free[f] = int8(i)
			f++
		}
	}
	for i := 0; c+i < ChestCount; i++ {
		j := i + int(d.st.Below(uint64(f-i)))
		free[i], free[j] = free[j], free[i]
		s.Chests[c+i].Cell = cellAt(int(free[i]))
	}
}

// fillUnopened draws step 7: the unopened chests' contents, in the order
// of step 6, by weight, no game symbol appearing more than 3 times on the
// board.
func (d *scenarioDraw) fillUnopened(s *Scenario, c int) {
	for i := c; i < ChestCount; i++ {
		var w [len(symbolNames)]uint64
		total := uint64(0)
		for sym, sw := range boardWeights {
			if sym == int(Cross) || d.count[sym] < boardSymbolMax {
				w[sym] = sw
				total += sw
			}
		}
		r := d.st.Below(total)
		sym := 0
		for r >= w[sym] {
			r -= w[sym]
			sym++
		}
		s.Chests[i].Symbol = Symbol(sym)
		d.count[sym]++
	}
}

// sortChests does step 8: the chests are listed in row-major order of
// their cells.
func sortChests(s *Scenario) {
	for i := 1; i < ChestCount; i++ {
		for j := i; j > 0 && s.Chests[j].Cell.index() < s.Chests[j-1].Cell.index(); j-- {
			s.Chests[j], s.Chests[j-1] = s.Chests[j-1], s.Chests[j]
		}
	}
}

// openedWeights[k] is the weight of opening k chests, among the k a tier
// allows (need to 4): losses open 0 to 4 chests and wins open more than
// they need, so the number of chests opened is not a tell.
var openedWeights = [ThrowCount + 1]uint64{1, 2, 3, 3, 2}

// boardWeights are the weights of the unopened chests' symbols, by symbol
// code: mostly crosses, and chandeliers rarer than the others, so that the
// chests the pawn misses hold near misses like a real board.
var boardWeights = [len(symbolNames)]uint64{3, 1, 2, 2, 2}

// boardSymbolMax caps each game symbol on the board: no board shows more of
// a symbol than the best prize needs.
const boardSymbolMax = 3
