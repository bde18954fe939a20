package domain

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ProposeAdjustment proposes a credit or a debit to a player's account, of
// a kind, with the reference of what justifies it (a chargeback's case, a
// ticket) and a reason. It moves no money: a different staff subject
// approves it (ApproveAdjustment) or rejects it before it expires.
type ProposeAdjustment struct {
	Player    string
	Direction AdjustmentDirection
	Kind      AdjustmentKind
	Amount    Amount
	Reference string
	Reason    string
	By        *Actor
}

// ApproveAdjustment approves a pending adjustment and moves its money. The
// proposer cannot approve it (four eyes); approving an approved one again
// answers it and records nothing.
type ApproveAdjustment struct {
	Adjustment string
	By         *Actor
}

// RejectAdjustment rejects a pending adjustment, with a reason: it never
// moves money.
type RejectAdjustment struct {
	Adjustment string
	Reason     string
	By         *Actor
}

func (ProposeAdjustment) command() {}
func (ApproveAdjustment) command() {}
func (RejectAdjustment) command()  {}

// AdjustmentDirection says whether an adjustment credits or debits the
// player. Its zero value is no direction at all: an adjustment always names one.
type AdjustmentDirection string

// The directions of an adjustment, seen from the player's account.
const (
	Credit AdjustmentDirection = "credit"
	Debit  AdjustmentDirection = "debit"
)

// AdjustmentKind is why money moves by hand. Its zero value is no kind at
// all: an adjustment always names one. Each kind has its house account.
type AdjustmentKind string

// The kinds of adjustment: a gesture of goodwill, a payment reversed by
// the payment provider, a refund after a malfunction, the correction of an
// error.
const (
	Goodwill          AdjustmentKind = "goodwill"
	Chargeback        AdjustmentKind = "chargeback"
	MalfunctionRefund AdjustmentKind = "malfunction_refund"
	Correction        AdjustmentKind = "correction"
)

// AdjustmentKinds lists the kinds, in the order reports show them.
var AdjustmentKinds = []AdjustmentKind{Goodwill, Chargeback, MalfunctionRefund, Correction}

// validAdjustment checks a direction and a kind.
func validAdjustment(d AdjustmentDirection, k AdjustmentKind) error {
	if d != Credit && d != Debit {
		return refuse(CodeInvalidRequest, "direction %.40q: want credit or debit", d)
	}
	for _, x := range AdjustmentKinds {
		if k == x {
			return nil
		}
	}
	return refuse(CodeInvalidRequest, "kind %.40q: want goodwill, chargeback, malfunction_refund or correction", k)
}

// AdjustmentAccount names the house account an adjustment of a kind moves
// money against: a credit to a player is a debit of it, and the other way
// round, so that finance sees what each kind cost.
func AdjustmentAccount(k AdjustmentKind) string { return "house." + string(k) }

// AdjustmentsKeptMax bounds the adjustments the ledger keeps: pending ones,
// and those decided or expired within the idempotency window, so that a
// late retry is answered rather than refused as unknown.
const AdjustmentsKeptMax = 10000

// AdjustmentState is where an adjustment is in its life: a proposal's.
type AdjustmentState = ProposalState

// The states of an adjustment.
const (
	AdjustmentStatePending  = ProposalPending
	AdjustmentStateApproved = ProposalApproved
	AdjustmentStateRejected = ProposalRejected
)

// Adjustment is an adjustment as the write side keeps it.
type Adjustment struct {
	ID        string              `json:"id"`
	Player    string              `json:"player"`
	Direction AdjustmentDirection `json:"direction"`
	Kind      AdjustmentKind      `json:"kind"`
	Amount    Amount              `json:"amount"`
	Reference string              `json:"reference"`
	Reason    string              `json:"reason"`
	Proposal
}

// AdjustmentProposed records a proposed adjustment, pending until
// ExpiresAt. It moves no money.
type AdjustmentProposed struct {
	Adjustment string              `json:"adjustment"`
	Player     string              `json:"player"`
	Direction  AdjustmentDirection `json:"direction"`
	Kind       AdjustmentKind      `json:"kind"`
	Amount     Amount              `json:"amount"`
	Reference  string              `json:"reference"`
	Reason     string              `json:"reason"`
	ExpiresAt  time.Time           `json:"expires_at"`
	By         *Actor              `json:"by"`
}

// AdjustmentApproved records the approval of an adjustment by a subject
// other than its proposer, and the money it moves: the player's account
// against the kind's house account. It repeats the proposal's terms and
// proposer so that a reader of this event alone can post it; the audit
// checks them against the proposal.
type AdjustmentApproved struct {
	Adjustment string              `json:"adjustment"`
	Player     string              `json:"player"`
	Direction  AdjustmentDirection `json:"direction"`
	Kind       AdjustmentKind      `json:"kind"`
	Amount     Amount              `json:"amount"`
	Balance    Amount              `json:"balance_after"`
	ProposedBy *Actor              `json:"proposed_by"`
	By         *Actor              `json:"by"`
}

// AdjustmentRejected records the rejection of a pending adjustment.
type AdjustmentRejected struct {
	Adjustment string `json:"adjustment"`
	Player     string `json:"player"`
	Reason     string `json:"reason"`
	By         *Actor `json:"by"`
}

// UnmarshalJSON reads an AdjustmentProposed and refuses one without a
// valid direction and kind.
func (e *AdjustmentProposed) UnmarshalJSON(b []byte) error {
	type fields AdjustmentProposed // without this method
	return decodeChecked(b, (*fields)(e), func() error { return eventTerms(e.Direction, e.Kind) })
}

// UnmarshalJSON reads an AdjustmentApproved and refuses one without a
// valid direction and kind: either would post money to no account.
func (e *AdjustmentApproved) UnmarshalJSON(b []byte) error {
	type fields AdjustmentApproved // without this method
	return decodeChecked(b, (*fields)(e), func() error { return eventTerms(e.Direction, e.Kind) })
}

// eventTerms refuses an adjustment event whose direction or kind is not
// one Tresor knows.
func eventTerms(d AdjustmentDirection, k AdjustmentKind) error {
	if err := validAdjustment(d, k); err != nil {
		return fmt.Errorf("an adjustment: %w", err)
	}
	return nil
}

func (*AdjustmentProposed) EventType() string { return TypeAdjustmentProposed }
func (*AdjustmentApproved) EventType() string { return TypeAdjustmentApproved }
func (*AdjustmentRejected) EventType() string { return TypeAdjustmentRejected }

// AggregateID implementations: facts of the player's account.
func (e *AdjustmentProposed) AggregateID() string { return playerAggregate(e.Player) }
func (e *AdjustmentApproved) AggregateID() string { return playerAggregate(e.Player) }
func (e *AdjustmentRejected) AggregateID() string { return playerAggregate(e.Player) }

// adjustmentPostings is the movement of an approved adjustment.
func adjustmentPostings(e *AdjustmentApproved) []Posting {
	if e.Direction == Credit {
		return []Posting{{Debit: AdjustmentAccount(e.Kind), Credit: PlayerAccount(e.Player), Amount: e.Amount}}
	}
	return []Posting{{Debit: PlayerAccount(e.Player), Credit: AdjustmentAccount(e.Kind), Amount: e.Amount}}
}

// Signed returns what the adjustment does to the player's balance.
func (e *AdjustmentApproved) Signed() Amount {
	if e.Direction == Debit {
		return -e.Amount
	}
	return e.Amount
}

// adjustmentID names the n-th adjustment ever proposed (from 1).
func adjustmentID(n int) string { return numbered("A", n) }

// AdjustmentNumber reads n out of an adjustment's id, 0 for anything else.
func AdjustmentNumber(id string) int { return numberOf("A", id) }

// numbered names the n-th of a kind ever recorded (from 1): its prefix
// and n.
func numbered(prefix string, n int) string { return prefix + strconv.Itoa(n) }

// numberOf reads n out of numbered(prefix, n), 0 for anything else.
func numberOf(prefix, id string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(id, prefix))
	if !strings.HasPrefix(id, prefix) || err != nil || n < 1 || numbered(prefix, n) != id {
		return 0
	}
	return n
}

// subjectOf returns an actor's subject, "" for none.
func subjectOf(a *Actor) string {
	if a == nil {
		return ""
	}
	return a.Subject
}

// adjustingStaff checks who proposes, approves or rejects an adjustment:
// the operator's or finance's staff, never a player nor the regulator,
// who only reads.
func adjustingStaff(by *Actor) error {
	if by == nil {
		return refuse(CodeInvalidRequest, "an adjustment records who proposed and who decided it: no actor given")
	}
	if err := validActor(by); err != nil {
		return err
	}
	if by.Role != RoleOperator && by.Role != RoleFinance {
		return refuse(CodeForbidden, "adjustments are proposed and decided by the operator's or finance's staff, not a %s", by.Role)
	}
	return nil
}

func (l *Ledger) proposeAdjustment(now time.Time, c ProposeAdjustment) (Decision, error) {
	if err := adjustingStaff(c.By); err != nil {
		return Decision{}, err
	}
	a, err := l.liveAccount(c.Player)
	if err != nil {
		return Decision{}, err
	}
	if err := validAdjustment(c.Direction, c.Kind); err != nil {
		return Decision{}, err
	}
	if err := checkAmount("adjustment", c.Amount); err != nil {
		return Decision{}, err
	}
	if err := validText("reference", c.Reference, ReferenceMax, true); err != nil {
		return Decision{}, err
	}
	if err := validText("reason", c.Reason, ReasonMax, true); err != nil {
		return Decision{}, err
	}
	if err := l.openAccount(a, "an adjustment is"); err != nil {
		return Decision{}, err
	}
	if x := l.pendingLike(now, c); x != nil {
		// The same proposal again (a retry): the one pending.
		return Decision{Replay: &KeyRecord{Adjustment: x.ID, At: x.ProposedAt}}, nil
	}
	if err := debitCovered(a, c.Direction, c.Amount); err != nil {
		return Decision{}, err
	}
	if len(l.Adjustments) >= AdjustmentsKeptMax {
		return Decision{}, refuse(CodeConflict, "%d adjustments are pending or recently decided, the most Tresor keeps: decide the pending ones first", len(l.Adjustments))
	}
	return Decision{Events: []Event{&AdjustmentProposed{Adjustment: adjustmentID(l.adjustmentsIssued + 1), Player: c.Player,
		Direction: c.Direction, Kind: c.Kind, Amount: c.Amount, Reference: c.Reference, Reason: c.Reason,
		ExpiresAt: now.Add(l.Settings.AdjustmentExpiry()), By: c.By}}}, nil
}

// pendingLike returns the adjustment pending at now that the same subject
// proposed with the same terms and reference, or nil.
func (l *Ledger) pendingLike(now time.Time, c ProposeAdjustment) *Adjustment {
	for _, x := range l.Adjustments {
		if x.pendingAt(now) && x.Player == c.Player && x.Direction == c.Direction &&
			x.Kind == c.Kind && x.Amount == c.Amount && x.Reference == c.Reference && subjectOf(x.ProposedBy) == c.By.Subject {
			return x
		}
	}
	return nil
}

// debitCovered refuses a debit larger than the balance: a balance never
// goes negative, and what a player owes beyond it is collected outside the
// game's ledger (docs/compliance.md says why).
func debitCovered(a *Account, d AdjustmentDirection, amount Amount) error {
	if d == Debit && amount > a.Balance {
		return refuse(CodeInsufficientFunds, "a debit of %s would bring the balance of player %s (%s) below zero", amount, a.Player, a.Balance)
	}
	return nil
}

// decidable returns the adjustment a decision names, after the checks
// common to an approval and a rejection: staff, a known adjustment, and
// four eyes.
func (l *Ledger) decidable(id string, by *Actor) (*Adjustment, error) {
	if err := adjustingStaff(by); err != nil {
		return nil, err
	}
	x := l.Adjustments[id]
	if x == nil {
		if n := AdjustmentNumber(id); n >= 1 && n <= l.adjustmentsIssued {
			return nil, refuse(CodeConflict, "adjustment %s was decided or expired more than %s ago", id, l.window())
		}
		return nil, refuse(CodeNotFound, "no adjustment %.80q", id)
	}
	return x, fourEyes("adjustment "+id, x.ProposedBy, by)
}

func (l *Ledger) approveAdjustment(now time.Time, c ApproveAdjustment) (Decision, error) {
	x, err := l.decidable(c.Adjustment, c.By)
	if err != nil {
		return Decision{}, err
	}
	// Approved already: the first approval moved the money; this one
	// answers it.
	if again, err := x.approval(adjustmentTerms, x.ID, now); again || err != nil {
		return replayed(again, err, &KeyRecord{Adjustment: x.ID, At: x.DecidedAt})
	}
	a, err := l.liveAccount(x.Player)
	if err != nil {
		return Decision{}, err
	}
	if err := l.openAccount(a, "an adjustment is"); err != nil {
		return Decision{}, err
	}
	if err := debitCovered(a, x.Direction, x.Amount); err != nil {
		return Decision{}, err
	}
	e := &AdjustmentApproved{Adjustment: x.ID, Player: x.Player, Direction: x.Direction, Kind: x.Kind,
		Amount: x.Amount, ProposedBy: x.ProposedBy, By: c.By}
	e.Balance = a.Balance + e.Signed()
	return Decision{Events: []Event{e}}, nil
}

func (l *Ledger) rejectAdjustment(now time.Time, c RejectAdjustment) (Decision, error) {
	x, err := l.decidable(c.Adjustment, c.By)
	if err != nil {
		return Decision{}, err
	}
	if again, err := x.rejection(adjustmentTerms, x.ID, c.Reason, c.By, now); again || err != nil {
		return replayed(again, err, &KeyRecord{Adjustment: x.ID, At: x.DecidedAt})
	}
	return Decision{Events: []Event{&AdjustmentRejected{Adjustment: x.ID, Player: x.Player, Reason: c.Reason, By: c.By}}}, nil
}

// evolveAdjustment applies a proposal, an approval or a rejection, and
// forgets the adjustments decided or expired more than a window ago.
func (l *Ledger) evolveAdjustment(at time.Time, e Event) error {
	switch e := e.(type) {
	case *AdjustmentProposed:
		if l.Adjustments[e.Adjustment] != nil {
			return fmt.Errorf("evolve %s: adjustment %s proposed twice", e.EventType(), e.Adjustment)
		}
		l.Adjustments[e.Adjustment] = &Adjustment{ID: e.Adjustment, Player: e.Player, Direction: e.Direction, Kind: e.Kind,
			Amount: e.Amount, Reference: e.Reference, Reason: e.Reason, Proposal: newProposal(e.By, at, e.ExpiresAt)}
		l.adjustmentsIssued++
	case *AdjustmentApproved:
		x, acct, err := l.pendingAdjustment(e, e.Adjustment, e.Player)
		if err != nil {
			return err
		}
		acct.Balance += e.Signed()
		x.decide(ProposalApproved, e.By, at)
	case *AdjustmentRejected:
		x, _, err := l.pendingAdjustment(e, e.Adjustment, e.Player)
		if err != nil {
			return err
		}
		x.decide(ProposalRejected, e.By, at)
	}
	for id, x := range l.Adjustments {
		if !at.Before(x.forgetAt(l.window())) {
			delete(l.Adjustments, id)
		}
	}
	return nil
}

// pendingAdjustment returns the pending adjustment a decision names and
// its player's account.
func (l *Ledger) pendingAdjustment(e Event, id, player string) (*Adjustment, *Account, error) {
	x := l.Adjustments[id]
	if x == nil || x.State != AdjustmentStatePending || x.Player != player {
		return nil, nil, fmt.Errorf("evolve %s: no pending adjustment %s of player %s", e.EventType(), id, player)
	}
	a, err := l.account(player)
	return x, a, err
}
