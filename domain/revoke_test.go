package domain

import "testing"

func revokeSubject(key string) RevokeTokens {
	return RevokeTokens{Subject: "bob@fdj", Reason: "left the company", Key: key, By: operator}
}

func TestARevocationIsRecordedWithWhoAndWhy(t *testing.T) {
	for _, c := range []RevokeTokens{
		revokeSubject("k1"),
		{JTI: "Yk3-9_aQ", Reason: "token pasted in a ticket", Key: "k2", By: operator},
	} {
		w := newWorld(t)
		evs := accepted(t, w, c)
		e, ok := evs[0].(*TokenRevoked)
		if len(evs) != 1 || !ok || e.JTI != c.JTI || e.Subject != c.Subject || e.Reason != c.Reason || e.By != operator || e.Key != c.Key {
			t.Fatalf("recorded %+v", evs)
		}
		if e.AggregateID() != RevocationsAggregate {
			t.Fatalf("aggregate %q", e.AggregateID())
		}
	}
}

func TestARevocationRetriedWithItsKeyIsRecordedOnce(t *testing.T) {
	w := newWorld(t)
	accepted(t, w, revokeSubject("k1"))
	d, err := w.do(revokeSubject("k1"))
	if err != nil || len(d.Events) != 0 || d.Replay == nil {
		t.Fatalf("retry: %v, events %v, replay %+v", err, types(d.Events), d.Replay)
	}
	other := revokeSubject("k1")
	other.Subject = "carol@fdj"
	refused(t, w, other, ErrConflict)
	// A key is remembered across a snapshot of the ledger too.
	b, err := EncodeLedger(w.l)
	if err != nil {
		t.Fatal(err)
	}
	if w.l, err = DecodeLedger(w.l.Rules, b); err != nil {
		t.Fatal(err)
	}
	if d, err := Decide(w.l, w.now, revokeSubject("k1")); err != nil || d.Replay == nil {
		t.Fatalf("retry after a snapshot: %v, replay %+v", err, d.Replay)
	}
}

func TestRevocationRefusals(t *testing.T) {
	finance := &Actor{Role: RoleFinance, Subject: "fin@fdj"}
	for name, tc := range map[string]struct {
		c    RevokeTokens
		code error
	}{
		"no actor":           {RevokeTokens{Subject: "bob", Reason: "r", Key: "k"}, ErrForbidden},
		"finance":            {RevokeTokens{Subject: "bob", Reason: "r", Key: "k", By: finance}, ErrForbidden},
		"neither":            {RevokeTokens{Reason: "r", Key: "k", By: operator}, ErrInvalidRequest},
		"both":               {RevokeTokens{JTI: "j", Subject: "bob", Reason: "r", Key: "k", By: operator}, ErrInvalidRequest},
		"jti with a space":   {RevokeTokens{JTI: "a b", Reason: "r", Key: "k", By: operator}, ErrInvalidRequest},
		"subject with space": {RevokeTokens{Subject: "bob smith", Reason: "r", Key: "k", By: operator}, ErrInvalidRequest},
		"no reason":          {RevokeTokens{Subject: "bob", Key: "k", By: operator}, ErrInvalidRequest},
		"no key":             {RevokeTokens{Subject: "bob", Reason: "r", By: operator}, ErrInvalidRequest},
	} {
		t.Run(name, func(t *testing.T) {
			refused(t, newWorld(t), tc.c, tc.code)
		})
	}
}
