package domain

import "time"

// RevokeTokens withdraws API tokens at once: the one whose id (the JWT's
// jti) is JTI, or every token of Subject issued up to the revocation (a
// staff member leaving). Exactly one of the two is given. Reason says why
// and By who (an operator); Key makes retries safe. Tresor does not hold
// the tokens: the API refuses a revoked one as it verifies it.
type RevokeTokens struct {
	JTI     string
	Subject string
	// SubjectRef is the subject's pseudonym (PersonalSealer.Pseudonym),
	// set by the writer when it seals Subject.
	SubjectRef string
	Reason     string
	Key        string
	By         *Actor
}

func (RevokeTokens) command() {}

// TokenRevoked records a revocation of tokens: of one token (JTI) or of
// every token of a subject issued up to the time it is recorded (Subject).
// Every node applies it to the set of revoked tokens it checks each
// request against.
//
// Subject is sealed like every staff subject (schema 2); SubjectRef, its
// pseudonym, is what the API matches tokens against, so that a revocation
// outlives the erasure of its subject's data key (docs/privacy.md).
type TokenRevoked struct {
	JTI        string `json:"jti,omitempty"`
	Subject    string `json:"subject,omitempty"`
	SubjectRef string `json:"subject_ref,omitempty"`
	Reason     string `json:"reason"`
	Key        string `json:"idempotency_key,omitempty"`
	By         *Actor `json:"by,omitempty"`
}

func (*TokenRevoked) EventType() string { return TypeTokenRevoked }

// AggregateID: every revocation is on one aggregate, so that a node reads
// them all, and learns whether it holds the last, with one subject.
func (*TokenRevoked) AggregateID() string { return RevocationsAggregate }

// RevocationsAggregate is the aggregate of every TokenRevoked.
const RevocationsAggregate = "tokens.revocations"

// revocationRequest is what a revocation's key remembers of it, so that a
// key used again for another revocation is a conflict.
func revocationRequest(jti, subject, reason string) string {
	return "jti=" + jti + "\x00subject=" + subject + "\x00reason=" + reason
}

func (l *Ledger) revokeTokens(c RevokeTokens) (Decision, error) {
	switch {
	case c.By == nil || c.By.Role != RoleOperator:
		return Decision{}, refuse(CodeForbidden, "an operator revokes tokens, and the revocation records which one")
	case (c.JTI == "") == (c.Subject == ""):
		return Decision{}, refuse(CodeInvalidRequest, "a revocation names a token (jti) or a subject, exactly one of them")
	case c.JTI != "" && !keyPattern.MatchString(c.JTI):
		return Decision{}, refuse(CodeInvalidRequest, "jti %.80q: want 1 to 128 visible ASCII characters (no spaces)", c.JTI)
	case c.Subject != "" && !ValidStaffSubject(c.Subject):
		return Decision{}, badSubject("subject", c.Subject)
	}
	if err := validActor(c.By); err != nil {
		return Decision{}, err
	}
	if err := validText("reason", c.Reason, ReasonMax, true); err != nil {
		return Decision{}, err
	}
	if r, err := l.replay("", KeyRevocation, c.Key, revocationRequest(c.JTI, c.Subject, c.Reason)); err != nil || r != nil {
		return Decision{Replay: r}, err
	}
	if c.SubjectRef != "" && !ValidPseudonym(c.SubjectRef) {
		return Decision{}, refuse(CodeInvalidRequest, "subject pseudonym %.80q: want %s and 32 hex digits", c.SubjectRef, PseudonymPrefix)
	}
	return Decision{Events: []Event{&TokenRevoked{JTI: c.JTI, Subject: c.Subject, SubjectRef: c.SubjectRef, Reason: c.Reason, Key: c.Key, By: c.By}}}, nil
}

// evolveRevocation remembers a revocation's key: the revoked set itself is
// the API's, not the writer's.
func (l *Ledger) evolveRevocation(at time.Time, e *TokenRevoked) {
	l.remember("", KeyRevocation, e.Key, &KeyRecord{Request: revocationRequest(e.JTI, e.Subject, e.Reason), At: at})
}
