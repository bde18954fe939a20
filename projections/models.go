package projections

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/shopspring/decimal"
)

// errorsf wraps a sentinel with a message: fmt.Errorf("%w: ...").
func errorsf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// Account is a player's account as finance and the player see it: the
// balance, what went in and out, and the weekly limits. Every balance can be
// recomputed from the journal (credits minus debits of the player's ledger
// account).
type Account struct {
	Player       string        `json:"player"`
	OpenedAt     time.Time     `json:"opened_at"`
	Balance      domain.Amount `json:"balance"`
	Deposited    domain.Amount `json:"deposited"`
	Withdrawn    domain.Amount `json:"withdrawn"`
	Staked       domain.Amount `json:"staked"`
	Won          domain.Amount `json:"won"`
	Plays        int           `json:"plays"`
	SelfExcluded bool          `json:"self_excluded"`
	// SelfExcludedUntil is the end of the latest self-exclusion term, nil
	// when none was ever set (it stays once the term has ended).
	SelfExcludedUntil *time.Time `json:"self_excluded_until,omitempty"`
	// ClosedAt is when the account was closed, nil while it is open (or
	// once reopened): the retention of the player's data starts there.
	ClosedAt *time.Time `json:"closed_at,omitempty"`
	// AdjustedCredits and AdjustedDebits add up the approved adjustments
	// that credited and debited the account, so that the balance is
	// deposited − withdrawn − staked + won + adjusted_credits −
	// adjusted_debits.
	AdjustedCredits domain.Amount `json:"adjusted_credits"`
	AdjustedDebits  domain.Amount `json:"adjusted_debits"`
	// DepositLimit and StakeLimit are the weekly limits, nil until set.
	DepositLimit *Limit `json:"deposit_limit,omitempty"`
	StakeLimit   *Limit `json:"stake_limit,omitempty"`
	// Limits are all the limits set, weekly ones included, by kind and
	// period.
	Limits []PeriodLimit `json:"limits,omitempty"`
	// Bans are the bans in force.
	Bans []Ban `json:"bans,omitempty"`
	// LastSeq is the stream sequence of the last event that changed it.
	LastSeq uint64 `json:"last_seq"`
}

// PeriodLimit is a limit of one kind over one rolling period.
type PeriodLimit struct {
	Kind       domain.LimitKind `json:"kind"`
	PeriodDays int              `json:"period_days"`
	Limit
}

// Ban is a ban of a player, in force or lifted: who recorded it, when, by
// which decision and why, and the same of its lifting.
type Ban struct {
	Player    string        `json:"player"`
	Ban       string        `json:"ban"`
	Seq       uint64        `json:"seq"`
	At        time.Time     `json:"at"`
	Reference string        `json:"reference"`
	Reason    string        `json:"reason"`
	By        *domain.Actor `json:"by,omitempty"`
	// The lifting, once lifted.
	LiftedSeq     uint64        `json:"lifted_seq,omitempty"`
	LiftedAt      *time.Time    `json:"lifted_at,omitempty"`
	LiftReference string        `json:"lift_reference,omitempty"`
	LiftReason    string        `json:"lift_reason,omitempty"`
	LiftedBy      *domain.Actor `json:"lifted_by,omitempty"`
}

// BansMax bounds the bans of one player the read side lists.
const BansMax = 1000

// Suspension is a suspension of sales, in force or resumed: its scope
// (domain.SalesScope's text), who recorded it, when and why, and the same
// of its end.
type Suspension struct {
	ID     string        `json:"id"`
	Scope  string        `json:"scope"`
	Seq    uint64        `json:"seq"`
	At     time.Time     `json:"at"`
	Reason string        `json:"reason"`
	By     *domain.Actor `json:"by,omitempty"`
	// The end, once resumed.
	ResumedSeq   uint64        `json:"resumed_seq,omitempty"`
	ResumedAt    *time.Time    `json:"resumed_at,omitempty"`
	ResumeReason string        `json:"resume_reason,omitempty"`
	ResumedBy    *domain.Actor `json:"resumed_by,omitempty"`
}

// SuspensionsResumedMax bounds the resumed suspensions the read side lists
// beside those in force (the newest); the decider bounds those in force.
const SuspensionsResumedMax = 1000

// ListSuspensions returns what Store.Suspensions answers out of every
// suspension, oldest first: those in force and the newest
// SuspensionsResumedMax resumed.
func ListSuspensions(all []*Suspension) []Suspension {
	out := []Suspension{}
	resumed := 0
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].ResumedAt != nil {
			if resumed == SuspensionsResumedMax {
				continue
			}
			resumed++
		}
		out = append(out, *all[i])
	}
	slices.Reverse(out)
	return out
}

// Limit is a weekly limit: the amount in force when it was last changed and
// a raise waiting for its 24 hours, if any. At tells the limit in force at
// any time, as the write side decides it.
type Limit struct {
	Amount      domain.Amount  `json:"amount"`
	Pending     *domain.Amount `json:"pending,omitempty"`
	PendingFrom *time.Time     `json:"pending_from,omitempty"`
}

// At returns the limit in force at t: the pending raise once its time has
// come, the amount before.
func (l Limit) At(t time.Time) domain.Amount {
	if l.Pending != nil && !t.Before(*l.PendingFrom) {
		return *l.Pending
	}
	return l.Amount
}

// LimitChange is one recorded LimitChanged. The read side keeps the changes
// rather than a folded limit, because whether a raise replaces a pending one
// depends on the time of the change; ReplayLimits folds them on read exactly
// as domain.Ledger.Evolve does.
type LimitChange struct {
	Player      string           `json:"player"`
	Kind        domain.LimitKind `json:"kind"`
	PeriodDays  int              `json:"period_days"`
	Seq         uint64           `json:"seq"`
	At          time.Time        `json:"at"`
	Limit       domain.Amount    `json:"limit"`
	EffectiveAt time.Time        `json:"effective_at"`
}

// ReplayLimits folds a player's limit changes, in stream order, into the
// limits they leave, by kind and period (deposit first, shorter periods
// first): the same rules as domain.Ledger.Evolve (a lowering applies at
// once and cancels a pending raise; a raise waits and replaces a pending
// one).
func ReplayLimits(changes []LimitChange) []PeriodLimit {
	var out []PeriodLimit
	for _, c := range changes {
		i := slices.IndexFunc(out, func(l PeriodLimit) bool { return l.Kind == c.Kind && l.PeriodDays == c.PeriodDays })
		if i < 0 {
			out = append(out, PeriodLimit{Kind: c.Kind, PeriodDays: c.PeriodDays, Limit: Limit{Amount: c.Limit}})
			continue
		}
		if c.EffectiveAt.After(c.At) {
			amount, from := c.Limit, c.EffectiveAt
			out[i].Limit = Limit{Amount: out[i].At(c.At), Pending: &amount, PendingFrom: &from}
		} else {
			out[i].Limit = Limit{Amount: c.Limit}
		}
	}
	slices.SortFunc(out, func(a, b PeriodLimit) int {
		if a.Kind != b.Kind {
			return strings.Compare(string(a.Kind), string(b.Kind))
		}
		return a.PeriodDays - b.PeriodDays
	})
	return out
}

// SetLimits sets the account's limits from its limit changes, in stream
// order: all of them, and the weekly ones in DepositLimit and StakeLimit.
func (a *Account) SetLimits(changes []LimitChange) {
	a.Limits, a.DepositLimit, a.StakeLimit = ReplayLimits(changes), nil, nil
	for i := range a.Limits {
		l := &a.Limits[i]
		if l.PeriodDays != domain.LegacyLimitPeriodDays {
			continue
		}
		weekly := l.Limit
		if l.Kind == domain.DepositLimit {
			a.DepositLimit = &weekly
		} else {
			a.StakeLimit = &weekly
		}
	}
}

// Side is the side of a journal line.
type Side string

// The two sides of double entry. A ledger account's balance is its credits
// minus its debits.
const (
	Debit  Side = "debit"
	Credit Side = "credit"
)

// JournalLine is one line of the double-entry journal: every posting of
// domain.Postings gives a debit line and a credit line of the same amount,
// with the event that caused them.
type JournalLine struct {
	Seq uint64 `json:"seq"`
	// Line numbers the lines of one event: 2i is posting i's debit, 2i+1
	// its credit.
	Line        int           `json:"line"`
	At          time.Time     `json:"at"`
	Account     string        `json:"account"`
	Side        Side          `json:"side"`
	Amount      domain.Amount `json:"amount"`
	Counterpart string        `json:"counterpart"`
	EventType   string        `json:"event_type"`
	// Ref is the play of a stake or prize, the client key of a deposit or
	// withdrawal.
	Ref string `json:"ref"`
	// BalanceAfter is, on a player's line, the player's balance once the
	// event applies (the event's balance_after); nil on the house's and
	// the blocks' lines.
	BalanceAfter *domain.Amount `json:"balance_after,omitempty"`
}

// JournalCursor is the position of a journal line; the zero cursor is before
// the first.
type JournalCursor struct {
	Seq  uint64
	Line int
}

// Cursor returns the line's position, to ask for the page after it.
func (l JournalLine) Cursor() JournalCursor { return JournalCursor{Seq: l.Seq, Line: l.Line} }

// TierRow is what a block holds of one tier: the Article 3 lots and prize,
// how many sold units carry the tier (finance only) and how many settled.
type TierRow struct {
	Lots     int           `json:"lots"`
	Prize    domain.Amount `json:"prize"`
	Assigned int           `json:"assigned"`
	Paid     int           `json:"paid"`
}

// BlockRow is a block as the stores keep it, with finance's counters.
// BlockReport is what may be shown of it; Totals is what reconciliation
// reads of it.
type BlockRow struct {
	ID         string            `json:"id"`
	Emission   string            `json:"emission"`
	Index      int               `json:"index"`
	Price      domain.Amount     `json:"price"`
	Units      int               `json:"units"`
	State      domain.BlockState `json:"state"`
	Commitment domain.Commitment `json:"commitment"`
	Seed       *domain.Seed      `json:"seed,omitempty"`
	OpenedAt   time.Time         `json:"opened_at"`
	// OpenedSeq is the stream sequence of the block's BlockOpened: where
	// anyone holding a copy of the stream finds the commitment.
	OpenedSeq uint64     `json:"opened_seq"`
	ClosedAt  *time.Time `json:"closed_at,omitempty"`
	Settled   int        `json:"settled"`
	// BySystem counts the plays the system completed (abandoned by their
	// players): they are among the settled ones.
	BySystem int                       `json:"by_system"`
	Counters Counters                  `json:"counters"`
	Tiers    [domain.TierCount]TierRow `json:"tiers"`
	LastSeq  uint64                    `json:"last_seq"`
}

// Counters are the money figures reconciliation adds up, per block and per
// day. They only ever grow by deltas, so batches add them without reading.
type Counters struct {
	UnitsSold int `json:"units_sold"`
	// Sales is the sum of stakes.
	Sales domain.Amount `json:"sales"`
	// PrizesPaid is the sum of PrizePaid; PrizesSettled the sum of the
	// prizes PlaySettled announced; they must agree.
	PrizesPaid    domain.Amount `json:"prizes_paid"`
	PrizesSettled domain.Amount `json:"prizes_settled"`
	// PrizesOwed is the Article 3 prize of every sold unit's tier, known at
	// sale from its proof.
	PrizesOwed domain.Amount `json:"prizes_owed"`
	// PrizeFund is the Article 3 total of the blocks opened.
	PrizeFund domain.Amount `json:"prize_fund"`
	// StakeMismatch adds |stake − block price| over stakes and
	// SettleMismatch |table prize − settled prize| over settlements: both
	// must stay zero.
	StakeMismatch  domain.Amount `json:"stake_mismatch"`
	SettleMismatch domain.Amount `json:"settle_mismatch"`
}

// Add adds d to c.
func (c *Counters) Add(d Counters) {
	c.UnitsSold += d.UnitsSold
	c.Sales += d.Sales
	c.PrizesPaid += d.PrizesPaid
	c.PrizesSettled += d.PrizesSettled
	c.PrizesOwed += d.PrizesOwed
	c.PrizeFund += d.PrizeFund
	c.StakeMismatch += d.StakeMismatch
	c.SettleMismatch += d.SettleMismatch
}

// TableMismatch is, for a sold-out block whose plays have all settled, the
// prize value of the difference between the tiers its units carried and
// the Article 3 table (Σ |assigned − lots| × prize); zero otherwise, since
// the tiers of unsold units are not known.
func (b *BlockRow) TableMismatch() domain.Amount {
	if b.Counters.UnitsSold != b.Units || b.Settled != b.Units {
		return 0
	}
	var d domain.Amount
	for _, t := range b.Tiers {
		n := t.Assigned - t.Lots
		if n < 0 {
			n = -n
		}
		d += domain.Amount(n) * t.Prize
	}
	return d
}

// TierReport is a tier of a block report: the Article 3 lots and those paid
// (settled) and left. Left counts unsold units and plays in progress alike,
// so it says nothing of which units hold what.
type TierReport struct {
	Tier  domain.Tier   `json:"tier"`
	Prize domain.Amount `json:"prize"`
	Lots  int           `json:"lots"`
	Paid  int           `json:"paid"`
	Left  int           `json:"left"`
}

// BlockReport is the block consumption operators and the public may see.
// While the block is open it reveals nothing of an unsold unit: tiers count
// only settled plays, and the seed appears only once the block is closed.
type BlockReport struct {
	ID         string            `json:"id"`
	Emission   string            `json:"emission"`
	Index      int               `json:"index"`
	Price      domain.Amount     `json:"price"`
	State      domain.BlockState `json:"state"`
	Units      int               `json:"units"`
	Sold       int               `json:"sold"`
	Left       int               `json:"left"`
	Sales      domain.Amount     `json:"sales"`
	PrizesPaid domain.Amount     `json:"prizes_paid"`
	// PayoutRate is prizes paid over sales so far, an exact decimal
	// rounded to 8 places (0 before the first sale).
	PayoutRate decimal.Decimal   `json:"payout_rate"`
	Tiers      []TierReport      `json:"tiers"`
	Commitment domain.Commitment `json:"commitment"`
	Seed       *domain.Seed      `json:"seed,omitempty"`
	OpenedAt   time.Time         `json:"opened_at"`
	// OpenedSeq is the stream sequence of the block's BlockOpened event.
	OpenedSeq uint64     `json:"opened_seq"`
	ClosedAt  *time.Time `json:"closed_at,omitempty"`
}

// PayoutRateDecimals is the precision of payout rates, as domain's tables.
const PayoutRateDecimals = 8

// Report returns what may be shown of the block.
func (b *BlockRow) Report() BlockReport {
	r := BlockReport{
		ID: b.ID, Emission: b.Emission, Index: b.Index, Price: b.Price, State: b.State,
		Units: b.Units, Sold: b.Counters.UnitsSold, Left: b.Units - b.Counters.UnitsSold,
		Sales: b.Counters.Sales, PrizesPaid: b.Counters.PrizesPaid, PayoutRate: decimal.Zero,
		Commitment: b.Commitment, OpenedAt: b.OpenedAt, OpenedSeq: b.OpenedSeq, ClosedAt: b.ClosedAt,
	}
	if b.Counters.Sales > 0 {
		r.PayoutRate = decimal.NewFromInt(int64(b.Counters.PrizesPaid)).
			DivRound(decimal.NewFromInt(int64(b.Counters.Sales)), PayoutRateDecimals)
	}
	if b.State == domain.BlockStateClosed {
		r.Seed = b.Seed
	}
	for t, row := range b.Tiers {
		r.Tiers = append(r.Tiers, TierReport{Tier: domain.Tier(t), Prize: row.Prize, Lots: row.Lots, Paid: row.Paid, Left: row.Lots - row.Paid})
	}
	return r
}

// Emission is an emission as EmissionCreated recorded it.
type Emission struct {
	ID           string        `json:"id"`
	Price        domain.Amount `json:"price"`
	Blocks       int           `json:"blocks"`
	RulesVersion string        `json:"rules_version"`
	CreatedAt    time.Time     `json:"created_at"`
}

// PlayStatus is where a play is in its life, for the history screen.
type PlayStatus string

// Play statuses: in progress until its fourth throw; then settled, or
// completed by the system when Tresor made its remaining throws.
const (
	StatusInProgress        PlayStatus = "in_progress"
	StatusSettled           PlayStatus = "settled"
	StatusCompletedBySystem PlayStatus = "completed_by_system"
)

// Throw is one throw of a play as history shows it.
type Throw struct {
	Throw    int                `json:"throw"`
	At       time.Time          `json:"at"`
	BySystem bool               `json:"by_system"`
	Result   domain.ThrowResult `json:"result"`
}

// Play is one play of a player's history (Article 4.2).
type Play struct {
	ID     string `json:"id"`
	Player string `json:"player"`
	Block  string `json:"block"`
	Unit   uint32 `json:"unit"`
	// Seq is the stream sequence of its stake; history pages by it.
	Seq    uint64        `json:"seq"`
	At     time.Time     `json:"at"`
	Stake  domain.Amount `json:"stake"`
	Status PlayStatus    `json:"status"`
	// Proof is the unit's inclusion proof against its block's commitment,
	// nil until the unit is assigned.
	Proof  *domain.UnitProof `json:"proof,omitempty"`
	Throws []Throw           `json:"throws"`
	// Tier, Prize and SettledAt are set once the play is settled.
	Tier      *domain.Tier   `json:"tier,omitempty"`
	Prize     *domain.Amount `json:"prize,omitempty"`
	SettledAt *time.Time     `json:"settled_at,omitempty"`
	// SettledSeq is the stream sequence of the last event of the play's
	// life, 0 while it is in progress: its PrizePaid for a winner, else
	// its PlaySettled. A witness of the stream up to there has seen the
	// play's outcome and its payment, not only its stake (Seq).
	SettledSeq uint64 `json:"settled_seq,omitempty"`
	// BalanceBefore is the balance before the stake; BalanceAfter the
	// balance after the stake, then after the prize once paid.
	BalanceBefore domain.Amount `json:"balance_before"`
	BalanceAfter  domain.Amount `json:"balance_after"`
}

// ChestView is a chest of the map as far as revealed: its cell always, its
// symbol once opened or once the play is settled.
type ChestView struct {
	Cell   domain.Cell    `json:"cell"`
	Symbol *domain.Symbol `json:"symbol,omitempty"`
}

// ScenarioView is the scenario of a play as far as it is revealed: the map,
// the pawn's start and the nine chest cells from the start; each throw as it
// is made; every chest's content once the play is settled.
type ScenarioView struct {
	Rows   int                  `json:"rows"`
	Cols   int                  `json:"cols"`
	Start  domain.Cell          `json:"start"`
	Chests []ChestView          `json:"chests"`
	Throws []domain.ThrowResult `json:"throws"`
}

// Scenario returns the play's scenario as far as revealed, derived from its
// proof's salt and tier (nil before its unit is assigned).
func (p *Play) Scenario() *ScenarioView {
	if p.Proof == nil || !p.Proof.Tier.Valid() {
		return nil
	}
	s := domain.GenerateScenario(p.Proof.Salt, p.Proof.Tier)
	v := &ScenarioView{Rows: s.Rows, Cols: s.Cols, Start: s.Start, Chests: make([]ChestView, len(s.Chests)), Throws: []domain.ThrowResult{}}
	settled := p.Status != StatusInProgress
	for i, c := range s.Chests {
		v.Chests[i].Cell = c.Cell
		if settled {
			sym := c.Symbol
			v.Chests[i].Symbol = &sym
		}
	}
	for _, t := range p.Throws {
		v.Throws = append(v.Throws, t.Result)
		if t.Result.Chest >= 0 && t.Result.Chest < len(v.Chests) {
			sym := t.Result.Symbol
			v.Chests[t.Result.Chest].Symbol = &sym
		}
	}
	return v
}

// HistoryPage is one page of a player's history, newest first, with the
// cursor of the next (older) page, "" at the end.
type HistoryPage struct {
	Plays []Play `json:"plays"`
	Next  string `json:"next,omitempty"`
}

// Scope is what a reconciliation row covers.
type Scope string

// Reconciliation scopes.
const (
	ScopeBlock    Scope = "block"
	ScopeEmission Scope = "emission"
	ScopeDay      Scope = "day"
)

// ValidScope reports whether s is one of the three scopes.
func ValidScope(s Scope) bool { return s == ScopeBlock || s == ScopeEmission || s == ScopeDay }

// Reconciliation is one row of finance's reconciliation: what was sold and
// paid against the Article 3 table. Difference must be zero; anything else
// names a discrepancy to investigate.
type Reconciliation struct {
	Scope     Scope         `json:"scope"`
	Key       string        `json:"key"`
	UnitsSold int           `json:"units_sold"`
	Sales     domain.Amount `json:"sales"`
	// PrizesPaid is what was paid; PrizesOwed the Article 3 prizes of the
	// units sold, paid or still in play.
	PrizesPaid domain.Amount `json:"prizes_paid"`
	PrizesOwed domain.Amount `json:"prizes_owed"`
	// PrizeFund is the Article 3 total of the blocks opened;
	// PrizeFundLeft what of it is not paid yet.
	PrizeFund     domain.Amount `json:"prize_fund"`
	PrizeFundLeft domain.Amount `json:"prize_fund_left"`
	// HouseMargin is sales minus prizes owed.
	HouseMargin domain.Amount `json:"house_margin"`
	// Difference adds every discrepancy: stakes off the block price,
	// settled prizes not paid or paid twice, settlements off the table,
	// and a sold-out block's tiers off Article 3.
	Difference domain.Amount `json:"difference"`
}

// Reconcile builds a reconciliation row from counters and the table mismatch
// of the blocks in scope.
func Reconcile(scope Scope, key string, c Counters, tableMismatch domain.Amount) Reconciliation {
	unpaid := c.PrizesSettled - c.PrizesPaid
	if unpaid < 0 {
		unpaid = -unpaid
	}
	return Reconciliation{
		Scope: scope, Key: key, UnitsSold: c.UnitsSold, Sales: c.Sales,
		PrizesPaid: c.PrizesPaid, PrizesOwed: c.PrizesOwed,
		PrizeFund: c.PrizeFund, PrizeFundLeft: c.PrizeFund - c.PrizesPaid,
		HouseMargin: c.Sales - c.PrizesOwed,
		Difference:  c.StakeMismatch + unpaid + c.SettleMismatch + tableMismatch,
	}
}

// DayKey is the UTC calendar day reconciliation files a time under.
func DayKey(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// Day is one day's counters of one emission's blocks: what reconciliation
// adds up, and the plays settled that day (for the plays in progress at its
// end). The read models keep a row per day and emission (emissions are a
// few a month), so that reconciliation answers one emission's days; the
// reports sum a day's rows (SumDays), and their rows have no emission.
type Day struct {
	Day      string   `json:"day"`
	Emission string   `json:"emission,omitempty"`
	Counters Counters `json:"counters"`
	// Settled counts the plays settled that day, SettledStakes their
	// stakes (at their blocks' price), BySystem those the system completed.
	Settled       int           `json:"settled"`
	SettledStakes domain.Amount `json:"settled_stakes"`
	BySystem      int           `json:"by_system"`
}

// SumDays adds up the rows of each day, rows in day order, into one row
// per day without an emission.
func SumDays(rows []Day) []Day {
	var out []Day
	for _, d := range rows {
		if n := len(out); n > 0 && out[n-1].Day == d.Day {
			out[n-1].Add(&d)
			continue
		}
		out = append(out, Day{Day: d.Day})
		out[len(out)-1].Add(&d)
	}
	return out
}

// CashDay is one day's money paid into and out of players' accounts: with
// the day's stakes and prizes, the change of the players' liability.
type CashDay struct {
	Day         string        `json:"day"`
	Deposits    domain.Amount `json:"deposits"`
	Withdrawals domain.Amount `json:"withdrawals"`
}
