package audit

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
)

// PlayMaxBytes bounds what ReadPlays reads: a history page of
// projections.PageMax plays, each with its proof, is about 300 KB.
const PlayMaxBytes = 16 << 20

// ErrUnreadablePlay is wrapped by ReadPlays' errors: the input is not a
// play answer of the history API.
var ErrUnreadablePlay = errors.New("not a play of the history API")

// ReadPlays reads a play answer of the history API, or a history page
// ({"plays": [...]}) whose every play is then checked.
func ReadPlays(data []byte) ([]projections.PlayView, error) {
	if len(data) > PlayMaxBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrUnreadablePlay, len(data), PlayMaxBytes)
	}
	var probe struct {
		Plays  *[]json.RawMessage `json:"plays"`
		PlayID *string            `json:"play_id"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnreadablePlay, err)
	}
	raw := []json.RawMessage{data}
	switch {
	case probe.Plays != nil:
		raw = *probe.Plays
	case probe.PlayID == nil:
		return nil, fmt.Errorf("%w: neither a play (play_id) nor a history page (plays)", ErrUnreadablePlay)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: a history page without plays", ErrUnreadablePlay)
	}
	docs := make([]projections.PlayView, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &docs[i]); err != nil {
			return nil, fmt.Errorf("%w: play %d: %w", ErrUnreadablePlay, i+1, err)
		}
	}
	return docs, nil
}

// CheckStatus is the outcome of one check of a play.
type CheckStatus string

// A check passes, fails, or is skipped when the play does not allow it yet
// (a prize before settlement, a deck before the block's seed is revealed).
const (
	CheckPass CheckStatus = "pass"
	CheckFail CheckStatus = "fail"
	CheckSkip CheckStatus = "skip"
)

// The checks of VerifyPlay, in the order they run. Their names are a
// contract with the tools that read `tresor verify-play --json`
// (docs/verify-play.md): never rename one.
const (
	// CheckDocument: the play id names the block and unit, the proof is
	// there and proves that unit.
	CheckDocument = "document"
	// CheckRoot: the document's commitment has the rules' block size and,
	// given an independent root, the same root.
	CheckRoot = "root"
	// CheckInclusion: the proof's leaf (salt, unit, tier) leads to the root.
	CheckInclusion = "inclusion_proof"
	// CheckScenario: the scenario derived from the proven salt and tier
	// evaluates to exactly that tier (Article 4.5: one prize at most).
	CheckScenario = "scenario"
	// CheckScenarioShown: the map, start and chests shown are the derived
	// scenario's.
	CheckScenarioShown = "scenario_shown"
	// CheckThrows: the throws shown are the scenario's, in order, as many as
	// the status says.
	CheckThrows = "throws"
	// CheckTier: the tier the play settled on is the proven tier.
	CheckTier = "tier"
	// CheckPrize: the prize is the rules' prize of the proven tier at the
	// stake's price (Article 3 table, Article 4.5 multiplier).
	CheckPrize = "prize"
	// CheckDeck: the block's seed hashes to the commitment, rebuilds its
	// root, and gives the unit the proven tier and salt.
	CheckDeck = "deck"
)

// PlayCheck is the outcome of one check, with what was expected and found
// when it fails.
type PlayCheck struct {
	Name   string      `json:"name"`
	Status CheckStatus `json:"status"`
	Detail string      `json:"detail"`
}

// Where the root and the seed a play was checked against came from.
const (
	// SourceIndependent: given by the verifier (--root, --seed), from the
	// commitment the operator published before the sale or the reveal.
	SourceIndependent = "independent"
	// SourceDocument: the operator's own copy in the play document; it
	// proves the play consistent with what the operator claims, not with
	// what it published.
	SourceDocument = "document"
	// SourceNone: no root (or seed) was available.
	SourceNone = "none"
)

// PlayVerdict is VerifyPlay's answer for one play.
type PlayVerdict struct {
	PlayID string `json:"play_id"`
	Valid  bool   `json:"valid"`
	// Root is the root the proof was checked against, RootSource where it
	// came from; SeedSource likewise for the deck check.
	Root       string `json:"root"`
	RootSource string `json:"root_source"`
	// RootFrom says where an independent root came from: "--root", or the
	// commitments file or URL it was read from.
	RootFrom string `json:"root_from,omitempty"`
	// SeedFrom likewise: "--seed", or the commitments the seed was
	// published with.
	SeedFrom   string      `json:"seed_from,omitempty"`
	SeedSource string      `json:"seed_source"`
	Checks     []PlayCheck `json:"checks"`
}

// VerifyPlayOptions are the verifier's own inputs.
type VerifyPlayOptions struct {
	// Rules is the rule set the play's emission was sold under (required).
	Rules *domain.RuleSet
	// Root is the block's root as published in BlockOpened (or the block
	// report), nil to check against the document's own claim only.
	Root *[32]byte
	// Seed is the block's seed as revealed by BlockClosed, nil to use the
	// document's block_seed if any.
	Seed *domain.Seed
	// Commitments are the commitments the operator published (GET
	// /v1/commitments, or a mirror of it), by block id, read from
	// CommitmentsFrom: the play's block's root, seed hash and size are
	// checked against them and, once revealed, its seed taken from them.
	// A play whose block is not among them fails the root check. Used when
	// Root is nil.
	Commitments     map[string]projections.PublishedCommitment
	CommitmentsFrom string
}

// ReadCommitments reads published commitments: the NDJSON file of GET
// /v1/commitments.ndjson (one per line), a page of GET /v1/commitments
// ({"commitments": [...]}) or one commitment (GET /v1/commitments/{block}).
// A block listed twice with different commitments is refused.
func ReadCommitments(data []byte) (map[string]projections.PublishedCommitment, error) {
	if len(data) > CommitmentsMaxBytes {
		return nil, fmt.Errorf("commitments: %d bytes, more than %d", len(data), CommitmentsMaxBytes)
	}
	var list []projections.PublishedCommitment
	var page struct {
		Commitments *[]projections.PublishedCommitment `json:"commitments"`
	}
	if err := json.Unmarshal(data, &page); err == nil && page.Commitments != nil {
		list = *page.Commitments
	} else {
		dec := json.NewDecoder(bytes.NewReader(data))
		for i := 1; ; i++ {
			var c projections.PublishedCommitment
			if err := dec.Decode(&c); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("commitments: record %d: %w", i, err)
			}
			list = append(list, c)
		}
	}
	out := make(map[string]projections.PublishedCommitment, len(list))
	for _, c := range list {
		if !domain.ValidID(c.BlockID) {
			return nil, fmt.Errorf("commitments: block id %.80q is not valid", c.BlockID)
		}
		if old, ok := out[c.BlockID]; ok && old.Commitment != c.Commitment {
			return nil, fmt.Errorf("commitments: block %s is listed twice with different commitments", c.BlockID)
		}
		out[c.BlockID] = c
	}
	if len(out) == 0 {
		return nil, errors.New("commitments: no commitment in the file")
	}
	return out, nil
}

// CommitmentsMaxBytes bounds what ReadCommitments reads: about 500 bytes a
// block, for the 100 000 blocks the API publishes at most.
const CommitmentsMaxBytes = 64 << 20

// VerifyPlay checks one play offline, as a player or an auditor would: the
// unit's inclusion proof against its block's root, the scenario derived
// from the proof against the unit's tier, the map and throws shown against
// that scenario, the settled tier and prize against the rules and, given
// the block's seed, the unit against the whole deck. Every check runs even
// after one fails, so that the verdict names all that is wrong. The play is
// valid when no check fails.
func VerifyPlay(doc projections.PlayView, opt VerifyPlayOptions) PlayVerdict {
	v := &verification{doc: doc, opt: opt, verdict: PlayVerdict{PlayID: doc.PlayID, RootSource: SourceNone, SeedSource: SourceNone}}
	v.document()
	v.root()
	if v.pending() {
		v.progress()
	} else {
		v.inclusion()
		v.scenario()
		v.tier()
		v.prize()
		v.deck()
	}
	v.verdict.Valid = true
	for _, c := range v.verdict.Checks {
		if c.Status == CheckFail {
			v.verdict.Valid = false
		}
	}
	return v.verdict
}

// verification is one VerifyPlay under way.
type verification struct {
	doc     projections.PlayView
	opt     VerifyPlayOptions
	verdict PlayVerdict
	// rootUsed is the root checked against, nil when there is none.
	rootUsed *[32]byte
	// published is the play's block's published commitment, nil when
	// none was given.
	published *projections.PublishedCommitment
}

// add records a check: failures lists what is wrong (none: it passed),
// passed says what a pass established.
func (v *verification) add(name string, failures []string, passed string) {
	c := PlayCheck{Name: name, Status: CheckPass, Detail: passed}
	if len(failures) > 0 {
		c.Status, c.Detail = CheckFail, strings.Join(failures, "; ")
	}
	v.verdict.Checks = append(v.verdict.Checks, c)
}

// skip records a check that could not run, and why.
func (v *verification) skip(name, why string) {
	v.verdict.Checks = append(v.verdict.Checks, PlayCheck{Name: name, Status: CheckSkip, Detail: why})
}

// proof returns the document's proof, nil when it has none.
func (v *verification) proof() *domain.UnitProof { return v.doc.Proof }

// pending reports a play in progress served without its proof: the proof
// would tell its outcome before the chests are opened, so the API gives it
// with the settlement.
func (v *verification) pending() bool {
	return v.doc.Status == projections.StatusInProgress && v.proof() == nil
}

// pendingWhy is what a check that needs the proof says of a pending play.
const pendingWhy = "the play is in progress: its proof, which fixes its outcome, comes with its settlement (the fourth throw or the system's completion); verify it again then"

func (v *verification) document() {
	var bad []string
	d := v.doc
	if block, unit, ok := domain.ParsePlayID(d.PlayID); !ok || block != d.BlockID || unit != d.Unit {
		bad = append(bad, fmt.Sprintf("play id %q does not name block %s unit %d (want %q)", d.PlayID, d.BlockID, d.Unit, domain.PlayID(d.BlockID, d.Unit)))
	}
	passed := fmt.Sprintf("play %s is unit %d of block %s and carries its proof", d.PlayID, d.Unit, d.BlockID)
	switch p := v.proof(); {
	case v.pending():
		passed = fmt.Sprintf("play %s is unit %d of block %s, in progress: its proof comes with its settlement", d.PlayID, d.Unit, d.BlockID)
	case p == nil:
		bad = append(bad, "the play carries no proof")
	case p.Unit != d.Unit:
		bad = append(bad, fmt.Sprintf("the proof is for unit %d, the play for unit %d", p.Unit, d.Unit))
	}
	v.add(CheckDocument, bad, passed)
}

// progress checks what a pending play shows without its proof: as many
// throws as it says, the pawn where the last one left it, each opened
// chest showing what its throw found and no other; the checks that need
// the proof are skipped, saying why.
func (v *verification) progress() {
	for _, name := range []string{CheckInclusion, CheckScenario, CheckScenarioShown} {
		v.skip(name, pendingWhy)
	}
	var bad []string
	d := v.doc
	n := len(d.Throws)
	if n >= domain.ThrowCount {
		bad = append(bad, fmt.Sprintf("status in_progress after %d throws", n))
	}
	if d.ThrowsLeft != domain.ThrowCount-n {
		bad = append(bad, fmt.Sprintf("throws_left %d after %d throws, want %d", d.ThrowsLeft, n, domain.ThrowCount-n))
	}
	switch {
	case n > 0 && d.Pawn != d.Throws[n-1].Pawn:
		bad = append(bad, fmt.Sprintf("pawn on %s, the last throw left it on %s", d.Pawn, d.Throws[n-1].Pawn))
	case n == 0 && (d.Start == nil || d.Pawn != *d.Start):
		bad = append(bad, fmt.Sprintf("pawn on %s before any throw, not on the start", d.Pawn))
	}
	opened := make(map[int]domain.Symbol)
	for i, t := range d.Throws {
		if t.Chest == domain.NoChest {
			continue
		}
		if t.Chest < 0 || t.Chest >= len(d.Chests) || d.Chests[t.Chest].Cell != t.Pawn {
			bad = append(bad, fmt.Sprintf("throws[%d] opens chest %d, which is not on %s", i, t.Chest, t.Pawn))
			continue
		}
		opened[t.Chest] = t.Symbol
	}
	for i, c := range d.Chests {
		sym, ok := opened[i]
		switch {
		case c.Symbol != nil && !ok:
			bad = append(bad, fmt.Sprintf("chests[%d] shows %s before it is opened", i, *c.Symbol))
		case c.Symbol != nil && *c.Symbol != sym:
			bad = append(bad, fmt.Sprintf("chests[%d] shows %s, its throw found %s", i, *c.Symbol, sym))
		}
	}
	if d.Tier != nil || d.Prize != nil {
		bad = append(bad, "a tier or a prize shown before the settlement")
	}
	v.add(CheckThrows, bad, fmt.Sprintf("%d throws made, pawn on %s, only the chests opened shown", n, d.Pawn))
	for _, name := range []string{CheckTier, CheckPrize, CheckDeck} {
		v.skip(name, pendingWhy)
	}
}

func (v *verification) root() {
	var bad []string
	c := v.doc.BlockCommitment
	if c != nil && c.Units != v.opt.Rules.BlockUnits {
		bad = append(bad, fmt.Sprintf("the commitment is for a block of %d units, the rules' blocks have %d", c.Units, v.opt.Rules.BlockUnits))
	}
	switch {
	case v.opt.Root != nil:
		v.rootUsed, v.verdict.RootSource, v.verdict.RootFrom = v.opt.Root, SourceIndependent, "--root"
		if c != nil && c.Root != *v.opt.Root {
			bad = append(bad, fmt.Sprintf("the document's block_commitment.root is %x, the published root is %x", c.Root, *v.opt.Root))
		}
	case v.opt.Commitments != nil:
		pc, ok := v.opt.Commitments[v.doc.BlockID]
		if !ok {
			bad = append(bad, fmt.Sprintf("block %s is not among the commitments published at %s", v.doc.BlockID, v.opt.CommitmentsFrom))
			break
		}
		v.published = &pc
		v.rootUsed, v.verdict.RootSource, v.verdict.RootFrom = &pc.Commitment.Root, SourceIndependent, v.opt.CommitmentsFrom
		switch {
		case c == nil:
		case c.Root != pc.Commitment.Root:
			bad = append(bad, fmt.Sprintf("the document's block_commitment.root is %x, the published root is %x", c.Root, pc.Commitment.Root))
		case c.SeedHash != pc.Commitment.SeedHash:
			bad = append(bad, fmt.Sprintf("the document's block_commitment.seed_hash is %x, the published one is %x", c.SeedHash, pc.Commitment.SeedHash))
		}
		if pc.Commitment.Units != v.opt.Rules.BlockUnits {
			bad = append(bad, fmt.Sprintf("the published commitment is for a block of %d units, the rules' blocks have %d", pc.Commitment.Units, v.opt.Rules.BlockUnits))
		}
		if pc.Price != v.doc.Stake {
			bad = append(bad, fmt.Sprintf("the play's stake is %s, the published block's price %s", v.doc.Stake, pc.Price))
		}
	case c != nil:
		v.rootUsed, v.verdict.RootSource = &c.Root, SourceDocument
	default:
		bad = append(bad, "no root: the document has no block_commitment and no published root was given")
	}
	if v.rootUsed != nil {
		v.verdict.Root = hex.EncodeToString(v.rootUsed[:])
	}
	if len(bad) == 0 && v.verdict.RootSource == SourceDocument {
		v.skip(CheckRoot, "the root is the document's own claim (block_commitment.root), not checked against the commitment published before the sale: give it with --root")
		return
	}
	passed := "the document's root is the published root " + v.verdict.Root
	if v.published != nil {
		passed = fmt.Sprintf("the document's commitment is the one published at %s: root %s", v.opt.CommitmentsFrom, v.verdict.Root)
	}
	if c == nil {
		passed = "the document carries no block_commitment: the proof is checked against the published root " + v.verdict.Root
	}
	v.add(CheckRoot, bad, passed)
}

func (v *verification) inclusion() {
	p := v.proof()
	if p == nil || v.rootUsed == nil {
		v.add(CheckInclusion, []string{"no proof or no root to check it against"}, "")
		return
	}
	var bad []string
	if err := domain.VerifyUnitProof(*v.rootUsed, v.opt.Rules.BlockUnits, *p); err != nil {
		bad = append(bad, err.Error())
	}
	v.add(CheckInclusion, bad, fmt.Sprintf("unit %d with tier %s and salt %x is a leaf of root %x", p.Unit, p.Tier, p.Salt, *v.rootUsed))
}

// scenario runs the checks of the scenario: derived, shown, thrown.
func (v *verification) scenario() {
	p := v.proof()
	if p == nil || !p.Tier.Valid() {
		for _, name := range []string{CheckScenario, CheckScenarioShown, CheckThrows} {
			v.add(name, []string{"no proof to derive the scenario from"}, "")
		}
		return
	}
	s := domain.GenerateScenario(p.Salt, p.Tier)
	var bad []string
	if err := domain.ValidateScenario(s, p.Tier); err != nil {
		bad = append(bad, err.Error())
	}
	v.add(CheckScenario, bad, fmt.Sprintf("the scenario derived from the salt opens chests worth exactly %s", p.Tier))
	v.shown(s)
	results, err := s.Play()
	if err != nil {
		v.add(CheckThrows, []string{"the derived scenario cannot be played: " + err.Error()}, "")
		return
	}
	v.throws(s, results)
}

// shown compares the map, start and chests the document shows with the
// derived scenario: every chest's cell, and its symbol where one is shown
// (all of them once the play is over).
func (v *verification) shown(s domain.Scenario) {
	var bad []string
	d := v.doc
	if d.Map.Rows != s.Rows || d.Map.Cols != s.Cols {
		bad = append(bad, fmt.Sprintf("map %d×%d, want %d×%d", d.Map.Rows, d.Map.Cols, s.Rows, s.Cols))
	}
	switch {
	case d.Start == nil:
		bad = append(bad, fmt.Sprintf("no start shown, want %s", s.Start))
	case *d.Start != s.Start:
		bad = append(bad, fmt.Sprintf("start %s, want %s", d.Start, s.Start))
	}
	if len(d.Chests) != len(s.Chests) {
		bad = append(bad, fmt.Sprintf("%d chests, want %d", len(d.Chests), len(s.Chests)))
	}
	over := d.Status != projections.StatusInProgress
	for i := range min(len(d.Chests), len(s.Chests)) {
		got, want := d.Chests[i], s.Chests[i]
		if got.Cell != want.Cell {
			bad = append(bad, fmt.Sprintf("chests[%d] on %s, want %s", i, got.Cell, want.Cell))
		}
		switch {
		case got.Symbol != nil && *got.Symbol != want.Symbol:
			bad = append(bad, fmt.Sprintf("chests[%d] shows %s, want %s", i, *got.Symbol, want.Symbol))
		case got.Symbol == nil && over:
			bad = append(bad, fmt.Sprintf("chests[%d] hidden in a play that is over, want %s shown", i, want.Symbol))
		}
	}
	v.add(CheckScenarioShown, bad, fmt.Sprintf("the map, start %s and %d chests shown are the derived scenario's", s.Start, len(s.Chests)))
}

// throws compares the throws shown with the derived scenario's, and their
// number with the status.
func (v *verification) throws(s domain.Scenario, results [domain.ThrowCount]domain.ThrowResult) {
	var bad []string
	d := v.doc
	n := len(d.Throws)
	if n > domain.ThrowCount {
		bad = append(bad, fmt.Sprintf("%d throws, at most %d", n, domain.ThrowCount))
		n = domain.ThrowCount
	}
	for i, got := range d.Throws[:n] {
		if got != results[i] {
			bad = append(bad, fmt.Sprintf("throws[%d] is %s, want %s", i, throwText(got), throwText(results[i])))
		}
	}
	if d.ThrowsLeft != domain.ThrowCount-len(d.Throws) {
		bad = append(bad, fmt.Sprintf("throws_left %d after %d throws, want %d", d.ThrowsLeft, len(d.Throws), domain.ThrowCount-len(d.Throws)))
	}
	pawn := s.Start
	if n > 0 {
		pawn = results[n-1].Pawn
	}
	if d.Pawn != pawn {
		bad = append(bad, fmt.Sprintf("pawn on %s, want %s", d.Pawn, pawn))
	}
	switch d.Status {
	case projections.StatusInProgress:
		if len(d.Throws) == domain.ThrowCount {
			bad = append(bad, "status in_progress after the 4th throw")
		}
	case projections.StatusSettled, projections.StatusCompletedBySystem:
		if len(d.Throws) != domain.ThrowCount {
			bad = append(bad, fmt.Sprintf("status %s after %d throws, want %d", d.Status, len(d.Throws), domain.ThrowCount))
		}
	default:
		bad = append(bad, fmt.Sprintf("status %q, want in_progress, settled or completed_by_system", d.Status))
	}
	v.add(CheckThrows, bad, fmt.Sprintf("the %d throws shown are the derived scenario's, pawn on %s", len(d.Throws), pawn))
}

// throwText writes a throw result for a failure: direction, counter,
// landing cell and what it opened.
func throwText(r domain.ThrowResult) string {
	opened := "nothing"
	if r.Chest != domain.NoChest {
		opened = fmt.Sprintf("chest %d (%s)", r.Chest, r.Symbol)
	}
	return fmt.Sprintf("%s %d to %s opening %s", r.Direction, r.Steps, r.Pawn, opened)
}

func (v *verification) tier() {
	p, d := v.proof(), v.doc
	switch {
	case p == nil:
		v.add(CheckTier, []string{"no proof to read the unit's tier from"}, "")
	case d.Status == projections.StatusInProgress && d.Tier == nil:
		v.skip(CheckTier, "the play is in progress: no tier yet")
	case d.Tier == nil:
		v.add(CheckTier, []string{fmt.Sprintf("a play %s without a tier", d.Status)}, "")
	case *d.Tier != p.Tier:
		v.add(CheckTier, []string{fmt.Sprintf("the play settled on %s, the proven tier is %s", *d.Tier, p.Tier)}, "")
	default:
		v.add(CheckTier, nil, "the play settled on the proven tier "+p.Tier.ID())
	}
}

func (v *verification) prize() {
	p, d := v.proof(), v.doc
	if p == nil {
		v.add(CheckPrize, []string{"no proof to read the unit's tier from"}, "")
		return
	}
	table, err := v.opt.Rules.Table(d.Stake)
	if err != nil {
		v.add(CheckPrize, []string{fmt.Sprintf("stake %s: %v", d.Stake, err)}, "")
		return
	}
	want := table.Prize(p.Tier)
	switch {
	case d.Status == projections.StatusInProgress && d.Prize == nil:
		v.skip(CheckPrize, fmt.Sprintf("the play is in progress: it will pay %s (%s at %s)", want, p.Tier, d.Stake))
	case d.Prize == nil:
		v.add(CheckPrize, []string{fmt.Sprintf("a play %s without a prize, want %s", d.Status, want)}, "")
	case *d.Prize != want:
		v.add(CheckPrize, []string{fmt.Sprintf("prize %s, want %s (%s at stake %s, rules %s)", *d.Prize, want, p.Tier, d.Stake, v.opt.Rules.Version)}, "")
	default:
		v.add(CheckPrize, nil, fmt.Sprintf("prize %s is the rules' prize of %s at stake %s (rules %s)", want, p.Tier, d.Stake, v.opt.Rules.Version))
	}
}

// deck rebuilds the block's deck from its seed, when one is known: the
// strongest check, since the seed fixes every unit of the block.
func (v *verification) deck() {
	seed, d := v.opt.Seed, v.doc
	v.verdict.SeedSource, v.verdict.SeedFrom = SourceIndependent, "--seed"
	if seed == nil && v.published != nil {
		seed, v.verdict.SeedFrom = v.published.Seed, v.opt.CommitmentsFrom
	}
	if seed == nil {
		seed, v.verdict.SeedSource, v.verdict.SeedFrom = d.BlockSeed, SourceDocument, ""
	}
	if seed == nil {
		v.verdict.SeedSource = SourceNone
		v.skip(CheckDeck, "the block's seed is not revealed yet (it is, in block_seed, once the block is closed; or give it with --seed)")
		return
	}
	var bad []string
	if d.BlockSeed != nil && *d.BlockSeed != *seed {
		bad = append(bad, "the document's block_seed is not the seed given")
	}
	if c := d.BlockCommitment; c != nil && seed.Hash() != c.SeedHash {
		bad = append(bad, fmt.Sprintf("the seed hashes to %x, the commitment's seed_hash is %x", seed.Hash(), c.SeedHash))
	}
	if p := v.published; p != nil && seed.Hash() != p.Commitment.SeedHash {
		bad = append(bad, fmt.Sprintf("the seed hashes to %x, the published seed_hash is %x", seed.Hash(), p.Commitment.SeedHash))
	}
	table, err := v.opt.Rules.Table(d.Stake)
	if err != nil {
		v.add(CheckDeck, append(bad, fmt.Sprintf("stake %s: %v", d.Stake, err)), "")
		return
	}
	deck := domain.BuildDeck(table.LotCounts(), *seed)
	if v.rootUsed != nil && deck.Commitment.Root != *v.rootUsed {
		bad = append(bad, fmt.Sprintf("the seed's deck has root %x, want %x", deck.Commitment.Root, *v.rootUsed))
	}
	p := v.proof()
	switch {
	case p == nil:
		bad = append(bad, "no proof to compare with the deck")
	case int64(p.Unit) >= int64(len(deck.Tiers)):
		bad = append(bad, fmt.Sprintf("unit %d is outside the deck of %d units", p.Unit, len(deck.Tiers)))
	default:
		if t := deck.Tiers[p.Unit]; t != p.Tier {
			bad = append(bad, fmt.Sprintf("the deck gives unit %d tier %s, the proof %s", p.Unit, t, p.Tier))
		}
		if salt := deck.Keys.UnitSalt(p.Unit); salt != p.Salt {
			bad = append(bad, fmt.Sprintf("the deck gives unit %d salt %x, the proof %x", p.Unit, salt, p.Salt))
		}
	}
	v.add(CheckDeck, bad, fmt.Sprintf("the seed (%s) hashes to the commitment, its deck has the root and gives the unit its tier and salt", v.verdict.SeedSource))
}
