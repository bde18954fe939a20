package audit

import (
	"fmt"
	"strconv"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
)

// state is what the auditor re-derives from the events, in stream order.
// Unlike domain.Ledger it trusts nothing: every reference is looked up and
// every index bounded, so that a hostile stream yields violations, never a
// panic, and one bad event does not hide the next.
type state struct {
	a     *Auditor
	rules *domain.RuleSet
	// partial is set when the audit starts at a seal: accounts, blocks and
	// plays that began before it are unknown, and their events skipped.
	partial bool

	lastSeq   uint64
	events    uint64
	unchecked uint64 // events skipped because they continue what began before the seal

	accounts  map[string]*account
	emissions map[string]*emission
	blocks    map[string]*block
	open      map[domain.Amount]*block // the block on sale per price
	books     *domain.Books
	throws    map[playKey]*[domain.ThrowCount]domain.ThrowResult
	prices    map[domain.Amount]*PriceTotals

	plays, settled int
	jobs           *jobBatch
	// sealedAt is, per chain, the position of its last valid seal (from a
	// seal, the starting one), and head its last position.
	sealedAt, head map[string]uint64
	// ctl re-derives the responsible-gaming controls.
	ctl *controlState
}

type account struct {
	// base is the balance before the first event seen (from a seal).
	base                                  domain.Amount
	deposits, withdrawals, stakes, prizes domain.Amount
	// adjusted is the net of the approved adjustments: credits minus
	// debits.
	adjusted domain.Amount
}

// balance is what the account holds after the events seen.
func (a *account) balance() domain.Amount {
	return a.base + a.deposits - a.withdrawals - a.stakes + a.prizes + a.adjusted
}

type emission struct {
	price          domain.Amount
	blocks, opened int
}

type blockState uint8

const (
	blockOpen blockState = iota
	blockExhausted
	blockClosed
)

type block struct {
	id         string
	price      domain.Amount
	table      *domain.PriceTable
	commitment domain.Commitment
	state      blockState
	// units holds every sold unit by index; nil once the block is closed
	// and its units handed to the reveal check.
	units  []unit
	sold   int
	tiers  [domain.TierCount]int
	prizes domain.Amount
	inPlay int
}

// Unit statuses, in the order a play goes through them.
const (
	unitMissing  uint8 = iota // a hole left by a unit sold out of order
	unitStaked                // StakePlaced seen
	unitAssigned              // UnitAssigned seen
	unitSettled               // PlaySettled seen
	unitPaid                  // PrizePaid seen
)

type unit struct {
	player    string
	stake     domain.Amount
	prize     domain.Amount
	salt      [32]byte
	assignSeq uint64
	tier      domain.Tier
	status    uint8
	throws    uint8
}

type playKey struct {
	b    *block
	unit uint32
}

func newState(a *Auditor, partial bool) *state {
	return &state{
		a: a, rules: a.cfg.Rules, partial: partial,
		accounts: map[string]*account{}, emissions: map[string]*emission{}, blocks: map[string]*block{},
		open: map[domain.Amount]*block{}, books: domain.NewBooks(),
		throws: map[playKey]*[domain.ThrowCount]domain.ThrowResult{}, prices: map[domain.Amount]*PriceTotals{},
		sealedAt: map[string]uint64{}, head: map[string]uint64{}, ctl: newControlState(partial),
	}
}

func (s *state) bad(seq uint64, code Code, subject string, expected, found any) {
	s.a.vs.add(Violation{Sequence: seq, Code: code, Subject: subject, Expected: fmt.Sprint(expected), Found: fmt.Sprint(found)})
}

func (s *state) price(p domain.Amount) *PriceTotals {
	t := s.prices[p]
	if t == nil {
		t = &PriceTotals{Price: p}
		s.prices[p] = t
	}
	return t
}

// apply checks one event in stream order.
func (s *state) apply(ev *eventstore.RecordedEvent, d *decoded) {
	if s.lastSeq != 0 && ev.Sequence != s.lastSeq+1 {
		s.bad(ev.Sequence, CodeSequenceGap, "stream", s.lastSeq+1, ev.Sequence)
	}
	s.lastSeq = ev.Sequence
	if ev.Type == "" && d.bad != nil { // a message the source could not read
		s.a.vs.add(*d.bad)
		return
	}
	s.events++
	err := s.a.verifier.CheckComputed(*ev, d.hash)
	if err != nil {
		if v, ok := fromIntegrity(err); ok {
			s.a.vs.add(v)
		} else {
			s.bad(ev.Sequence, CodeChainBroken, ev.Chain, "a verifiable event", err.Error())
		}
	}
	s.sealGap(ev, err == nil && ev.Type == eventstore.SealType)
	if d.bad != nil {
		s.a.vs.add(*d.bad)
	}
	if s.a.cfg.ReadModels != nil {
		s.a.feedReadModels(ev, d.event)
	}
	if d.event == nil {
		return
	}
	seq := ev.Sequence
	s.control(ev, d.event)
	switch e := d.event.(type) {
	case *domain.AccountOpened:
		if s.accounts[e.Player] != nil {
			s.bad(seq, CodeAccountInvalid, "player "+e.Player, "an account opened once", "opened again")
			return
		}
		s.accounts[e.Player] = &account{}
	case *domain.LimitChanged:
		s.known(seq, e.Player)
	case *domain.SelfExcluded:
		s.known(seq, e.Player)
	case *domain.SelfExcludedUntil:
		s.known(seq, e.Player)
	case *domain.PlayerBanned:
		s.known(seq, e.Player)
	case *domain.BanLifted:
		s.known(seq, e.Player)
	case *domain.AccountClosed:
		s.known(seq, e.Player)
	case *domain.AccountReopened:
		s.known(seq, e.Player)
	case *domain.FundsDeposited:
		s.money(seq, e, e.Player, e.Amount, e.Balance)
	case *domain.FundsWithdrawn:
		s.money(seq, e, e.Player, -e.Amount, e.Balance)
	case *domain.EmissionCreated:
		s.emissionCreated(seq, e)
	case *domain.BlockOpened:
		s.blockOpened(seq, e)
	case *domain.BlockExhausted:
		s.blockExhausted(seq, e)
	case *domain.BlockClosed:
		s.blockClosed(seq, e)
	case *domain.SeedsResealed:
		s.seedsResealed(seq, e)
	case *domain.StakePlaced:
		s.stakePlaced(seq, e)
	case *domain.UnitAssigned:
		s.unitAssigned(seq, e)
	case *domain.ThrowMade:
		s.throwMade(seq, e)
	case *domain.PlaySettled:
		s.playSettled(seq, e)
	case *domain.PrizePaid:
		s.prizePaid(seq, e)
	case *domain.AdjustmentApproved:
		s.money(seq, e, e.Player, e.Signed(), e.Balance)
	case *domain.AdjustmentRejected:
		s.known(seq, e.Player)
	}
}

// sealGap checks that no chain runs longer than Config.SealGapMax without
// a valid seal; sealed says the event is one.
func (s *state) sealGap(ev *eventstore.RecordedEvent, sealed bool) {
	if _, seen := s.head[ev.Chain]; !seen && s.partial {
		s.sealedAt[ev.Chain] = ev.ChainSeq // the starting seal's head
	}
	s.head[ev.Chain] = ev.ChainSeq
	if !sealed {
		return
	}
	if gap := ev.ChainSeq - min(ev.ChainSeq, s.sealedAt[ev.Chain]); gap > s.a.cfg.SealGapMax {
		s.bad(ev.Sequence, CodeSealMissing, "chain "+ev.Chain, fmt.Sprintf("a seal within %d events", s.a.cfg.SealGapMax), fmt.Sprintf("%d events since the last one", gap))
	}
	s.sealedAt[ev.Chain] = ev.ChainSeq
}

// known checks that an event which moves no money names an opened account.
func (s *state) known(seq uint64, player string) {
	if s.accounts[player] == nil && !s.partial {
		s.bad(seq, CodeAccountInvalid, "player "+player, "an account opened before", "no AccountOpened")
	}
}

// account returns a player's account. From a seal, an account first seen
// is one opened before it: its balance before this event is the balance
// the event records minus the event's own movement.
func (s *state) account(seq uint64, player string, delta, after domain.Amount) *account {
	if a := s.accounts[player]; a != nil {
		return a
	}
	a := &account{}
	if s.partial {
		a.base = after - delta
		s.books.Balances[domain.PlayerAccount(player)] = a.base
	} else {
		s.bad(seq, CodeAccountInvalid, "player "+player, "an account opened before", "no AccountOpened")
	}
	s.accounts[player] = a
	return a
}

// money posts a movement of a player's money (delta: its effect on the
// balance) and checks the balance the event records after itself.
func (s *state) money(seq uint64, e domain.Event, player string, delta, after domain.Amount) {
	a := s.account(seq, player, delta, after)
	var amount domain.Amount
	switch e := e.(type) {
	case *domain.FundsDeposited:
		amount = e.Amount
		a.deposits += e.Amount
	case *domain.FundsWithdrawn:
		amount = e.Amount
		a.withdrawals += e.Amount
	case *domain.StakePlaced:
		amount = e.Stake
		a.stakes += e.Stake
	case *domain.PrizePaid:
		amount = e.Amount
		a.prizes += e.Amount
	case *domain.AdjustmentApproved:
		amount = e.Amount
		a.adjusted += e.Signed()
	}
	if amount <= 0 {
		s.bad(seq, CodeInvalidAmount, "player "+player, "an amount above 0", amount)
	}
	if err := s.books.Apply(e); err != nil {
		got := s.books.Balances[domain.PlayerAccount(player)]
		if got < 0 {
			s.bad(seq, CodeNegativeBalance, "player "+player, "a balance of 0.00 or more", got)
		} else {
			s.bad(seq, CodeBalanceMismatch, "player "+player, got, after)
		}
	}
}

func (s *state) emissionCreated(seq uint64, e *domain.EmissionCreated) {
	subject := "emission " + e.Emission
	if s.emissions[e.Emission] != nil {
		s.bad(seq, CodeEmissionInvalid, subject, "an emission created once", "created again")
		return
	}
	if _, err := s.rules.Table(e.Price); err != nil {
		s.bad(seq, CodeEmissionInvalid, subject, "a price of Article 2", e.Price)
	}
	if e.RulesVersion != s.rules.Version {
		s.bad(seq, CodeEmissionInvalid, subject, "rules version "+s.rules.Version, e.RulesVersion)
	}
	if e.Blocks < 1 {
		s.bad(seq, CodeEmissionInvalid, subject, "at least 1 block", e.Blocks)
	}
	s.emissions[e.Emission] = &emission{price: e.Price, blocks: e.Blocks}
}

func (s *state) blockOpened(seq uint64, e *domain.BlockOpened) {
	subject := "block " + e.Block
	if s.blocks[e.Block] != nil {
		s.bad(seq, CodeBlockInvalid, subject, "a block opened once", "opened again")
		return
	}
	if em := s.emissions[e.Emission]; em != nil {
		em.opened++
		switch {
		case e.Price != em.price:
			s.bad(seq, CodeBlockInvalid, subject, "the emission's price "+em.price.String(), e.Price)
		case e.Index != em.opened || e.Index > em.blocks:
			s.bad(seq, CodeBlockInvalid, subject, fmt.Sprintf("block %d of %d", em.opened, em.blocks), e.Index)
		case e.Block != fmt.Sprintf("%s-B%03d", e.Emission, e.Index):
			s.bad(seq, CodeBlockInvalid, subject, fmt.Sprintf("id %s-B%03d", e.Emission, e.Index), e.Block)
		}
	} else if !s.partial {
		s.bad(seq, CodeBlockInvalid, subject, "an emission created before", "unknown emission "+e.Emission)
	}
	if other := s.open[e.Price]; other != nil {
		s.bad(seq, CodeBlockInvalid, subject, "no other block of "+e.Price.String()+" on sale", other.id+" on sale")
	}
	c := e.Commitment
	switch {
	case c.Units != s.rules.BlockUnits:
		s.bad(seq, CodeCommitmentMalformed, subject, fmt.Sprintf("%d units", s.rules.BlockUnits), c.Units)
	case c.SeedHash == [32]byte{} || c.Root == [32]byte{}:
		s.bad(seq, CodeCommitmentMalformed, subject, "a seed hash and a root", fmt.Sprintf("seed_hash %x root %x", c.SeedHash, c.Root))
	}
	table, err := s.rules.Table(e.Price)
	if err != nil {
		s.bad(seq, CodeBlockInvalid, subject, "a price of Article 2", e.Price)
	}
	b := &block{id: e.Block, price: e.Price, table: table, commitment: c}
	s.blocks[e.Block] = b
	s.open[e.Price] = b
	s.price(e.Price).Blocks++
}

// block returns a block the event names, or nil: unknown, or (from a seal)
// opened before it.
func (s *state) block(seq uint64, id string) *block {
	if b := s.blocks[id]; b != nil {
		return b
	}
	if s.partial {
		s.unchecked++
	} else {
		s.bad(seq, CodeBlockState, "block "+id, "a block opened before", "unknown block")
	}
	return nil
}

// seedsResealed checks that a master-key rotation reseals only seeds
// still secret: those of blocks opened and not yet closed.
func (s *state) seedsResealed(seq uint64, e *domain.SeedsResealed) {
	for _, r := range e.Seeds {
		if b := s.block(seq, r.Block); b != nil && b.state == blockClosed {
			s.bad(seq, CodeBlockState, "block "+b.id, "a block not yet closed (its seed still secret)", "closed")
		}
	}
}

func (s *state) blockExhausted(seq uint64, e *domain.BlockExhausted) {
	b := s.block(seq, e.Block)
	if b == nil {
		return
	}
	switch {
	case b.state != blockOpen:
		s.bad(seq, CodeBlockState, "block "+b.id, "an open block", "exhausted or closed")
	case b.sold != s.rules.BlockUnits:
		s.bad(seq, CodeBlockState, "block "+b.id, fmt.Sprintf("%d units sold", s.rules.BlockUnits), b.sold)
	}
	b.state = blockExhausted
	s.offSale(b)
}

func (s *state) offSale(b *block) {
	if s.open[b.price] == b {
		delete(s.open, b.price)
	}
}

func (s *state) blockClosed(seq uint64, e *domain.BlockClosed) {
	b := s.block(seq, e.Block)
	if b == nil {
		return
	}
	subject := "block " + b.id
	if b.state == blockClosed {
		s.bad(seq, CodeBlockState, subject, "a block closed once", "closed again")
		return
	}
	if b.inPlay != 0 {
		s.bad(seq, CodeBlockState, subject, "no play in progress at close", fmt.Sprintf("%d plays in progress", b.inPlay))
	}
	if e.Sold != b.sold {
		s.bad(seq, CodeBlockState, subject, fmt.Sprintf("sold %d", b.sold), e.Sold)
	}
	b.state = blockClosed
	s.offSale(b)
	s.checkUnitsDone(b)
	if b.sold == s.rules.BlockUnits && b.table != nil {
		s.checkArticle3(seq, b)
	}
	s.job(job{kind: jobReveal, seq: seq, subject: subject, reveal: &reveal{block: b.id, seed: e.Seed, commitment: b.commitment,
		lots: s.lots(b), units: b.units}})
	b.units = nil
}

// lots is the Article 3 multiset of a block's deck.
func (s *state) lots(b *block) [domain.TierCount]int {
	if b.table == nil {
		return [domain.TierCount]int{}
	}
	return b.table.LotCounts()
}

// checkArticle3 compares a sold-out block with its Article 3 table.
func (s *state) checkArticle3(seq uint64, b *block) {
	if lots := b.table.LotCounts(); b.tiers != lots {
		for t := range lots {
			if b.tiers[t] != lots[t] {
				s.bad(seq, CodeArticle3, "block "+b.id+" tier "+domain.Tier(t).ID(), lots[t], b.tiers[t])
			}
		}
	}
	if b.prizes != b.table.Total {
		s.bad(seq, CodeArticle3, "block "+b.id+" prizes", b.table.Total, b.prizes)
	}
}

// checkUnitsDone reports the plays of a block left incomplete where the
// write side commits atomically: a stake without its unit, a fourth throw
// without its settlement, a winning settlement without its payment.
func (s *state) checkUnitsDone(b *block) {
	for i := range b.units {
		u := &b.units[i]
		switch {
		case u.status == unitStaked:
			s.bad(s.lastSeq, CodePlaySequence, "play "+domain.PlayID(b.id, uint32(i)), "UnitAssigned with its StakePlaced", "none")
		case u.status == unitAssigned && u.throws >= domain.ThrowCount:
			s.bad(s.lastSeq, CodePlaySequence, "play "+domain.PlayID(b.id, uint32(i)), "PlaySettled with the fourth throw", "none")
		case u.status == unitSettled && u.prize > 0:
			s.bad(s.lastSeq, CodePrizePayment, "play "+domain.PlayID(b.id, uint32(i)), "PrizePaid "+u.prize.String(), "none")
		}
	}
}

func (s *state) stakePlaced(seq uint64, e *domain.StakePlaced) {
	s.money(seq, e, e.Player, -e.Stake, e.Balance)
	b := s.block(seq, e.Block)
	if b == nil {
		return
	}
	subject := "play " + e.Play
	if b.state != blockOpen {
		s.bad(seq, CodeBlockState, subject, "block "+b.id+" on sale", "exhausted or closed")
	}
	if e.Stake != b.price {
		s.bad(seq, CodeStakePrice, subject, b.price, e.Stake)
	}
	id, n, ok := domain.ParsePlayID(e.Play)
	switch {
	case !ok || id != b.id:
		s.bad(seq, CodeUnitOrder, subject, "a play id of block "+b.id, e.Play)
		return
	case int(n) < b.sold:
		s.bad(seq, CodeUnitReassigned, subject, fmt.Sprintf("unit %d (the next one)", b.sold), fmt.Sprintf("unit %d, sold before", n))
		return
	case int64(n) >= int64(s.rules.BlockUnits):
		s.bad(seq, CodeUnitOrder, subject, fmt.Sprintf("a unit below %d", s.rules.BlockUnits), n)
		return
	case int(n) > b.sold:
		// Leave a hole for the units skipped, so that the next units are
		// not all reported too.
		s.bad(seq, CodeUnitOrder, subject, fmt.Sprintf("unit %d (the next one)", b.sold), n)
	}
	for b.sold < int(n) {
		b.units = append(b.units, unit{})
		b.sold++
	}
	b.units = append(b.units, unit{player: e.Player, stake: e.Stake, status: unitStaked})
	b.sold++
	b.inPlay++
	s.plays++
	t := s.price(b.price)
	t.Plays++
	t.Stakes += e.Stake
}

// play returns the unit a play id names, or nil after reporting why.
func (s *state) play(seq uint64, play string) (*block, *unit) {
	id, n, ok := domain.ParsePlayID(play)
	if !ok {
		s.bad(seq, CodePlaySequence, "play "+play, "a staked play", "a malformed play id")
		return nil, nil
	}
	b := s.blocks[id]
	if b == nil && s.partial {
		s.unchecked++
		return nil, nil
	}
	if b != nil && b.state == blockClosed {
		s.bad(seq, CodeBlockState, "play "+play, "events of a play before its block closes", "block "+b.id+" closed")
		return nil, nil
	}
	if b == nil || int64(n) >= int64(len(b.units)) || b.units[n].status == unitMissing {
		s.bad(seq, CodePlaySequence, "play "+play, "a staked play", "no StakePlaced")
		return nil, nil
	}
	return b, &b.units[n]
}

func (s *state) unitAssigned(seq uint64, e *domain.UnitAssigned) {
	b, u := s.play(seq, e.Play)
	if u == nil {
		return
	}
	subject := "play " + e.Play
	if u.status != unitStaked {
		s.bad(seq, CodeUnitReassigned, subject, "one UnitAssigned per play", "another")
		return
	}
	_, n, _ := domain.ParsePlayID(e.Play)
	switch {
	case e.Player != u.player || e.Block != b.id:
		s.bad(seq, CodeUnitOrder, subject, "player "+u.player+" block "+b.id, "player "+e.Player+" block "+e.Block)
	case e.Proof.Unit != n:
		s.bad(seq, CodeUnitOrder, subject, fmt.Sprintf("unit %d", n), e.Proof.Unit)
	}
	u.status = unitAssigned
	u.assignSeq = seq
	u.salt = e.Proof.Salt
	u.tier = e.Proof.Tier
	if !e.Proof.Tier.Valid() {
		s.bad(seq, CodeProofInvalid, subject, "a tier of Article 4.5", e.Proof.Tier)
		return
	}
	b.tiers[e.Proof.Tier]++
	s.job(job{kind: jobProof, seq: seq, subject: subject, root: b.commitment.Root, size: b.commitment.Units, proof: e.Proof})
}

func (s *state) throwMade(seq uint64, e *domain.ThrowMade) {
	b, u := s.play(seq, e.Play)
	if u == nil {
		return
	}
	subject := "play " + e.Play
	if u.status != unitAssigned {
		s.bad(seq, CodePlaySequence, subject, "a throw of a play with its unit, not settled", playStatus(u.status))
		return
	}
	if e.Player != u.player {
		s.bad(seq, CodeUnitOrder, subject, "player "+u.player, e.Player)
	}
	u.throws++
	if e.Throw != int(u.throws) {
		s.bad(seq, CodePlaySequence, subject, "throw "+strconv.Itoa(int(u.throws)), e.Throw)
	}
	if e.Throw < 1 || e.Throw > domain.ThrowCount || u.throws > domain.ThrowCount {
		if u.throws > domain.ThrowCount {
			s.bad(seq, CodePlaySequence, subject, fmt.Sprintf("%d throws", domain.ThrowCount), u.throws)
		}
		return
	}
	_, n, _ := domain.ParsePlayID(e.Play)
	k := playKey{b, n}
	r := s.throws[k]
	if r == nil {
		r = new([domain.ThrowCount]domain.ThrowResult)
		s.throws[k] = r
	}
	r[e.Throw-1] = e.Result
}

func playStatus(st uint8) string {
	return [...]string{"no stake", "no UnitAssigned", "assigned", "settled", "settled and paid"}[st]
}

func (s *state) playSettled(seq uint64, e *domain.PlaySettled) {
	b, u := s.play(seq, e.Play)
	if u == nil {
		return
	}
	subject := "play " + e.Play
	if u.status != unitAssigned {
		s.bad(seq, CodePlaySequence, subject, "one settlement of a play with its unit", playStatus(u.status))
		return
	}
	_, n, _ := domain.ParsePlayID(e.Play)
	if u.throws != domain.ThrowCount {
		s.bad(seq, CodePlaySequence, subject, fmt.Sprintf("%d throws before the settlement", domain.ThrowCount), u.throws)
	}
	if e.Player != u.player || e.Block != b.id || e.Unit != n {
		s.bad(seq, CodeUnitOrder, subject, fmt.Sprintf("player %s block %s unit %d", u.player, b.id, n),
			fmt.Sprintf("player %s block %s unit %d", e.Player, e.Block, e.Unit))
	}
	if e.Tier != u.tier {
		s.bad(seq, CodeTierMismatch, subject, u.tier, e.Tier)
	}
	if b.table != nil && u.tier.Valid() {
		if want := b.table.Prize(u.tier); e.Prize != want {
			s.bad(seq, CodePrizeAmount, subject, want, e.Prize)
		}
	}
	k := playKey{b, n}
	if r := s.throws[k]; r != nil {
		if u.throws == domain.ThrowCount && u.tier.Valid() {
			s.job(job{kind: jobScenario, seq: seq, subject: subject, salt: u.salt, tier: u.tier, shown: *r})
		}
		delete(s.throws, k)
	}
	u.status = unitSettled
	u.prize = e.Prize
	b.prizes += e.Prize
	b.inPlay--
	s.settled++
}

func (s *state) prizePaid(seq uint64, e *domain.PrizePaid) {
	s.money(seq, e, e.Player, e.Amount, e.Balance)
	b, u := s.play(seq, e.Play)
	if u == nil {
		return
	}
	subject := "play " + e.Play
	switch {
	case u.status != unitSettled:
		s.bad(seq, CodePrizePayment, subject, "one payment of a settled play", playStatus(u.status))
		return
	case e.Amount != u.prize:
		s.bad(seq, CodePrizePayment, subject, "the settled prize "+u.prize.String(), e.Amount)
	case e.Player != u.player || e.Block != b.id:
		s.bad(seq, CodeUnitOrder, subject, "player "+u.player+" block "+b.id, "player "+e.Player+" block "+e.Block)
	}
	u.status = unitPaid
	s.price(b.price).Prizes += e.Amount
}

// finish runs the checks of the stream as a whole, once every event is in.
func (s *state) finish() {
	for _, b := range s.blocks {
		s.checkUnitsDone(b)
		if b.state != blockClosed && b.sold == s.rules.BlockUnits && b.inPlay == 0 && b.table != nil {
			s.checkArticle3(s.lastSeq, b)
		}
	}
	for chain, head := range s.head {
		if gap := head - min(head, s.sealedAt[chain]); gap > s.a.cfg.SealGapMax {
			s.bad(0, CodeSealMissing, "chain "+chain, fmt.Sprintf("a seal within %d events of the end", s.a.cfg.SealGapMax), fmt.Sprintf("%d events since the last one", gap))
		}
	}
	var players domain.Amount
	for id, a := range s.accounts {
		bal := s.books.Balances[domain.PlayerAccount(id)]
		players += bal
		if want := a.balance(); bal != want {
			s.bad(0, CodeBooksUnbalanced, "player "+id, "deposits − withdrawals − stakes + prizes + adjustments = "+want.String(), bal)
		}
	}
	if s.books.Debits != s.books.Credits {
		s.bad(0, CodeBooksUnbalanced, "books", "debits = credits = "+s.books.Debits.String(), "credits "+s.books.Credits.String())
	}
	if !s.partial {
		if _, err := s.books.Check(); err != nil {
			s.bad(0, CodeBooksUnbalanced, "books", "balanced books", err.Error())
		}
	}
}
