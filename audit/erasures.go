package audit

import (
	"fmt"
	"time"

	"github.com/fdj/tresor/domain"
)

// erasureFourEyesVersion is the schema version of PersonalDataErased from
// which an erasure approves a proposal: one of version 1 was recorded at
// once, and is checked as it was written then.
const erasureFourEyesVersion = 2

// auditErasure is a proposed erasure as the auditor re-derives it: whose,
// its legal ground, its proposer, until when it may be approved, and
// whether it was decided. Every one proposed is kept, so that a second
// decision is seen.
type auditErasure struct {
	Player      string       `json:"player,omitempty"`
	KeyID       string       `json:"key_id,omitempty"`
	LegalGround string       `json:"legal_ground,omitempty"`
	By          domain.Actor `json:"by"`
	ExpiresAt   time.Time    `json:"expires_at"`
	Decided     bool         `json:"decided,omitempty"`
}

// erasureSubject names an erasure in a violation.
func erasureSubject(player, keyID string) string {
	if player == "" {
		return "erasure of data key " + keyID
	}
	return "erasure of " + player
}

// erasureProposed folds a proposal and checks it as the erasure itself is
// checked (by staff, on a ground that holds, of a closed account or a
// staff subject's key), and: an id used once, an expiry the settings in
// force give.
func (s *state) erasureProposed(seq uint64, at time.Time, e *domain.PersonalDataErasureProposed) {
	c := s.ctl
	c.counts.ErasuresProposed++
	subject := erasureSubject(e.Player, e.KeyID) + " (" + e.Erasure + ")"
	s.erasureLawful(seq, at, subject, e.Player, e.KeyID, e.Ground, e.LegalGround, e.By)
	switch {
	case c.erasures[e.Erasure] != nil:
		s.bad(seq, CodeErasureInvalid, subject, "an erasure id used once", "proposed again")
	case c.known && !e.ExpiresAt.Equal(at.Add(c.settings.AdjustmentExpiry())):
		s.bad(seq, CodeErasureInvalid, subject, "an expiry of "+c.settings.AdjustmentExpiry().String()+" after the proposal", e.ExpiresAt.Sub(at))
	}
	x := &auditErasure{Player: e.Player, KeyID: e.KeyID, LegalGround: e.LegalGround, ExpiresAt: e.ExpiresAt}
	if e.By != nil {
		x.By = *e.By
	}
	c.erasures[e.Erasure] = x
}

// personalDataErased checks an erasure: lawful (erasureLawful) and, from
// schema 2 on, the approval of a pending proposal of the same person, with
// its legal ground, by a subject other than its proposer, before its
// expiry.
func (s *state) personalDataErased(seq uint64, at time.Time, version uint32, e *domain.PersonalDataErased) {
	s.ctl.counts.Erasures++
	subject := erasureSubject(e.Player, e.KeyID)
	s.erasureLawful(seq, at, subject, e.Player, e.KeyID, e.Ground, e.LegalGround, e.By)
	if version < erasureFourEyesVersion {
		return
	}
	if e.Erasure == "" {
		s.bad(seq, CodeErasureInvalid, subject, "the proposal it approves, another subject's", "none")
		return
	}
	x := s.erasureDecided(seq, at, e.Erasure, e.Player, e.KeyID, e.By)
	if x != nil && (x.LegalGround != e.LegalGround || x.By.Subject != subjectOf(e.ProposedBy)) {
		s.bad(seq, CodeErasureInvalid, subject+" ("+e.Erasure+")", "the proposal's legal ground and proposer, "+x.By.Subject,
			fmt.Sprintf("legal ground %q by %s", e.LegalGround, subjectOf(e.ProposedBy)))
	}
}

// erasureRejected checks a rejection: a decision of a pending proposal,
// with a reason.
func (s *state) erasureRejected(seq uint64, at time.Time, e *domain.PersonalDataErasureRejected) {
	s.ctl.counts.ErasuresRejected++
	s.erasureDecided(seq, at, e.Erasure, e.Player, e.KeyID, e.By)
	if e.Reason == "" {
		s.bad(seq, CodeErasureInvalid, erasureSubject(e.Player, e.KeyID)+" ("+e.Erasure+")", "a rejection with a reason", "none")
	}
}

// erasureDecided checks an approval or a rejection against its proposal:
// one pending, of the same person, decided before its expiry by staff
// other than the proposer. A proposal before the seal a partial audit
// starts from is unknown: only what the event carries is checked then.
// It returns the proposal, or nil.
func (s *state) erasureDecided(seq uint64, at time.Time, id, player, keyID string, by *domain.Actor) *auditErasure {
	c := s.ctl
	subject := erasureSubject(player, keyID) + " (" + id + ")"
	if !by.Staff() || !domain.ValidStaffSubject(by.Subject) {
		s.bad(seq, CodeErasureInvalid, subject, "a decision by the operator's staff, named", "by "+actorName(by))
	}
	x := c.erasures[id]
	switch {
	case x == nil && !c.eraseAnchored:
		return nil
	case x == nil:
		s.bad(seq, CodeErasureInvalid, subject, "a decision of a proposed erasure", "no PersonalDataErasureProposed")
		return nil
	case x.Decided:
		s.bad(seq, CodeErasureInvalid, subject, "one decision", "decided again")
	case x.Player != player || x.KeyID != keyID:
		s.bad(seq, CodeErasureInvalid, subject, "a decision of the proposal's person, "+erasureSubject(x.Player, x.KeyID), erasureSubject(player, keyID))
	case by != nil && by.Subject == x.By.Subject:
		s.bad(seq, CodeFourEyesBroken, subject, "a decision by a subject other than the proposer, "+x.By.Subject, by.Subject)
	case !at.Before(x.ExpiresAt):
		s.bad(seq, CodeErasureInvalid, subject, "a decision before "+x.ExpiresAt.Format(time.RFC3339), at.Format(time.RFC3339Nano))
	}
	x.Decided = true
	return x
}

// erasureLawful checks what makes an erasure lawful, proposed or
// recorded: by a named staff member, on a known ground (a legal ground
// with its text; the end of the retention only once it has ended), of a
// closed account or of a staff subject's data key. What it erases is not
// the audit's to read: every field it checks is in clear or sealed alike.
func (s *state) erasureLawful(seq uint64, at time.Time, subject, player, keyID, ground, legalGround string, by *domain.Actor) {
	switch {
	case !by.Staff() || !domain.ValidStaffSubject(by.Subject):
		s.bad(seq, CodeErasureInvalid, subject, "an erasure by the operator's staff, named", "by "+actorName(by))
	case ground != domain.GroundLegal && ground != domain.GroundRetentionEnded:
		s.bad(seq, CodeErasureInvalid, subject, "ground retention_ended or legal_ground", ground)
	case ground == domain.GroundLegal && legalGround == "":
		s.bad(seq, CodeErasureInvalid, subject, "the legal ground's text", "none")
	case keyID != "" && !domain.ValidKeyID(keyID), player == "" && keyID == "":
		s.bad(seq, CodeErasureInvalid, subject, "the data key it destroys (16 hex digits)", keyID)
	}
	if player == "" {
		return
	}
	s.known(seq, player)
	p := s.ctl.player(player)
	switch {
	case !p.anchored:
	case !p.closed:
		s.bad(seq, CodeErasureInvalid, subject, "the erasure of a closed account", "an open account")
	case ground == domain.GroundRetentionEnded && at.Before(domain.RetentionEnds(s.ctl.settings, p.closedAt)):
		s.bad(seq, CodeErasureInvalid, subject, "a legal ground before the retention ends at "+domain.RetentionEnds(s.ctl.settings, p.closedAt).Format(time.RFC3339),
			"retention_ended at "+at.Format(time.RFC3339))
	}
}
