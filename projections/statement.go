package projections

import (
	"strconv"
	"time"

	"github.com/fdj/tresor/domain"
)

// MovementKind is what moved a player's money.
type MovementKind string

// The kinds of movement, one per event that moves money.
const (
	MovementDeposit    MovementKind = "deposit"
	MovementWithdrawal MovementKind = "withdrawal"
	MovementStake      MovementKind = "stake"
	MovementPrize      MovementKind = "prize"
	// MovementAdjustment is an approved adjustment, credit or debit; its
	// reference is the adjustment's id.
	MovementAdjustment MovementKind = "adjustment"
)

// movementKinds maps the event types of the journal to their movement.
var movementKinds = map[string]MovementKind{
	domain.TypeFundsDeposited: MovementDeposit, domain.TypeFundsWithdrawn: MovementWithdrawal,
	domain.TypeStakePlaced: MovementStake, domain.TypePrizePaid: MovementPrize,
	domain.TypeAdjustmentApproved: MovementAdjustment,
}

// Movement is one line of a player's statement. Amount is signed: what the
// movement did to the balance (a deposit or a prize adds, a withdrawal or
// a stake takes).
type Movement struct {
	// ID names the movement for good: the stream sequence of its event
	// (one event moves a player's money once).
	ID            string        `json:"id"`
	Seq           uint64        `json:"seq"`
	At            time.Time     `json:"at"`
	Kind          MovementKind  `json:"kind"`
	Amount        domain.Amount `json:"amount"`
	BalanceBefore domain.Amount `json:"balance_before"`
	BalanceAfter  domain.Amount `json:"balance_after"`
	// Ref is the play of a stake or prize, the client key of a deposit or
	// withdrawal.
	Ref string `json:"ref"`
}

// StatementQuery asks for a player's movements recorded from From
// (included) to To (excluded). The zero From is the beginning, the zero To
// no end. After pages: the movements after that stream sequence; Limit
// bounds a page (StatementPageMax; StatementPageDefault when 0).
type StatementQuery struct {
	Player   string
	From, To time.Time
	After    uint64
	Limit    int
}

// Limits of a statement's pages.
const (
	StatementPageMax     = 10_000
	StatementPageDefault = 1_000
)

// Statement is a player's statement over a period, read in one snapshot:
// the balance before the period's first instant (Opening) and before its
// end (Closing), and a page of the movements between them, oldest first.
// Seq is the stream position the statement reflects.
type Statement struct {
	Player    string        `json:"player"`
	Opening   domain.Amount `json:"opening_balance"`
	Closing   domain.Amount `json:"closing_balance"`
	Movements []Movement    `json:"movements"`
	// Next is the cursor (After) of the next page, 0 on the last.
	Next uint64 `json:"next,omitempty"`
	Seq  uint64 `json:"seq"`
}

// NoEnd stands for the zero To of a query in the stores: past any
// movement.
var NoEnd = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// Bounds returns the query's period with NoEnd for no end, at the read
// side's precision, checked.
func (q StatementQuery) Bounds() (from, to time.Time, limit int, err error) {
	from, to = q.From.UTC().Truncate(Precision), q.To.UTC().Truncate(Precision)
	if q.To.IsZero() {
		to = NoEnd
	}
	if to.Before(from) {
		return from, to, 0, errorsf(ErrInvalid, "statement from %s to %s: the end comes first", from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
	}
	switch {
	case q.Limit == 0:
		limit = StatementPageDefault
	case q.Limit < 0 || q.Limit > StatementPageMax:
		return from, to, 0, errorsf(ErrInvalid, "page size %d: want 1 to %d", q.Limit, StatementPageMax)
	default:
		limit = q.Limit
	}
	return from, to, limit, nil
}

// MovementOf returns the movement a player's journal line records.
func MovementOf(l JournalLine) Movement {
	m := Movement{ID: strconv.FormatUint(l.Seq, 10), Seq: l.Seq, At: l.At, Kind: movementKinds[l.EventType], Amount: l.Amount, Ref: l.Ref}
	if l.Side == Debit {
		m.Amount = -l.Amount
	}
	if l.BalanceAfter != nil {
		m.BalanceAfter = *l.BalanceAfter
	}
	m.BalanceBefore = m.BalanceAfter - m.Amount
	return m
}
