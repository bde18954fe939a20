package domain

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// smallRules is the 2015 rule set with blocks of 12 units (one lot of each
// winning tier and three losing units), so a test can sell a block out.
func smallRules(tb testing.TB) *RuleSet {
	tb.Helper()
	r, err := DefaultRules()
	if err != nil {
		tb.Fatal(err)
	}
	small := *r
	small.BlockUnits = 12
	small.Tables = append([]PriceTable(nil), r.Tables...)
	for i := range small.Tables {
		t := &small.Tables[i]
		t.TotalLots, t.Total = 0, 0
		for tier := range t.Lots {
			t.Lots[tier].Count = 1
			t.Lots[tier].Total = t.Lots[tier].Amount
			if Tier(tier) != TierNone {
				t.TotalLots++
				t.Total += t.Lots[tier].Amount
			}
		}
		t.Lots[TierNone].Count = 3
	}
	return &small
}

// prepared returns a block ready to open, from a seed made of one byte.
func prepared(tb testing.TB, r *RuleSet, price Amount, b byte) *PreparedBlock {
	tb.Helper()
	table, err := r.Table(price)
	if err != nil {
		tb.Fatal(err)
	}
	var seed Seed
	for i := range seed {
		seed[i] = b + byte(i)
	}
	return &PreparedBlock{Seed: seed, SealedSeed: []byte("sealed"), Deck: BuildDeck(table.LotCounts(), seed)}
}

// world is a ledger under test with its clock, and the events it recorded.
type world struct {
	tb  testing.TB
	l   *Ledger
	now time.Time
	log []recorded
}

// recorded is an event as the stream holds it: with its time.
type recorded struct {
	at time.Time
	e  Event
}

func newWorld(tb testing.TB) *world {
	return &world{tb: tb, l: NewLedger(smallRules(tb)), now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
}

// do decides a command and applies its events, as the writer does.
func (w *world) do(c Command) (Decision, error) {
	d, err := Decide(w.l, w.now, c)
	if err != nil {
		return d, err
	}
	for _, e := range d.Events {
		if err := w.l.Evolve(w.now, e); err != nil {
			w.tb.Fatalf("evolve %s: %v", e.EventType(), err)
		}
		w.log = append(w.log, recorded{w.now, e})
	}
	return d, nil
}

// given runs commands that must succeed.
func (w *world) given(cs ...Command) *world {
	w.tb.Helper()
	for _, c := range cs {
		if _, err := w.do(c); err != nil {
			w.tb.Fatalf("given %T: %v", c, err)
		}
	}
	return w
}

func amt(s string) *Amount {
	a, err := ParseAmount(s)
	if err != nil {
		panic(err)
	}
	return &a
}

// funded is a player with limits of 1 000 € and 100 € deposited, and an
// open block of 1 € units.
func funded(tb testing.TB) *world {
	w := newWorld(tb)
	return w.given(
		ConfigureAccount{Player: "p1", DepositLimit: amt("1000"), StakeLimit: amt("1000")},
		Deposit{Player: "p1", Amount: 10000, Key: "d1"},
		CreateEmission{Price: 100, Blocks: 2, First: prepared(tb, w.l.Rules, 100, 1)},
	)
}

func types(evs []Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.EventType()
	}
	return out
}

func sameTypes(got []Event, want ...string) bool {
	g := types(got)
	if len(g) != len(want) {
		return false
	}
	for i := range g {
		if g[i] != want[i] {
			return false
		}
	}
	return true
}

func TestDecideRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		given func(tb testing.TB) *world
		when  Command
		then  error
	}{
		{"deposit before a deposit limit", func(tb testing.TB) *world {
			return newWorld(tb).given(ConfigureAccount{Player: "p1"})
		}, Deposit{Player: "p1", Amount: 100, Key: "k"}, ErrLimitExceeded},
		{"deposit above the weekly limit", func(tb testing.TB) *world {
			return newWorld(tb).given(ConfigureAccount{Player: "p1", DepositLimit: amt("50")}, Deposit{Player: "p1", Amount: 4000, Key: "a"})
		}, Deposit{Player: "p1", Amount: 1001, Key: "b"}, ErrLimitExceeded},
		{"deposit to no account", newWorld, Deposit{Player: "ghost", Amount: 100, Key: "k"}, ErrNotFound},
		{"deposit of zero", funded, Deposit{Player: "p1", Amount: 0, Key: "z"}, ErrInvalidRequest},
		{"deposit without a key", funded, Deposit{Player: "p1", Amount: 100}, ErrInvalidRequest},
		{"withdrawal above the balance", funded, Withdraw{Player: "p1", Amount: 10001, Key: "w"}, ErrInsufficientFunds},
		{"same key, another amount", funded, Deposit{Player: "p1", Amount: 200, Key: "d1"}, ErrConflict},
		{"same key, another amount, of a withdrawal", func(tb testing.TB) *world {
			return funded(tb).given(Withdraw{Player: "p1", Amount: 100, Key: "w1"})
		}, Withdraw{Player: "p1", Amount: 200, Key: "w1"}, ErrConflict},
		{"stake of 1.50", funded, PlaceStake{Player: "p1", Stake: 150, Key: "s"}, ErrInvalidStake},
		{"stake with no open block of that price", funded, PlaceStake{Player: "p1", Stake: 200, Key: "s"}, ErrNoOpenBlock},
		{"stake before a stake limit", func(tb testing.TB) *world {
			w := newWorld(tb)
			return w.given(ConfigureAccount{Player: "p1", DepositLimit: amt("10")}, Deposit{Player: "p1", Amount: 500, Key: "d"},
				CreateEmission{Price: 100, Blocks: 1, First: prepared(tb, w.l.Rules, 100, 1)})
		}, PlaceStake{Player: "p1", Stake: 100, Key: "s"}, ErrLimitExceeded},
		{"stake above the weekly stake limit", func(tb testing.TB) *world {
			w := funded(tb)
			return w.given(ConfigureAccount{Player: "p1", StakeLimit: amt("1")}, PlaceStake{Player: "p1", Stake: 100, Key: "s1"})
		}, PlaceStake{Player: "p1", Stake: 100, Key: "s2"}, ErrLimitExceeded},
		{"stake above the balance", func(tb testing.TB) *world {
			w := newWorld(tb)
			return w.given(ConfigureAccount{Player: "p1", DepositLimit: amt("10"), StakeLimit: amt("10")}, Deposit{Player: "p1", Amount: 50, Key: "d"},
				CreateEmission{Price: 100, Blocks: 1, First: prepared(tb, w.l.Rules, 100, 1)})
		}, PlaceStake{Player: "p1", Stake: 100, Key: "s"}, ErrInsufficientFunds},
		{"stake while self-excluded", func(tb testing.TB) *world {
			return funded(tb).given(ConfigureAccount{Player: "p1", SelfExcluded: true})
		}, PlaceStake{Player: "p1", Stake: 100, Key: "s"}, ErrSelfExcluded},
		{"lifting a self-exclusion", func(tb testing.TB) *world {
			return funded(tb).given(ConfigureAccount{Player: "p1", SelfExcluded: true})
		}, ConfigureAccount{Player: "p1", LiftSelfExclusion: true}, ErrConflict},
		{"deposit while self-excluded", func(tb testing.TB) *world {
			return funded(tb).given(ConfigureAccount{Player: "p1", SelfExcluded: true})
		}, Deposit{Player: "p1", Amount: 100, Key: "d-after"}, ErrSelfExcluded},
		{"throw out of turn", func(tb testing.TB) *world {
			return funded(tb).given(PlaceStake{Player: "p1", Stake: 100, Key: "s"},
				MakeThrow{Player: "p1", Play: "E0001-B001-U000000", Throw: 1})
		}, MakeThrow{Player: "p1", Play: "E0001-B001-U000000", Throw: 3}, ErrThrowOutOfTurn},
		{"throw 5", func(tb testing.TB) *world {
			return funded(tb).given(PlaceStake{Player: "p1", Stake: 100, Key: "s"})
		}, MakeThrow{Player: "p1", Play: "E0001-B001-U000000", Throw: 5}, ErrInvalidRequest},
		{"same emission key, another request", func(tb testing.TB) *world {
			w := newWorld(tb)
			return w.given(CreateEmission{Price: 100, Blocks: 1, Key: "e1", First: prepared(tb, w.l.Rules, 100, 1)})
		}, CreateEmission{Price: 100, Blocks: 2, Key: "e1"}, ErrConflict},
		{"throw on a foreign play", func(tb testing.TB) *world {
			w := funded(tb)
			return w.given(ConfigureAccount{Player: "p2", DepositLimit: amt("10"), StakeLimit: amt("10")},
				Deposit{Player: "p2", Amount: 500, Key: "d"}, PlaceStake{Player: "p2", Stake: 100, Key: "s"})
		}, MakeThrow{Player: "p1", Play: "E0001-B001-U000000"}, ErrNotFound},
		{"fifth throw", func(tb testing.TB) *world {
			return funded(tb).given(PlaceStake{Player: "p1", Stake: 100, Key: "s"},
				MakeThrow{Player: "p1", Play: "E0001-B001-U000000"}, MakeThrow{Player: "p1", Play: "E0001-B001-U000000"},
				MakeThrow{Player: "p1", Play: "E0001-B001-U000000"}, MakeThrow{Player: "p1", Play: "E0001-B001-U000000"})
		}, MakeThrow{Player: "p1", Play: "E0001-B001-U000000"}, ErrPlayFinished},
		{"throw on a play that does not exist", funded, MakeThrow{Player: "p1", Play: "E0001-B001-U000009"}, ErrNotFound},
		{"bad player id", newWorld, ConfigureAccount{Player: "p 1"}, ErrInvalidRequest},
		{"emission at 3 €", newWorld, CreateEmission{Price: 300, Blocks: 1}, ErrInvalidStake},
		{"close a block with plays in progress", func(tb testing.TB) *world {
			return funded(tb).given(PlaceStake{Player: "p1", Stake: 100, Key: "s"})
		}, CloseBlock{Block: "E0001-B001"}, ErrConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.given(t)
			before := len(w.l.Plays)
			d, err := Decide(w.l, w.now, tc.when)
			if !errors.Is(err, tc.then) {
				t.Fatalf("then: %v, want code %s", err, CodeOf(tc.then))
			}
			if len(d.Events) != 0 || len(w.l.Plays) != before {
				t.Fatalf("a refusal recorded %v", types(d.Events))
			}
		})
	}
}

func TestPlayFromStakeToPrize(t *testing.T) {
	// given a funded player and an open block of 1 € units
	w := funded(t)
	b := w.l.OpenBlock(100)
	// when the player stakes
	d, err := w.do(PlaceStake{Player: "p1", Stake: 100, Key: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	// then the stake is debited and unit 0 is assigned with a valid proof
	if !sameTypes(d.Events, TypeStakePlaced, TypeUnitAssigned) {
		t.Fatalf("events %v", types(d.Events))
	}
	stake := d.Events[0].(*StakePlaced)
	ua := d.Events[1].(*UnitAssigned)
	if stake.Balance != 9900 || ua.Proof.Unit != 0 || stake.Play != "E0001-B001-U000000" {
		t.Fatalf("stake %+v unit %d", stake, ua.Proof.Unit)
	}
	if err := VerifyUnitProof(b.Commitment.Root, b.Commitment.Units, ua.Proof); err != nil {
		t.Fatalf("proof: %v", err)
	}
	// and a retry with the same key returns the first result, recording nothing
	d, err = Decide(w.l, w.now, PlaceStake{Player: "p1", Stake: 100, Key: "s1"})
	if err != nil || d.Replay == nil || d.Replay.Play != stake.Play || len(d.Events) != 0 {
		t.Fatalf("retry: %+v, %v", d, err)
	}
	// when the player throws four times
	var evs []Event
	for i := 1; i <= ThrowCount; i++ {
		d, err := w.do(MakeThrow{Player: "p1", Play: stake.Play})
		if err != nil {
			t.Fatalf("throw %d: %v", i, err)
		}
		if tm := d.Events[0].(*ThrowMade); tm.Throw != i || tm.BySystem {
			t.Fatalf("throw %d recorded as %+v", i, tm)
		}
		evs = append(evs, d.Events...)
	}
	// then the play settles on its unit's tier and a winner is paid
	table, _ := w.l.Rules.Table(100)
	settled := evs[len(evs)-1]
	if p, ok := settled.(*PrizePaid); ok {
		settled = evs[len(evs)-2]
		if p.Amount != table.Prize(ua.Proof.Tier) || p.Balance != 9900+p.Amount {
			t.Fatalf("prize %+v for tier %s", p, ua.Proof.Tier)
		}
	}
	ps := settled.(*PlaySettled)
	if ps.Tier != ua.Proof.Tier || ps.Prize != table.Prize(ps.Tier) {
		t.Fatalf("settled %+v, unit tier %s", ps, ua.Proof.Tier)
	}
	if len(w.l.Plays) != 0 || w.l.Accounts["p1"].Balance != 9900+ps.Prize {
		t.Fatalf("plays %d balance %s", len(w.l.Plays), w.l.Accounts["p1"].Balance)
	}
}

func TestSellOutPaysTheTableAndOpensTheNextBlock(t *testing.T) {
	// given an emission of two blocks, the second prepared
	w := funded(t)
	w.l.Prepare("E0001", prepared(t, w.l.Rules, 100, 2))
	table, _ := w.l.Rules.Table(100)
	var prizes Amount
	var tiers [TierCount]int
	// when every unit of the first block is played to the end
	for u := 0; u < w.l.Rules.BlockUnits; u++ {
		d, err := w.do(PlaceStake{Player: "p1", Stake: 100, Key: "s" + string(rune('a'+u))})
		if err != nil {
			t.Fatalf("stake %d: %v", u, err)
		}
		if u == w.l.Rules.BlockUnits-1 && !sameTypes(d.Events, TypeStakePlaced, TypeUnitAssigned, TypeBlockExhausted, TypeBlockOpened) {
			t.Fatalf("last sale: %v", types(d.Events))
		}
		play := d.Events[0].(*StakePlaced).Play
		d, err = w.do(CompletePlay{Play: play})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range d.Events {
			switch e := e.(type) {
			case *ThrowMade:
				if !e.BySystem {
					t.Fatalf("system throw not marked: %+v", e)
				}
			case *PlaySettled:
				tiers[e.Tier]++
				prizes += e.Prize
			}
		}
	}
	// then the block paid exactly its table and the next one is on sale
	if tiers != table.LotCounts() || prizes != table.Total {
		t.Fatalf("tiers %v prizes %s, want %v %s", tiers, prizes, table.LotCounts(), table.Total)
	}
	if b := w.l.OpenBlock(100); b == nil || b.ID != "E0001-B002" {
		t.Fatalf("open block after sell-out: %+v", b)
	}
	first := w.l.Blocks["E0001-B001"]
	if first.State != BlockStateExhausted || first.InPlay != 0 || first.Sold != 12 {
		t.Fatalf("first block %+v", first)
	}
	// and it closes with its seed, which matches the commitment
	seed := prepared(t, w.l.Rules, 100, 1).Seed
	d, err := w.do(CloseBlock{Block: first.ID, Seed: seed})
	if err != nil || !sameTypes(d.Events, TypeBlockClosed) {
		t.Fatalf("close: %v %v", d.Events, err)
	}
	if err := VerifyReveal(seed, table.LotCounts(), first.Commitment); err != nil {
		t.Fatal(err)
	}
}

func TestLimitsLowerAtOnceRaiseAfter24Hours(t *testing.T) {
	w := funded(t)
	// when the stake limit is raised from 1 000 € to 2 000 €
	w.given(ConfigureAccount{Player: "p1", StakeLimit: amt("2000")})
	lim := w.l.Accounts["p1"].Limits[weeklyStake]
	// then the old limit holds for 24 hours
	if got := lim.At(w.now.Add(raiseDelay - time.Second)); got != 100000 {
		t.Fatalf("limit before 24h: %s", got)
	}
	if got := lim.At(w.now.Add(raiseDelay)); got != 200000 {
		t.Fatalf("limit after 24h: %s", got)
	}
	// when it is lowered to 5 €, it applies at once and cancels the raise
	w.given(ConfigureAccount{Player: "p1", StakeLimit: amt("5")})
	if got := lim.At(w.now.Add(48 * time.Hour)); got != 500 {
		t.Fatalf("lowered limit: %s", got)
	}
	// and the rolling window lets stakes again once 7 days have passed
	for i := 0; i < 5; i++ {
		w.given(PlaceStake{Player: "p1", Stake: 100, Key: "s" + string(rune('a'+i))})
	}
	if _, err := Decide(w.l, w.now, PlaceStake{Player: "p1", Stake: 100, Key: "s-late"}); !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("sixth stake: %v", err)
	}
	w.now = w.now.Add(week + time.Second)
	if _, err := Decide(w.l, w.now, PlaceStake{Player: "p1", Stake: 100, Key: "s-late"}); err != nil {
		t.Fatalf("stake a week later: %v", err)
	}
}

func TestIdempotencyKeysExpireAfterTheWindow(t *testing.T) {
	w := funded(t)
	if d, err := Decide(w.l, w.now, Deposit{Player: "p1", Amount: 10000, Key: "d1"}); err != nil || d.Replay == nil || d.Replay.Balance != 10000 {
		t.Fatalf("retry within the window: %+v %v", d, err)
	}
	w.now = w.now.Add(IdempotencyWindowDefault + time.Minute)
	w.given(ConfigureAccount{Player: "p2"}) // any event moves the ledger's clock
	if w.l.Key("p1", KeyDeposit, "d1") != nil {
		t.Fatal("key still remembered after the window")
	}
}

func TestKeysAreScopedToThePlayerAndTheKindOfCommand(t *testing.T) {
	// given a deposit with key k
	w := funded(t)
	w.given(Deposit{Player: "p1", Amount: 100, Key: "k"})
	// when a stake and a withdrawal use the same key, they are new commands
	for _, c := range []Command{PlaceStake{Player: "p1", Stake: 100, Key: "k"}, Withdraw{Player: "p1", Amount: 100, Key: "k"}} {
		d, err := w.do(c)
		if err != nil || d.Replay != nil || len(d.Events) == 0 {
			t.Fatalf("%T with a deposit's key: %+v %v", c, d, err)
		}
	}
	// and another player's deposit with the same key is theirs
	w.given(ConfigureAccount{Player: "p2", DepositLimit: amt("10")})
	if d, err := w.do(Deposit{Player: "p2", Amount: 100, Key: "k"}); err != nil || d.Replay != nil {
		t.Fatalf("p2's deposit: %+v %v", d, err)
	}
	// while a retry of the deposit answers its first result, even after
	// the later commands moved the balance
	d, err := Decide(w.l, w.now, Deposit{Player: "p1", Amount: 100, Key: "k"})
	if err != nil || d.Replay == nil || d.Replay.Balance != 10100 {
		t.Fatalf("retry: %+v %v", d, err)
	}
	// and a conflict does not say what the first request was
	_, err = Decide(w.l, w.now, Deposit{Player: "p1", Amount: 999, Key: "k"})
	if !errors.Is(err, ErrConflict) || strings.Contains(err.Error(), "1.00") {
		t.Fatalf("conflict: %v", err)
	}
}

func TestRetriedThrowsAnswerTheThrowTheyName(t *testing.T) {
	// given a play with two throws made
	w := funded(t)
	w.given(PlaceStake{Player: "p1", Stake: 100, Key: "s"})
	play := "E0001-B001-U000000"
	w.given(MakeThrow{Player: "p1", Play: play, Throw: 1}, MakeThrow{Player: "p1", Play: play, Throw: 2})
	// when throw 2 is sent again, it answers throw 2 and records nothing
	d, err := Decide(w.l, w.now, MakeThrow{Player: "p1", Play: play, Throw: 2})
	if err != nil || d.Replay == nil || d.Replay.Throw != 2 || d.Replay.Play != play || len(d.Events) != 0 {
		t.Fatalf("retry of throw 2: %+v %v", d, err)
	}
	// and a request without a throw number makes the next throw, as before
	d, err = w.do(MakeThrow{Player: "p1", Play: play})
	if err != nil || d.Events[0].(*ThrowMade).Throw != 3 {
		t.Fatalf("unnumbered throw: %+v %v", d, err)
	}
	// when throw 4 settles the play, its retry still answers throw 4
	d, err = w.do(MakeThrow{Player: "p1", Play: play, Throw: 4})
	if err != nil || !sameTypes(d.Events[:2], TypeThrowMade, TypePlaySettled) {
		t.Fatalf("throw 4: %+v %v", d, err)
	}
	d, err = Decide(w.l, w.now, MakeThrow{Player: "p1", Play: play, Throw: 4})
	if err != nil || d.Replay == nil || d.Replay.Throw != 4 {
		t.Fatalf("retry of throw 4 after settlement: %+v %v", d, err)
	}
	// and an unnumbered throw on the finished play is play_finished
	if _, err := Decide(w.l, w.now, MakeThrow{Player: "p1", Play: play}); !errors.Is(err, ErrPlayFinished) {
		t.Fatalf("unnumbered fifth throw: %v", err)
	}
}

func TestEmissionKeysAnswerTheFirstEmission(t *testing.T) {
	w := newWorld(t)
	// given an emission created with key e1 that opened its first block
	w.given(CreateEmission{Price: 100, Blocks: 2, Key: "e1", First: prepared(t, w.l.Rules, 100, 1)})
	// and a second emission of the same price, which queues
	w.given(CreateEmission{Price: 100, Blocks: 1, Key: "e2", First: prepared(t, w.l.Rules, 100, 2)})
	for _, tc := range []struct {
		key, emission, opened string
		blocks                int
	}{{"e1", "E0001", "E0001-B001", 2}, {"e2", "E0002", "", 1}} {
		d, err := Decide(w.l, w.now, CreateEmission{Price: 100, Blocks: tc.blocks, Key: tc.key})
		if err != nil || d.Replay == nil || d.Replay.Emission != tc.emission || d.Replay.OpenedBlock != tc.opened || len(d.Events) != 0 {
			t.Fatalf("retry of %s: %+v %v", tc.key, d, err)
		}
	}
	// and an emission without a key is a new one each time
	d, err := Decide(w.l, w.now, CreateEmission{Price: 100, Blocks: 1, First: prepared(t, w.l.Rules, 100, 3)})
	if err != nil || d.Replay != nil || d.Events[0].(*EmissionCreated).Emission != "E0003" {
		t.Fatalf("emission without a key: %+v %v", d, err)
	}
}

func TestSelfExclusionLeavesLimitsAndWithdrawalsOpen(t *testing.T) {
	w := funded(t)
	w.given(ConfigureAccount{Player: "p1", SelfExcluded: true})
	// a lowered limit, a repeated exclusion and a withdrawal are accepted
	w.given(ConfigureAccount{Player: "p1", StakeLimit: amt("5")}, ConfigureAccount{Player: "p1", SelfExcluded: true},
		Withdraw{Player: "p1", Amount: 100, Key: "w"})
	if lim := w.l.Accounts["p1"].Limits[weeklyStake].At(w.now); lim != 500 || !w.l.Accounts["p1"].SelfExcluded {
		t.Fatalf("limit %s, excluded %v", lim, w.l.Accounts["p1"].SelfExcluded)
	}
}

func TestClosingAClosedBlockRecordsNothing(t *testing.T) {
	w := funded(t)
	b := w.l.OpenBlock(100)
	seed := prepared(t, w.l.Rules, 100, 1).Seed
	w.given(CloseBlock{Block: b.ID, Seed: seed})
	d, err := Decide(w.l, w.now, CloseBlock{Block: b.ID})
	if err != nil || len(d.Events) != 0 {
		t.Fatalf("second close: %+v %v", d, err)
	}
}

// weeklyStake names the weekly stake limit; raiseDelay and week are the
// baseline settings' raise delay and period.
var (
	weeklyStake = LimitKey{StakeLimit, 7}
	raiseDelay  = 24 * time.Hour
	week        = 7 * 24 * time.Hour
)
