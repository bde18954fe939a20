package domain

import (
	"errors"
	"testing"
	"time"
)

var (
	operator = &Actor{Role: RoleOperator, Subject: "alice@fdj"}
	selfP1   = &Actor{Role: RolePlayer, Subject: "p1"}
)

// refused asserts that a command is refused with code and records nothing.
func refused(tb testing.TB, w *world, c Command, code error) {
	tb.Helper()
	d, err := Decide(w.l, w.now, c)
	if !errors.Is(err, code) || len(d.Events) != 0 {
		tb.Fatalf("%T %+v: %v, events %v; want %s", c, c, err, types(d.Events), CodeOf(code))
	}
}

// accepted asserts that a command is accepted, applies it and returns its
// events.
func accepted(tb testing.TB, w *world, c Command) []Event {
	tb.Helper()
	d, err := w.do(c)
	if err != nil {
		tb.Fatalf("%T %+v: %v", c, c, err)
	}
	return d.Events
}

func at(t time.Time) *time.Time { return &t }

func TestSelfExclusionForATerm(t *testing.T) {
	// given a funded player who excludes themselves for 48 hours
	w := funded(t)
	until := w.now.Add(48 * time.Hour)
	evs := accepted(t, w, ConfigureAccount{Player: "p1", SelfExcludedUntil: at(until), By: selfP1})
	if !sameTypes(evs, TypeSelfExcludedUntil) || !evs[0].(*SelfExcludedUntil).Until.Equal(until) {
		t.Fatalf("events %v", evs)
	}
	// then stakes and deposits are refused at once, withdrawals are not
	refused(t, w, PlaceStake{Player: "p1", Stake: 100, Key: "s"}, ErrSelfExcluded)
	refused(t, w, Deposit{Player: "p1", Amount: 100, Key: "d2"}, ErrSelfExcluded)
	accepted(t, w, Withdraw{Player: "p1", Amount: 100, Key: "w"})
	// and the term is never shortened nor lifted, but extended
	refused(t, w, ConfigureAccount{Player: "p1", SelfExcludedUntil: at(until.Add(-time.Second))}, ErrConflict)
	refused(t, w, ConfigureAccount{Player: "p1", LiftSelfExclusion: true}, ErrConflict)
	if evs := accepted(t, w, ConfigureAccount{Player: "p1", SelfExcludedUntil: at(until)}); len(evs) != 0 {
		t.Fatalf("the same term again recorded %v", types(evs))
	}
	until = until.Add(24 * time.Hour)
	accepted(t, w, ConfigureAccount{Player: "p1", SelfExcludedUntil: at(until)})
	// when the term ends, exactly at its instant, the account plays again
	w.now = until.Add(-time.Nanosecond)
	refused(t, w, PlaceStake{Player: "p1", Stake: 100, Key: "s"}, ErrSelfExcluded)
	w.now = until
	accepted(t, w, PlaceStake{Player: "p1", Stake: 100, Key: "s"})
	accepted(t, w, Deposit{Player: "p1", Amount: 100, Key: "d3"})
	// and lifting an ended term records nothing
	if evs := accepted(t, w, ConfigureAccount{Player: "p1", LiftSelfExclusion: true}); len(evs) != 0 {
		t.Fatalf("lifting an ended term recorded %v", types(evs))
	}
}

func TestSelfExclusionTermBoundsAndReasons(t *testing.T) {
	w := funded(t)
	for _, tc := range []struct {
		name string
		when ConfigureAccount
		then error
	}{
		{"under 24 hours", ConfigureAccount{Player: "p1", SelfExcludedUntil: at(w.now.Add(23 * time.Hour))}, ErrInvalidRequest},
		{"over 12 months", ConfigureAccount{Player: "p1", SelfExcludedUntil: at(w.now.AddDate(1, 0, 0).Add(time.Second))}, ErrInvalidRequest},
		{"in the past", ConfigureAccount{Player: "p1", SelfExcludedUntil: at(w.now.Add(-time.Hour))}, ErrInvalidRequest},
		{"for good and for a term", ConfigureAccount{Player: "p1", SelfExcluded: true, SelfExcludedUntil: at(w.now.Add(48 * time.Hour))}, ErrInvalidRequest},
		{"recorded by the operator without a reason", ConfigureAccount{Player: "p1", SelfExcludedUntil: at(w.now.Add(48 * time.Hour)), By: operator}, ErrInvalidRequest},
		{"for good by the operator without a reason", ConfigureAccount{Player: "p1", SelfExcluded: true, By: operator}, ErrInvalidRequest},
		{"a reason with a control character", ConfigureAccount{Player: "p1", SelfExcluded: true, By: operator, Reason: "asked\x00"}, ErrInvalidRequest},
		{"a player opening an account", ConfigureAccount{Player: "p9", By: &Actor{Role: RolePlayer, Subject: "p9"}}, ErrNotFound},
		{"an actor without a subject", ConfigureAccount{Player: "p1", By: &Actor{Role: RoleOperator}}, ErrInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, w, tc.when, tc.then) })
	}
	// the bounds themselves are accepted, and the operator's with a reason
	accepted(t, w, ConfigureAccount{Player: "p1", SelfExcludedUntil: at(w.now.Add(24 * time.Hour)), By: operator, Reason: "asked by phone, ticket 42"})
	evs := accepted(t, w, ConfigureAccount{Player: "p1", SelfExcludedUntil: at(w.now.AddDate(1, 0, 0)), By: operator, Reason: "extension asked by mail"})
	if e := evs[0].(*SelfExcludedUntil); e.By != operator || e.Reason != "extension asked by mail" {
		t.Fatalf("who and why not recorded: %+v", e)
	}
	// and a permanent exclusion makes a term pointless
	w.given(ConfigureAccount{Player: "p1", SelfExcluded: true, By: selfP1})
	refused(t, w, ConfigureAccount{Player: "p1", SelfExcludedUntil: at(w.now.Add(48 * time.Hour))}, ErrConflict)
}

func TestBans(t *testing.T) {
	w := funded(t)
	ban := BanPlayer{Player: "p1", Reference: "ANJ-2026-0042", Reason: "national list", By: operator}
	for _, c := range []BanPlayer{
		{Player: "p1", Reason: "no reference", By: operator},
		{Player: "p1", Reference: "R1", By: operator},
		{Player: "ghost", Reference: "R1", Reason: "r", By: operator},
	} {
		if _, err := Decide(w.l, w.now, c); err == nil {
			t.Fatalf("%+v accepted", c)
		}
	}
	// given a ban
	evs := accepted(t, w, ban)
	b := evs[0].(*PlayerBanned)
	if b.Ban != "B1" || b.Reference != ban.Reference || b.By != operator {
		t.Fatalf("ban %+v", b)
	}
	// then stakes and deposits are refused, naming the ban; withdrawals are not
	refused(t, w, PlaceStake{Player: "p1", Stake: 100, Key: "s"}, ErrBanned)
	refused(t, w, Deposit{Player: "p1", Amount: 100, Key: "d2"}, ErrBanned)
	accepted(t, w, Withdraw{Player: "p1", Amount: 100, Key: "w"})
	// and recording the same decision again answers the same ban
	d, err := Decide(w.l, w.now, ban)
	if err != nil || d.Replay == nil || d.Replay.Ban != "B1" || len(d.Events) != 0 {
		t.Fatalf("retried ban: %+v %v", d, err)
	}
	other := ban
	other.Reason = "another reason"
	refused(t, w, other, ErrConflict)
	// when it is lifted, the player plays again; lifting it again records nothing
	refused(t, w, LiftBan{Player: "p1", Ban: "B1", Reference: "ANJ-2026-0043", By: operator}, ErrInvalidRequest)
	refused(t, w, LiftBan{Player: "p1", Ban: "B2", Reference: "R", Reason: "r", By: operator}, ErrNotFound)
	lift := LiftBan{Player: "p1", Ban: "B1", Reference: "ANJ-2026-0043", Reason: "removed from the list", By: operator}
	if evs := accepted(t, w, lift); !sameTypes(evs, TypeBanLifted) {
		t.Fatalf("lift: %v", types(evs))
	}
	accepted(t, w, PlaceStake{Player: "p1", Stake: 100, Key: "s"})
	if d, err := Decide(w.l, w.now, lift); err != nil || d.Replay == nil || len(d.Events) != 0 {
		t.Fatalf("second lift: %+v %v", d, err)
	}
	// and the next ban gets the next id
	if evs := accepted(t, w, BanPlayer{Player: "p1", Reference: "OP-7", Reason: "operator's list", By: operator}); evs[0].(*PlayerBanned).Ban != "B2" {
		t.Fatalf("second ban %+v", evs[0])
	}
}

func TestClosingEarlyNeedsAReason(t *testing.T) {
	w := funded(t)
	b := w.l.OpenBlock(100)
	seed := prepared(t, w.l.Rules, 100, 1).Seed
	refused(t, w, CloseBlock{Block: b.ID, Seed: seed, By: operator}, ErrInvalidRequest)
	evs := accepted(t, w, CloseBlock{Block: b.ID, Seed: seed, By: operator, Reason: "printing error on the block's tickets"})
	if c := evs[0].(*BlockClosed); c.By != operator || c.Reason == "" {
		t.Fatalf("close %+v", c)
	}
}

// withSettings is a funded world under other settings.
func withSettings(tb testing.TB, s Settings) *world {
	w := newWorld(tb)
	w.given(AdoptSettings{Settings: s})
	return w.given(
		ConfigureAccount{Player: "p1", DepositLimit: amt("1000"), StakeLimit: amt("1000")},
		Deposit{Player: "p1", Amount: 10000, Key: "d1"},
		CreateEmission{Price: 100, Blocks: 2, First: prepared(tb, w.l.Rules, 100, 1)},
	)
}

func TestSettingsDecideLimits(t *testing.T) {
	uk := BaselineSettings()
	uk.Jurisdiction, uk.Version, uk.LimitPeriodsDays, uk.LimitRaiseDelayHours = "UK", "uk-test", []int{1, 7, 30}, 48
	uk.DepositLimitRequired, uk.StakeLimitRequired = false, false
	w := withSettings(t, uk)
	// a daily limit is offered and checked beside the weekly one
	w.given(ConfigureAccount{Player: "p1", Limits: []LimitSetting{{StakeLimit, 1, 200}}})
	w.given(PlaceStake{Player: "p1", Stake: 100, Key: "s1"}, PlaceStake{Player: "p1", Stake: 100, Key: "s2"})
	refused(t, w, PlaceStake{Player: "p1", Stake: 100, Key: "s3"}, ErrLimitExceeded)
	w.now = w.now.Add(24*time.Hour + time.Second)
	accepted(t, w, PlaceStake{Player: "p1", Stake: 100, Key: "s3"})
	// a period not offered is refused
	refused(t, w, ConfigureAccount{Player: "p1", Limits: []LimitSetting{{DepositLimit, 3, 100}}}, ErrInvalidRequest)
	// a raise waits the settings' 48 hours
	evs := accepted(t, w, ConfigureAccount{Player: "p1", Limits: []LimitSetting{{StakeLimit, 1, 500}}})
	if got := evs[0].(*LimitChanged).EffectiveAt; !got.Equal(w.now.Add(48 * time.Hour)) {
		t.Fatalf("raise effective %s, want 48 h later", got)
	}
	// no limit is required: a player without any deposits
	w.given(ConfigureAccount{Player: "p2"})
	accepted(t, w, Deposit{Player: "p2", Amount: 100, Key: "d"})
}

func TestASettingsChangeIsNotRetroactive(t *testing.T) {
	// given a raise recorded under the baseline's 24 hours
	w := funded(t)
	w.given(ConfigureAccount{Player: "p1", StakeLimit: amt("2000")})
	raisedAt := w.now
	// when settings with a 72-hour delay, a 30-day period and no weekly
	// period are adopted
	s := BaselineSettings()
	s.Version, s.LimitPeriodsDays, s.LimitRaiseDelayHours = "fr-2", []int{30}, 72
	if evs := accepted(t, w, AdoptSettings{Settings: s}); !sameTypes(evs, TypeSettingsAdopted) {
		t.Fatalf("adopt: %v", types(evs))
	}
	if evs := accepted(t, w, AdoptSettings{Settings: s}); len(evs) != 0 {
		t.Fatalf("adopting the settings in force recorded %v", types(evs))
	}
	// then the recorded raise keeps its date
	w.now = raisedAt.Add(24 * time.Hour)
	if got := w.l.Accounts["p1"].Limits[weeklyStake].At(w.now); got != 200000 {
		t.Fatalf("raise under the old settings: limit %s", got)
	}
	// and the weekly limit, no longer offered, may be lowered but not raised
	accepted(t, w, ConfigureAccount{Player: "p1", StakeLimit: amt("1500")})
	refused(t, w, ConfigureAccount{Player: "p1", StakeLimit: amt("1600")}, ErrInvalidRequest)
	// and a 30-day limit counts deposits older than a week
	w.given(ConfigureAccount{Player: "p1", Limits: []LimitSetting{{DepositLimit, 30, 10500}}})
	w.now = w.now.Add(10 * 24 * time.Hour)
	refused(t, w, Deposit{Player: "p1", Amount: 600, Key: "d-late"}, ErrLimitExceeded)
	accepted(t, w, Deposit{Player: "p1", Amount: 500, Key: "d-late"})
	// and a replay of the stream reaches the same state and decisions
	replayed := NewLedger(w.l.Rules)
	for _, r := range w.log {
		if err := replayed.Evolve(r.at, r.e); err != nil {
			t.Fatal(err)
		}
	}
	if !replayed.Settings.Equal(s) || replayed.Accounts["p1"].Limits[LimitKey{DepositLimit, 30}].At(w.now) != 10500 {
		t.Fatalf("replayed settings %+v", replayed.Settings)
	}
	for _, c := range []Command{Deposit{Player: "p1", Amount: 1, Key: "x"}, ConfigureAccount{Player: "p1", StakeLimit: amt("1600")}} {
		_, e1 := Decide(w.l, w.now, c)
		_, e2 := Decide(replayed, w.now, c)
		if CodeOf(e1) != CodeOf(e2) {
			t.Fatalf("%T decided %v live, %v replayed", c, e1, e2)
		}
	}
}

func TestSettingsValidation(t *testing.T) {
	doc, err := DefaultSettings()
	if err != nil {
		t.Fatal(err)
	}
	if !doc.Settings.Equal(BaselineSettings()) {
		t.Fatalf("the embedded settings %+v are not the baseline %+v: a stream without SettingsAdopted would be misread", doc.Settings, BaselineSettings())
	}
	for _, mutate := range []func(*Settings){
		func(s *Settings) { s.Version = "a b" },
		func(s *Settings) { s.LimitPeriodsDays = nil },
		func(s *Settings) { s.LimitPeriodsDays = []int{7, 1} },
		func(s *Settings) { s.LimitPeriodsDays = []int{32} },
		func(s *Settings) { s.LimitRaiseDelayHours = -1 },
		func(s *Settings) { s.SelfExclusionMinHours = 0 },
		func(s *Settings) { s.SelfExclusionMaxMonths = 121 },
		func(s *Settings) { s.SelfExclusionMinHours, s.SelfExclusionMaxMonths = 24*60, 1 },
	} {
		s := BaselineSettings()
		mutate(&s)
		if err := s.Validate(); !errors.Is(err, ErrSettings) {
			t.Errorf("%+v: %v, want ErrSettings", s, err)
		}
	}
	if _, err := LoadSettings([]byte(`{"jurisdiction":"FR","version":"x","limit_periods_days":[7],"limit_raise_delay_hours":24,
		"deposit_limit_required":true,"stake_limit_required":true,"self_exclusion_min_hours":24,"self_exclusion_max_months":12,"sources":{}}`)); !errors.Is(err, ErrSettings) {
		t.Errorf("a file without sources: %v", err)
	}
}
