package domain

import (
	"regexp"
	"strings"
)

// SealedPrefix opens every personal field sealed under a person's data key
// (docs/privacy.md): "sealed:v1:<key id>:<base64url of nonce, ciphertext
// and tag>". The writer seals commands' personal fields before it decides,
// so that the stream, the ledger, its snapshots and every read model hold
// only this form; erasing a person destroys the key, and the field then
// reads as ErasedText while every hash still covers the same bytes.
const SealedPrefix = "sealed:v1:"

// ErasedText is what a sealed field whose data key is gone (erased, or
// lost) reads as. It is no valid subject, so an erased subject can never
// be taken for a live one.
const ErasedText = "[erased]"

// keyIDPattern is the shape of a data key's id: 16 hex digits, random, so
// that it names the person's key without saying anything of them.
var keyIDPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// ValidKeyID reports whether s can name a data key.
func ValidKeyID(s string) bool { return keyIDPattern.MatchString(s) }

// IsSealed reports whether a field holds a sealed value.
func IsSealed(s string) bool { return strings.HasPrefix(s, SealedPrefix) }

// SealedKeyID returns the id of the data key a sealed value is sealed
// under, or "" for a value that is not sealed.
func SealedKeyID(s string) string {
	if !IsSealed(s) {
		return ""
	}
	id, _, ok := strings.Cut(s[len(SealedPrefix):], ":")
	if !ok || !ValidKeyID(id) {
		return ""
	}
	return id
}

// Owner is the person whose data key seals a field: a player (by the
// account's id) or a staff subject (by the token's subject). Exactly one
// is set.
type Owner struct {
	Player  string
	Subject string
}

// PersonalSealer seals personal fields under their owner's data key, the
// same plaintext under the same key always to the same value, so that the
// decider compares sealed subjects and references as it compared them in
// clear. The writer's keyring implements it.
type PersonalSealer interface {
	// Seal seals plain under o's data key, creating the key on first use.
	Seal(o Owner, plain string) (string, error)
	// KeyOf returns the id of o's data key; ok is false when o has none
	// (never had one, or it was erased).
	KeyOf(o Owner) (keyID string, ok bool, err error)
	// Pseudonym names a subject by a keyed hash that no erasure destroys
	// (PseudonymPrefix): what a token revocation is matched by.
	Pseudonym(subject string) (string, error)
}

// PseudonymPrefix opens a subject's pseudonym: "ref:v1:" and 32 hex
// digits of an HMAC of the subject under a key kept with the data keys.
const PseudonymPrefix = "ref:v1:"

// pseudonymPattern is the shape of a pseudonym.
var pseudonymPattern = regexp.MustCompile(`^ref:v1:[0-9a-f]{32}$`)

// ValidPseudonym reports whether s is a subject's pseudonym.
func ValidPseudonym(s string) bool { return pseudonymPattern.MatchString(s) }

// SealCommand returns cmd with its personal fields sealed: the subjects of
// staff actors (a player's subject is its account id, which stays in
// clear), and free text (reasons, references, a legal ground) under the
// player's key when the command names a player, otherwise under the
// acting staff subject's. Each field is checked in clear first, with the
// decider's bounds, since the decider sees only its sealed form. Commands
// without personal fields are returned as they are.
func SealCommand(cmd Command, s PersonalSealer) (Command, error) {
	p := &personalSealing{s: s}
	switch c := cmd.(type) {
	case ConfigureAccount:
		c.By = p.seal(c.By, reason(&c.Reason, Owner{Player: c.Player}))
		cmd = c
	case Deposit:
		c.By = p.seal(c.By)
		cmd = c
	case Withdraw:
		c.By = p.seal(c.By)
		cmd = c
	case CreateEmission:
		c.By = p.seal(c.By)
		cmd = c
	case CloseBlock:
		c.By = p.seal(c.By, reason(&c.Reason, staffOwner(c.By)))
		cmd = c
	case BanPlayer:
		c.By = p.seal(c.By, reference(&c.Reference, Owner{Player: c.Player}), reason(&c.Reason, Owner{Player: c.Player}))
		cmd = c
	case LiftBan:
		c.By = p.seal(c.By, reference(&c.Reference, Owner{Player: c.Player}), reason(&c.Reason, Owner{Player: c.Player}))
		cmd = c
	case SuspendSales:
		c.By = p.seal(c.By, reason(&c.Reason, staffOwner(c.By)))
		cmd = c
	case ResumeSales:
		c.By = p.seal(c.By, reason(&c.Reason, staffOwner(c.By)))
		cmd = c
	case CloseAccount:
		c.By = p.seal(c.By, reason(&c.Reason, Owner{Player: c.Player}))
		cmd = c
	case ReopenAccount:
		c.By = p.seal(c.By, reason(&c.Reason, Owner{Player: c.Player}))
		cmd = c
	case ProposeAdjustment:
		c.By = p.seal(c.By, reference(&c.Reference, Owner{Player: c.Player}), reason(&c.Reason, Owner{Player: c.Player}))
		cmd = c
	case ApproveAdjustment:
		c.By = p.seal(c.By)
		cmd = c
	case RejectAdjustment:
		c.By = p.seal(c.By, reason(&c.Reason, staffOwner(c.By)))
		cmd = c
	case ApproveErasure:
		c.By = p.seal(c.By)
		cmd = c
	case RejectErasure:
		c.By = p.seal(c.By, reason(&c.Reason, staffOwner(c.By)))
		cmd = c
	case RevokeTokens:
		cmd = p.revocation(c)
	case ErasePersonalData:
		c.KeyID = p.keyOf(c)
		// The legal ground is the eraser's words: sealed under the
		// eraser's key, it outlives the erasure of the person it names.
		c.By = p.seal(c.By, textField{"legal_ground", &c.LegalGround, ReasonMax, staffOwner(c.By)})
		cmd = c
	}
	return cmd, p.err
}

// textField is one field of free text a command carries, and whose it is.
type textField struct {
	what  string
	s     *string
	max   int
	owner Owner
}

func reason(s *string, o Owner) textField    { return textField{"reason", s, ReasonMax, o} }
func reference(s *string, o Owner) textField { return textField{"reference", s, ReferenceMax, o} }

// seal seals the texts of a command (in place) and returns its actor
// sealed: the texts first, whose owner may be the actor in clear.
func (p *personalSealing) seal(by *Actor, texts ...textField) *Actor {
	for _, t := range texts {
		*t.s = p.text(t.what, *t.s, t.max, t.owner)
	}
	return p.actor(by)
}

// personalSealing seals the fields of one command, keeping the first
// error.
type personalSealing struct {
	s   PersonalSealer
	err error
}

// staffOwner is the owner of free text that names no player: the staff
// subject who wrote it, or nobody for the system (whose text is not
// personal).
func staffOwner(by *Actor) Owner {
	if by.Staff() {
		return Owner{Subject: by.Subject}
	}
	return Owner{}
}

// text checks and seals one field of free text; "" stays "", as does text
// of no owner.
func (p *personalSealing) text(what, s string, max int, o Owner) string {
	if p.err != nil || s == "" {
		return s
	}
	if p.err = validText(what, s, max, false); p.err != nil {
		return s
	}
	if IsSealed(s) {
		p.err = refuse(CodeInvalidRequest, "%s: text may not start with %q", what, SealedPrefix)
		return s
	}
	if o == (Owner{}) {
		return s
	}
	sealed, err := p.s.Seal(o, s)
	if err != nil {
		p.err = err
		return s
	}
	return sealed
}

// actor returns a copy of a staff actor with its subject sealed under its
// own key; a player (whose subject is the account id) and the system stay
// as they are.
func (p *personalSealing) actor(a *Actor) *Actor {
	if p.err != nil || !a.Staff() {
		return a
	}
	if p.err = validActor(a); p.err != nil {
		return a
	}
	if !ValidSubject(a.Subject) { // validActor takes a sealed one too
		p.err = badSubject("actor subject", a.Subject)
		return a
	}
	sealed, err := p.s.Seal(Owner{Subject: a.Subject}, a.Subject)
	if err != nil {
		p.err = err
		return a
	}
	return &Actor{Role: a.Role, Subject: sealed}
}

// keyOf resolves the data key an erasure destroys: the player's, or the
// staff subject's (whose subject never reaches the stream: the erasure
// names the key).
func (p *personalSealing) keyOf(c ErasePersonalData) string {
	if p.err != nil {
		return ""
	}
	o := Owner{Player: c.Player, Subject: c.Subject}
	if c.Player != "" && c.Subject != "" {
		p.err = refuse(CodeInvalidRequest, "an erasure names a player or a subject, not both")
		return ""
	}
	if c.Subject != "" && !ValidSubject(c.Subject) {
		p.err = badSubject("subject", c.Subject)
		return ""
	}
	if c.Player != "" && !ValidID(c.Player) {
		p.err = refuse(CodeInvalidRequest, "player id %q: want 1 to 64 letters, digits, '-' or '_'", c.Player)
		return ""
	}
	id, _, err := p.s.KeyOf(o)
	p.err = err
	return id
}

// revocation seals a token revocation: the revoked subject under its own
// key, with its pseudonym beside it for the API to match tokens by, and
// the reason under the revoked subject's key (the revoker's for a single
// token's).
func (p *personalSealing) revocation(c RevokeTokens) RevokeTokens {
	owner := staffOwner(c.By)
	if c.Subject != "" && p.err == nil {
		if !ValidSubject(c.Subject) {
			p.err = badSubject("subject", c.Subject)
			return c
		}
		owner = Owner{Subject: c.Subject}
		c.SubjectRef, p.err = p.s.Pseudonym(c.Subject)
		c.Subject = p.text("subject", c.Subject, ReasonMax, owner)
	}
	c.By = p.seal(c.By, reason(&c.Reason, owner))
	return c
}

// badSubject refuses text that cannot name a subject.
func badSubject(what, s string) error {
	return refuse(CodeInvalidRequest, "%s %.80q: want 1 to 128 of letters, digits, '_', '.', '@', '+' or '-'", what, s)
}
