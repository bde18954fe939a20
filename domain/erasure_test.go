package domain

import (
	"errors"
	"testing"
	"time"
)

// TestRetentionClockListsWhoseRetentionEnded folds closures, reopenings,
// erasures and settings, and lists who is due at a time.
func TestRetentionClockListsWhoseRetentionEnded(t *testing.T) {
	t0 := time.Date(2020, 1, 15, 12, 0, 0, 0, time.UTC)
	seven := BaselineSettings()
	seven.Version, seven.RetentionAfterClosureYears = "fr-7y", 7
	for _, c := range []struct {
		name   string
		events []Event
		at     time.Time
		want   []string
	}{
		{"none closed", []Event{&AccountOpened{Player: "a"}}, t0.AddDate(10, 0, 0), nil},
		{"a second before five years", []Event{&AccountClosed{Player: "a"}}, t0.AddDate(5, 0, 0).Add(-time.Second), nil},
		{"five years to the second", []Event{&AccountClosed{Player: "a"}}, t0.AddDate(5, 0, 0), []string{"a"}},
		{"reopened", []Event{&AccountClosed{Player: "a"}, &AccountReopened{Player: "a"}}, t0.AddDate(6, 0, 0), nil},
		{"erased", []Event{&AccountClosed{Player: "a"}, &PersonalDataErased{Player: "a"}}, t0.AddDate(6, 0, 0), nil},
		{"a subject's erasure changes nothing", []Event{&AccountClosed{Player: "a"}, &PersonalDataErased{KeyID: "0123456789abcdef"}}, t0.AddDate(6, 0, 0), []string{"a"}},
		{"seven years in force", []Event{&SettingsAdopted{Settings: seven}, &AccountClosed{Player: "a"}}, t0.AddDate(6, 0, 0), nil},
		{"oldest closure first", []Event{&AccountClosed{Player: "b"}, &AccountClosed{Player: "a"}}, t0.AddDate(6, 0, 0), []string{"b", "a"}},
	} {
		r := NewRetentionClock()
		for i, e := range c.events {
			r.Apply(t0.Add(time.Duration(i)*time.Minute), e)
		}
		var got []string
		for _, d := range r.Due(c.at) {
			got = append(got, d.Player)
		}
		if len(got) != len(c.want) || (len(got) > 0 && got[0] != c.want[0]) || (len(got) > 1 && got[1] != c.want[1]) {
			t.Errorf("%s: due %v, want %v", c.name, got, c.want)
		}
	}
}

func TestRetentionSettingsAreBoundedAndSourced(t *testing.T) {
	s := BaselineSettings()
	for _, years := range []int{-1, RetentionMaxYears + 1} {
		s.RetentionAfterClosureYears = years
		if err := s.Validate(); !errors.Is(err, ErrSettings) {
			t.Errorf("retention of %d years: %v, want refused", years, err)
		}
	}
	doc, err := DefaultSettings()
	if err != nil || doc.Settings.RetentionAfterClosureYears != 5 || doc.Sources["retention_after_closure_years"] == "" {
		t.Fatalf("the default settings: %v, %+v: want five years, sourced", err, doc)
	}
	recorded := BaselineSettings()
	recorded.RetentionAfterClosureYears = 0 // a SettingsAdopted from before erasures
	if !recorded.Equal(BaselineSettings()) {
		t.Fatal("settings recorded without a retention differ from the baseline's five years")
	}
}

// dataKey is the data key the erasures of these tests name.
const dataKey = "0123456789abcdef"

// erasureOf is the operator's proposal to erase p1's data on a legal
// ground.
var erasureOf = ErasePersonalData{Player: "p1", KeyID: dataKey, LegalGround: "GDPR art. 17 request", By: operator}

// closedP1 is a player whose account is closed, with no balance.
func closedP1(tb testing.TB) *world {
	return newWorld(tb).given(ConfigureAccount{Player: "p1", DepositLimit: amt("10"), StakeLimit: amt("10")},
		CloseAccount{Player: "p1", Reason: "leaves", By: operator})
}

func TestAnErasureIsRecordedOnlyOnceAnotherSubjectApprovesIt(t *testing.T) {
	// given a closed account
	w := closedP1(t)
	// when the operator proposes its erasure, nothing is erased yet
	evs := accepted(t, w, erasureOf)
	p, ok := evs[0].(*PersonalDataErasureProposed)
	if !ok || len(evs) != 1 || p.Erasure != "ER1" || p.Ground != GroundLegal || p.KeyID != dataKey || p.By != operator ||
		!p.ExpiresAt.Equal(w.now.Add(72*time.Hour)) || p.AggregateID() != "player.p1" {
		t.Fatalf("proposed %+v", evs)
	}
	if _, erased := w.l.Accounts["p1"].ErasedAt(); erased || len(w.l.ErasedKeys()) != 0 {
		t.Fatal("p1 erased by a proposal")
	}
	// then neither its proposer nor a player approves it
	refused(t, w, ApproveErasure{Erasure: "ER1", By: operator}, ErrFourEyes)
	refused(t, w, RejectErasure{Erasure: "ER1", Reason: "mine", By: operator}, ErrFourEyes)
	refused(t, w, ApproveErasure{Erasure: "ER1", By: selfP1}, ErrForbidden)
	refused(t, w, ApproveErasure{Erasure: "ER9", By: finance}, ErrNotFound)
	// and another subject's approval records the erasure, naming the
	// proposal and its proposer
	w.now = w.now.Add(time.Hour)
	evs = accepted(t, w, ApproveErasure{Erasure: "ER1", By: finance})
	e, ok := evs[0].(*PersonalDataErased)
	if !ok || len(evs) != 1 || e.Erasure != "ER1" || e.ProposedBy != operator || e.By != finance || e.KeyID != dataKey ||
		e.Ground != GroundLegal || e.LegalGround != erasureOf.LegalGround {
		t.Fatalf("approved %+v", evs)
	}
	if at, erased := w.l.Accounts["p1"].ErasedAt(); !erased || !at.Equal(w.now) {
		t.Fatal("p1 not erased by the approval")
	}
	if keys := w.l.ErasedKeys(); len(keys) != 1 || keys[0] != (ErasedKey{KeyID: dataKey, Player: "p1"}) {
		t.Fatalf("keys to destroy %+v", keys)
	}
	// and approving it again answers it, proposing it again records
	// nothing, rejecting it is too late
	d, err := Decide(w.l, w.now, ApproveErasure{Erasure: "ER1", By: operator2})
	if err != nil || len(d.Events) != 0 || d.Replay == nil || d.Replay.Erasure != "ER1" {
		t.Fatalf("approved again: %+v %v", d, err)
	}
	if d, err := Decide(w.l, w.now, erasureOf); err != nil || len(d.Events) != 0 || d.Replay != nil {
		t.Fatalf("proposed again once erased: %+v %v", d, err)
	}
	refused(t, w, RejectErasure{Erasure: "ER1", Reason: "too late", By: operator2}, ErrConflict)
}

func TestAStaffSubjectsErasureNamesOnlyItsKey(t *testing.T) {
	w := newWorld(t)
	staff := ErasePersonalData{KeyID: dataKey, LegalGround: "left the company", By: operator}
	refused(t, w, ErasePersonalData{KeyID: dataKey, By: operator}, ErrInvalidRequest)
	refused(t, w, ErasePersonalData{LegalGround: "left", By: operator}, ErrNotFound)
	p := accepted(t, w, staff)[0].(*PersonalDataErasureProposed)
	if p.Player != "" || p.AggregateID() != "personal."+dataKey {
		t.Fatalf("proposed %+v", p)
	}
	e := accepted(t, w, ApproveErasure{Erasure: p.Erasure, By: finance})[0].(*PersonalDataErased)
	if e.Player != "" || e.AggregateID() != "personal."+dataKey || e.KeyID != dataKey {
		t.Fatalf("approved %+v", e)
	}
	if keys := w.l.ErasedKeys(); len(keys) != 1 || keys[0] != (ErasedKey{KeyID: dataKey}) {
		t.Fatalf("keys to destroy %+v", keys)
	}
}

func TestAPersonHasOneErasurePendingAtATime(t *testing.T) {
	w := closedP1(t)
	accepted(t, w, erasureOf)
	d, err := Decide(w.l, w.now, erasureOf)
	if err != nil || len(d.Events) != 0 || d.Replay == nil || d.Replay.Erasure != "ER1" {
		t.Fatalf("retried: %+v %v", d, err)
	}
	other := erasureOf
	other.By = operator2
	refused(t, w, other, ErrConflict)
	// a rejection, with a reason, erases nothing and frees the person
	refused(t, w, RejectErasure{Erasure: "ER1", By: finance}, ErrInvalidRequest)
	r := accepted(t, w, RejectErasure{Erasure: "ER1", Reason: "no request on file", By: finance})[0].(*PersonalDataErasureRejected)
	if r.Erasure != "ER1" || r.Player != "p1" || r.By != finance {
		t.Fatalf("rejected %+v", r)
	}
	if _, erased := w.l.Accounts["p1"].ErasedAt(); erased {
		t.Fatal("p1 erased by a rejection")
	}
	refused(t, w, ApproveErasure{Erasure: "ER1", By: operator2}, ErrConflict)
	if p := accepted(t, w, other)[0].(*PersonalDataErasureProposed); p.Erasure != "ER2" {
		t.Fatalf("proposed after the rejection: %+v", p)
	}
}

func TestAnErasurePastItsExpiryErasesNothing(t *testing.T) {
	// given an erasure pending for the settings' 72 hours
	w := closedP1(t).given(erasureOf)
	w.now = w.now.Add(72 * time.Hour)
	// when its time has passed, its approval and rejection are refused
	refused(t, w, ApproveErasure{Erasure: "ER1", By: finance}, ErrErasureExpired)
	refused(t, w, RejectErasure{Erasure: "ER1", Reason: "late", By: finance}, ErrErasureExpired)
	// and a new proposal is another erasure; once a window has passed,
	// the first is forgotten but still not approvable
	w.now = w.now.Add(w.l.window())
	w.given(erasureOf)
	if w.l.Erasures["ER1"] != nil || w.l.Erasures["ER2"] == nil {
		t.Fatalf("erasures kept: %v", w.l.Erasures)
	}
	refused(t, w, ApproveErasure{Erasure: "ER1", By: finance}, ErrConflict)
}

func TestAnErasureIsLawfulWhenApprovedToo(t *testing.T) {
	// given an erasure proposed once the retention has ended: no legal
	// ground needed
	w := closedP1(t)
	w.now = w.now.AddDate(5, 0, 0)
	p := accepted(t, w, ErasePersonalData{Player: "p1", KeyID: dataKey, By: operator})[0].(*PersonalDataErasureProposed)
	if p.Ground != GroundRetentionEnded {
		t.Fatalf("proposed %+v", p)
	}
	// when the account is reopened and closed again before the approval,
	// the retention starts again: the approval is refused
	w.given(ReopenAccount{Player: "p1", Reason: "mistake", By: operator})
	refused(t, w, ApproveErasure{Erasure: p.Erasure, By: finance}, ErrConflict)
	w.given(CloseAccount{Player: "p1", Reason: "leaves again", By: operator})
	refused(t, w, ApproveErasure{Erasure: p.Erasure, By: finance}, ErrConflict)
	// and an erasure proposed on a legal ground is approved on it
	w.given(RejectErasure{Erasure: p.Erasure, Reason: "reopened", By: finance}, erasureOf)
	if e := accepted(t, w, ApproveErasure{Erasure: "ER2", By: finance})[0].(*PersonalDataErased); e.Ground != GroundLegal {
		t.Fatalf("approved %+v", e)
	}
}

func TestAStaffSubjectIsNotErasedWithAProposalOfTheirsPending(t *testing.T) {
	// given an adjustment proposed by a subject sealed under dataKey
	sealed := &Actor{Role: RoleOperator, Subject: SealedPrefix + dataKey + ":c2VhbGVk"}
	other := &Actor{Role: RoleFinance, Subject: SealedPrefix + "1111111111111111:b3RoZXI"}
	third := &Actor{Role: RoleOperator, Subject: SealedPrefix + "2222222222222222:dGhpcmQ"}
	adjustment := proposal("p1", Credit, Goodwill, 500)
	adjustment.By = sealed
	w := funded(t).given(adjustment)
	staff := ErasePersonalData{KeyID: dataKey, LegalGround: "left the company", By: other}
	// then the subject's erasure is refused while it is pending
	refused(t, w, staff, ErrConflict)
	// when another subject rejects it, the erasure is proposed; an
	// erasure the subject proposes meanwhile stops its approval
	accepted(t, w, RejectAdjustment{Adjustment: "A1", Reason: "no ticket", By: other})
	accepted(t, w, staff)
	accepted(t, w, ErasePersonalData{KeyID: "fedcba9876543210", LegalGround: "asked", By: sealed})
	refused(t, w, ApproveErasure{Erasure: "ER1", By: third}, ErrConflict)
	// and once that one is decided too, the subject's erasure is approved
	accepted(t, w, RejectErasure{Erasure: "ER2", Reason: "not asked", By: other})
	accepted(t, w, ApproveErasure{Erasure: "ER1", By: third})
}
