package domain

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
)

// tornPlay is the probe's ledger: a funded player whose stake was recorded
// but whose UnitAssigned a torn append lost, so the ledger holds the play
// with no unit. It returns the world and the play's id.
func tornPlay(tb testing.TB) (*world, string) {
	tb.Helper()
	w := funded(tb)
	d, err := Decide(w.l, w.now, PlaceStake{Player: "p1", Stake: 100, Key: "torn"})
	if err != nil {
		tb.Fatal(err)
	}
	stake := d.Events[0].(*StakePlaced)
	if err := w.l.Evolve(w.now, stake); err != nil {
		tb.Fatal(err)
	}
	return w, stake.Play
}

// A play whose UnitAssigned the ledger does not hold has no tier: nothing
// throws it, completes it, settles it or answers it as a whole play.
func TestAPlayWithoutItsUnitIsNeverThrownNorSettled(t *testing.T) {
	for _, tc := range []struct {
		name string
		when func(play string) Command
	}{
		{"the next throw", func(play string) Command { return MakeThrow{Player: "p1", Play: play} }},
		{"throw 1 by number", func(play string) Command { return MakeThrow{Player: "p1", Play: play, Throw: 1} }},
		{"the abandoned-play sweep's completion", func(play string) Command { return CompletePlay{Play: play} }},
		{"a retry of the stake", func(string) Command { return PlaceStake{Player: "p1", Stake: 100, Key: "torn"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// given a play whose stake was kept and whose unit was lost
			w, play := tornPlay(t)
			balance := w.l.Accounts["p1"].Balance
			// when
			d, err := Decide(w.l, w.now, tc.when(play))
			// then an integrity refusal naming the play, and nothing recorded
			if !integrityRefusal(err, play) {
				t.Fatalf("then: %v, want an internal refusal naming %s", err, play)
			}
			if len(d.Events) != 0 || d.Replay != nil {
				t.Fatalf("a refusal recorded %v, answered %+v", types(d.Events), d.Replay)
			}
			if w.l.Accounts["p1"].Balance != balance || w.l.Plays[play].Throws != 0 {
				t.Fatalf("the refusal changed the ledger: balance %s, throws %d", w.l.Accounts["p1"].Balance, w.l.Plays[play].Throws)
			}
		})
	}
}

// A replay stops at an event that would move a play without its unit on:
// adopting it would settle a tier nobody drew.
func TestEvolveRefusesTheEventsOfAPlayWithoutItsUnit(t *testing.T) {
	for _, tc := range []struct {
		name string
		when func(play string) Event
	}{
		{"a throw", func(play string) Event {
			return &ThrowMade{Play: play, Player: "p1", Throw: 1, Result: ThrowResult{Direction: North, Steps: 1, Chest: NoChest}}
		}},
		{"a settlement", func(play string) Event {
			return &PlaySettled{Play: play, Player: "p1", Block: "E0001-B001", Tier: ChandelierX3, Prize: 1000000}
		}},
		{"a prize", func(play string) Event {
			return &PrizePaid{Play: play, Player: "p1", Block: "E0001-B001", Amount: 1000000, Balance: 1009900}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// given a play whose stake was kept and whose unit was lost
			w, play := tornPlay(t)
			b := w.l.Blocks["E0001-B001"]
			balance, inPlay := w.l.Accounts["p1"].Balance, b.InPlay
			// when the event is applied
			err := w.l.Evolve(w.now, tc.when(play))
			// then it is an error naming the play, and the ledger is as it was
			if err == nil || !strings.Contains(err.Error(), play) || !strings.Contains(err.Error(), "no unit") {
				t.Fatalf("then: %v, want an error naming %s", err, play)
			}
			p := w.l.Plays[play]
			if p == nil || p.Throws != 0 || b.InPlay != inPlay || w.l.Accounts["p1"].Balance != balance {
				t.Fatalf("the ledger moved: play %+v, in play %d, balance %s", p, b.InPlay, w.l.Accounts["p1"].Balance)
			}
		})
	}
}

// A payload that does not say its tier decodes to no tier at all: an error,
// never the tier whose code is zero.
func TestAnEventWithoutItsTierIsRefused(t *testing.T) {
	const salt = `"0000000000000000000000000000000000000000000000000000000000000001"`
	for _, tc := range []struct {
		name, typ, payload string
	}{
		{"a unit without a tier", TypeUnitAssigned, `{"play":"E0001-B001-U000000","player":"p1","block":"E0001-B001","proof":{"unit":0,"salt":` + salt + `,"path":[]}}`},
		{"a unit with a null tier", TypeUnitAssigned, `{"play":"E0001-B001-U000000","player":"p1","block":"E0001-B001","proof":{"unit":0,"tier":null,"salt":` + salt + `,"path":[]}}`},
		{"a unit without a proof", TypeUnitAssigned, `{"play":"E0001-B001-U000000","player":"p1","block":"E0001-B001"}`},
		{"a settlement without a tier", TypePlaySettled, `{"play":"E0001-B001-U000000","player":"p1","block":"E0001-B001","unit":0,"prize":"10000.00"}`},
		{"a settlement with a null tier", TypePlaySettled, `{"play":"E0001-B001-U000000","player":"p1","block":"E0001-B001","unit":0,"tier":null,"prize":"10000.00"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// when the payload is decoded (domain/codec checks its fast path
			// on the same payloads)
			e, err := DecodeEvent(tc.typ, []byte(tc.payload))
			// then it is refused
			if err == nil {
				t.Fatalf("decoded: %+v", e)
			}
		})
	}
}

// The same payloads with their tier still decode, and to that tier.
func TestAnEventWithItsTierDecodes(t *testing.T) {
	for _, tc := range []struct {
		typ, payload string
		tier         func(Event) Tier
	}{
		{TypeUnitAssigned, `{"play":"E0001-B001-U000000","player":"p1","block":"E0001-B001","proof":{"unit":0,"tier":"skull_x2","salt":"0000000000000000000000000000000000000000000000000000000000000001","path":[]}}`,
			func(e Event) Tier { return e.(*UnitAssigned).Proof.Tier }},
		{TypePlaySettled, `{"play":"E0001-B001-U000000","player":"p1","block":"E0001-B001","unit":0,"tier":"skull_x2","prize":"2.00"}`,
			func(e Event) Tier { return e.(*PlaySettled).Tier }},
	} {
		e, err := DecodeEvent(tc.typ, []byte(tc.payload))
		if err != nil || tc.tier(e) != SkullX2 {
			t.Fatalf("%s: %+v, %v", tc.typ, e, err)
		}
	}
}

// A snapshot keeps a play without its unit as it is: decoded, it is still
// refused, never given a unit 0 of the tier whose code is zero.
func TestASnapshotKeepsAPlayWithoutItsUnit(t *testing.T) {
	// given the torn play's ledger, through a snapshot
	w, play := tornPlay(t)
	l := decoded(t, w.l)
	// when the sweep completes it
	_, err := Decide(l, w.now, CompletePlay{Play: play})
	// then it is refused as in the ledger that wrote the snapshot
	if !integrityRefusal(err, play) {
		t.Fatalf("completion after a snapshot: %v", err)
	}
	if err := sameLedger(w.l, l); err != nil {
		t.Fatal(err)
	}
}

// A snapshot's unit that does not say its tier is refused, whole: read as
// the tier whose code is zero, it would be the best prize.
func TestASnapshotUnitWithoutItsTierIsRefused(t *testing.T) {
	w := funded(t)
	must(t, w, PlaceStake{Player: "p1", Stake: 100, Key: "s"})
	b, err := EncodeLedger(w.l)
	if err != nil {
		t.Fatal(err)
	}
	tier := regexp.MustCompile(`("unit":\{"index":0,)"tier":"[a-z0-9_]+",`)
	if !tier.Match(b) {
		t.Fatalf("no unit with a tier in %s", b[:bytes.IndexByte(b, '\n')])
	}
	for name, with := range map[string]string{"absent": "$1", "null": `$1"tier":null,`, "unknown": `$1"tier":"gold_x9",`} {
		_, err := DecodeLedger(w.l.Rules, tier.ReplaceAll(b, []byte(with)))
		if !errors.Is(err, ErrSnapshotFormat) {
			t.Errorf("tier %s: %v, want a refusal", name, err)
		}
	}
}

// The zero value of what holds a play's outcome is no unit, hence no tier:
// never the tier whose code is zero, the best prize.
func TestAPlaysZeroValueHoldsNoTier(t *testing.T) {
	var p Play
	if p.Unit != nil || p.Scenario() != nil {
		t.Fatalf("a zero play holds unit %+v", p.Unit)
	}
	if _, err := NewLedger(smallRules(t)).throws(&Play{ID: "E0001-B001-U000000"}, ThrowCount, true); !integrityRefusal(err, "E0001-B001-U000000") {
		t.Fatalf("settling a zero play: %v", err)
	}
}

// A whole play is still thrown, settled and retried as before.
func TestAWholePlayIsUnaffected(t *testing.T) {
	w := funded(t)
	d := must(t, w, PlaceStake{Player: "p1", Stake: 100, Key: "s"})
	play := d.Events[0].(*StakePlaced).Play
	if d, err := Decide(w.l, w.now, PlaceStake{Player: "p1", Stake: 100, Key: "s"}); err != nil || d.Replay == nil || d.Replay.Play != play {
		t.Fatalf("retry of a whole play's stake: %+v %v", d, err)
	}
	must(t, w, MakeThrow{Player: "p1", Play: play, Throw: 1})
	d = must(t, w, CompletePlay{Play: play})
	if !sameTypes(d.Events[:4], TypeThrowMade, TypeThrowMade, TypeThrowMade, TypePlaySettled) {
		t.Fatalf("completion: %v", types(d.Events))
	}
	if _, err := Decide(w.l, w.now, MakeThrow{Player: "p1", Play: play}); !errors.Is(err, ErrPlayFinished) {
		t.Fatalf("throw after settlement: %v", err)
	}
}

// must runs a command that must succeed and returns its decision.
func must(tb testing.TB, w *world, c Command) Decision {
	tb.Helper()
	d, err := w.do(c)
	if err != nil {
		tb.Fatalf("%T: %v", c, err)
	}
	return d
}

// integrityRefusal reports whether err is the refusal of a play without its
// unit: an internal error, which the API logs and answers with a 500,
// naming the play.
func integrityRefusal(err error, play string) bool {
	return err != nil && CodeOf(err) == CodeInternal && strings.Contains(err.Error(), play) && strings.Contains(err.Error(), "no unit")
}
