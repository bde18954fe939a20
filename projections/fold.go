package projections

import (
	"fmt"
	"time"

	"github.com/fdj/tresor/domain"
)

// Changes is what one batch of events does to the read models. Fold computes
// it once, purely; each store only writes it. Figures that add up (totals,
// counters) are deltas, so a store adds them to its rows without reading
// them first; facts the events carry whole (a balance after, a state) are
// set.
type Changes struct {
	// From and To are the first and last sequences the batch covers; To
	// is the new checkpoint. A batch wholly at or below the checkpoint has
	// From > To and changes nothing.
	From, To     uint64
	Accounts     []*AccountChange
	LimitChanges []LimitChange
	Journal      []JournalLine
	Emissions    []Emission
	Blocks       []*BlockChange
	Plays        []*PlayChange
	Days         []*Day
	CashDays     []*CashDay
	// Bans are new bans (Ban.LiftedAt nil or lifted in the same batch)
	// and liftings of earlier ones (BanChange.New false).
	Bans []*BanChange
	// Suspensions are new suspensions of sales (resumed in the same batch
	// or not) and ends of earlier ones (SuspensionChange.New false).
	Suspensions []*SuspensionChange
	// Adjustments are new adjustments (decided in the same batch or not)
	// and decisions of earlier ones (AdjustmentChange.New false).
	Adjustments []*AdjustmentChange
	// AdjustmentDays are deltas of the approved adjustments per day and
	// kind.
	AdjustmentDays []*AdjustmentDay
	// Erasures are new erasures (decided in the same batch or not) and
	// decisions of earlier ones (ErasureChange.New false).
	Erasures []*ErasureChange

	accounts   map[string]*AccountChange
	blocks     map[string]*BlockChange
	plays      map[string]*PlayChange
	days       map[string]*Day
	cashDays   map[string]*CashDay
	bans       map[[2]string]*BanChange
	suspends   map[string]*SuspensionChange
	adjusts    map[string]*AdjustmentChange
	adjustDays map[string]*AdjustmentDay
	erasures   map[string]*ErasureChange
	facts      map[string]blockFacts
}

// SuspensionChange is what a batch does to one suspension of sales: the
// whole row when it is recorded in the batch (New), or its end.
type SuspensionChange struct {
	New bool
	Suspension
}

// ApplyTo applies a suspension's end to an existing row.
func (c *SuspensionChange) ApplyTo(row *Suspension) {
	row.ResumedSeq, row.ResumedAt, row.ResumeReason, row.ResumedBy = c.ResumedSeq, c.ResumedAt, c.ResumeReason, c.ResumedBy
}

// BanChange is what a batch does to one ban: the whole row when it is
// recorded in the batch (New), or its lifting.
type BanChange struct {
	New bool
	Ban
}

// AccountChange is what a batch does to one account.
type AccountChange struct {
	Player string
	// Opened is set when the account opens in this batch.
	Opened *time.Time
	// Balance is the balance after the batch's last movement, nil if none.
	Balance *domain.Amount
	// Deltas.
	Deposited, Withdrawn, Staked, Won domain.Amount
	AdjustedCredits, AdjustedDebits   domain.Amount
	Plays                             int
	SelfExcluded                      bool
	// ExcludedUntil is the latest term's end, set when the batch sets one.
	ExcludedUntil *time.Time
	// ClosureChanged is set when the batch closes or reopens the account;
	// ClosedAt is then when it was closed, nil for reopened.
	ClosureChanged bool
	ClosedAt       *time.Time
	LastSeq        uint64
}

// BlockChange is what a batch does to one block.
type BlockChange struct {
	ID string
	// Opened is the block's first row when it opens in this batch.
	Opened *BlockRow
	// State, Seed and ClosedAt are set when they change.
	State    *domain.BlockState
	Seed     *domain.Seed
	ClosedAt *time.Time
	// Deltas.
	Settled  int
	BySystem int
	Counters Counters
	Assigned [domain.TierCount]int
	Paid     [domain.TierCount]int
	LastSeq  uint64
}

// PlayChange is what a batch does to one play: a whole new row when its
// stake is in the batch (everything later in the batch is folded into it),
// or a patch of an existing row.
type PlayChange struct {
	ID     string
	Player string
	New    *Play
	// Patch fields, set when the batch changes them.
	Proof        *domain.UnitProof
	Throws       []Throw
	Status       *PlayStatus
	Tier         *domain.Tier
	Prize        *domain.Amount
	SettledAt    *time.Time
	BalanceAfter *domain.Amount
	// SettledSeq is the sequence of the play's last event in the batch
	// once it is settled (its PlaySettled, then its PrizePaid), 0 when
	// the batch does not settle or pay it.
	SettledSeq uint64
}

// blockFacts are the facts of a block that events naming it need: its
// emission (whose day rows its activity goes to), its price and the Article
// 3 prize of each tier.
type blockFacts struct {
	emission string
	price    domain.Amount
	prizes   [domain.TierCount]domain.Amount
}

// Projector folds batches of events into Changes. It knows the rules and the
// price of every block seen, so that a stake or a settlement can be checked
// against the block's table; a store seeds it with its blocks when it opens
// (blocks are few: one per 450 000 units).
type Projector struct {
	rules *domain.RuleSet
	facts map[string]blockFacts
}

// NewProjector returns a projector under the rule set the stream was written
// with; EmissionCreated of another rules version is refused.
func NewProjector(rules *domain.RuleSet) *Projector {
	return &Projector{rules: rules, facts: map[string]blockFacts{}}
}

// Rules returns the rule set the projector checks events against.
func (p *Projector) Rules() *domain.RuleSet { return p.rules }

// Know records a block already applied (from a store's rows).
func (p *Projector) Know(b *BlockRow) {
	f := blockFacts{emission: b.Emission, price: b.Price}
	for t, row := range b.Tiers {
		f.prizes[t] = row.Prize
	}
	p.facts[b.ID] = f
}

// Commit records the blocks a batch opened, once the store has made the
// batch durable: a batch that failed leaves the projector as it was.
func (p *Projector) Commit(c *Changes) {
	for id, f := range c.facts {
		p.facts[id] = f
	}
}

// Fold computes the changes of a batch applied on top of checkpoint. Records
// at or below the checkpoint are skipped; the rest must start at
// checkpoint+1 and be contiguous (else ErrGap). An event that names an
// unknown block, a malformed play id or another rules version is
// ErrInvalid. Fold changes nothing: Commit does, after the write.
func (p *Projector) Fold(checkpoint uint64, batch []Envelope) (*Changes, error) {
	c := &Changes{
		From: checkpoint + 1, To: checkpoint,
		accounts: map[string]*AccountChange{}, blocks: map[string]*BlockChange{},
		plays: map[string]*PlayChange{}, days: map[string]*Day{}, cashDays: map[string]*CashDay{},
		bans: map[[2]string]*BanChange{}, suspends: map[string]*SuspensionChange{}, adjusts: map[string]*AdjustmentChange{},
		adjustDays: map[string]*AdjustmentDay{}, erasures: map[string]*ErasureChange{},
		facts: map[string]blockFacts{},
	}
	for _, env := range batch {
		if env.Seq <= c.To {
			if env.Seq <= checkpoint {
				continue
			}
			return nil, errorsf(ErrGap, "sequence %d after %d: the batch is not in stream order", env.Seq, c.To)
		}
		if env.Seq != c.To+1 {
			return nil, errorsf(ErrGap, "want sequence %d, got %d", c.To+1, env.Seq)
		}
		c.To = env.Seq
		if env.Event == nil {
			continue
		}
		if err := p.fold(c, env); err != nil {
			return nil, fmt.Errorf("apply %s at sequence %d: %w", env.Event.EventType(), env.Seq, err)
		}
	}
	return c, nil
}

// Precision is the time precision of the read side: PostgreSQL keeps
// microseconds, so every store does, and the two agree row for row.
const Precision = time.Microsecond

func (p *Projector) fold(c *Changes, env Envelope) error {
	at := env.At.UTC().Truncate(Precision)
	seq := env.Seq
	player, balance := balanceOf(env.Event)
	for i, post := range domain.Postings(env.Event) {
		ref := refOf(env.Event)
		debit := JournalLine{Seq: seq, Line: 2 * i, At: at, Account: post.Debit, Side: Debit, Amount: post.Amount, Counterpart: post.Credit, EventType: env.Event.EventType(), Ref: ref}
		credit := JournalLine{Seq: seq, Line: 2*i + 1, At: at, Account: post.Credit, Side: Credit, Amount: post.Amount, Counterpart: post.Debit, EventType: env.Event.EventType(), Ref: ref}
		for _, l := range []*JournalLine{&debit, &credit} {
			if player != "" && l.Account == domain.PlayerAccount(player) {
				l.BalanceAfter = amountPtr(balance)
			}
		}
		c.Journal = append(c.Journal, debit, credit)
	}
	switch e := env.Event.(type) {
	case *domain.AccountOpened:
		a := c.account(e.Player, seq)
		a.Opened = &at
	case *domain.LimitChanged:
		c.account(e.Player, seq)
		c.LimitChanges = append(c.LimitChanges, LimitChange{Player: e.Player, Kind: e.Kind, PeriodDays: e.Period(), Seq: seq, At: at,
			Limit: e.Limit, EffectiveAt: e.EffectiveAt.UTC().Truncate(Precision)})
	case *domain.SelfExcluded:
		c.account(e.Player, seq).SelfExcluded = true
	case *domain.SelfExcludedUntil:
		a := c.account(e.Player, seq)
		if until := e.Until.UTC().Truncate(Precision); a.ExcludedUntil == nil || until.After(*a.ExcludedUntil) {
			a.ExcludedUntil = &until
		}
	case *domain.PlayerBanned:
		c.account(e.Player, seq)
		k := [2]string{e.Player, e.Ban}
		if c.bans[k] != nil {
			return errorsf(ErrInvalid, "ban %s of player %s recorded twice", e.Ban, e.Player)
		}
		b := &BanChange{New: true, Ban: Ban{Player: e.Player, Ban: e.Ban, Seq: seq, At: at, Reference: e.Reference, Reason: e.Reason, By: e.By}}
		c.bans[k] = b
		c.Bans = append(c.Bans, b)
	case *domain.BanLifted:
		c.account(e.Player, seq)
		k := [2]string{e.Player, e.Ban}
		b := c.bans[k]
		if b == nil {
			b = &BanChange{Ban: Ban{Player: e.Player, Ban: e.Ban}}
			c.bans[k] = b
			c.Bans = append(c.Bans, b)
		}
		b.LiftedSeq, b.LiftedAt, b.LiftReference, b.LiftReason, b.LiftedBy = seq, &at, e.Reference, e.Reason, e.By
	case *domain.AccountClosed:
		a := c.account(e.Player, seq)
		a.ClosureChanged, a.ClosedAt = true, &at
	case *domain.AccountReopened:
		a := c.account(e.Player, seq)
		a.ClosureChanged, a.ClosedAt = true, nil
	case *domain.SalesSuspended:
		if c.suspends[e.Suspension] != nil {
			return errorsf(ErrInvalid, "suspension %s recorded twice", e.Suspension)
		}
		s := &SuspensionChange{New: true, Suspension: Suspension{ID: e.Suspension, Scope: e.Scope.String(), Seq: seq, At: at, Reason: e.Reason, By: e.By}}
		c.suspends[e.Suspension] = s
		c.Suspensions = append(c.Suspensions, s)
	case *domain.SalesResumed:
		s := c.suspends[e.Suspension]
		if s == nil {
			s = &SuspensionChange{Suspension: Suspension{ID: e.Suspension, Scope: e.Scope.String()}}
			c.suspends[e.Suspension] = s
			c.Suspensions = append(c.Suspensions, s)
		}
		s.ResumedSeq, s.ResumedAt, s.ResumeReason, s.ResumedBy = seq, &at, e.Reason, e.By
	case *domain.AdjustmentProposed, *domain.AdjustmentApproved, *domain.AdjustmentRejected:
		return c.foldAdjustment(seq, at, e)
	case *domain.SettingsAdopted:
		// The settings decide on the write side; no read model shows them.
	case *domain.SeedsResealed:
		// A sealed seed is the writers' business; no read model shows it.
	case *domain.PersonalDataErasureProposed, *domain.PersonalDataErased, *domain.PersonalDataErasureRejected:
		// Every field an erasure erases is sealed in the read models
		// too: once its key is destroyed, the answers show them erased,
		// and no row but the erasure's changes.
		return c.foldErasure(seq, at, e)
	case *domain.TokenRevoked:
		// The API keeps the revoked tokens in memory, from the stream
		// itself, on every node; no read model shows them.
	case *domain.FundsDeposited:
		a := c.account(e.Player, seq)
		a.Balance, a.Deposited = amountPtr(e.Balance), a.Deposited+e.Amount
		c.cashDay(at).Deposits += e.Amount
	case *domain.FundsWithdrawn:
		a := c.account(e.Player, seq)
		a.Balance, a.Withdrawn = amountPtr(e.Balance), a.Withdrawn+e.Amount
		c.cashDay(at).Withdrawals += e.Amount
	case *domain.EmissionCreated:
		if e.RulesVersion != p.rules.Version {
			return errorsf(ErrInvalid, "emission %s was created under rules %q, the projection runs %q", e.Emission, e.RulesVersion, p.rules.Version)
		}
		c.Emissions = append(c.Emissions, Emission{ID: e.Emission, Price: e.Price, Blocks: e.Blocks, RulesVersion: e.RulesVersion, CreatedAt: at})
	case *domain.BlockOpened:
		table, err := p.rules.Table(e.Price)
		if err != nil {
			return errorsf(ErrInvalid, "block %s: %v", e.Block, err)
		}
		row := &BlockRow{ID: e.Block, Emission: e.Emission, Index: e.Index, Price: e.Price, Units: e.Commitment.Units,
			State: domain.BlockStateOpen, Commitment: e.Commitment, OpenedAt: at, OpenedSeq: seq}
		f := blockFacts{emission: e.Emission, price: e.Price}
		for t, lot := range table.Lots {
			row.Tiers[t] = TierRow{Lots: lot.Count, Prize: lot.Amount}
			f.prizes[t] = lot.Amount
		}
		c.facts[e.Block] = f
		b := c.block(e.Block, seq)
		b.Opened = row
		b.Counters.PrizeFund += table.Total
		c.day(at, e.Emission).Counters.PrizeFund += table.Total
	case *domain.BlockExhausted:
		state := domain.BlockStateExhausted
		c.block(e.Block, seq).State = &state
	case *domain.BlockClosed:
		state, seed := domain.BlockStateClosed, e.Seed
		b := c.block(e.Block, seq)
		b.State, b.Seed, b.ClosedAt = &state, &seed, &at
	case *domain.StakePlaced:
		f, err := p.blockFacts(c, e.Block)
		if err != nil {
			return err
		}
		block, unit, ok := domain.ParsePlayID(e.Play)
		if !ok || block != e.Block {
			return errorsf(ErrInvalid, "play id %q does not name a unit of block %s", e.Play, e.Block)
		}
		a := c.account(e.Player, seq)
		a.Balance, a.Staked, a.Plays = amountPtr(e.Balance), a.Staked+e.Stake, a.Plays+1
		d := Counters{UnitsSold: 1, Sales: e.Stake, StakeMismatch: abs(e.Stake - f.price)}
		c.block(e.Block, seq).Counters.Add(d)
		c.day(at, f.emission).Counters.Add(d)
		if c.plays[e.Play] != nil {
			return errorsf(ErrInvalid, "play %s staked twice", e.Play)
		}
		pc := &PlayChange{ID: e.Play, Player: e.Player, New: &Play{ID: e.Play, Player: e.Player, Block: e.Block, Unit: unit,
			Seq: seq, At: at, Stake: e.Stake, Status: StatusInProgress, Throws: []Throw{},
			BalanceBefore: e.Balance + e.Stake, BalanceAfter: e.Balance}}
		c.plays[e.Play] = pc
		c.Plays = append(c.Plays, pc)
	case *domain.UnitAssigned:
		f, err := p.blockFacts(c, e.Block)
		if err != nil {
			return err
		}
		if !e.Proof.Tier.Valid() {
			return errorsf(ErrInvalid, "play %s: unit %d has tier code %d", e.Play, e.Proof.Unit, uint8(e.Proof.Tier))
		}
		if _, unit, ok := domain.ParsePlayID(e.Play); !ok || unit != e.Proof.Unit {
			return errorsf(ErrInvalid, "play %s was assigned the proof of unit %d", e.Play, e.Proof.Unit)
		}
		b := c.block(e.Block, seq)
		b.Assigned[e.Proof.Tier]++
		d := Counters{PrizesOwed: f.prizes[e.Proof.Tier]}
		b.Counters.Add(d)
		c.day(at, f.emission).Counters.Add(d)
		proof := e.Proof
		pc := c.play(e.Play, e.Player)
		if pc.New != nil {
			pc.New.Proof = &proof
		} else {
			pc.Proof = &proof
		}
	case *domain.ThrowMade:
		t := Throw{Throw: e.Throw, At: at, BySystem: e.BySystem, Result: e.Result}
		pc := c.play(e.Play, e.Player)
		if pc.New != nil {
			pc.New.Throws = append(pc.New.Throws, t)
		} else {
			pc.Throws = append(pc.Throws, t)
		}
	case *domain.PlaySettled:
		f, err := p.blockFacts(c, e.Block)
		if err != nil {
			return err
		}
		if !e.Tier.Valid() {
			return errorsf(ErrInvalid, "play %s settled on tier code %d", e.Play, uint8(e.Tier))
		}
		b := c.block(e.Block, seq)
		b.Settled++
		b.Paid[e.Tier]++
		d := Counters{PrizesSettled: e.Prize, SettleMismatch: abs(f.prizes[e.Tier] - e.Prize)}
		b.Counters.Add(d)
		day := c.day(at, f.emission)
		day.Counters.Add(d)
		day.Settled++
		day.SettledStakes += f.price
		if e.BySystem {
			b.BySystem++
			day.BySystem++
		}
		status := StatusSettled
		if e.BySystem {
			status = StatusCompletedBySystem
		}
		tier, prize := e.Tier, e.Prize
		pc := c.play(e.Play, e.Player)
		if pc.New != nil {
			pc.New.Status, pc.New.Tier, pc.New.Prize, pc.New.SettledAt, pc.New.SettledSeq = status, &tier, &prize, &at, seq
		} else {
			pc.Status, pc.Tier, pc.Prize, pc.SettledAt, pc.SettledSeq = &status, &tier, &prize, &at, seq
		}
	case *domain.PrizePaid:
		f, err := p.blockFacts(c, e.Block)
		if err != nil {
			return err
		}
		a := c.account(e.Player, seq)
		a.Balance, a.Won = amountPtr(e.Balance), a.Won+e.Amount
		d := Counters{PrizesPaid: e.Amount}
		c.block(e.Block, seq).Counters.Add(d)
		c.day(at, f.emission).Counters.Add(d)
		pc := c.play(e.Play, e.Player)
		// The payment is the last event of the play's life.
		if pc.New != nil {
			pc.New.BalanceAfter, pc.New.SettledSeq = e.Balance, seq
		} else {
			pc.BalanceAfter, pc.SettledSeq = amountPtr(e.Balance), seq
		}
	default:
		return errorsf(ErrInvalid, "event type %s has no projection", env.Event.EventType())
	}
	return nil
}

// balanceOf is the player an event that moves money belongs to and the
// balance it records after itself ("" for any other event).
func balanceOf(e domain.Event) (string, domain.Amount) {
	switch e := e.(type) {
	case *domain.FundsDeposited:
		return e.Player, e.Balance
	case *domain.FundsWithdrawn:
		return e.Player, e.Balance
	case *domain.StakePlaced:
		return e.Player, e.Balance
	case *domain.PrizePaid:
		return e.Player, e.Balance
	case *domain.AdjustmentApproved:
		return e.Player, e.Balance
	}
	return "", 0
}

// refOf is the journal reference of an event that moves money.
func refOf(e domain.Event) string {
	switch e := e.(type) {
	case *domain.FundsDeposited:
		return e.Key
	case *domain.FundsWithdrawn:
		return e.Key
	case *domain.StakePlaced:
		return e.Play
	case *domain.PrizePaid:
		return e.Play
	case *domain.AdjustmentApproved:
		return e.Adjustment
	}
	return ""
}

func (p *Projector) blockFacts(c *Changes, id string) (blockFacts, error) {
	if f, ok := c.facts[id]; ok {
		return f, nil
	}
	if f, ok := p.facts[id]; ok {
		return f, nil
	}
	return blockFacts{}, errorsf(ErrInvalid, "unknown block %q", id)
}

func (c *Changes) account(player string, seq uint64) *AccountChange {
	a := c.accounts[player]
	if a == nil {
		a = &AccountChange{Player: player}
		c.accounts[player] = a
		c.Accounts = append(c.Accounts, a)
	}
	a.LastSeq = seq
	return a
}

func (c *Changes) block(id string, seq uint64) *BlockChange {
	b := c.blocks[id]
	if b == nil {
		b = &BlockChange{ID: id}
		c.blocks[id] = b
		c.Blocks = append(c.Blocks, b)
	}
	b.LastSeq = seq
	return b
}

func (c *Changes) play(id, player string) *PlayChange {
	p := c.plays[id]
	if p == nil {
		p = &PlayChange{ID: id, Player: player}
		c.plays[id] = p
		c.Plays = append(c.Plays, p)
	}
	return p
}

// day returns the batch's row of at's day and an emission's activity.
func (c *Changes) day(at time.Time, emission string) *Day {
	return dayOf(c.days, &c.Days, &Day{Day: DayKey(at), Emission: emission})
}

// dayOf returns the row of blank's key in m, blank itself listed when new.
func dayOf[T any, P DayRow[T]](m map[string]P, list *[]P, blank P) P {
	k := blank.RowKey()
	d, ok := m[k]
	if !ok {
		d = blank
		m[k] = d
		*list = append(*list, d)
	}
	return d
}

// DayRow is a row kept per UTC day (and, for a Day, per emission) that
// batches add deltas to.
type DayRow[T any] interface {
	*T
	// RowKey is the row's key: its day, then its emission if any, so
	// that keys sort by day.
	RowKey() string
	// Add adds a delta of the same key.
	Add(*T)
}

// AddByDay adds each delta to the row of its key, the delta itself (a
// copy) when the key has no row yet: the in-memory store's way.
func AddByDay[T any, P DayRow[T]](rows map[string]P, deltas []P) {
	for _, d := range deltas {
		if row, ok := rows[d.RowKey()]; ok {
			row.Add(d)
			continue
		}
		row := *d
		rows[d.RowKey()] = P(&row)
	}
}

// RowKey implements DayRow: days are of one length, so keys sort by day,
// then by emission.
func (d *Day) RowKey() string { return d.Day + " " + d.Emission }

// RowKey implements DayRow.
func (d *CashDay) RowKey() string { return d.Day }

func (c *Changes) cashDay(at time.Time) *CashDay {
	return dayOf(c.cashDays, &c.CashDays, &CashDay{Day: DayKey(at)})
}

// Add adds a day's deltas to the day.
func (d *Day) Add(delta *Day) {
	d.Counters.Add(delta.Counters)
	d.Settled += delta.Settled
	d.SettledStakes += delta.SettledStakes
	d.BySystem += delta.BySystem
}

// Add adds a day's cash deltas to the day.
func (d *CashDay) Add(delta *CashDay) {
	d.Deposits += delta.Deposits
	d.Withdrawals += delta.Withdrawals
}

// ApplyTo applies a ban change to an existing row: its lifting.
func (b *BanChange) ApplyTo(row *Ban) {
	row.LiftedSeq, row.LiftedAt, row.LiftReference, row.LiftReason, row.LiftedBy = b.LiftedSeq, b.LiftedAt, b.LiftReference, b.LiftReason, b.LiftedBy
}

func amountPtr(a domain.Amount) *domain.Amount { return &a }

func abs(a domain.Amount) domain.Amount {
	if a < 0 {
		return -a
	}
	return a
}

// ApplyTo applies the change to an existing block row (the in-memory store's
// way, and the PostgreSQL store's model of its UPDATE).
func (b *BlockChange) ApplyTo(row *BlockRow) {
	if b.State != nil {
		row.State = *b.State
	}
	if b.Seed != nil {
		row.Seed = b.Seed
	}
	if b.ClosedAt != nil {
		row.ClosedAt = b.ClosedAt
	}
	row.Settled += b.Settled
	row.BySystem += b.BySystem
	row.Counters.Add(b.Counters)
	for t := range row.Tiers {
		row.Tiers[t].Assigned += b.Assigned[t]
		row.Tiers[t].Paid += b.Paid[t]
	}
	row.LastSeq = b.LastSeq
}

// ApplyTo applies the change to an existing play row.
func (pc *PlayChange) ApplyTo(p *Play) {
	if pc.Proof != nil {
		p.Proof = pc.Proof
	}
	p.Throws = append(p.Throws, pc.Throws...)
	if pc.Status != nil {
		p.Status = *pc.Status
	}
	if pc.Tier != nil {
		p.Tier = pc.Tier
	}
	if pc.Prize != nil {
		p.Prize = pc.Prize
	}
	if pc.SettledAt != nil {
		p.SettledAt = pc.SettledAt
	}
	if pc.BalanceAfter != nil {
		p.BalanceAfter = *pc.BalanceAfter
	}
	if pc.SettledSeq != 0 {
		p.SettledSeq = pc.SettledSeq
	}
}

// ApplyTo applies the change to an existing account row (limits aside: they
// are replayed from LimitChanges).
func (a *AccountChange) ApplyTo(row *Account) {
	if a.Opened != nil {
		row.OpenedAt = *a.Opened
	}
	if a.Balance != nil {
		row.Balance = *a.Balance
	}
	row.Deposited += a.Deposited
	row.Withdrawn += a.Withdrawn
	row.Staked += a.Staked
	row.Won += a.Won
	row.AdjustedCredits += a.AdjustedCredits
	row.AdjustedDebits += a.AdjustedDebits
	row.Plays += a.Plays
	row.SelfExcluded = row.SelfExcluded || a.SelfExcluded
	if a.ExcludedUntil != nil && (row.SelfExcludedUntil == nil || a.ExcludedUntil.After(*row.SelfExcludedUntil)) {
		until := *a.ExcludedUntil
		row.SelfExcludedUntil = &until
	}
	if a.ClosureChanged {
		row.ClosedAt = nil
		if a.ClosedAt != nil {
			closed := *a.ClosedAt
			row.ClosedAt = &closed
		}
	}
	row.LastSeq = a.LastSeq
}
