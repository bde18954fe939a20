package domain

import (
	"testing"
	"time"
)

// emptied is a funded player who withdrew everything, with no play in
// progress.
func emptied(tb testing.TB) *world {
	return funded(tb).given(Withdraw{Player: "p1", Amount: 10000, Key: "all"})
}

func closure(by *Actor) CloseAccount {
	return CloseAccount{Player: "p1", Reason: "the player leaves", By: by}
}

func TestAClosedAccountTakesNoMovementNorChange(t *testing.T) {
	// given an emptied account closed by its player
	w := emptied(t)
	evs := accepted(t, w, closure(selfP1))
	if e, ok := evs[0].(*AccountClosed); !ok || len(evs) != 1 || e.By != selfP1 || e.Reason == "" {
		t.Fatalf("recorded %v", types(evs))
	}
	if at, closed := w.l.Accounts["p1"].ClosedAt(); !closed || !at.Equal(w.now) {
		t.Fatalf("closed %v at %s, want at %s", closed, at, w.now)
	}
	// then no deposit, withdrawal, stake or change of limits or exclusions
	w.now = w.now.Add(time.Hour)
	refused(t, w, Deposit{Player: "p1", Amount: 100, Key: "d2", By: operator}, ErrAccountClosed)
	refused(t, w, Withdraw{Player: "p1", Amount: 100, Key: "w2", By: operator}, ErrAccountClosed)
	refused(t, w, PlaceStake{Player: "p1", Stake: 100, Key: "s"}, ErrAccountClosed)
	refused(t, w, ConfigureAccount{Player: "p1", StakeLimit: amt("5"), By: selfP1}, ErrAccountClosed)
	refused(t, w, ConfigureAccount{Player: "p1", SelfExcluded: true, By: selfP1}, ErrAccountClosed)
	// but the retry of a deposit made before answers it, and closing again
	// records nothing
	if d, err := Decide(w.l, w.now, Deposit{Player: "p1", Amount: 10000, Key: "d1"}); err != nil || d.Replay == nil {
		t.Fatalf("retried deposit: %+v %v", d, err)
	}
	if evs := accepted(t, w, closure(operator)); len(evs) != 0 {
		t.Fatalf("closing a closed account recorded %v", types(evs))
	}
	// when the operator reopens it, it takes deposits again
	refused(t, w, ReopenAccount{Player: "p1", Reason: "asked back", By: selfP1}, ErrForbidden)
	evs = accepted(t, w, ReopenAccount{Player: "p1", Reason: "closed by mistake", By: operator})
	if _, ok := evs[0].(*AccountReopened); !ok {
		t.Fatalf("reopened: %v", types(evs))
	}
	if _, closed := w.l.Accounts["p1"].ClosedAt(); closed {
		t.Fatal("still closed")
	}
	accepted(t, w, Deposit{Player: "p1", Amount: 100, Key: "d2", By: operator})
	accepted(t, w, PlaceStake{Player: "p1", Stake: 100, Key: "s"})
}

func TestClosureRefusals(t *testing.T) {
	inPlay := func(tb testing.TB) *world {
		w := funded(tb).given(PlaceStake{Player: "p1", Stake: 100, Key: "s"})
		return w.given(Withdraw{Player: "p1", Amount: 9900, Key: "rest"})
	}
	closed := func(tb testing.TB) *world { return emptied(tb).given(closure(selfP1)) }
	for _, tc := range []struct {
		name  string
		given func(tb testing.TB) *world
		when  Command
		then  error
	}{
		{"an account that holds money", funded, closure(operator), ErrConflict},
		{"an account with a play in progress", inPlay, closure(operator), ErrConflict},
		{"no account", emptied, CloseAccount{Player: "ghost", Reason: "r", By: operator}, ErrNotFound},
		{"no reason", emptied, CloseAccount{Player: "p1", By: operator}, ErrInvalidRequest},
		{"nobody", emptied, CloseAccount{Player: "p1", Reason: "r"}, ErrInvalidRequest},
		{"another player", emptied, closure(&Actor{Role: RolePlayer, Subject: "p2"}), ErrForbidden},
		{"reopening an open account", emptied, ReopenAccount{Player: "p1", Reason: "r", By: operator}, ErrConflict},
		{"reopening without a reason", closed, ReopenAccount{Player: "p1", By: operator}, ErrInvalidRequest},
		{"reopening by finance", closed, ReopenAccount{Player: "p1", Reason: "r", By: &Actor{Role: RoleFinance, Subject: "f"}}, ErrForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, tc.given(t), tc.when, tc.then) })
	}
}

// A play in progress when its player asks to close settles first; once
// the system completes it and its prize is withdrawn, the account closes.
func TestAClosureWaitsForThePlayInProgress(t *testing.T) {
	w := funded(t).given(PlaceStake{Player: "p1", Stake: 100, Key: "s"})
	refused(t, w, closure(selfP1), ErrConflict)
	accepted(t, w, CompletePlay{Play: "E0001-B001-U000000"})
	if b := w.l.Accounts["p1"].Balance; b > 0 {
		w.given(Withdraw{Player: "p1", Amount: b, Key: "rest"})
	}
	accepted(t, w, closure(selfP1))
}
