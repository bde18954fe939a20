package api

import (
	"bytes"
	"strings"
	"testing"
	"time"
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
