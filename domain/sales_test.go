package domain

import (
	"errors"
	"strings"
	"testing"
)

// twoPrices is a funded player with an open block of 1 € units (emission
// E0001) and one of 2 € units (emission E0002).
func twoPrices(tb testing.TB) *world {
	w := funded(tb)
	return w.given(CreateEmission{Price: 200, Blocks: 1, First: prepared(tb, w.l.Rules, 200, 7)})
}

func suspend(scope string) SuspendSales {
	return SuspendSales{Scope: scope, Reason: "scenario screen shows the wrong chests", By: operator}
}

func resume(id string) ResumeSales {
	return ResumeSales{Suspension: id, Reason: "screen fixed", By: operator}
}

func stake(price Amount, key string) PlaceStake {
	return PlaceStake{Player: "p1", Stake: price, Key: key}
}

func TestASuspensionStopsTheStakesOfItsScopeOnly(t *testing.T) {
	for _, tc := range []struct {
		scope          string
		stops, spares  Amount
		recordedScope  SalesScope
		sparesNoneOpen bool
	}{
		{scope: "all", stops: 100, recordedScope: SalesScope{Kind: ScopeAll}},
		{scope: "price:1.00", stops: 100, spares: 200, recordedScope: SalesScope{Kind: ScopePrice, Price: 100}},
		{scope: "price:2", stops: 200, spares: 100, recordedScope: SalesScope{Kind: ScopePrice, Price: 200}},
		{scope: "block:E0001-B001", stops: 100, spares: 200, recordedScope: SalesScope{Kind: ScopeBlock, ID: "E0001-B001"}},
		{scope: "emission:E0002", stops: 200, spares: 100, recordedScope: SalesScope{Kind: ScopeEmission, ID: "E0002"}},
	} {
		t.Run(tc.scope, func(t *testing.T) {
			// given blocks of two prices on sale and a suspension
			w := twoPrices(t)
			evs := accepted(t, w, suspend(tc.scope))
			s, ok := evs[0].(*SalesSuspended)
			if !ok || len(evs) != 1 || s.Suspension != "S1" || s.Scope != tc.recordedScope || s.By != operator || s.Reason == "" {
				t.Fatalf("recorded %+v", evs)
			}
			// then a stake in its scope is refused, naming it
			_, err := Decide(w.l, w.now, stake(tc.stops, "in"))
			if !errors.Is(err, ErrSalesSuspended) || !strings.Contains(err.Error(), "suspension S1") {
				t.Fatalf("stake of %s: %v", tc.stops, err)
			}
			// and one outside it is taken
			if tc.spares != 0 {
				accepted(t, w, stake(tc.spares, "out"))
			}
		})
	}
}

func TestPlaysBoughtBeforeASuspensionGoOn(t *testing.T) {
	// given a play bought, and one bought and half thrown
	w := funded(t)
	w.given(stake(100, "s1"), stake(100, "s2"), MakeThrow{Player: "p1", Play: "E0001-B001-U000001"})
	// when every sale is suspended
	accepted(t, w, suspend("all"))
	// then a new stake is refused, but the retry of one bought before
	// answers its play
	refused(t, w, stake(100, "s3"), ErrSalesSuspended)
	if d, err := Decide(w.l, w.now, stake(100, "s1")); err != nil || d.Replay == nil || d.Replay.Play != "E0001-B001-U000000" {
		t.Fatalf("retried stake: %+v %v", d, err)
	}
	// and the plays are thrown, completed by the system and settled
	for range ThrowCount {
		accepted(t, w, MakeThrow{Player: "p1", Play: "E0001-B001-U000000"})
	}
	if evs := accepted(t, w, CompletePlay{Play: "E0001-B001-U000001"}); !strings.Contains(strings.Join(types(evs), " "), TypePlaySettled) {
		t.Fatalf("completion recorded %v", types(evs))
	}
	if len(w.l.Plays) != 0 {
		t.Fatalf("%d plays still in progress", len(w.l.Plays))
	}
	// and deposits and withdrawals are unaffected
	accepted(t, w, Deposit{Player: "p1", Amount: 500, Key: "d2"})
	accepted(t, w, Withdraw{Player: "p1", Amount: 500, Key: "w1"})
}

// The writer decides commands one at a time in the order they reach it and
// applies each decision before the next, so a suspension decided between
// two stakes sits between them in the stream, and every stake decided after
// it is refused, even while the stakes before it are still committing.
func TestNoStakeInTheScopeFollowsASuspension(t *testing.T) {
	w := twoPrices(t)
	for i := range 4 {
		w.given(stake(100, "before-"+string(rune('a'+i))))
	}
	accepted(t, w, suspend("price:1.00"))
	for i := range 4 {
		refused(t, w, stake(100, "after-"+string(rune('a'+i))), ErrSalesSuspended)
		accepted(t, w, stake(200, "other-"+string(rune('a'+i))))
	}
	suspendedAt := -1
	for i, r := range w.log {
		switch e := r.e.(type) {
		case *SalesSuspended:
			suspendedAt = i
		case *StakePlaced:
			if suspendedAt >= 0 && e.Stake == 100 {
				t.Fatalf("stake %s of %s at %d follows the suspension at %d", e.Play, e.Stake, i, suspendedAt)
			}
		}
	}
	if suspendedAt < 0 {
		t.Fatal("no suspension in the log")
	}
}

func TestResumingOneScopeLeavesTheOthersSuspended(t *testing.T) {
	// given the emission of 1 € units and every 2 € unit suspended, and
	// then every 1 € unit too
	w := twoPrices(t)
	accepted(t, w, suspend("emission:E0001"))
	accepted(t, w, suspend("price:2.00"))
	accepted(t, w, suspend("price:1.00"))
	// when the emission resumes, 1 € stakes stay refused, by S3 now
	accepted(t, w, resume("S1"))
	_, err := Decide(w.l, w.now, stake(100, "a"))
	if !errors.Is(err, ErrSalesSuspended) || !strings.Contains(err.Error(), "suspension S3") {
		t.Fatalf("after resuming S1: %v", err)
	}
	// and when S3 resumes they are taken, while 2 € stakes stay refused
	accepted(t, w, resume("S3"))
	accepted(t, w, stake(100, "a"))
	refused(t, w, stake(200, "b"), ErrSalesSuspended)
	accepted(t, w, resume("S2"))
	accepted(t, w, stake(200, "b"))
	if len(w.l.Suspensions) != 0 || w.l.suspensionsIssued != 3 {
		t.Fatalf("in force %v, issued %d", w.l.Suspensions, w.l.suspensionsIssued)
	}
	// and the next suspension gets the next id
	if evs := accepted(t, w, suspend("all")); evs[0].(*SalesSuspended).Suspension != "S4" {
		t.Fatalf("next suspension %+v", evs[0])
	}
}

func TestSuspensionRefusals(t *testing.T) {
	closed := func(tb testing.TB) *world {
		w := newWorld(tb)
		w.given(CreateEmission{Price: 100, Blocks: 2, First: prepared(tb, w.l.Rules, 100, 1)})
		w.l.Prepare("E0001", prepared(tb, w.l.Rules, 100, 2))
		return w.given(CloseBlock{Block: "E0001-B001", Seed: prepared(tb, w.l.Rules, 100, 1).Seed, By: operator, Reason: "withdrawn"})
	}
	inForce := func(tb testing.TB) *world { return twoPrices(tb).given(suspend("price:1.00")) }
	resumed := func(tb testing.TB) *world { return inForce(tb).given(resume("S1")) }
	for _, tc := range []struct {
		name  string
		given func(tb testing.TB) *world
		when  Command
		then  error
	}{
		{"an unknown form of scope", twoPrices, suspend("everything"), ErrInvalidRequest},
		{"an empty scope", twoPrices, suspend(""), ErrInvalidRequest},
		{"a price that is not an amount", twoPrices, suspend("price:two"), ErrInvalidRequest},
		{"a price of zero", twoPrices, suspend("price:0.00"), ErrInvalidRequest},
		{"a block without its id", twoPrices, suspend("block:"), ErrInvalidRequest},
		{"an emission id with a space", twoPrices, suspend("emission:E 1"), ErrInvalidRequest},
		{"all with a value", twoPrices, suspend("all:1"), ErrInvalidRequest},
		{"a price no unit is sold at", twoPrices, suspend("price:3.00"), ErrNotFound},
		{"a block that does not exist", twoPrices, suspend("block:E0001-B009"), ErrNotFound},
		{"an emission that does not exist", twoPrices, suspend("emission:E0009"), ErrNotFound},
		{"a block closed", closed, suspend("block:E0001-B001"), ErrConflict},
		{"no reason", twoPrices, SuspendSales{Scope: "all", By: operator}, ErrInvalidRequest},
		{"a reason with a control character", twoPrices, SuspendSales{Scope: "all", Reason: "bad\nscreen", By: operator}, ErrInvalidRequest},
		{"a reason too long", twoPrices, SuspendSales{Scope: "all", Reason: strings.Repeat("x", ReasonMax+1), By: operator}, ErrInvalidRequest},
		{"a reason of blanks", twoPrices, SuspendSales{Scope: "all", Reason: " \u00a0 ", By: operator}, ErrInvalidRequest},
		{"a reason of a zero-width space", twoPrices, SuspendSales{Scope: "all", Reason: "\u200b", By: operator}, ErrInvalidRequest},
		{"a reason of direction marks", twoPrices, SuspendSales{Scope: "all", Reason: "\u202e \u200f", By: operator}, ErrInvalidRequest},
		{"nobody", twoPrices, SuspendSales{Scope: "all", Reason: "r"}, ErrInvalidRequest},
		{"an actor without a subject", twoPrices, SuspendSales{Scope: "all", Reason: "r", By: &Actor{Role: RoleOperator}}, ErrInvalidRequest},
		{"the same scope for another reason", inForce, SuspendSales{Scope: "price:1", Reason: "another", By: operator}, ErrConflict},
		{"resuming an unknown suspension", inForce, resume("S2"), ErrNotFound},
		{"resuming a malformed id", inForce, resume("S01"), ErrNotFound},
		{"resuming one resumed already", resumed, resume("S1"), ErrConflict},
		{"resuming without a reason", inForce, ResumeSales{Suspension: "S1", By: operator}, ErrInvalidRequest},
		{"resuming by nobody", inForce, ResumeSales{Suspension: "S1", Reason: "r"}, ErrInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.given(t)
			before := len(w.l.Suspensions)
			refused(t, w, tc.when, tc.then)
			if len(w.l.Suspensions) != before {
				t.Fatalf("a refusal changed the suspensions in force: %d, was %d", len(w.l.Suspensions), before)
			}
		})
	}
}

func TestTheSameSuspensionAgainAnswersTheOneInForce(t *testing.T) {
	w := twoPrices(t)
	accepted(t, w, suspend("price:1.00"))
	d, err := Decide(w.l, w.now, suspend("price:1"))
	if err != nil || len(d.Events) != 0 || d.Replay == nil || d.Replay.Suspension != "S1" || !d.Replay.At.Equal(w.now) {
		t.Fatalf("the same suspension again: %+v %v", d, err)
	}
	// once resumed, the same scope is suspended anew, under a new id
	accepted(t, w, resume("S1"))
	if evs := accepted(t, w, suspend("price:1.00")); evs[0].(*SalesSuspended).Suspension != "S2" {
		t.Fatalf("suspended anew as %+v", evs[0])
	}
}

func TestSuspensionsInForceAreBounded(t *testing.T) {
	// given as many emissions suspended as Tresor keeps suspensions
	w := newWorld(t)
	w.given(CreateEmission{Price: 100, Blocks: 1, First: prepared(t, w.l.Rules, 100, 1)})
	for range SuspensionsActiveMax - 1 {
		w.given(CreateEmission{Price: 100, Blocks: 1})
	}
	for _, id := range w.l.emissionOrder {
		accepted(t, w, suspend("emission:"+id))
	}
	// then one more is refused until one resumes
	refused(t, w, suspend("all"), ErrConflict)
	accepted(t, w, resume("S1"))
	accepted(t, w, suspend("all"))
}

func TestSalesScopeTextRoundTrips(t *testing.T) {
	for _, s := range []string{"all", "price:0.50", "price:2.00", "block:E0001-B001", "emission:E0001"} {
		scope, err := ParseSalesScope(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		b, err := scope.MarshalText()
		if err != nil || string(b) != s {
			t.Fatalf("%s written as %q (%v)", s, b, err)
		}
	}
	if _, err := (SalesScope{}).MarshalText(); err == nil {
		t.Fatal("a scope of no kind was written")
	}
	// an event without its scope, or with a malformed one, is not read:
	// the zero scope covers nothing, and a suspension of nothing would
	// pass for one that stopped sales
	for _, typ := range []string{TypeSalesSuspended, TypeSalesResumed} {
		for _, payload := range []string{`{"suspension":"S1","reason":"r"}`, `{"suspension":"S1","scope":null,"reason":"r"}`,
			`{"suspension":"S1","scope":"","reason":"r"}`, `{"suspension":"S1","scope":"price:x","reason":"r"}`} {
			if e, err := DecodeEvent(typ, []byte(payload)); err == nil {
				t.Errorf("%s %s read as %+v", typ, payload, e)
			}
		}
	}
}

func TestEvolveRefusesASuspensionTwiceOrAResumptionOfNone(t *testing.T) {
	w := twoPrices(t)
	accepted(t, w, suspend("all"))
	if err := w.l.Evolve(w.now, &SalesSuspended{Suspension: "S1", Scope: SalesScope{Kind: ScopeAll}, Reason: "r"}); err == nil {
		t.Fatal("the same suspension applied twice")
	}
	if err := w.l.Evolve(w.now, &SalesResumed{Suspension: "S7", Scope: SalesScope{Kind: ScopeAll}, Reason: "r"}); err == nil {
		t.Fatal("a resumption of no suspension applied")
	}
}
