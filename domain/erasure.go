package domain

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// The types of the events of an erasure: proposed, then approved (the
// erasure itself, after which the writer destroys the data key) or
// rejected.
const (
	TypePersonalDataErasureProposed = "PersonalDataErasureProposed"
	TypePersonalDataErased          = "PersonalDataErased"
	TypePersonalDataErasureRejected = "PersonalDataErasureRejected"
)

// ErasePersonalData proposes the erasure of the personal data of a player
// or of a staff subject: an erasure cannot be undone, so a staff subject
// other than the proposer approves it (ApproveErasure) before it is
// recorded, or rejects it, before it expires. Once it is approved the
// writer destroys the person's data key, and every field sealed under it
// reads as erased. A player's data is kept while the retention period
// runs (from the closure of the account: the settings'
// RetentionAfterClosureYears); LegalGround, a legal ground recorded with
// the proposal, erases it before. A staff subject's retention is the
// operator's to decide: its erasure always gives one. KeyID is the data
// key to destroy, resolved by the writer (SealCommand); Subject itself
// never reaches the stream. Proposing the erasure of an erased player
// records nothing. The command keeps its name from before four eyes: it
// is a name on the wire between nodes.
type ErasePersonalData struct {
	Player      string
	Subject     string
	KeyID       string
	LegalGround string
	By          *Actor
}

// ApproveErasure approves a pending erasure: the erasure is recorded, then
// the writer destroys the data key. Its proposer cannot approve it (four
// eyes); approving an approved one again answers it and records nothing.
type ApproveErasure struct {
	Erasure string
	By      *Actor
}

// RejectErasure rejects a pending erasure, with a reason: nothing is
// erased.
type RejectErasure struct {
	Erasure string
	Reason  string
	By      *Actor
}

func (ErasePersonalData) command() {}
func (ApproveErasure) command()    {}
func (RejectErasure) command()     {}

// Grounds of an erasure.
const (
	// GroundRetentionEnded: the retention period after the account's
	// closure has run out.
	GroundRetentionEnded = "retention_ended"
	// GroundLegal: a legal ground given with the erasure (the person's
	// request under GDPR article 17, a court's order...).
	GroundLegal = "legal_ground"
)

// ErasuresKeptMax bounds the erasures the ledger keeps: pending ones, and
// those decided or expired within the idempotency window.
const ErasuresKeptMax = 10000

// Erasure is an erasure as the write side keeps it.
type Erasure struct {
	ID          string `json:"id"`
	Player      string `json:"player,omitempty"`
	KeyID       string `json:"key_id,omitempty"`
	Ground      string `json:"ground"`
	LegalGround string `json:"legal_ground,omitempty"`
	Proposal
}

// whose names the person of an erasure in a message.
func (x *Erasure) whose() string {
	if x.Player != "" {
		return "of player " + x.Player
	}
	return "of data key " + x.KeyID
}

// PersonalDataErasureProposed records a proposed erasure, pending until
// ExpiresAt: whose (the player, or only the data key of a staff subject),
// why (the ground as it stood when proposed, and the legal ground's text,
// sealed under the proposer's key), who proposed it (by); never the
// data. Nothing is erased yet.
type PersonalDataErasureProposed struct {
	Erasure     string    `json:"erasure"`
	Player      string    `json:"player,omitempty"`
	KeyID       string    `json:"key_id,omitempty"`
	Ground      string    `json:"ground"`
	LegalGround string    `json:"legal_ground,omitempty"`
	ExpiresAt   time.Time `json:"expires_at"`
	By          *Actor    `json:"by"`
}

// PersonalDataErased records the erasure of a person's data: whose (the
// player, or only the data key of a staff subject), why (the ground, and
// the legal ground's text, sealed under the proposer's key), who (by: the
// approver) and when (the event's time); never the data. From here on the
// data key KeyID is destroyed ("" when the player had no personal field
// sealed). Erasure and ProposedBy (schema 2) name the proposal it
// approves and its proposer; an erasure of schema 1 was recorded at once,
// before erasures took four eyes.
type PersonalDataErased struct {
	Player      string `json:"player,omitempty"`
	KeyID       string `json:"key_id,omitempty"`
	Ground      string `json:"ground"`
	LegalGround string `json:"legal_ground,omitempty"`
	By          *Actor `json:"by"`
	Erasure     string `json:"erasure,omitempty"`
	ProposedBy  *Actor `json:"proposed_by,omitempty"`
}

// PersonalDataErasureRejected records the rejection of a pending erasure:
// nothing is erased.
type PersonalDataErasureRejected struct {
	Erasure string `json:"erasure"`
	Player  string `json:"player,omitempty"`
	KeyID   string `json:"key_id,omitempty"`
	Reason  string `json:"reason"`
	By      *Actor `json:"by"`
}

func (*PersonalDataErasureProposed) EventType() string { return TypePersonalDataErasureProposed }
func (*PersonalDataErased) EventType() string          { return TypePersonalDataErased }
func (*PersonalDataErasureRejected) EventType() string { return TypePersonalDataErasureRejected }

// AggregateID implementations: the player's account, or for a staff
// subject its key.
func (e *PersonalDataErasureProposed) AggregateID() string {
	return erasureAggregate(e.Player, e.KeyID)
}
func (e *PersonalDataErased) AggregateID() string { return erasureAggregate(e.Player, e.KeyID) }
func (e *PersonalDataErasureRejected) AggregateID() string {
	return erasureAggregate(e.Player, e.KeyID)
}

func erasureAggregate(player, keyID string) string {
	if player != "" {
		return playerAggregate(player)
	}
	return "personal." + keyID
}

// ErasedAt reports whether the player's personal data was erased, and
// when.
func (a *Account) ErasedAt() (time.Time, bool) { return a.erasedAt, !a.erasedAt.IsZero() }

// RetentionEnds is when the retention of a player's personal data ends
// under settings s, for an account closed at closedAt.
func RetentionEnds(s Settings, closedAt time.Time) time.Time {
	return closedAt.AddDate(s.withDefaults().RetentionAfterClosureYears, 0, 0)
}

// erasureID names the n-th erasure ever proposed (from 1).
func erasureID(n int) string { return numbered(erasurePrefix, n) }

// erasurePrefix begins an erasure's id: "ER", apart from the emissions'
// "E0001".
const erasurePrefix = "ER"

// ErasureNumber reads n out of an erasure's id, 0 for anything else.
func ErasureNumber(id string) int { return numberOf(erasurePrefix, id) }

// erasingStaff checks who proposes, approves or rejects an erasure: the
// operator's staff, named.
func erasingStaff(by *Actor) error {
	if !by.Staff() {
		return refuse(CodeForbidden, "an erasure is recorded by the operator's staff, with who asked")
	}
	return validActor(by)
}

func (l *Ledger) erase(now time.Time, c ErasePersonalData) (Decision, error) {
	if err := erasingStaff(c.By); err != nil {
		return Decision{}, err
	}
	if err := validText("legal_ground", c.LegalGround, ReasonMax, false); err != nil {
		return Decision{}, err
	}
	if c.KeyID != "" && !ValidKeyID(c.KeyID) {
		return Decision{}, refuse(CodeInvalidRequest, "data key id %q: want 16 hex digits", c.KeyID)
	}
	e := &PersonalDataErasureProposed{Player: c.Player, KeyID: c.KeyID, Ground: GroundLegal, LegalGround: c.LegalGround, By: c.By}
	if c.Player == "" {
		if c.KeyID == "" {
			return Decision{}, refuse(CodeNotFound, "no personal data of this subject is held: never recorded, or erased already")
		}
		if c.LegalGround == "" {
			return Decision{}, refuse(CodeInvalidRequest, "legal_ground required: a staff subject's retention is the operator's to decide")
		}
	} else {
		a, err := l.liveAccount(c.Player)
		if err != nil {
			return Decision{}, err
		}
		if _, erased := a.ErasedAt(); erased {
			return Decision{}, nil // a retry: erased already
		}
		if e.Ground, err = l.erasureGround(now, a, c.LegalGround); err != nil {
			return Decision{}, err
		}
	}
	if x := l.pendingErasure(now, c.Player, c.KeyID); x != nil {
		if subjectOf(x.ProposedBy) == c.By.Subject && x.LegalGround == c.LegalGround {
			// The same proposal again (a retry): the one pending.
			return Decision{Replay: &KeyRecord{Erasure: x.ID, At: x.ProposedAt}}, nil
		}
		return Decision{}, refuse(CodeConflict, "erasure %s %s is pending until %s: approve or reject it", x.ID, x.whose(), x.ExpiresAt.Format(time.RFC3339))
	}
	if err := l.proposerPending(now, c.KeyID, ""); err != nil {
		return Decision{}, err
	}
	if len(l.Erasures) >= ErasuresKeptMax {
		return Decision{}, refuse(CodeConflict, "%d erasures are pending or recently decided, the most Tresor keeps: decide the pending ones first", len(l.Erasures))
	}
	e.Erasure, e.ExpiresAt = erasureID(l.erasuresIssued+1), now.Add(l.Settings.AdjustmentExpiry())
	return Decision{Events: []Event{e}}, nil
}

// erasureGround returns the ground on which a player's data may be erased
// at now: the end of the retention, or else the legal ground given. The
// account must be closed.
func (l *Ledger) erasureGround(now time.Time, a *Account, legalGround string) (string, error) {
	closedAt, closed := a.ClosedAt()
	if !closed {
		return "", refuse(CodeConflict, "the account of player %s is open: close it before erasing its personal data", a.Player)
	}
	ends := RetentionEnds(l.Settings, closedAt)
	switch {
	case !now.Before(ends):
		return GroundRetentionEnded, nil
	case legalGround == "":
		return "", refuse(CodeConflict, "the retention of player %s's personal data runs until %s (%d years after the account's closure): give a legal ground to erase before",
			a.Player, ends.Format(time.RFC3339), l.Settings.withDefaults().RetentionAfterClosureYears)
	}
	return GroundLegal, nil
}

// pendingErasure returns the erasure of the same person pending at now,
// or nil: a person has one at a time.
func (l *Ledger) pendingErasure(now time.Time, player, keyID string) *Erasure {
	for _, x := range l.Erasures {
		if x.pendingAt(now) && x.Player == player && (player != "" || x.KeyID == keyID) {
			return x
		}
	}
	return nil
}

// proposerPending refuses the erasure of a staff subject's data key while
// a proposal of theirs is pending (but the erasure except, which may be
// their own): four eyes compare sealed subjects, and once the key is gone
// the subject seals under a new one, which the proposal's would no longer
// match: their own approval would pass for another's.
func (l *Ledger) proposerPending(now time.Time, keyID, except string) error {
	if keyID == "" {
		return nil
	}
	var ids []string
	for _, id := range sortedKeys(l.Adjustments) {
		if a := l.Adjustments[id]; a.pendingAt(now) && SealedKeyID(subjectOf(a.ProposedBy)) == keyID {
			ids = append(ids, id)
		}
	}
	for _, id := range sortedKeys(l.Erasures) {
		if x := l.Erasures[id]; id != except && x.pendingAt(now) && SealedKeyID(subjectOf(x.ProposedBy)) == keyID {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	named := strings.Join(ids[:min(len(ids), pendingNamedMax)], ", ")
	if len(ids) > pendingNamedMax {
		named += fmt.Sprintf(" and %d more", len(ids)-pendingNamedMax)
	}
	return refuse(CodeConflict, "the subject proposed %s, pending: have another subject approve or reject them before the subject's data is erased", named)
}

// pendingNamedMax bounds the proposals a refusal names.
const pendingNamedMax = 10

// decidableErasure returns the erasure a decision names, after the checks
// common to an approval and a rejection: staff, a known erasure, and four
// eyes.
func (l *Ledger) decidableErasure(id string, by *Actor) (*Erasure, error) {
	if err := erasingStaff(by); err != nil {
		return nil, err
	}
	x := l.Erasures[id]
	if x == nil {
		if n := ErasureNumber(id); n >= 1 && n <= l.erasuresIssued {
			return nil, refuse(CodeConflict, "erasure %s was decided or expired more than %s ago", id, l.window())
		}
		return nil, refuse(CodeNotFound, "no erasure %.80q", id)
	}
	return x, fourEyes("erasure "+id, x.ProposedBy, by)
}

func (l *Ledger) approveErasure(now time.Time, c ApproveErasure) (Decision, error) {
	x, err := l.decidableErasure(c.Erasure, c.By)
	if err != nil {
		return Decision{}, err
	}
	// Approved already: the first approval erased; this one answers it.
	if again, err := x.approval(erasureTerms, x.ID, now); again || err != nil {
		return replayed(again, err, &KeyRecord{Erasure: x.ID, At: x.DecidedAt})
	}
	if err := l.proposerPending(now, x.KeyID, x.ID); err != nil {
		return Decision{}, err
	}
	ground := x.Ground
	if x.Player != "" {
		// The account may have been reopened (and closed again) since
		// the proposal: the erasure must still be lawful now.
		a, err := l.liveAccount(x.Player)
		if err != nil {
			return Decision{}, err
		}
		if ground, err = l.erasureGround(now, a, x.LegalGround); err != nil {
			return Decision{}, err
		}
	}
	return Decision{Events: []Event{&PersonalDataErased{Erasure: x.ID, Player: x.Player, KeyID: x.KeyID, Ground: ground,
		LegalGround: x.LegalGround, ProposedBy: x.ProposedBy, By: c.By}}}, nil
}

func (l *Ledger) rejectErasure(now time.Time, c RejectErasure) (Decision, error) {
	x, err := l.decidableErasure(c.Erasure, c.By)
	if err != nil {
		return Decision{}, err
	}
	if again, err := x.rejection(erasureTerms, x.ID, c.Reason, c.By, now); again || err != nil {
		return replayed(again, err, &KeyRecord{Erasure: x.ID, At: x.DecidedAt})
	}
	return Decision{Events: []Event{&PersonalDataErasureRejected{Erasure: x.ID, Player: x.Player, KeyID: x.KeyID, Reason: c.Reason, By: c.By}}}, nil
}

// evolveErasure applies a proposal, an approval (which marks a player's
// data erased; a staff subject's erasure changes nothing else the ledger
// decides on) or a rejection, and forgets the erasures decided or expired
// more than a window ago. An erasure of schema 1 approves no proposal.
func (l *Ledger) evolveErasure(at time.Time, e Event) error {
	switch e := e.(type) {
	case *PersonalDataErasureProposed:
		if l.Erasures[e.Erasure] != nil {
			return fmt.Errorf("evolve %s: erasure %s proposed twice", e.EventType(), e.Erasure)
		}
		l.Erasures[e.Erasure] = &Erasure{ID: e.Erasure, Player: e.Player, KeyID: e.KeyID, Ground: e.Ground, LegalGround: e.LegalGround,
			Proposal: newProposal(e.By, at, e.ExpiresAt)}
		l.erasuresIssued++
	case *PersonalDataErased:
		if e.Erasure != "" {
			if err := l.decideErasure(e, e.Erasure, ProposalApproved, e.By, at); err != nil {
				return err
			}
		}
		if e.Player != "" {
			a, err := l.account(e.Player)
			if err != nil {
				return err
			}
			a.erasedAt = at
		}
	case *PersonalDataErasureRejected:
		if err := l.decideErasure(e, e.Erasure, ProposalRejected, e.By, at); err != nil {
			return err
		}
	}
	for id, x := range l.Erasures {
		if !at.Before(x.forgetAt(l.window())) {
			delete(l.Erasures, id)
		}
	}
	return nil
}

// decideErasure marks a pending erasure decided.
func (l *Ledger) decideErasure(e Event, id string, state ProposalState, by *Actor, at time.Time) error {
	if x := l.Erasures[id]; x == nil || !x.decide(state, by, at) {
		return fmt.Errorf("evolve %s: no pending erasure %s", e.EventType(), id)
	}
	return nil
}

// ErasedKey is the data key of an erasure the ledger keeps, and whose it
// is: what the writer destroys once the erasure is recorded.
type ErasedKey struct {
	KeyID  string
	Player string
}

// ErasedKeys lists the data keys of the erasures approved within the
// idempotency window, by erasure: a writer destroys those its data keys
// bucket still holds when it opens and after each erasure, so that an
// erasure whose key a crash or an unreachable bucket left is finished
// without anyone asking.
func (l *Ledger) ErasedKeys() []ErasedKey {
	var out []ErasedKey
	for _, id := range sortedKeys(l.Erasures) {
		if x := l.Erasures[id]; x.State == ProposalApproved && x.KeyID != "" {
			out = append(out, ErasedKey{KeyID: x.KeyID, Player: x.Player})
		}
	}
	return out
}

// RetentionDue is a player whose personal data is due for erasure: the
// account closed at ClosedAt, and the retention ended at Ends.
type RetentionDue struct {
	Player   string    `json:"player"`
	ClosedAt time.Time `json:"closed_at"`
	Ends     time.Time `json:"retention_ends"`
}

// RetentionClock follows the events that start, stop and end the
// retention of players' personal data (closures, reopenings, erasures,
// settings), to list those due for erasure: tresor retention folds the
// stream through it.
type RetentionClock struct {
	settings Settings
	closed   map[string]time.Time
}

// NewRetentionClock returns a clock under the baseline settings.
func NewRetentionClock() *RetentionClock {
	return &RetentionClock{settings: BaselineSettings(), closed: map[string]time.Time{}}
}

// Apply follows one event recorded at at.
func (r *RetentionClock) Apply(at time.Time, e Event) {
	switch e := e.(type) {
	case *SettingsAdopted:
		r.settings = e.Settings.withDefaults()
	case *AccountClosed:
		r.closed[e.Player] = at
	case *AccountReopened:
		delete(r.closed, e.Player)
	case *PersonalDataErased:
		delete(r.closed, e.Player)
	}
}

// Due lists the players whose retention has ended at now, oldest closure
// first, under the settings in force.
func (r *RetentionClock) Due(now time.Time) []RetentionDue {
	var out []RetentionDue
	for p, at := range r.closed {
		if ends := RetentionEnds(r.settings, at); !now.Before(ends) {
			out = append(out, RetentionDue{Player: p, ClosedAt: at, Ends: ends})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].ClosedAt.Equal(out[j].ClosedAt) {
			return out[i].ClosedAt.Before(out[j].ClosedAt)
		}
		return out[i].Player < out[j].Player
	})
	return out
}

// Retention returns the settings' retention, in years after closure.
func (r *RetentionClock) Retention() int { return r.settings.withDefaults().RetentionAfterClosureYears }
