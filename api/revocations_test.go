package api

import (
	"errors"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/golang-jwt/jwt/v5"
)

func TestRevokedTokensAreRefused(t *testing.T) {
	revokedAt := time.Date(2026, 12, 7, 14, 0, 0, 0, time.UTC)
	skew := 5 * time.Second
	v := NewRevocations(skew)
	by := &domain.Actor{Role: domain.RoleOperator, Subject: "ops"}
	v.Apply(10, revokedAt, &domain.TokenRevoked{JTI: "leaked", Reason: "pasted in a ticket", By: by})
	v.Apply(12, revokedAt, &domain.TokenRevoked{Subject: "bob", Reason: "left", By: by})
	v.Apply(11, revokedAt, &domain.TokenRevoked{Subject: "carol", Reason: "read again after an error: ignored"})
	now := revokedAt.Add(time.Minute)
	v.Fresh(now.Add(-time.Second), 20)
	claims := func(sub, jti string, iat *time.Time) *Claims {
		c := &Claims{Role: RoleOperator, RegisteredClaims: jwt.RegisteredClaims{Subject: sub, ID: jti}}
		if iat != nil {
			c.IssuedAt = jwt.NewNumericDate(*iat)
		}
		return c
	}
	before, within, after := revokedAt.Add(-time.Hour), revokedAt.Add(skew), revokedAt.Add(skew+time.Second)
	for name, tc := range map[string]struct {
		c       *Claims
		revoked bool
	}{
		"its jti":                           {claims("alice", "leaked", &before), true},
		"another jti":                       {claims("alice", "other", &before), false},
		"the subject's, issued before":      {claims("bob", "x", &before), true},
		"the subject's, within the skew":    {claims("bob", "x", &within), true},
		"the subject's, issued after":       {claims("bob", "x", &after), false},
		"the subject's, without iat":        {claims("bob", "", nil), true},
		"a subject revoked out of order":    {claims("carol", "", &before), false},
		"a player's, by its id as subject":  {&Claims{Role: RolePlayer, Player: "bob"}, true},
		"another subject, without jti, iat": {claims("dave", "", nil), false},
	} {
		err := v.check(tc.c, now)
		if got := errors.Is(err, errTokenRevoked); got != tc.revoked || (!tc.revoked && err != nil) {
			t.Errorf("%s: %v, want revoked %v", name, err, tc.revoked)
		}
	}
	// A set not read for longer than its bound refuses every token.
	if err := v.check(claims("alice", "", &after), now.Add(RevocationsStaleAfter)); !errors.Is(err, ErrNotReady) {
		t.Fatalf("stale set: %v", err)
	}
	if err := NewRevocations(skew).check(claims("alice", "", &after), now); !errors.Is(err, ErrNotReady) {
		t.Fatalf("set never read: %v", err)
	}
	if page := v.page(10, 5); len(page) != 1 || page[0].Subject != "bob" || !page[0].CoversIssuedUntil.Equal(within) {
		t.Fatalf("page after 10: %+v", page)
	}
}
