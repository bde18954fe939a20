package domain

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var (
	finance   = &Actor{Role: RoleFinance, Subject: "fin"}
	operator2 = &Actor{Role: RoleOperator, Subject: "ops2"}
)

// proposal is an adjustment of p1's account proposed by the operator.
func proposal(player string, d AdjustmentDirection, k AdjustmentKind, amount Amount) ProposeAdjustment {
	return ProposeAdjustment{Player: player, Direction: d, Kind: k, Amount: amount, Reference: "case-42",
		Reason: "the payment provider reversed the deposit", By: operator}
}

// proposed is a funded player (100.00) with adjustment A1 pending: a
// credit of 5.00 for goodwill.
func proposed(tb testing.TB) *world {
	return funded(tb).given(proposal("p1", Credit, Goodwill, 500))
}

func TestAnApprovedAdjustmentMovesMoneyOnceAgainstItsHouseAccount(t *testing.T) {
	for _, tc := range []struct {
		d       AdjustmentDirection
		k       AdjustmentKind
		balance Amount
		debit   string
	}{
		{Credit, Goodwill, 10500, "house.goodwill"},
		{Credit, MalfunctionRefund, 10500, "house.malfunction_refund"},
		{Debit, Chargeback, 9500, "player.p1"},
		{Debit, Correction, 9500, "player.p1"},
	} {
		t.Run(string(tc.d)+" "+string(tc.k), func(t *testing.T) {
			// given a funded player
			w := funded(t)
			// when an operator proposes an adjustment, nothing moves
			evs := accepted(t, w, proposal("p1", tc.d, tc.k, 500))
			p, ok := evs[0].(*AdjustmentProposed)
			if !ok || len(evs) != 1 || p.Adjustment != "A1" || !p.ExpiresAt.Equal(w.now.Add(72*time.Hour)) || len(Postings(p)) != 0 {
				t.Fatalf("proposed %+v", evs)
			}
			if w.l.Accounts["p1"].Balance != 10000 {
				t.Fatalf("balance %s after a proposal", w.l.Accounts["p1"].Balance)
			}
			// then another subject approves it and the money moves, in
			// double entry against the kind's house account
			w.now = w.now.Add(time.Hour)
			evs = accepted(t, w, ApproveAdjustment{Adjustment: "A1", By: finance})
			a, ok := evs[0].(*AdjustmentApproved)
			if !ok || len(evs) != 1 || a.Balance != tc.balance || a.ProposedBy != operator || a.By != finance {
				t.Fatalf("approved %+v", evs)
			}
			ps := Postings(a)
			if len(ps) != 1 || ps[0].Debit != tc.debit || ps[0].Amount != 500 || w.l.Accounts["p1"].Balance != tc.balance {
				t.Fatalf("postings %+v, balance %s", ps, w.l.Accounts["p1"].Balance)
			}
			// and approving it again answers it and moves nothing
			d, err := Decide(w.l, w.now, ApproveAdjustment{Adjustment: "A1", By: operator2})
			if err != nil || len(d.Events) != 0 || d.Replay == nil || d.Replay.Adjustment != "A1" {
				t.Fatalf("approved again: %+v %v", d, err)
			}
		})
	}
}

func TestAProposalRetriedAnswersThePendingOne(t *testing.T) {
	w := proposed(t)
	d, err := Decide(w.l, w.now, proposal("p1", Credit, Goodwill, 500))
	if err != nil || len(d.Events) != 0 || d.Replay == nil || d.Replay.Adjustment != "A1" {
		t.Fatalf("retried: %+v %v", d, err)
	}
	// another amount, or another proposer, is another adjustment
	if evs := accepted(t, w, proposal("p1", Credit, Goodwill, 501)); evs[0].(*AdjustmentProposed).Adjustment != "A2" {
		t.Fatalf("another amount: %v", types(evs))
	}
	by2 := proposal("p1", Credit, Goodwill, 500)
	by2.By = operator2
	if evs := accepted(t, w, by2); evs[0].(*AdjustmentProposed).Adjustment != "A3" {
		t.Fatalf("another proposer: %v", types(evs))
	}
}

func TestAnApprovalRacingARejectionLosesToIt(t *testing.T) {
	// given a pending adjustment, rejected first
	w := proposed(t)
	accepted(t, w, RejectAdjustment{Adjustment: "A1", Reason: "no ticket", By: finance})
	// then the approval that follows is refused, naming the rejection
	_, err := Decide(w.l, w.now, ApproveAdjustment{Adjustment: "A1", By: operator2})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "rejected by fin") {
		t.Fatalf("approval after a rejection: %v", err)
	}
	// and the other way round: approved first, the rejection is refused
	w = proposed(t)
	accepted(t, w, ApproveAdjustment{Adjustment: "A1", By: operator2})
	_, err = Decide(w.l, w.now, RejectAdjustment{Adjustment: "A1", Reason: "too late", By: finance})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "approved by ops2") {
		t.Fatalf("rejection after an approval: %v", err)
	}
	if w.l.Accounts["p1"].Balance != 10500 {
		t.Fatalf("balance %s", w.l.Accounts["p1"].Balance)
	}
}

func TestAnAdjustmentPastItsExpiryNeverMovesMoney(t *testing.T) {
	// given an adjustment pending for the settings' 72 hours
	w := proposed(t)
	w.now = w.now.Add(72*time.Hour - time.Nanosecond)
	if _, err := Decide(w.l, w.now, ApproveAdjustment{Adjustment: "A1", By: finance}); err != nil {
		t.Fatalf("just before its expiry: %v", err)
	}
	// when its time has passed, its approval is refused
	w.now = w.now.Add(time.Nanosecond)
	refused(t, w, ApproveAdjustment{Adjustment: "A1", By: finance}, ErrAdjustmentExpired)
	refused(t, w, RejectAdjustment{Adjustment: "A1", Reason: "late", By: finance}, ErrAdjustmentExpired)
	// and once a window has passed too, it is forgotten but still not
	// approvable
	w.now = w.now.Add(w.l.window())
	w.given(proposal("p1", Credit, Goodwill, 100))
	if w.l.Adjustments["A1"] != nil {
		t.Fatal("A1 kept past its window")
	}
	refused(t, w, ApproveAdjustment{Adjustment: "A1", By: finance}, ErrConflict)
	if w.l.Accounts["p1"].Balance != 10000 {
		t.Fatalf("balance %s", w.l.Accounts["p1"].Balance)
	}
}

func TestTheExpiryIsAJurisdictionSetting(t *testing.T) {
	w := funded(t)
	s := BaselineSettings()
	s.Version, s.AdjustmentExpiryHours = "fr-short", 1
	w.given(AdoptSettings{Settings: s}, proposal("p1", Credit, Goodwill, 100))
	w.now = w.now.Add(time.Hour)
	refused(t, w, ApproveAdjustment{Adjustment: "A1", By: finance}, ErrAdjustmentExpired)
	// settings recorded before adjustments existed read as the baseline
	legacy := BaselineSettings()
	legacy.Version, legacy.AdjustmentExpiryHours = "fr-legacy", 0
	w.given(AdoptSettings{Settings: legacy})
	if w.l.Settings.AdjustmentExpiryHours != AdjustmentExpiryBaselineHours || w.l.Settings.AdjustmentExpiry() != 72*time.Hour {
		t.Fatalf("legacy settings: %+v", w.l.Settings)
	}
}

func TestAdjustmentRefusals(t *testing.T) {
	player := &Actor{Role: RolePlayer, Subject: "p1"}
	regulator := &Actor{Role: RoleRegulator, Subject: "reg"}
	closed := func(tb testing.TB) *world {
		return proposed(tb).given(Withdraw{Player: "p1", Amount: 10000, Key: "all"},
			CloseAccount{Player: "p1", Reason: "leaves", By: operator})
	}
	spent := func(tb testing.TB) *world {
		return funded(tb).given(proposal("p1", Debit, Chargeback, 6000), Withdraw{Player: "p1", Amount: 5000, Key: "w"})
	}
	with := func(f func(*ProposeAdjustment)) ProposeAdjustment {
		c := proposal("p1", Credit, Goodwill, 500)
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name  string
		given func(tb testing.TB) *world
		when  Command
		then  error
	}{
		{"the proposer approves", proposed, ApproveAdjustment{Adjustment: "A1", By: operator}, ErrFourEyes},
		{"the proposer under another role", proposed, ApproveAdjustment{Adjustment: "A1", By: &Actor{Role: RoleFinance, Subject: operator.Subject}}, ErrFourEyes},
		{"the proposer rejects", proposed, RejectAdjustment{Adjustment: "A1", Reason: "oops", By: operator}, ErrFourEyes},
		{"a player approves", proposed, ApproveAdjustment{Adjustment: "A1", By: player}, ErrForbidden},
		{"the regulator approves", proposed, ApproveAdjustment{Adjustment: "A1", By: regulator}, ErrForbidden},
		{"nobody approves", proposed, ApproveAdjustment{Adjustment: "A1"}, ErrInvalidRequest},
		{"an unknown adjustment", proposed, ApproveAdjustment{Adjustment: "A9", By: finance}, ErrNotFound},
		{"a rejection without a reason", proposed, RejectAdjustment{Adjustment: "A1", By: finance}, ErrInvalidRequest},
		{"a player proposes", funded, with(func(c *ProposeAdjustment) { c.By = player }), ErrForbidden},
		{"no direction", funded, with(func(c *ProposeAdjustment) { c.Direction = "" }), ErrInvalidRequest},
		{"no kind", funded, with(func(c *ProposeAdjustment) { c.Kind = "" }), ErrInvalidRequest},
		{"another kind", funded, with(func(c *ProposeAdjustment) { c.Kind = "bonus" }), ErrInvalidRequest},
		{"no amount", funded, with(func(c *ProposeAdjustment) { c.Amount = 0 }), ErrInvalidRequest},
		{"a negative amount", funded, with(func(c *ProposeAdjustment) { c.Amount = -5 }), ErrInvalidRequest},
		{"no reference", funded, with(func(c *ProposeAdjustment) { c.Reference = "" }), ErrInvalidRequest},
		{"no reason", funded, with(func(c *ProposeAdjustment) { c.Reason = "" }), ErrInvalidRequest},
		{"no account", funded, with(func(c *ProposeAdjustment) { c.Player = "ghost" }), ErrNotFound},
		{"a debit above the balance", funded, proposal("p1", Debit, Chargeback, 10001), ErrInsufficientFunds},
		{"a debit the balance no longer covers", spent, ApproveAdjustment{Adjustment: "A1", By: finance}, ErrInsufficientFunds},
		{"a proposal on a closed account", closed, proposal("p1", Credit, Goodwill, 100), ErrAccountClosed},
		{"an approval on a closed account", closed, ApproveAdjustment{Adjustment: "A1", By: finance}, ErrAccountClosed},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, tc.given(t), tc.when, tc.then) })
	}
}

// A replay of the log, through a snapshot or not, keeps what the live
// ledger keeps: the books of the events alone agree with its balances.
func TestTheBooksOfAdjustmentsBalance(t *testing.T) {
	w := funded(t).given(
		proposal("p1", Credit, Goodwill, 500),
		proposal("p1", Debit, Chargeback, 2000),
		ApproveAdjustment{Adjustment: "A1", By: finance},
		ApproveAdjustment{Adjustment: "A2", By: finance},
	)
	b := NewBooks()
	for _, r := range w.log {
		if err := b.Apply(r.e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Check(); err != nil || b.Adjustments != -1500 || b.Balances["house.goodwill"] != -500 || b.Balances["house.chargeback"] != 2000 {
		t.Fatalf("books: %v, adjustments %s, %v", err, b.Adjustments, b.Balances)
	}
	if got := decoded(t, w.l); got.Accounts["p1"].Balance != 8500 || len(got.Adjustments) != 2 {
		t.Fatalf("decoded: balance %s, %d adjustments", got.Accounts["p1"].Balance, len(got.Adjustments))
	}
}

// An approval read without its direction or kind would post money to no
// account: it does not decode.
func TestAnAdjustmentEventWithoutItsTermsDoesNotDecode(t *testing.T) {
	for _, payload := range []string{
		`{"adjustment":"A1","player":"p1","kind":"goodwill","amount":"5.00"}`,
		`{"adjustment":"A1","player":"p1","direction":"credit","amount":"5.00"}`,
		`{"adjustment":"A1","player":"p1","direction":"credit","kind":"bonus","amount":"5.00"}`,
	} {
		for _, typ := range []string{TypeAdjustmentProposed, TypeAdjustmentApproved} {
			if _, err := DecodeEvent(typ, []byte(payload)); err == nil {
				t.Errorf("%s %s decoded", typ, payload)
			}
		}
	}
	if _, err := DecodeEvent(TypeAdjustmentApproved, []byte(`{"adjustment":"A1","player":"p1","direction":"debit","kind":"chargeback","amount":"5.00"}`)); err != nil {
		t.Fatal(err)
	}
}
