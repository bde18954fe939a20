package audit

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
)

// State is an auditor's own state at the end of an audit: what it re-derived
// from the events (balances, blocks with their sold units, plays in
// progress, controls), the chains' heads and last verified seals, its
// position in the stream and the violations found so far. An incremental
// audit saves it (WriteStateFile) and the next one resumes from it
// (Resume). Its JSON keys are the format of docs/audit.md, "The state
// file": never rename one; a change of meaning is a new StateVersion.
type State struct {
	// RulesVersion, BlockUnits, KeyID and SealGapMax are the audit's
	// configuration: a state resumes only under the same one.
	RulesVersion string `json:"rules_version"`
	BlockUnits   int    `json:"block_units"`
	KeyID        string `json:"key_id"`
	SealGapMax   uint64 `json:"seal_gap_max"`
	// LastSequence is the stream sequence of the last event checked: the
	// next audit reads from the one after.
	LastSequence uint64 `json:"last_sequence"`
	// FromSeal is the seal the first audit of the series started at (0:
	// the first event); Partial is true then.
	FromSeal uint64 `json:"from_seal"`
	Partial  bool   `json:"partial"`

	Events       uint64 `json:"events"`
	Unanchored   uint64 `json:"unanchored_events"`
	Plays        int    `json:"plays"`
	PlaysSettled int    `json:"plays_settled"`

	Verifier eventstore.VerifierState `json:"verifier"`
	// SealedAt and ChainPositions are, per chain, the position of its last
	// valid seal and its last position: the seal-gap check's state.
	SealedAt       map[string]uint64 `json:"sealed_at"`
	ChainPositions map[string]uint64 `json:"chain_positions"`

	Accounts  map[string]savedAccount  `json:"accounts"`
	Emissions map[string]savedEmission `json:"emissions"`
	Blocks    []savedBlock             `json:"blocks"`
	// OnSale lists the block on sale of each price.
	OnSale     []string        `json:"on_sale"`
	Books      savedBooks      `json:"books"`
	Throws     []savedThrows   `json:"throws"`
	Prices     []PriceTotals   `json:"prices"`
	Controls   savedControls   `json:"controls"`
	Violations savedViolations `json:"violations"`
}

type savedAccount struct {
	Base        domain.Amount `json:"base"`
	Deposits    domain.Amount `json:"deposits"`
	Withdrawals domain.Amount `json:"withdrawals"`
	Stakes      domain.Amount `json:"stakes"`
	Prizes      domain.Amount `json:"prizes"`
	Adjusted    domain.Amount `json:"adjusted,omitempty"`
}

type savedEmission struct {
	Price  domain.Amount `json:"price"`
	Blocks int           `json:"blocks"`
	Opened int           `json:"opened"`
}

// blockStates name the block states in a state file.
var blockStates = [...]string{blockOpen: "open", blockExhausted: "exhausted", blockClosed: "closed"}

type savedBlock struct {
	ID         string                `json:"id"`
	Price      domain.Amount         `json:"price"`
	Commitment domain.Commitment     `json:"commitment"`
	State      string                `json:"state"`
	Sold       int                   `json:"sold"`
	Tiers      [domain.TierCount]int `json:"tiers"`
	Prizes     domain.Amount         `json:"prizes"`
	InPlay     int                   `json:"in_play"`
	// Units are the sold units by index, until the block closes and its
	// reveal is checked.
	Units []savedUnit `json:"units,omitempty"`
}

type savedUnit struct {
	Player    string         `json:"player,omitempty"`
	Stake     domain.Amount  `json:"stake"`
	Prize     domain.Amount  `json:"prize"`
	Salt      domain.HexHash `json:"salt"`
	AssignSeq uint64         `json:"assign_seq,omitempty"`
	Tier      domain.Tier    `json:"tier"`
	Status    uint8          `json:"status"`
	Throws    uint8          `json:"throws,omitempty"`
}

type savedBooks struct {
	Balances    map[string]domain.Amount `json:"balances"`
	Debits      domain.Amount            `json:"debits"`
	Credits     domain.Amount            `json:"credits"`
	Deposits    domain.Amount            `json:"deposits"`
	Withdrawals domain.Amount            `json:"withdrawals"`
	Stakes      domain.Amount            `json:"stakes"`
	Prizes      domain.Amount            `json:"prizes"`
	Adjustments domain.Amount            `json:"adjustments,omitempty"`
	Events      int                      `json:"events"`
}

// savedThrows are the throws of a play in progress.
type savedThrows struct {
	Block   string                                `json:"block"`
	Unit    uint32                                `json:"unit"`
	Results [domain.ThrowCount]domain.ThrowResult `json:"results"`
}

type savedControls struct {
	Settings domain.Settings        `json:"settings"`
	Known    bool                   `json:"settings_known"`
	Counts   ControlCounts          `json:"counts"`
	Players  map[string]savedPlayer `json:"players"`
	// Suspensions are the suspensions of sales recorded, by id, and
	// SalesPartial whether the audit started from a seal, not knowing
	// those recorded before it. A state written before them has neither:
	// it predates the events, and so missed none.
	Suspensions  map[string]savedSuspension `json:"sales_suspensions,omitempty"`
	SalesPartial bool                       `json:"sales_partial,omitempty"`
	// Adjustments are the adjustments proposed, by id, and
	// AdjustmentsPartial whether the audit started from a seal; a state
	// written before them has neither, as for the suspensions.
	Adjustments        map[string]*auditAdjustment `json:"adjustments,omitempty"`
	AdjustmentsPartial bool                        `json:"adjustments_partial,omitempty"`
	// Erasures are the erasures proposed, by id, and ErasuresPartial
	// whether the audit started from a seal; a state written before them
	// has neither, as for the suspensions.
	Erasures        map[string]*auditErasure `json:"erasures,omitempty"`
	ErasuresPartial bool                     `json:"erasures_partial,omitempty"`
}

type savedPlayer struct {
	Anchored  bool                                 `json:"anchored"`
	Closed    bool                                 `json:"closed,omitempty"`
	ForGood   bool                                 `json:"for_good"`
	Until     time.Time                            `json:"until"`
	Bans      map[string]bool                      `json:"bans,omitempty"`
	Limits    []savedLimit                         `json:"limits,omitempty"`
	Movements map[domain.LimitKind]savedRunningSum `json:"movements,omitempty"`
}

type savedLimit struct {
	Kind       domain.LimitKind `json:"kind"`
	Days       int              `json:"days"`
	Amount     domain.Amount    `json:"amount"`
	Pending    domain.Amount    `json:"pending"`
	From       time.Time        `json:"from"`
	HasPending bool             `json:"has_pending"`
}

// savedRunningSum is a runningSum: movement times in Unix nanoseconds and
// their running totals.
type savedRunningSum struct {
	At   []int64         `json:"at"`
	Cum  []domain.Amount `json:"cum"`
	Base domain.Amount   `json:"base"`
}

// savedViolations are the violations found by the events so far: the
// checks of the stream as a whole (run by Finish) are not in them, since
// the next audit runs them again at its end.
type savedViolations struct {
	Total  int          `json:"total"`
	Counts map[Code]int `json:"counts"`
	Kept   []Violation  `json:"kept"`
}

// State returns the auditor's state after Finish, or after Round and
// before more events are fed, to save for the next incremental audit. Some
// of it shares memory with the auditor's: encode it before feeding more.
func (a *Auditor) State() (*State, error) {
	if !a.done && a.rounded == nil {
		return nil, errors.New("audit: the state is taken after Finish or Round")
	}
	s := a.st
	keyID := ""
	if a.cfg.PublicKey != nil {
		keyID = eventstore.KeyID(a.cfg.PublicKey)
	}
	out := &State{
		RulesVersion: s.rules.Version, BlockUnits: s.rules.BlockUnits, KeyID: keyID, SealGapMax: a.cfg.SealGapMax,
		LastSequence: s.lastSeq, FromSeal: a.fromSeal, Partial: s.partial,
		Events: s.events, Unanchored: s.unchecked, Plays: s.plays, PlaysSettled: s.settled,
		Verifier: a.verifier.State(), SealedAt: maps.Clone(s.sealedAt), ChainPositions: maps.Clone(s.head),
		Accounts: map[string]savedAccount{}, Emissions: map[string]savedEmission{},
		Books: savedBooks{Balances: maps.Clone(s.books.Balances), Debits: s.books.Debits, Credits: s.books.Credits,
			Deposits: s.books.Deposits, Withdrawals: s.books.Withdrawals, Stakes: s.books.Stakes, Prizes: s.books.Prizes,
			Adjustments: s.books.Adjustments, Events: s.books.Events},
		Controls:   s.ctl.save(),
		Violations: a.eventViolations,
	}
	for id, ac := range s.accounts {
		out.Accounts[id] = savedAccount{Base: ac.base, Deposits: ac.deposits, Withdrawals: ac.withdrawals, Stakes: ac.stakes, Prizes: ac.prizes,
			Adjusted: ac.adjusted}
	}
	for id, e := range s.emissions {
		out.Emissions[id] = savedEmission{Price: e.price, Blocks: e.blocks, Opened: e.opened}
	}
	for _, b := range s.blocks {
		out.Blocks = append(out.Blocks, b.save())
	}
	slices.SortFunc(out.Blocks, func(x, y savedBlock) int { return cmp.Compare(x.ID, y.ID) })
	for _, b := range s.open {
		out.OnSale = append(out.OnSale, b.id)
	}
	slices.Sort(out.OnSale)
	for k, r := range s.throws {
		out.Throws = append(out.Throws, savedThrows{Block: k.b.id, Unit: k.unit, Results: *r})
	}
	slices.SortFunc(out.Throws, func(x, y savedThrows) int {
		return cmp.Or(cmp.Compare(x.Block, y.Block), cmp.Compare(x.Unit, y.Unit))
	})
	for _, t := range s.prices {
		out.Prices = append(out.Prices, *t)
	}
	slices.SortFunc(out.Prices, func(x, y PriceTotals) int { return cmp.Compare(x.Price, y.Price) })
	return out, nil
}

func (b *block) save() savedBlock {
	out := savedBlock{ID: b.id, Price: b.price, Commitment: b.commitment, State: blockStates[b.state], Sold: b.sold,
		Tiers: b.tiers, Prizes: b.prizes, InPlay: b.inPlay}
	for _, u := range b.units {
		out.Units = append(out.Units, savedUnit{Player: u.player, Stake: u.stake, Prize: u.prize, Salt: u.salt,
			AssignSeq: u.assignSeq, Tier: u.tier, Status: u.status, Throws: u.throws})
	}
	return out
}

func (c *controlState) save() savedControls {
	out := savedControls{Settings: c.settings, Known: c.known, Counts: c.counts, Players: map[string]savedPlayer{}, SalesPartial: !c.salesAnchored,
		AdjustmentsPartial: !c.adjustAnchored, ErasuresPartial: !c.eraseAnchored}
	out.Adjustments = copied(c.adjustments)
	out.Erasures = copied(c.erasures)
	for id, x := range c.suspensions {
		if out.Suspensions == nil {
			out.Suspensions = map[string]savedSuspension{}
		}
		out.Suspensions[id] = savedSuspension{Scope: x.scope, InForce: x.inForce}
	}
	for id, p := range c.players {
		sp := savedPlayer{Anchored: p.anchored, Closed: p.closed, ForGood: p.forGood, Until: p.until, Bans: maps.Clone(p.bans)}
		for key, l := range p.limits {
			sp.Limits = append(sp.Limits, savedLimit{Kind: key.Kind, Days: key.Days, Amount: l.amount, Pending: l.pending, From: l.from, HasPending: l.hasPending})
		}
		slices.SortFunc(sp.Limits, func(x, y savedLimit) int { return cmp.Or(cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Days, y.Days)) })
		for kind, r := range p.movements {
			if sp.Movements == nil {
				sp.Movements = map[domain.LimitKind]savedRunningSum{}
			}
			sp.Movements[kind] = savedRunningSum{At: r.at, Cum: r.cum, Base: r.base}
		}
		out.Players[id] = sp
	}
	return out
}

// Resume returns an auditor that goes on from a saved state: feed it the
// events after st.LastSequence, once CheckContinuity has confirmed that
// the stream still holds what the state verified. A state written under
// another configuration (rules, seal key, seal gap) or that contradicts
// itself is an error wrapping ErrStateUnusable.
func Resume(cfg Config, st *State) (*Auditor, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.ReadModels != nil {
		return nil, errors.New("audit: read models are rebuilt from the first event, not from a saved state")
	}
	keyID := ""
	if cfg.PublicKey != nil {
		keyID = eventstore.KeyID(cfg.PublicKey)
	}
	if st.RulesVersion != cfg.Rules.Version || st.BlockUnits != cfg.Rules.BlockUnits || st.KeyID != keyID || st.SealGapMax != cfg.SealGapMax {
		return nil, fmt.Errorf("%w: written under rules %s (%d-unit blocks), key %q, seal gap %d; this audit runs under rules %s (%d-unit blocks), key %q, seal gap %d",
			ErrStateUnusable, st.RulesVersion, st.BlockUnits, st.KeyID, st.SealGapMax, cfg.Rules.Version, cfg.Rules.BlockUnits, keyID, cfg.SealGapMax)
	}
	v, err := eventstore.ResumeVerifier(st.Verifier, cfg.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStateUnusable, err)
	}
	a := allocAuditor(cfg, v, st.Partial)
	if err := a.st.load(st); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStateUnusable, err)
	}
	a.fromSeal, a.resumed = st.FromSeal, st
	a.startEvents = st.Events
	a.vs.total, a.vs.byCode, a.vs.kept = st.Violations.Total, maps.Clone(st.Violations.Counts), slices.Clone(st.Violations.Kept)
	if a.vs.byCode == nil {
		a.vs.byCode = map[Code]int{}
	}
	a.start()
	return a, nil
}

// load sets the state from a saved one.
func (s *state) load(st *State) error {
	s.lastSeq, s.events, s.unchecked, s.plays, s.settled = st.LastSequence, st.Events, st.Unanchored, st.Plays, st.PlaysSettled
	s.sealedAt, s.head = orEmpty(maps.Clone(st.SealedAt)), orEmpty(maps.Clone(st.ChainPositions))
	for id, ac := range st.Accounts {
		s.accounts[id] = &account{base: ac.Base, deposits: ac.Deposits, withdrawals: ac.Withdrawals, stakes: ac.Stakes, prizes: ac.Prizes,
			adjusted: ac.Adjusted}
	}
	for id, e := range st.Emissions {
		s.emissions[id] = &emission{price: e.Price, blocks: e.Blocks, opened: e.Opened}
	}
	for _, sb := range st.Blocks {
		b, err := s.loadBlock(sb)
		if err != nil {
			return err
		}
		if s.blocks[b.id] != nil {
			return fmt.Errorf("block %s twice", b.id)
		}
		s.blocks[b.id] = b
	}
	for _, id := range st.OnSale {
		b := s.blocks[id]
		if b == nil || s.open[b.price] != nil {
			return fmt.Errorf("block on sale %s unknown, or a second one of its price", id)
		}
		s.open[b.price] = b
	}
	s.books.Balances = orEmpty(maps.Clone(st.Books.Balances))
	s.books.Debits, s.books.Credits, s.books.Events = st.Books.Debits, st.Books.Credits, st.Books.Events
	s.books.Deposits, s.books.Withdrawals, s.books.Stakes, s.books.Prizes = st.Books.Deposits, st.Books.Withdrawals, st.Books.Stakes, st.Books.Prizes
	s.books.Adjustments = st.Books.Adjustments
	for _, t := range st.Throws {
		b := s.blocks[t.Block]
		if b == nil {
			return fmt.Errorf("throws of unknown block %s", t.Block)
		}
		r := t.Results
		s.throws[playKey{b, t.Unit}] = &r
	}
	for _, t := range st.Prices {
		p := t
		s.prices[t.Price] = &p
	}
	return s.ctl.load(st.Controls)
}

func (s *state) loadBlock(sb savedBlock) (*block, error) {
	st := slices.Index(blockStates[:], sb.State)
	if st < 0 || sb.Sold != len(sb.Units) && sb.State != blockStates[blockClosed] {
		return nil, fmt.Errorf("block %s: state %q with %d units sold and %d saved", sb.ID, sb.State, sb.Sold, len(sb.Units))
	}
	// A price outside the rules was reported when the block opened; it
	// has no table, as then.
	table, _ := s.rules.Table(sb.Price)
	b := &block{id: sb.ID, price: sb.Price, table: table, commitment: sb.Commitment, state: blockState(st), sold: sb.Sold,
		tiers: sb.Tiers, prizes: sb.Prizes, inPlay: sb.InPlay}
	if len(sb.Units) > 0 {
		b.units = make([]unit, len(sb.Units))
	}
	for i, u := range sb.Units {
		if u.Status > unitPaid || u.Throws > domain.ThrowCount+1 {
			return nil, fmt.Errorf("block %s unit %d: status %d, %d throws", sb.ID, i, u.Status, u.Throws)
		}
		b.units[i] = unit{player: u.Player, stake: u.Stake, prize: u.Prize, salt: u.Salt, assignSeq: u.AssignSeq,
			tier: u.Tier, status: u.Status, throws: u.Throws}
	}
	return b, nil
}

func (c *controlState) load(sc savedControls) error {
	c.settings, c.known, c.counts, c.salesAnchored = sc.Settings, sc.Known, sc.Counts, !sc.SalesPartial
	c.adjustAnchored, c.eraseAnchored = !sc.AdjustmentsPartial, !sc.ErasuresPartial
	for id, x := range sc.Adjustments {
		if x == nil || x.Direction == "" || x.Kind == "" {
			return fmt.Errorf("adjustment %s without its terms", id)
		}
	}
	for id, x := range sc.Erasures {
		if x == nil || (x.Player == "" && x.KeyID == "") {
			return fmt.Errorf("erasure %s of nobody", id)
		}
	}
	c.adjustments, c.erasures = copied(sc.Adjustments), copied(sc.Erasures)
	for id, x := range sc.Suspensions {
		if x.Scope.Kind == "" {
			return fmt.Errorf("suspension %s without its scope", id)
		}
		c.suspensions[id] = &auditSuspension{scope: x.Scope, inForce: x.InForce}
		if x.InForce {
			c.salesInForce++
		}
	}
	for id, sp := range sc.Players {
		p := c.player(id)
		p.anchored, p.closed, p.forGood, p.until, p.bans = sp.Anchored, sp.Closed, sp.ForGood, sp.Until, sp.Bans
		for _, l := range sp.Limits {
			p.limits[domain.LimitKey{Kind: l.Kind, Days: l.Days}] = &auditLimit{amount: l.Amount, pending: l.Pending, from: l.From, hasPending: l.HasPending}
		}
		for kind, r := range sp.Movements {
			if len(r.At) != len(r.Cum) {
				return fmt.Errorf("player %s: %d movement times and %d running totals", id, len(r.At), len(r.Cum))
			}
			p.movements[kind] = &runningSum{at: r.At, cum: r.Cum, base: r.Base}
		}
	}
	return nil
}

func orEmpty[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return map[K]V{}
	}
	return m
}

// CheckContinuity checks, before a resumed audit reads anything, that the
// stream still holds what the saved state verified: at each chain's saved
// head, an event of that chain and position whose stated hash, and the
// hash of its bytes, are the saved one. at returns the event at a stream
// sequence (StoreEvent, ExportEvent). When the
// stream differs (rewritten before the saved position, truncated, or not
// the stream the state was written from), the auditor records a
// CodeContinuityBroken violation and CheckContinuity returns false: feed it
// nothing more, Finish it for the report and keep the old state file. An
// error is a read error.
func (a *Auditor) CheckContinuity(at EventAt) (bool, error) {
	if a.resumed == nil {
		return false, errors.New("audit: continuity is checked by an audit resumed from a state")
	}
	for _, c := range a.resumed.Verifier.Chains {
		want, err := c.Head.Head()
		if err != nil || want.Sequence == 0 {
			continue // a chain anchored at a seal not reached yet: nothing verified
		}
		ev, found, err := at(want.Sequence)
		if err != nil {
			return false, fmt.Errorf("audit: read the saved head of chain %s at %d: %w", c.Chain, want.Sequence, err)
		}
		got := "no event"
		if !found {
			a.vs.add(Violation{Sequence: want.Sequence, Code: CodeStreamTruncated, Subject: "stream",
				Expected: fmt.Sprintf("the events up to sequence %d, as the saved state verified", want.Sequence),
				Found:    "no event: the stream ends before it"})
		}
		if found {
			computed := eventstore.ComputeHash(&ev)
			if ev.Chain == c.Chain && ev.ChainSeq == want.ChainSeq && ev.Hash == want.Hash && computed == want.Hash {
				continue
			}
			got = fmt.Sprintf("chain %s chain_seq %d hash %s (its bytes hash to %s)", ev.Chain, ev.ChainSeq, ev.Hash, computed)
		}
		a.vs.add(Violation{Sequence: want.Sequence, Code: CodeContinuityBroken, Subject: "chain " + c.Chain + " at the saved position",
			Expected: fmt.Sprintf("chain %s chain_seq %d hash %s, as the saved state verified", c.Chain, want.ChainSeq, want.Hash), Found: got})
		return false, nil
	}
	return true, nil
}

// copied copies the values of a map of proposals: a saved state and the
// auditor's never share one.
func copied[T any](m map[string]*T) map[string]*T {
	out := make(map[string]*T, len(m))
	for id, x := range m {
		y := *x
		out[id] = &y
	}
	return out
}
