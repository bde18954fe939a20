package audit

import (
	"time"

	"github.com/fdj/tresor/domain"
)

// accountClosed folds a closure and checks it: of an open account, with
// a zero balance, with who and why. An account first seen after the seal a
// partial audit starts from is not checked: its balance is not known.
func (s *state) accountClosed(seq uint64, at time.Time, e *domain.AccountClosed) {
	p := s.ctl.player(e.Player)
	subject := "closure of " + e.Player
	if p.closed {
		s.bad(seq, CodeClosureInvalid, subject, "the closure of an open account", "closed already")
	}
	if a := s.accounts[e.Player]; a != nil && p.anchored {
		if bal := a.balance(); bal != 0 {
			s.bad(seq, CodeClosureInvalid, subject, "a zero balance", bal)
		}
	}
	s.closureWhoAndWhy(seq, subject, e.By, e.Reason)
	p.closed, p.closedAt = true, at
}

// accountReopened folds a reopening and checks it: of a closed account,
// by the operator, with a reason.
func (s *state) accountReopened(seq uint64, e *domain.AccountReopened) {
	p := s.ctl.player(e.Player)
	subject := "reopening of " + e.Player
	if !p.closed && p.anchored {
		s.bad(seq, CodeClosureInvalid, subject, "the reopening of a closed account", "an open account")
	}
	if e.By != nil && e.By.Role != domain.RoleOperator {
		s.bad(seq, CodeClosureInvalid, subject, "a reopening by the operator", "by "+e.By.Role+" "+e.By.Subject)
	}
	s.closureWhoAndWhy(seq, subject, e.By, e.Reason)
	p.closed = false
}

// closureWhoAndWhy reports a closure or a reopening without who asked or
// why: the decider requires both.
func (s *state) closureWhoAndWhy(seq uint64, subject string, by *domain.Actor, reason string) {
	if by == nil || reason == "" {
		s.bad(seq, CodeClosureInvalid, subject, "who asked and why", "none")
	}
}

// closedMovement reports money moved on a closed account.
func (s *state) closedMovement(seq uint64, e domain.Event, player string) {
	if s.ctl.player(player).closed {
		s.bad(seq, CodeClosedAccountMoved, e.EventType()+" of "+player, "no movement: the account is closed", "recorded")
	}
}

// actorName names an actor in a violation.
func actorName(a *domain.Actor) string {
	if a == nil {
		return "the system"
	}
	return a.Role + " " + a.Subject
}
