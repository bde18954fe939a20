package audit

import (
	"fmt"
	"time"

	"github.com/fdj/tresor/domain"
)

// auditAdjustment is a proposed adjustment as the auditor re-derives it:
// its terms, its proposer, until when it may be approved, and whether it
// was decided. Every one proposed is kept, so that a second decision is
// seen.
type auditAdjustment struct {
	Player    string                     `json:"player"`
	Direction domain.AdjustmentDirection `json:"direction"`
	Kind      domain.AdjustmentKind      `json:"kind"`
	Amount    domain.Amount              `json:"amount"`
	By        domain.Actor               `json:"by"`
	ExpiresAt time.Time                  `json:"expires_at"`
	Decided   bool                       `json:"decided,omitempty"`
}

// adjustingStaff reports whether an actor may propose or decide an
// adjustment: the operator's or finance's staff, named.
func adjustingStaff(by *domain.Actor) bool {
	return by != nil && (by.Role == domain.RoleOperator || by.Role == domain.RoleFinance) && domain.ValidStaffSubject(by.Subject)
}

// adjustmentProposed folds a proposal and checks it: an id used once, by
// staff, with a reference and a reason, an amount above zero, and an
// expiry the settings in force give.
func (s *state) adjustmentProposed(seq uint64, at time.Time, e *domain.AdjustmentProposed) {
	c := s.ctl
	c.counts.AdjustmentsProposed++
	s.known(seq, e.Player)
	subject := "adjustment " + e.Adjustment + " of " + e.Player
	switch {
	case c.adjustments[e.Adjustment] != nil:
		s.bad(seq, CodeAdjustmentInvalid, subject, "an adjustment id used once", "proposed again")
	case !adjustingStaff(e.By):
		s.bad(seq, CodeAdjustmentInvalid, subject, "a proposal by the operator's or finance's staff", fmt.Sprint(e.By))
	case e.Reference == "" || e.Reason == "":
		s.bad(seq, CodeAdjustmentInvalid, subject, "a reference and a reason", fmt.Sprintf("reference %q, reason %q", e.Reference, e.Reason))
	case e.Amount <= 0:
		s.bad(seq, CodeInvalidAmount, subject, "an amount above 0", e.Amount)
	case c.known && !e.ExpiresAt.Equal(at.Add(c.settings.AdjustmentExpiry())):
		s.bad(seq, CodeAdjustmentInvalid, subject, "an expiry of "+c.settings.AdjustmentExpiry().String()+" after the proposal", e.ExpiresAt.Sub(at))
	}
	x := &auditAdjustment{Player: e.Player, Direction: e.Direction, Kind: e.Kind, Amount: e.Amount, ExpiresAt: e.ExpiresAt}
	if e.By != nil {
		x.By = *e.By
	}
	c.adjustments[e.Adjustment] = x
}

// adjustmentDecided checks an approval or a rejection against its
// proposal: one pending, of the same player, decided before its expiry by
// staff other than the proposer. An adjustment proposed before the seal a
// partial audit starts from is unknown: only the decider's own rules that
// the event carries are checked then. It returns the proposal, or nil.
func (s *state) adjustmentDecided(seq uint64, at time.Time, id, player string, by *domain.Actor) *auditAdjustment {
	c := s.ctl
	subject := "adjustment " + id + " of " + player
	if !adjustingStaff(by) {
		s.bad(seq, CodeAdjustmentInvalid, subject, "a decision by the operator's or finance's staff", fmt.Sprint(by))
	}
	x := c.adjustments[id]
	switch {
	case x == nil && !c.adjustAnchored:
		return nil
	case x == nil:
		s.bad(seq, CodeAdjustmentInvalid, subject, "a decision of a proposed adjustment", "no AdjustmentProposed")
		return nil
	case x.Decided:
		s.bad(seq, CodeAdjustmentInvalid, subject, "one decision", "decided again")
	case x.Player != player:
		s.bad(seq, CodeAdjustmentInvalid, subject, "a decision of the proposal's player, "+x.Player, player)
	case by != nil && by.Subject == x.By.Subject:
		s.bad(seq, CodeFourEyesBroken, subject, "a decision by a subject other than the proposer, "+x.By.Subject, by.Subject)
	case !at.Before(x.ExpiresAt):
		s.bad(seq, CodeAdjustmentExpired, subject, "a decision before "+x.ExpiresAt.Format(time.RFC3339), at.Format(time.RFC3339Nano))
	}
	x.Decided = true
	return x
}

// adjustmentApproved checks an approval, then posts its money: the terms
// it moves are the proposal's, on an open account, leaving a balance of
// zero or more (money checks that).
func (s *state) adjustmentApproved(seq uint64, at time.Time, e *domain.AdjustmentApproved) {
	s.ctl.counts.AdjustmentsApproved++
	if x := s.adjustmentDecided(seq, at, e.Adjustment, e.Player, e.By); x != nil {
		proposed := fmt.Sprintf("%s %s %s by %s", x.Direction, x.Kind, x.Amount, x.By.Subject)
		if got := fmt.Sprintf("%s %s %s by %s", e.Direction, e.Kind, e.Amount, subjectOf(e.ProposedBy)); got != proposed {
			s.bad(seq, CodeAdjustmentInvalid, "adjustment "+e.Adjustment+" of "+e.Player, "the proposal's terms, "+proposed, got)
		}
	}
	s.closedMovement(seq, e, e.Player)
}

// adjustmentRejected checks a rejection: with a reason.
func (s *state) adjustmentRejected(seq uint64, at time.Time, e *domain.AdjustmentRejected) {
	s.ctl.counts.AdjustmentsRejected++
	s.adjustmentDecided(seq, at, e.Adjustment, e.Player, e.By)
	if e.Reason == "" {
		s.bad(seq, CodeAdjustmentInvalid, "adjustment "+e.Adjustment+" of "+e.Player, "a rejection with a reason", "none")
	}
}

func subjectOf(a *domain.Actor) string {
	if a == nil {
		return "nobody"
	}
	return a.Subject
}
