package audit

import (
	"fmt"

	"github.com/fdj/tresor/domain"
)

// auditSuspension is a suspension of sales as the auditor re-derives it:
// its scope and whether it is in force. Every one recorded is kept, so
// that an id recorded twice or resumed twice is seen.
type auditSuspension struct {
	scope   domain.SalesScope
	inForce bool
}

// savedSuspension is an auditSuspension in a state file.
type savedSuspension struct {
	Scope   domain.SalesScope `json:"scope"`
	InForce bool              `json:"in_force"`
}

// salesSuspended folds a suspension of sales and checks it: an id
// recorded once, who gave it and why.
func (s *state) salesSuspended(seq uint64, e *domain.SalesSuspended) {
	c := s.ctl
	c.counts.Suspensions++
	subject := "suspension " + e.Suspension + " of " + e.Scope.String()
	if c.suspensions[e.Suspension] != nil {
		s.bad(seq, CodeSuspensionInvalid, subject, "a suspension id used once", "recorded again")
	}
	s.suspensionWhoAndWhy(seq, subject, e.By, e.Reason)
	if x := c.suspensions[e.Suspension]; x == nil || !x.inForce {
		c.salesInForce++
	}
	c.suspensions[e.Suspension] = &auditSuspension{scope: e.Scope, inForce: true}
}

// salesResumed folds the end of a suspension and checks it: one in force,
// of the scope it names, with who and why. A suspension recorded before
// the seal a partial audit starts from is unknown: its end is not checked.
func (s *state) salesResumed(seq uint64, e *domain.SalesResumed) {
	c := s.ctl
	c.counts.SuspensionsResumed++
	subject := "end of suspension " + e.Suspension + " of " + e.Scope.String()
	x := c.suspensions[e.Suspension]
	switch {
	case x == nil && !c.salesAnchored:
	case x == nil || !x.inForce:
		s.bad(seq, CodeSuspensionInvalid, subject, "the end of a suspension in force", "no such suspension in force")
	case x.scope != e.Scope:
		s.bad(seq, CodeSuspensionInvalid, subject, "the scope of the suspension, "+x.scope.String(), e.Scope.String())
	}
	s.suspensionWhoAndWhy(seq, subject, e.By, e.Reason)
	if x != nil && x.inForce {
		x.inForce = false
		c.salesInForce--
	}
}

// suspensionWhoAndWhy reports a suspension or an end without who gave it
// or without a reason: the decider requires both.
func (s *state) suspensionWhoAndWhy(seq uint64, subject string, by *domain.Actor, reason string) {
	if by == nil || reason == "" {
		s.bad(seq, CodeSuspensionInvalid, subject, "who gave it and why", fmt.Sprintf("by %v, reason %q", by, reason))
	}
}

// stakeSuspended reports a stake accepted while a suspension of sales
// covered its price, its block or its block's emission.
// Every suspension ever recorded is kept, so the stakes of a stream
// without one in force (nearly all of them) skip the loop.
func (s *state) stakeSuspended(seq uint64, e *domain.StakePlaced) {
	if s.ctl.salesInForce == 0 {
		return
	}
	emission, _ := domain.BlockEmission(e.Block)
	hit := ""
	for id, x := range s.ctl.suspensions {
		if x.inForce && x.scope.Covers(e.Stake, e.Block, emission) && (hit == "" || id < hit) {
			hit = id
		}
	}
	if hit != "" {
		s.bad(seq, CodeSuspensionBreached, "play "+e.Play, "no stake: sales of "+s.ctl.suspensions[hit].scope.String()+" are suspended by "+hit,
			"a stake of "+e.Stake.String()+" in block "+e.Block)
	}
}
