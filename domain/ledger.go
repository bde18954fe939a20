package domain

import (
	"fmt"
	"sort"
	"time"
)

// IdempotencyWindowDefault is how long a client key is remembered: a retry
// within it returns the first result. JetStream's own duplicate window (2
// minutes) is far too short to be the system's idempotency.
const IdempotencyWindowDefault = 48 * time.Hour

// limitRetention is how far back the rolling sums of deposits and stakes
// remember movements: the longest limit period any settings may offer,
// whatever the settings in force, so that a settings change adding a longer
// period sums exactly what a replay will.
const limitRetention = LimitPeriodMaxDays * 24 * time.Hour

// BansActiveMax bounds the bans in force on one player.
const BansActiveMax = 64

// Ledger is the write side's state: accounts, emissions, blocks, plays in
// progress and remembered idempotency keys. Evolve is the only thing that
// changes it, so a replay of the stream and a live write take one path.
// Decks are the exception: they are not in the stream (their seed is
// sealed), so the writer attaches them with AttachDeck.
type Ledger struct {
	Rules *RuleSet
	// Settings are the jurisdiction's settings in force: BaselineSettings
	// until a SettingsAdopted replaces them.
	Settings Settings
	// IdempotencyWindow is how long client keys are remembered (at least
	// 24 hours; IdempotencyWindowDefault when zero).
	IdempotencyWindow time.Duration

	Accounts  map[string]*Account
	Emissions map[string]*Emission
	Blocks    map[string]*Block
	// Plays holds the plays in progress; a settled play leaves it.
	Plays map[string]*Play
	// Suspensions holds the suspensions of sales in force, by id; a
	// resumed one leaves it. suspensionsIssued counts those ever recorded,
	// to number the next.
	Suspensions       map[string]*Suspension
	suspensionsIssued int
	// Adjustments holds the adjustments pending, and those decided or
	// expired within the idempotency window, by id; adjustmentsIssued
	// counts those ever proposed, to number the next.
	Adjustments       map[string]*Adjustment
	adjustmentsIssued int
	// Erasures holds the erasures of personal data pending, and those
	// decided or expired within the idempotency window, by id;
	// erasuresIssued counts those ever proposed, to number the next.
	Erasures       map[string]*Erasure
	erasuresIssued int
	// emissionOrder lists emissions in creation order, so that the next
	// block of a price comes from the oldest emission with blocks left.
	emissionOrder []string
	// openBlock is the block on sale for each price.
	openBlock map[Amount]string
	// packed are the keys of the snapshot the ledger started from, keys
	// those recorded since, and keyQueue those in the order they were
	// recorded, to expire them (keys.go).
	packed   packedKeys
	keys     map[idemKey]*KeyRecord
	keyQueue []idemKey
	decks    map[[32]byte]*Deck
	prepared map[string]*PreparedBlock // emission → its next block, ready to open
	// players interns player ids so that each block can remember the owner
	// of every sold unit in 4 bytes (1.8 MB for a block of 450 000 units).
	players   []string
	playerIdx map[string]uint32
	// Now is the time of the last event applied.
	Now time.Time
}

// Account is a player's account as the write side knows it.
type Account struct {
	Player  string
	Balance Amount
	Limits  map[LimitKey]*Limit
	// SelfExcluded is the permanent self-exclusion; ExcludedUntil the end
	// of the latest self-exclusion term (zero: none ever).
	SelfExcluded  bool
	ExcludedUntil time.Time
	// Bans holds the bans in force by id (nil before the first).
	Bans map[string]*Ban
	// bansIssued counts the bans ever recorded, to number the next.
	bansIssued int
	// closedAt is when the account was closed, zero while it is open.
	closedAt time.Time
	// erasedAt is when the player's personal data was erased, zero
	// before.
	erasedAt time.Time
	deposits rolling
	stakes   rolling
}

// LimitKey names one limit of an account: its kind and its period.
type LimitKey struct {
	Kind LimitKind
	Days int
}

// Ban is a ban in force on a player.
type Ban struct {
	ID, Reference, Reason string
	At                    time.Time
	By                    *Actor
}

// SelfExcludedAt reports whether the player is self-excluded at now: for
// good, or within a term (which ends exactly at its instant).
func (a *Account) SelfExcludedAt(now time.Time) bool {
	return a.SelfExcluded || now.Before(a.ExcludedUntil)
}

// Limit is one weekly limit: the amount in force and a pending raise.
type Limit struct {
	Amount         Amount
	Pending        Amount
	PendingFrom    time.Time
	pendingPresent bool
}

// At returns the limit in force at t: the pending raise once its time has
// come, the current amount before.
func (l *Limit) At(t time.Time) Amount {
	if l.pendingPresent && !t.Before(l.PendingFrom) {
		return l.Pending
	}
	return l.Amount
}

// rolling remembers the movements of one kind (deposits or stakes) of the
// last limitRetention, with their running total, so that the sum over any
// period up to it is two binary searches away.
type rolling struct {
	// at holds the movements' times (Unix nanoseconds, non-decreasing) and
	// cum the running total up to and including each.
	at  []int64
	cum []Amount
	// base is the running total before the first movement kept.
	base Amount
}

// last returns the running total of every movement.
func (w *rolling) last() Amount {
	if n := len(w.cum); n > 0 {
		return w.cum[n-1]
	}
	return w.base
}

// before returns the running total of the movements at or before cut.
func (w *rolling) before(cut int64) Amount {
	i := sort.Search(len(w.at), func(i int) bool { return w.at[i] > cut })
	if i == 0 {
		return w.base
	}
	return w.cum[i-1]
}

// add records an amount at t and forgets what is older than the retention.
func (w *rolling) add(t time.Time, a Amount) {
	cut := t.Add(-limitRetention).UnixNano()
	if i := sort.Search(len(w.at), func(i int) bool { return w.at[i] > cut }); i > 0 {
		w.base = w.cum[i-1]
		w.at, w.cum = w.at[i:], w.cum[i:]
	}
	total := w.last() + a
	w.at, w.cum = append(w.at, t.UnixNano()), append(w.cum, total)
}

// total returns the sum of the movements in the period ending at t:
// recorded after t − period.
func (w *rolling) total(t time.Time, period time.Duration) Amount {
	return w.last() - w.before(t.Add(-period).UnixNano())
}

// Emission is a run of blocks of one price.
type Emission struct {
	ID     string
	Price  Amount
	Blocks int
	Opened int
}

// BlockState is where a block is in its life.
type BlockState string

// Block states: open (on sale), exhausted (sold out, plays may still be in
// progress), closed (seed revealed).
const (
	BlockStateOpen      BlockState = "open"
	BlockStateExhausted BlockState = "exhausted"
	BlockStateClosed    BlockState = "closed"
)

// Block is a block of 450 000 units as the write side knows it.
type Block struct {
	ID         string
	Emission   string
	Index      int
	Price      Amount
	Commitment Commitment
	SealedSeed []byte
	State      BlockState
	Sold       int
	// InPlay counts its plays not yet settled: a block closes only when
	// none is left, so the seed is never revealed under a live play.
	InPlay int
	// owners holds, per sold unit, the interned index of its player, until
	// the block closes.
	owners []uint32
	// TierSold counts the sold units of each tier.
	TierSold [TierCount]int
	Prizes   Amount
}

// Play is a play in progress.
type Play struct {
	ID, Player, Block string
	Stake             Amount
	// Unit is the game unit the play received, nil until its UnitAssigned
	// is applied. A stake and its unit are appended together, but a disk
	// can keep the one and lose the other: a play without its unit then
	// has no tier at all, rather than the tier whose code is zero (the
	// best prize), and nothing throws, completes or settles it.
	Unit         *AssignedUnit
	Throws       int
	LastActivity time.Time
	scenario     *Scenario
	results      *[ThrowCount]ThrowResult
}

// AssignedUnit is what a play holds of its unit: its index in the block,
// its predetermined tier and its salt, from which its scenario derives.
type AssignedUnit struct {
	Index uint32
	Tier  Tier
	Salt  [32]byte
}

// unitMissing is the refusal of a decision on a play that has no unit:
// the stream holds its stake but not its UnitAssigned. It is an internal
// error, for an operator to mend: no answer treats such a play as whole.
func unitMissing(p *Play) error {
	return refuse(CodeInternal, "play %s has no unit assigned: its stake is recorded but not its UnitAssigned", p.ID)
}

// Scenario returns the screen of the play's unit, derived from its salt
// and tier on first use and kept: replaying the stream at start derives
// none, since most plays there are already settled. It is nil for a play
// without its unit.
func (p *Play) Scenario() *Scenario {
	if p.scenario == nil && p.Unit != nil {
		s := GenerateScenario(p.Unit.Salt, p.Unit.Tier)
		p.scenario = &s
	}
	return p.scenario
}

// throwResults returns the four throws of the scenario of a play that
// holds its unit.
func (p *Play) throwResults() (*[ThrowCount]ThrowResult, error) {
	if p.results == nil {
		r, err := p.Scenario().Play()
		if err != nil {
			return nil, err
		}
		p.results = &r
	}
	return p.results, nil
}

// KeyRecord is what the ledger remembers of a command that carried a client
// idempotency key: the request it answered and the play, balance or
// emission it produced, so that a retry returns the first result. A retried
// throw is answered with a KeyRecord too, naming its play and throw.
type KeyRecord struct {
	Request string
	At      time.Time
	Play    string
	Balance Amount
	// Emission is the emission a key created and OpenedBlock the block
	// that opened with it ("" when it queued behind another emission).
	Emission    string
	OpenedBlock string
	// Throw is the throw a retried throw request names (1 to ThrowCount).
	Throw int
	// Ban is the ban a retried ban or lift names.
	Ban string
	// Suspension is the suspension of sales a retried suspension names.
	Suspension string
	// Adjustment is the adjustment a repeated approval or rejection names.
	Adjustment string
	// Erasure is the erasure a repeated proposal, approval or rejection
	// names.
	Erasure string
}

// KeyKind is the kind of command a client key belongs to: a key is scoped
// to its player and its kind, so that an operator's deposit key and a
// player's stake key never collide.
type KeyKind string

// The kinds of command that carry a client key.
const (
	KeyDeposit    KeyKind = "deposit"
	KeyWithdrawal KeyKind = "withdrawal"
	KeyStake      KeyKind = "stake"
	KeyEmission   KeyKind = "emission"
	KeyRevocation KeyKind = "revocation"
)

// idemKey scopes a client key to its player ("" for an operator's
// emission) and its kind.
type idemKey struct {
	player string
	kind   KeyKind
	key    string
}

// PreparedBlock is a block ready to open: a fresh seed, its sealed form and
// its deck. The writer prepares one per emission ahead of time so that the
// next block opens in the same batch as the sale that exhausts the previous
// one, without a gap in sales.
type PreparedBlock struct {
	Seed       Seed
	SealedSeed []byte
	Deck       *Deck
}

// NewLedger returns an empty ledger under the given rules.
func NewLedger(rules *RuleSet) *Ledger {
	return &Ledger{
		Rules:       rules,
		Settings:    BaselineSettings(),
		Accounts:    map[string]*Account{},
		Emissions:   map[string]*Emission{},
		Blocks:      map[string]*Block{},
		Plays:       map[string]*Play{},
		Suspensions: map[string]*Suspension{},
		Adjustments: map[string]*Adjustment{},
		Erasures:    map[string]*Erasure{},
		openBlock:   map[Amount]string{},
		keys:        map[idemKey]*KeyRecord{},
		decks:       map[[32]byte]*Deck{},
		prepared:    map[string]*PreparedBlock{},
		playerIdx:   map[string]uint32{},
	}
}

// AttachDeck gives the ledger the deck of a block whose seed the writer has
// unsealed (or of a block it is about to open): without it, units of that
// block cannot be assigned.
func (l *Ledger) AttachDeck(d *Deck) { l.decks[d.Commitment.SeedHash] = d }

// DeckOf returns the deck attached for a block, or nil.
func (l *Ledger) DeckOf(b *Block) *Deck { return l.decks[b.Commitment.SeedHash] }

// Prepare sets the next block of an emission, ready to open.
func (l *Ledger) Prepare(emission string, p *PreparedBlock) {
	l.prepared[emission] = p
	l.AttachDeck(p.Deck)
}

// NextToPrepare returns the emissions whose next block has no prepared seed:
// the writer prepares one for each, off the hot path.
func (l *Ledger) NextToPrepare() []string {
	var out []string
	for _, id := range l.emissionOrder {
		e := l.Emissions[id]
		if e.Opened < e.Blocks && l.prepared[id] == nil {
			out = append(out, id)
		}
	}
	return out
}

// OpenBlock returns the block on sale at a price, or nil.
func (l *Ledger) OpenBlock(price Amount) *Block {
	if id, ok := l.openBlock[price]; ok {
		return l.Blocks[id]
	}
	return nil
}

// window returns the idempotency window in force.
func (l *Ledger) window() time.Duration {
	if l.IdempotencyWindow > 0 {
		return l.IdempotencyWindow
	}
	return IdempotencyWindowDefault
}

// Evolve applies one recorded event, stamped with the time it was recorded.
// It is the only function that changes the ledger. It trusts the event: the
// decider checked it before it was recorded, and the audit re-checks the log.
// It returns an error only for an event that contradicts the state (an
// unknown account or block), which means the log and the code disagree.
func (l *Ledger) Evolve(at time.Time, e Event) error {
	l.Now = at
	switch e := e.(type) {
	case *AccountOpened:
		l.Accounts[e.Player] = &Account{Player: e.Player, Limits: map[LimitKey]*Limit{}}
		l.playerIdx[e.Player] = uint32(len(l.players))
		l.players = append(l.players, e.Player)
	case *LimitChanged:
		a, err := l.account(e.Player)
		if err != nil {
			return err
		}
		key := LimitKey{e.Kind, e.Period()}
		lim := a.Limits[key]
		switch {
		case lim == nil:
			a.Limits[key] = &Limit{Amount: e.Limit}
		case e.EffectiveAt.After(at):
			lim.Amount = lim.At(at)
			lim.Pending, lim.PendingFrom, lim.pendingPresent = e.Limit, e.EffectiveAt, true
		default:
			lim.Amount, lim.pendingPresent = e.Limit, false
		}
	case *SelfExcluded:
		a, err := l.account(e.Player)
		if err != nil {
			return err
		}
		a.SelfExcluded = true
	case *SelfExcludedUntil:
		a, err := l.account(e.Player)
		if err != nil {
			return err
		}
		if e.Until.After(a.ExcludedUntil) {
			a.ExcludedUntil = e.Until
		}
	case *PlayerBanned:
		a, err := l.account(e.Player)
		if err != nil {
			return err
		}
		if a.Bans == nil {
			a.Bans = map[string]*Ban{}
		}
		a.Bans[e.Ban] = &Ban{ID: e.Ban, Reference: e.Reference, Reason: e.Reason, At: at, By: e.By}
		a.bansIssued++
	case *BanLifted:
		a, err := l.account(e.Player)
		if err != nil {
			return err
		}
		delete(a.Bans, e.Ban)
	case *SettingsAdopted:
		l.Settings = e.Settings.clone().withDefaults()
	case *AccountClosed:
		a, err := l.account(e.Player)
		if err != nil {
			return err
		}
		a.closedAt = at
	case *AccountReopened:
		a, err := l.account(e.Player)
		if err != nil {
			return err
		}
		a.closedAt = time.Time{}
	case *PersonalDataErasureProposed, *PersonalDataErased, *PersonalDataErasureRejected:
		if err := l.evolveErasure(at, e); err != nil {
			return err
		}
	case *SalesSuspended, *SalesResumed:
		if err := l.evolveSales(at, e); err != nil {
			return err
		}
	case *TokenRevoked:
		l.evolveRevocation(at, e)
	case *SeedsResealed:
		for _, r := range e.Seeds {
			b, err := l.block(r.Block)
			if err != nil {
				return err
			}
			b.SealedSeed = r.SealedSeed
		}
	case *AdjustmentProposed, *AdjustmentApproved, *AdjustmentRejected:
		if err := l.evolveAdjustment(at, e); err != nil {
			return err
		}
	case *FundsDeposited:
		a, err := l.account(e.Player)
		if err != nil {
			return err
		}
		a.Balance += e.Amount
		a.deposits.add(at, e.Amount)
		l.remember(e.Player, KeyDeposit, e.Key, &KeyRecord{Request: amountRequest(e.Amount), At: at, Balance: a.Balance})
	case *FundsWithdrawn:
		a, err := l.account(e.Player)
		if err != nil {
			return err
		}
		a.Balance -= e.Amount
		l.remember(e.Player, KeyWithdrawal, e.Key, &KeyRecord{Request: amountRequest(e.Amount), At: at, Balance: a.Balance})
	case *EmissionCreated:
		r := &KeyRecord{Request: emissionRequest(e.Price, e.Blocks), At: at, Emission: e.Emission}
		if l.OpenBlock(e.Price) == nil {
			// The decider opens the emission's first block in the same
			// append when no block of its price is on sale.
			r.OpenedBlock = blockID(e.Emission, 1)
		}
		l.remember("", KeyEmission, e.Key, r)
		l.Emissions[e.Emission] = &Emission{ID: e.Emission, Price: e.Price, Blocks: e.Blocks}
		l.emissionOrder = append(l.emissionOrder, e.Emission)
	case *BlockOpened:
		em, ok := l.Emissions[e.Emission]
		if !ok {
			return fmt.Errorf("evolve %s: unknown emission %q", e.EventType(), e.Emission)
		}
		em.Opened++
		delete(l.prepared, e.Emission)
		l.Blocks[e.Block] = &Block{ID: e.Block, Emission: e.Emission, Index: e.Index, Price: e.Price,
			Commitment: e.Commitment, SealedSeed: e.SealedSeed, State: BlockStateOpen}
		l.openBlock[e.Price] = e.Block
	case *BlockExhausted:
		b, err := l.block(e.Block)
		if err != nil {
			return err
		}
		b.State = BlockStateExhausted
		l.closeSale(b)
	case *BlockClosed:
		b, err := l.block(e.Block)
		if err != nil {
			return err
		}
		b.State = BlockStateClosed
		b.owners = nil
		l.closeSale(b)
		delete(l.decks, b.Commitment.SeedHash)
	case *StakePlaced:
		a, err := l.account(e.Player)
		if err != nil {
			return err
		}
		b, err := l.block(e.Block)
		if err != nil {
			return err
		}
		a.Balance -= e.Stake
		a.stakes.add(at, e.Stake)
		if b.owners == nil {
			b.owners = make([]uint32, 0, l.Rules.BlockUnits)
		}
		b.owners = append(b.owners, l.playerIdx[e.Player])
		b.Sold++
		b.InPlay++
		l.Plays[e.Play] = &Play{ID: e.Play, Player: e.Player, Block: e.Block, Stake: e.Stake, LastActivity: at}
		l.remember(e.Player, KeyStake, e.Key, &KeyRecord{Request: amountRequest(e.Stake), At: at, Play: e.Play, Balance: a.Balance})
	case *UnitAssigned:
		p, err := l.play(e.Play)
		if err != nil {
			return err
		}
		b, err := l.block(e.Block)
		if err != nil {
			return err
		}
		p.Unit = &AssignedUnit{Index: e.Proof.Unit, Tier: e.Proof.Tier, Salt: e.Proof.Salt}
		b.TierSold[e.Proof.Tier]++
	case *ThrowMade:
		p, err := l.wholePlay(e, e.Play)
		if err != nil {
			return err
		}
		p.Throws++
		p.LastActivity = at
	case *PlaySettled:
		p, err := l.wholePlay(e, e.Play)
		if err != nil {
			return err
		}
		b, err := l.block(p.Block)
		if err != nil {
			return err
		}
		b.InPlay--
		b.Prizes += e.Prize
		delete(l.Plays, e.Play)
	case *PrizePaid:
		a, err := l.account(e.Player)
		if err != nil {
			return err
		}
		// A prize follows its settlement, which ends the play: a play
		// still in progress here must at least hold its unit.
		if _, inPlay := l.Plays[e.Play]; inPlay {
			if _, err := l.wholePlay(e, e.Play); err != nil {
				return err
			}
		}
		a.Balance += e.Amount
	default:
		return fmt.Errorf("evolve: unhandled event type %s", e.EventType())
	}
	l.expireKeys(at)
	return nil
}

// PlayOwner returns the player of a sold unit's play while its block is not
// closed, or "".
func (l *Ledger) PlayOwner(play string) string {
	block, unit, ok := ParsePlayID(play)
	if !ok {
		return ""
	}
	b := l.Blocks[block]
	if b == nil || int(unit) >= len(b.owners) {
		return ""
	}
	return l.players[b.owners[unit]]
}

// closeSale takes a block off sale if it is the open block of its price.
func (l *Ledger) closeSale(b *Block) {
	if l.openBlock[b.Price] == b.ID {
		delete(l.openBlock, b.Price)
	}
}

func (l *Ledger) account(player string) (*Account, error) {
	if a, ok := l.Accounts[player]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("evolve: unknown account %q", player)
}

func (l *Ledger) block(id string) (*Block, error) {
	if b, ok := l.Blocks[id]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("evolve: unknown block %q", id)
}

func (l *Ledger) play(id string) (*Play, error) {
	if p, ok := l.Plays[id]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("evolve: unknown play %q", id)
}

// wholePlay returns the play a throw or a settlement moves on, which must
// hold its unit: a replay stops there rather than adopt a throw or a tier
// that no UnitAssigned backs.
func (l *Ledger) wholePlay(e Event, id string) (*Play, error) {
	p, err := l.play(id)
	if err != nil {
		return nil, err
	}
	if p.Unit == nil {
		return nil, fmt.Errorf("evolve %s: play %q has no unit assigned", e.EventType(), id)
	}
	return p, nil
}

// amountRequest and emissionRequest fingerprint the requests a client key
// answers within its kind: the same key with another request is a conflict.
func amountRequest(amount Amount) string { return amount.String() }
func emissionRequest(price Amount, blocks int) string {
	return fmt.Sprintf("%s x %d", price, blocks)
}
