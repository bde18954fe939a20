package projections

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/fdj/tresor/domain"
)

// Adjustment is an adjustment of a player's account as staff and finance
// see it: its terms, who proposed it and when, until when it may be
// approved, and its decision once made.
type Adjustment struct {
	ID         string                     `json:"id"`
	Player     string                     `json:"player"`
	Direction  domain.AdjustmentDirection `json:"direction"`
	Kind       domain.AdjustmentKind      `json:"kind"`
	Amount     domain.Amount              `json:"amount"`
	Reference  string                     `json:"reference"`
	Reason     string                     `json:"reason"`
	Seq        uint64                     `json:"seq"`
	ProposedAt time.Time                  `json:"proposed_at"`
	ProposedBy *domain.Actor              `json:"proposed_by"`
	ExpiresAt  time.Time                  `json:"expires_at"`
	// State is pending, approved or rejected as the stream records it; an
	// expired adjustment is a pending one past ExpiresAt (StateAt).
	State domain.AdjustmentState `json:"state"`
	AdjustmentDecision
}

// AdjustmentDecision is an adjustment's approval or rejection: who, when,
// why (a rejection) and the balance it left (an approval).
type AdjustmentDecision struct {
	DecidedSeq     uint64         `json:"decided_seq,omitempty"`
	DecidedAt      *time.Time     `json:"decided_at,omitempty"`
	DecidedBy      *domain.Actor  `json:"decided_by,omitempty"`
	DecisionReason string         `json:"decision_reason,omitempty"`
	BalanceAfter   *domain.Amount `json:"balance_after,omitempty"`
}

// AdjustmentExpired is the state an adjustment shows once its time to be
// approved has passed: the stream records no event for it.
const AdjustmentExpired = "expired"

// StateAt returns the adjustment's state at now: its recorded state, or
// expired for a pending one past its expiry.
func (a Adjustment) StateAt(now time.Time) string {
	if a.State == domain.AdjustmentStatePending && !now.Before(a.ExpiresAt) {
		return AdjustmentExpired
	}
	return string(a.State)
}

// AdjustmentsMax bounds the adjustments the read side lists at once: the
// newest that match.
const AdjustmentsMax = 1000

// AdjustmentQuery selects adjustments: one by ID, a player's, or the
// pending ones only; the zero query selects every one.
type AdjustmentQuery struct {
	ID      string
	Player  string
	Pending bool
}

// Matches reports whether a query selects an adjustment.
func (q AdjustmentQuery) Matches(a *Adjustment) bool {
	return (q.ID == "" || a.ID == q.ID) && (q.Player == "" || a.Player == q.Player) &&
		(!q.Pending || a.State == domain.AdjustmentStatePending)
}

// ListAdjustments returns what Store.Adjustments answers out of every
// adjustment (oldest first): the newest AdjustmentsMax that match, oldest
// first.
func ListAdjustments(all []*Adjustment, q AdjustmentQuery) []Adjustment {
	return newest(all, q.Matches, AdjustmentsMax)
}

// newest returns copies of the newest max rows of all (oldest first) that
// match, oldest first.
func newest[T any](all []*T, matches func(*T) bool, max int) []T {
	out := []T{}
	for i := len(all) - 1; i >= 0 && len(out) < max; i-- {
		if matches(all[i]) {
			out = append(out, *all[i])
		}
	}
	slices.Reverse(out)
	return out
}

// AdjustmentChange is what a batch does to one adjustment: the whole row
// when it is proposed in the batch (New), or its decision.
type AdjustmentChange struct {
	New bool
	Adjustment
}

// ApplyTo applies a decision to an existing row.
func (c *AdjustmentChange) ApplyTo(row *Adjustment) {
	row.State, row.AdjustmentDecision = c.State, c.AdjustmentDecision
}

// DecisionJSON is the decision's fields as a JSON object, for a store
// that merges them into the row it keeps.
func (c *AdjustmentChange) DecisionJSON() ([]byte, error) {
	return json.Marshal(struct {
		State domain.AdjustmentState `json:"state"`
		AdjustmentDecision
	}{c.State, c.AdjustmentDecision})
}

// foldAdjustment folds a proposal, an approval or a rejection.
func (c *Changes) foldAdjustment(seq uint64, at time.Time, e domain.Event) error {
	switch e := e.(type) {
	case *domain.AdjustmentProposed:
		c.account(e.Player, seq)
		if c.adjusts[e.Adjustment] != nil {
			return errorsf(ErrInvalid, "adjustment %s proposed twice", e.Adjustment)
		}
		x := &AdjustmentChange{New: true, Adjustment: Adjustment{ID: e.Adjustment, Player: e.Player, Direction: e.Direction,
			Kind: e.Kind, Amount: e.Amount, Reference: e.Reference, Reason: e.Reason, Seq: seq, ProposedAt: at, ProposedBy: e.By,
			ExpiresAt: e.ExpiresAt.UTC().Truncate(Precision), State: domain.AdjustmentStatePending}}
		c.adjusts[e.Adjustment] = x
		c.Adjustments = append(c.Adjustments, x)
	case *domain.AdjustmentApproved:
		a := c.account(e.Player, seq)
		a.Balance = amountPtr(e.Balance)
		day := dayOf(c.adjustDays, &c.AdjustmentDays, &AdjustmentDay{Day: DayKey(at), Kind: e.Kind})
		day.Approved++
		if e.Direction == domain.Credit {
			day.Credits += e.Amount
			a.AdjustedCredits += e.Amount
		} else {
			day.Debits += e.Amount
			a.AdjustedDebits += e.Amount
		}
		c.decide(e.Adjustment, domain.AdjustmentStateApproved, AdjustmentDecision{DecidedSeq: seq, DecidedAt: &at,
			DecidedBy: e.By, BalanceAfter: amountPtr(e.Balance)})
	case *domain.AdjustmentRejected:
		c.account(e.Player, seq)
		c.decide(e.Adjustment, domain.AdjustmentStateRejected, AdjustmentDecision{DecidedSeq: seq, DecidedAt: &at,
			DecidedBy: e.By, DecisionReason: e.Reason})
	}
	return nil
}

// decide records an adjustment's decision in the batch.
func (c *Changes) decide(id string, state domain.AdjustmentState, d AdjustmentDecision) {
	x := c.adjusts[id]
	if x == nil {
		x = &AdjustmentChange{Adjustment: Adjustment{ID: id}}
		c.adjusts[id] = x
		c.Adjustments = append(c.Adjustments, x)
	}
	x.State, x.AdjustmentDecision = state, d
}

// AdjustmentDay is what the approved adjustments of one kind moved on one
// UTC day: how many, credited to players and debited from them.
type AdjustmentDay struct {
	Day      string                `json:"day"`
	Kind     domain.AdjustmentKind `json:"kind"`
	Approved int                   `json:"approved"`
	Credits  domain.Amount         `json:"credits"`
	Debits   domain.Amount         `json:"debits"`
}

// RowKey implements DayRow: by day, then by kind.
func (d *AdjustmentDay) RowKey() string { return d.Day + " " + string(d.Kind) }

// Add adds a day's deltas to the day.
func (d *AdjustmentDay) Add(delta *AdjustmentDay) {
	d.Approved += delta.Approved
	d.Credits += delta.Credits
	d.Debits += delta.Debits
}

// AdjustmentsHeader is the adjustments report's CSV header.
var AdjustmentsHeader = []string{"day", "kind", "approved", "credits", "debits"}

// AdjustmentsReport lists what the approved adjustments moved on each day
// of the period, per kind: the days and kinds with none are left out.
func AdjustmentsReport(d *ReportData, p Period) []AdjustmentDay {
	out := []AdjustmentDay{}
	for _, a := range d.AdjustmentDays {
		if a.Day >= p.From && a.Day <= p.To {
			out = append(out, a)
		}
	}
	return out
}

// AdjustmentRowCSV is an adjustments report line's CSV row.
func AdjustmentRowCSV(a AdjustmentDay) []string {
	return []string{a.Day, string(a.Kind), strconv.Itoa(a.Approved), a.Credits.String(), a.Debits.String()}
}
