package projections

import (
	"encoding/json"
	"time"

	"github.com/fdj/tresor/domain"
)

// Erasure is an erasure of a person's personal data as staff see it:
// whose (a player, or only the data key of a staff subject), on which
// ground, who proposed it and when, until when it may be approved, and
// its decision once made.
type Erasure struct {
	ID          string        `json:"id"`
	Player      string        `json:"player,omitempty"`
	KeyID       string        `json:"key_id,omitempty"`
	Ground      string        `json:"ground"`
	LegalGround string        `json:"legal_ground,omitempty"`
	Seq         uint64        `json:"seq"`
	ProposedAt  time.Time     `json:"proposed_at"`
	ProposedBy  *domain.Actor `json:"proposed_by"`
	ExpiresAt   time.Time     `json:"expires_at"`
	// State is pending, approved or rejected as the stream records it; an
	// expired erasure is a pending one past ExpiresAt (StateAt).
	State domain.ProposalState `json:"state"`
	ErasureDecision
}

// ErasureDecision is an erasure's approval or rejection: who, when, on
// which ground (an approval: the ground may have changed since the
// proposal, the retention having ended) and why (a rejection).
type ErasureDecision struct {
	DecidedSeq     uint64        `json:"decided_seq,omitempty"`
	DecidedAt      *time.Time    `json:"decided_at,omitempty"`
	DecidedBy      *domain.Actor `json:"decided_by,omitempty"`
	ErasedGround   string        `json:"erased_ground,omitempty"`
	DecisionReason string        `json:"decision_reason,omitempty"`
}

// ErasureExpired is the state an erasure shows once its time to be
// approved has passed: the stream records no event for it.
const ErasureExpired = "expired"

// StateAt returns the erasure's state at now: its recorded state, or
// expired for a pending one past its expiry.
func (x Erasure) StateAt(now time.Time) string {
	if x.State == domain.ProposalPending && !now.Before(x.ExpiresAt) {
		return ErasureExpired
	}
	return string(x.State)
}

// ErasuresMax bounds the erasures the read side lists at once: the newest
// that match.
const ErasuresMax = 1000

// ErasureQuery selects erasures: one by ID, or the pending ones only; the
// zero query selects every one.
type ErasureQuery struct {
	ID      string
	Pending bool
}

// Matches reports whether a query selects an erasure.
func (q ErasureQuery) Matches(x *Erasure) bool {
	return (q.ID == "" || x.ID == q.ID) && (!q.Pending || x.State == domain.ProposalPending)
}

// ListErasures returns what Store.Erasures answers out of every erasure
// (oldest first): the newest ErasuresMax that match, oldest first.
func ListErasures(all []*Erasure, q ErasureQuery) []Erasure {
	return newest(all, q.Matches, ErasuresMax)
}

// ErasureChange is what a batch does to one erasure: the whole row when
// it is proposed in the batch (New), or its decision.
type ErasureChange struct {
	New bool
	Erasure
}

// ApplyTo applies a decision to an existing row.
func (c *ErasureChange) ApplyTo(row *Erasure) {
	row.State, row.ErasureDecision = c.State, c.ErasureDecision
}

// DecisionJSON is the decision's fields as a JSON object, for a store
// that merges them into the row it keeps.
func (c *ErasureChange) DecisionJSON() ([]byte, error) {
	return json.Marshal(struct {
		State domain.ProposalState `json:"state"`
		ErasureDecision
	}{c.State, c.ErasureDecision})
}

// foldErasure folds a proposal, an approval or a rejection. An erasure
// recorded before erasures took four eyes has no row: it was never
// pending.
func (c *Changes) foldErasure(seq uint64, at time.Time, e domain.Event) error {
	switch e := e.(type) {
	case *domain.PersonalDataErasureProposed:
		if c.erasures[e.Erasure] != nil {
			return errorsf(ErrInvalid, "erasure %s proposed twice", e.Erasure)
		}
		x := &ErasureChange{New: true, Erasure: Erasure{ID: e.Erasure, Player: e.Player, KeyID: e.KeyID, Ground: e.Ground,
			LegalGround: e.LegalGround, Seq: seq, ProposedAt: at, ProposedBy: e.By, ExpiresAt: e.ExpiresAt.UTC().Truncate(Precision),
			State: domain.ProposalPending}}
		c.erasures[e.Erasure] = x
		c.Erasures = append(c.Erasures, x)
	case *domain.PersonalDataErased:
		if e.Erasure != "" {
			c.decideErasure(e.Erasure, domain.ProposalApproved, ErasureDecision{DecidedSeq: seq, DecidedAt: &at,
				DecidedBy: e.By, ErasedGround: e.Ground})
		}
	case *domain.PersonalDataErasureRejected:
		c.decideErasure(e.Erasure, domain.ProposalRejected, ErasureDecision{DecidedSeq: seq, DecidedAt: &at,
			DecidedBy: e.By, DecisionReason: e.Reason})
	}
	return nil
}

// decideErasure records an erasure's decision in the batch.
func (c *Changes) decideErasure(id string, state domain.ProposalState, d ErasureDecision) {
	x := c.erasures[id]
	if x == nil {
		x = &ErasureChange{Erasure: Erasure{ID: id}}
		c.erasures[id] = x
		c.Erasures = append(c.Erasures, x)
	}
	x.State, x.ErasureDecision = state, d
}
