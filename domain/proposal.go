package domain

import "time"

// ProposalState is where a change made with four eyes (an adjustment, an
// erasure) is in its life; an expired one is a pending one past its
// ExpiresAt.
type ProposalState string

// The states of a proposal.
const (
	ProposalPending  ProposalState = "pending"
	ProposalApproved ProposalState = "approved"
	ProposalRejected ProposalState = "rejected"
)

// Proposal is the life of a change made with four eyes, as the write side
// keeps it: who proposed it and when, until when another subject may
// decide it, and the decision.
type Proposal struct {
	ProposedBy *Actor        `json:"proposed_by"`
	ProposedAt time.Time     `json:"proposed_at"`
	ExpiresAt  time.Time     `json:"expires_at"`
	State      ProposalState `json:"state"`
	DecidedBy  *Actor        `json:"decided_by,omitempty"`
	DecidedAt  time.Time     `json:"decided_at"`
}

// newProposal is a proposal pending from at.
func newProposal(by *Actor, at, expires time.Time) Proposal {
	return Proposal{ProposedBy: by, ProposedAt: at, ExpiresAt: expires, State: ProposalPending}
}

// forgetAt is when the ledger forgets a proposal: a window after it was
// decided, or after it expired.
func (p *Proposal) forgetAt(window time.Duration) time.Time {
	if p.State == ProposalPending {
		return p.ExpiresAt.Add(window)
	}
	return p.DecidedAt.Add(window)
}

// pendingAt reports whether the proposal may still be decided at now.
func (p *Proposal) pendingAt(now time.Time) bool {
	return p.State == ProposalPending && now.Before(p.ExpiresAt)
}

// kept reports whether a proposal read from a snapshot is one the ledger
// could have kept: proposed by someone, pending or decided by someone.
func (p *Proposal) kept() bool {
	switch p.State {
	case ProposalPending:
		return p.ProposedBy != nil
	case ProposalApproved, ProposalRejected:
		return p.ProposedBy != nil && p.DecidedBy != nil
	}
	return false
}

// Terms of a kind of proposal, for the refusals of its decisions: what it
// is called, the code of one decided past its expiry, and what its expiry
// leaves undone.
type proposalTerms struct {
	noun    string
	expired Code
	undone  string
}

var (
	adjustmentTerms = proposalTerms{"adjustment", CodeAdjustmentExpired, "it moves no money"}
	erasureTerms    = proposalTerms{"erasure", CodeErasureExpired, "nothing was erased"}
)

// settled refuses a decision on the proposal id that is no longer
// pending, naming what became of it.
func (p *Proposal) settled(t proposalTerms, id string, now time.Time) error {
	switch {
	case p.State != ProposalPending:
		return refuse(CodeConflict, "%s %s was %s by %s at %s", t.noun, id, p.State, subjectOf(p.DecidedBy), p.DecidedAt.Format(time.RFC3339Nano))
	case !now.Before(p.ExpiresAt):
		return refuse(t.expired, "%s %s expired at %s, unapproved: %s; propose it again", t.noun, id, p.ExpiresAt.Format(time.RFC3339), t.undone)
	}
	return nil
}

// approval checks an approval of the proposal id at now: again is true
// when it was approved already (the same approval twice, or two
// approvers at once), which answers it.
func (p *Proposal) approval(t proposalTerms, id string, now time.Time) (again bool, err error) {
	if p.State == ProposalApproved {
		return true, nil
	}
	return false, p.settled(t, id, now)
}

// rejection checks a rejection of the proposal id by by, with a reason, at
// now: again is true for the same subject's rejection again (a retry).
func (p *Proposal) rejection(t proposalTerms, id, reason string, by *Actor, now time.Time) (again bool, err error) {
	if err := validText("reason", reason, ReasonMax, true); err != nil {
		return false, err
	}
	if p.State == ProposalRejected && subjectOf(p.DecidedBy) == by.Subject {
		return true, nil
	}
	return false, p.settled(t, id, now)
}

// replayed is the decision on a decision checked by approval or
// rejection: its refusal, or else the answer r of the one made already.
func replayed(again bool, err error, r *KeyRecord) (Decision, error) {
	if err != nil {
		return Decision{}, err
	}
	return Decision{Replay: r}, nil
}

// decide records a pending proposal's decision, refusing (as an event the
// ledger cannot apply) one that is not pending.
func (p *Proposal) decide(state ProposalState, by *Actor, at time.Time) bool {
	if p.State != ProposalPending {
		return false
	}
	p.State, p.DecidedBy, p.DecidedAt = state, by, at
	return true
}

// fourEyes refuses the decision of a proposal (what names it) by its
// proposer, and one whose decider cannot be compared with its proposer.
func fourEyes(what string, proposer, by *Actor) error {
	if proposer == nil {
		// Only a stream the decider did not write holds such a proposal.
		return refuse(CodeInternal, "%s records no proposer: four eyes cannot be checked", what)
	}
	if proposer.Subject == by.Subject {
		return refuse(CodeFourEyes, "%s was proposed by %s: another subject decides it", what, by.Subject)
	}
	if IsSealed(by.Subject) != IsSealed(proposer.Subject) {
		// Proposed before subjects were sealed (or the other way round):
		// a clear subject and a sealed one cannot be told apart here.
		return refuse(CodeConflict, "%s was proposed before staff subjects were sealed: four eyes cannot be checked; propose it again", what)
	}
	return nil
}
