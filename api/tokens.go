package api

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/golang-jwt/jwt/v5"
)

// Role is what a token may do.
type Role string

// The four roles: a player plays on their own account, the operator runs
// the game and its players' accounts, finance and the regulator read
// (docs/api.md says what each may call).
const (
	RolePlayer    Role = "player"
	RoleOperator  Role = "operator"
	RoleFinance   Role = "finance"
	RoleRegulator Role = "regulator"
)

// ValidRole reports whether r is one of the four roles.
func ValidRole(r Role) bool {
	return r == RolePlayer || r == RoleOperator || r == RoleFinance || r == RoleRegulator
}

// TokenKeySize is the size of the HMAC-SHA256 key that signs tokens.
const TokenKeySize = 32

// TokenTTLMax bounds a token's life, so that a leaked one expires.
const TokenTTLMax = 30 * 24 * time.Hour

// issuer names Tresor in its tokens, so that a token of another service
// signed with the same key by mistake is refused.
const issuer = "tresor"

// Claims is what a token carries: a role, the player id for a player, and
// the registered claims: expiry, and the subject (sub), who the token was
// minted for. A player's subject is the player id; an operator's,
// finance's or regulator's names the person or service, and every command
// it gives records it (domain.Actor). Tokens minted before subjects existed
// have none: they may still read, but give no command.
type Claims struct {
	Role   Role   `json:"role"`
	Player string `json:"player,omitempty"`
	jwt.RegisteredClaims
}

// Tokens mints and verifies the API's bearer tokens (JWT, HS256) with the
// current key, and verifies, until its grace ends, the tokens of the key it
// replaced. A token names its key by a kid header, an id derived from the
// key (tokenKeyID); a token without one, minted before kids existed, is
// tried with both.
type Tokens struct {
	key []byte
	kid string
	// previous is the replaced key, nil when there is none.
	previous *previousTokenKey
	// now is the clock of the grace and of expiries.
	now func() time.Time
}

// previousTokenKey is a replaced key and the end of its grace.
type previousTokenKey struct {
	key   []byte
	kid   string
	until time.Time
}

// NewTokens returns Tokens over a key of TokenKeySize bytes.
func NewTokens(key []byte) (*Tokens, error) {
	if len(key) != TokenKeySize {
		return nil, fmt.Errorf("token key: %d bytes, want %d", len(key), TokenKeySize)
	}
	return &Tokens{key: key, kid: tokenKeyID(key), now: time.Now}, nil
}

// WithPrevious returns Tokens that also accept the tokens of previous, the
// key this one replaced, until until: a grace for the tokens minted before
// the rotation, at most TokenTTLMax from now since none lives longer.
func (t *Tokens) WithPrevious(previous []byte, until time.Time) (*Tokens, error) {
	switch kid := tokenKeyID(previous); {
	case len(previous) != TokenKeySize:
		return nil, fmt.Errorf("previous token key: %d bytes, want %d", len(previous), TokenKeySize)
	case kid == t.kid:
		return nil, errors.New("previous token key: the same as the current key")
	case until.After(t.now().Add(TokenTTLMax)):
		return nil, fmt.Errorf("previous token key's grace until %s: more than %s from now, longer than any token lives", until.Format(time.RFC3339), TokenTTLMax)
	default:
		next := *t
		next.previous = &previousTokenKey{key: previous, kid: kid, until: until}
		return &next, nil
	}
}

// KeyID is the kid of the current key, which every token minted names.
func (t *Tokens) KeyID() string { return t.kid }

// tokenKeyID names a token key in its tokens' kid header: an HMAC of a
// fixed label under the key, which names it without revealing it.
func tokenKeyID(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("tresor token key id"))
	return "hs-" + hex.EncodeToString(m.Sum(nil)[:8])
}

// Mint signs a token for role (and player, for a player) valid for ttl. A
// player's subject is the player id; a token of another role minted here
// has none, so it may read but gives no command: MintFor names it.
func (t *Tokens) Mint(role Role, player string, ttl time.Duration, now time.Time) (string, error) {
	return t.MintFor(role, player, player, ttl, now)
}

// MintFor signs a token for role, naming its subject (who it is for: a
// player's is their player id, "" defaults to it), valid for ttl.
func (t *Tokens) MintFor(role Role, subject, player string, ttl time.Duration, now time.Time) (string, error) {
	if role == RolePlayer && subject == "" {
		subject = player
	}
	switch {
	case !ValidRole(role):
		return "", fmt.Errorf("role %q: want player, operator, finance or regulator", role)
	case role == RolePlayer && !domain.ValidID(player):
		return "", fmt.Errorf("player %q: a player token needs a valid player id", player)
	case role != RolePlayer && player != "":
		return "", errors.New("only a player token carries a player id")
	case role == RolePlayer && subject != player:
		return "", fmt.Errorf("subject %q: a player token's subject is its player id %q", subject, player)
	case subject != "" && !domain.ValidSubject(subject):
		return "", fmt.Errorf("subject %.80q: want 1 to 128 of letters, digits, '_', '.', '@', '+' or '-', starting with a letter or digit", subject)
	case ttl <= 0 || ttl > TokenTTLMax:
		return "", fmt.Errorf("ttl %s: want more than 0 and at most %s", ttl, TokenTTLMax)
	}
	c := Claims{Role: role, Player: player, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: issuer, Subject: subject, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)), ID: rand.Text(),
	}}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	tok.Header["kid"] = t.kid
	s, err := tok.SignedString(t.key)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return s, nil
}

// Verify checks a token's signature, algorithm, key, issuer and expiry and
// returns its claims.
func (t *Tokens) Verify(raw string) (*Claims, error) {
	var c Claims
	_, err := jwt.ParseWithClaims(raw, &c, t.keyOf, jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(issuer), jwt.WithExpirationRequired(), jwt.WithTimeFunc(t.now))
	if err != nil {
		return nil, fmt.Errorf("verify token: %w", err)
	}
	if !ValidRole(c.Role) || (c.Role == RolePlayer) != (c.Player != "") {
		return nil, errRoleAndPlayer
	}
	if c.Subject != "" && (!domain.ValidSubject(c.Subject) || (c.Role == RolePlayer && c.Subject != c.Player)) {
		return nil, errBadSubject
	}
	return &c, nil
}

// keyOf is the key a token's kid names: the current key, the previous one
// during its grace, both for a token without a kid.
func (t *Tokens) keyOf(tok *jwt.Token) (any, error) {
	kid, named := tok.Header["kid"]
	inGrace := t.previous != nil && t.now().Before(t.previous.until)
	switch {
	case !named && inGrace:
		return jwt.VerificationKeySet{Keys: []jwt.VerificationKey{t.key, t.previous.key}}, nil
	case !named || kid == t.kid:
		return t.key, nil
	case t.previous != nil && kid == t.previous.kid && inGrace:
		return t.previous.key, nil
	case t.previous != nil && kid == t.previous.kid:
		return nil, errKeyRetired
	}
	return nil, errUnknownKeyID
}

// Reasons a verified signature is still refused.
var (
	errRoleAndPlayer = errors.New("verify token: role and player do not agree")
	errBadSubject    = errors.New("verify token: malformed subject, or a player's subject other than the player")
	errNoRole        = errors.New("verify token: no role claim, or not a string")
	errLifetime      = errors.New("verify token: no issue time, or a life longer than any token's")
)

// Reasons a token's key is refused.
var (
	errUnknownKeyID = errors.New("unknown key id")
	errKeyRetired   = errors.New("a replaced key whose grace has ended")
	errNoKeyID      = errors.New("no key id")
)

// Actor is who the token's commands are recorded as given by: its role and
// subject (a player's id when it names none); nil for a token of another
// role without a subject.
func (c *Claims) Actor() *domain.Actor {
	subject := c.Subject
	if subject == "" && c.Role == RolePlayer {
		subject = c.Player
	}
	if subject == "" {
		return nil
	}
	return &domain.Actor{Role: string(c.Role), Subject: subject}
}

// identity is what a token is known by, for its rate limit: its verified
// claims, not its spelling. One HS256 signature has four base64url
// spellings that verify (its last character carries two unused bits,
// which golang-jwt ignores), so a key on the raw token would give one
// token four budgets.
func (c *Claims) identity() (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("token identity: %w", err)
	}
	return string(b), nil
}
