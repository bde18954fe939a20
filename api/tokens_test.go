package api

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// base64URL is the base64url alphabet (RFC 4648 §5) a JWT is spelled in.
const base64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// TestTokenSpellingsShareAnIdentity finds every spelling of one token that
// still verifies by changing the last character of each of its three
// segments to every other base64url character, and a few other
// respellings (padding, the standard alphabet): exactly four verify, the
// signature's (its last character carries two unused bits), and they all
// have the token's identity, which the rate limit is keyed on.
func TestTokenSpellingsShareAnIdentity(t *testing.T) {
	tokens, err := NewTokens(bytes.Repeat([]byte{7}, TokenKeySize))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := tokens.Mint(RolePlayer, "p-42", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := identityOf(t, tokens, raw)
	verified := map[string]bool{}
	for seg, end := range segmentEnds(raw) {
		for _, c := range base64URL {
			spelling := raw[:end-1] + string(c) + raw[end:]
			c, err := tokens.Verify(spelling)
			if err != nil {
				continue
			}
			if seg != 2 && spelling != raw {
				t.Errorf("segment %d respelled %q verifies", seg, spelling)
			}
			if id, _ := c.identity(); id != want {
				t.Errorf("spelling %q: identity %s, want %s", spelling, id, want)
			}
			verified[spelling] = true
		}
	}
	if len(verified) != 4 || !verified[raw] {
		t.Errorf("%d spellings verify, want the token and three others: %v", len(verified), verified)
	}
	for _, other := range []string{raw + "=", raw + "==", raw + " ", " " + raw, "Bearer " + raw} {
		if _, err := tokens.Verify(other); err == nil {
			t.Errorf("respelling %q verifies", other)
		}
	}

	// Another player, role or expiry is another identity.
	for _, mint := range []func() (string, error){
		func() (string, error) { return tokens.Mint(RolePlayer, "p-43", time.Hour, time.Now()) },
		func() (string, error) { return tokens.Mint(RoleOperator, "", time.Hour, time.Now()) },
		func() (string, error) { return tokens.Mint(RolePlayer, "p-42", 2*time.Hour, time.Now()) },
	} {
		other, err := mint()
		if err != nil {
			t.Fatal(err)
		}
		if identityOf(t, tokens, other) == want {
			t.Errorf("token %s shares the identity %s", other, want)
		}
	}
}

// segmentEnds returns the index just past each of a JWT's three segments.
func segmentEnds(raw string) []int {
	first := strings.Index(raw, ".")
	second := first + 1 + strings.Index(raw[first+1:], ".")
	return []int{first, second, len(raw)}
}

func identityOf(tb testing.TB, tokens *Tokens, raw string) string {
	tb.Helper()
	c, err := tokens.Verify(raw)
	if err != nil {
		tb.Fatal(err)
	}
	id, err := c.identity()
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

// TestTokenKeyRotation: after a rotation, a token of the previous key
// verifies until the grace ends and not after; the new key's tokens name
// it and verify; a token minted before kids existed verifies with the
// current key always and with the previous one during the grace; a kid
// of no key is refused.
func TestTokenKeyRotation(t *testing.T) {
	oldKey, newKey := bytes.Repeat([]byte{1}, TokenKeySize), bytes.Repeat([]byte{2}, TokenKeySize)
	now := time.Now()
	old, err := NewTokens(oldKey)
	if err != nil {
		t.Fatal(err)
	}
	byOld, err := old.MintFor(RoleOperator, "alice", "", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	legacyOld, legacyNew := legacyToken(t, oldKey, now), legacyToken(t, newKey, now)
	current, err := NewTokens(newKey)
	if err != nil {
		t.Fatal(err)
	}
	graceEnd := now.Add(30 * time.Minute)
	rotated, err := current.WithPrevious(oldKey, graceEnd)
	if err != nil {
		t.Fatal(err)
	}
	byNew, err := rotated.MintFor(RoleOperator, "alice", "", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if kid := headerKid(t, byNew); kid != rotated.KeyID() || kid == old.KeyID() {
		t.Errorf("new token's kid %q, want the new key's %q (the old one is %q)", kid, rotated.KeyID(), old.KeyID())
	}
	forged := forgeKid(t, byNew, "hs-0000000000000000", newKey)
	for _, tc := range []struct {
		at    time.Time
		token string
		want  error // nil: verifies
	}{
		{now, byOld, nil}, {now, legacyOld, nil}, {now, byNew, nil}, {now, legacyNew, nil},
		{now, forged, errUnknownKeyID},
		{graceEnd.Add(time.Second), byOld, errKeyRetired},
		{graceEnd.Add(time.Second), legacyOld, jwt.ErrTokenSignatureInvalid},
		{graceEnd.Add(time.Second), byNew, nil}, {graceEnd.Add(time.Second), legacyNew, nil},
	} {
		rotated.now = func() time.Time { return tc.at }
		_, err := rotated.Verify(tc.token)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("at %s, token %.30s…: %v, want %v", tc.at.Sub(now), tc.token, err, tc.want)
		}
	}

	if _, err := current.WithPrevious(newKey, graceEnd); err == nil {
		t.Error("the current key accepted as the previous one")
	}
	if _, err := current.WithPrevious(oldKey, time.Now().Add(TokenTTLMax+time.Hour)); err == nil {
		t.Error("a grace longer than any token lives accepted")
	}
}

// legacyToken is an operator token signed with key as tokens were before
// they named their key: no kid.
func legacyToken(t *testing.T, key []byte, now time.Time) string {
	t.Helper()
	c := Claims{Role: RoleOperator, RegisteredClaims: jwt.RegisteredClaims{Issuer: issuer, Subject: "alice",
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// forgeKid re-signs a token's claims with key under another kid.
func forgeKid(t *testing.T, token, kid string, key []byte) string {
	t.Helper()
	var c Claims
	if _, _, err := jwt.NewParser().ParseUnverified(token, &c); err != nil {
		t.Fatal(err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func headerKid(t *testing.T, token string) string {
	t.Helper()
	tok, _, err := jwt.NewParser().ParseUnverified(token, jwt.MapClaims{})
	if err != nil {
		t.Fatal(err)
	}
	kid, _ := tok.Header["kid"].(string)
	return kid
}
