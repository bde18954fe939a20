package projectionstest

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/shopspring/decimal"
)

// Open returns a store for a stream written under rules. The same name opens
// the same store again (a restarted process: the PostgreSQL store reopens
// its tables, the in-memory store is handed back as it is); a new name opens
// a fresh, empty one. The opener registers the cleanup.
type Open func(tb testing.TB, rules *domain.RuleSet, name string) projections.Store

// Run is the conformance suite of projections.Store: every implementation
// passes it.
func Run(t *testing.T, open Open) {
	rules := SmallRules(t)
	w := Standard(t, rules)
	t.Run("AgreesWithTheEvents", func(t *testing.T) {
		s := open(t, rules, "agrees")
		Project(t, s, w.Events, 7)
		checkAgainstEvents(t, s, w)
	})
	t.Run("OpenBlockRevealsNoUnsoldOutcome", func(t *testing.T) { testOpenBlock(t, open, rules, w) })
	t.Run("ReapplyIsANoOpAndAGapIsAnError", func(t *testing.T) { testGap(t, open, rules, w) })
	t.Run("KilledMidBatchEndsIdentical", func(t *testing.T) { testKilled(t, open, rules, w) })
	t.Run("WaitForReadsYourWrites", func(t *testing.T) { testWaitFor(t, open, rules, w) })
	t.Run("ReadersNeverSeeHalfAnAppend", func(t *testing.T) { testWholeAppends(t, open, rules, w) })
	t.Run("ResumesInsideAnAppend", func(t *testing.T) { testResumeInsideAnAppend(t, open, rules, w) })
	t.Run("QueriesAreBounded", func(t *testing.T) { testBounds(t, open, rules, w) })
	t.Run("Compliance", func(t *testing.T) {
		s := open(t, rules, "compliance")
		Project(t, s, w.Events, 5)
		t.Run("Statements", func(t *testing.T) { testStatements(t, s, w) })
		t.Run("Controls", func(t *testing.T) { testControls(t, s, w) })
		t.Run("Reports", func(t *testing.T) { testReports(t, s, w) })
	})
	t.Run("Article3Report", func(t *testing.T) { testArticle3Report(t, open) })
}

// Project applies events to a store through a Runner with batches of at most
// batch records, and waits until they are all applied.
func Project(tb testing.TB, s projections.Store, events []projections.Envelope, batch int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := projections.NewRunner(NewLog(events), s, projections.WithBatchMax(batch)).RunTo(ctx, uint64(len(events))); err != nil {
		tb.Fatalf("project %d events: %v", len(events), err)
	}
}

func checkAgainstEvents(t *testing.T, s projections.Store, w *World) {
	ctx := context.Background()
	type sums struct{ deposited, withdrawn, staked, won, adjCredits, adjDebits domain.Amount }
	want := map[string]*sums{}
	stakes := map[string][]*domain.StakePlaced{}
	openedSeq := map[string]uint64{}
	throws := map[string]int{}
	settled := map[string]*domain.PlaySettled{}
	paid := map[string]*domain.PrizePaid{}
	// lastSeq is the sequence of each play's last event once settled: its
	// PrizePaid, else its PlaySettled.
	lastSeq := map[string]uint64{}
	for _, env := range w.Events {
		switch e := env.Event.(type) {
		case *domain.AccountOpened:
			want[e.Player] = &sums{}
		case *domain.BlockOpened:
			openedSeq[e.Block] = env.Seq
		case *domain.FundsDeposited:
			want[e.Player].deposited += e.Amount
		case *domain.FundsWithdrawn:
			want[e.Player].withdrawn += e.Amount
		case *domain.StakePlaced:
			want[e.Player].staked += e.Stake
			stakes[e.Player] = append(stakes[e.Player], e)
		case *domain.ThrowMade:
			throws[e.Play]++
		case *domain.PlaySettled:
			settled[e.Play], lastSeq[e.Play] = e, env.Seq
		case *domain.PrizePaid:
			want[e.Player].won += e.Amount
			paid[e.Play], lastSeq[e.Play] = e, env.Seq
		case *domain.AdjustmentApproved:
			if e.Direction == domain.Credit {
				want[e.Player].adjCredits += e.Amount
			} else {
				want[e.Player].adjDebits += e.Amount
			}
		}
	}
	// Accounts: every balance is the ledger's and the sum of its journal.
	var net domain.Amount
	for id, la := range w.Ledger.Accounts {
		a, err := s.Account(ctx, id)
		if err != nil {
			t.Fatalf("account %s: %v", id, err)
		}
		c, d, err := s.AccountTotals(ctx, domain.PlayerAccount(id))
		if err != nil {
			t.Fatal(err)
		}
		ws := want[id]
		if a.Balance != la.Balance || c-d != a.Balance {
			t.Errorf("account %s: balance %s, journal %s, ledger %s", id, a.Balance, c-d, la.Balance)
		}
		if a.Deposited != ws.deposited || a.Withdrawn != ws.withdrawn || a.Staked != ws.staked || a.Won != ws.won || a.Plays != len(stakes[id]) ||
			a.AdjustedCredits != ws.adjCredits || a.AdjustedDebits != ws.adjDebits {
			t.Errorf("account %s: %+v, want %+v and %d plays", id, a, *ws, len(stakes[id]))
		}
		// The account adds up: its totals explain its balance.
		if sum := a.Deposited - a.Withdrawn - a.Staked + a.Won + a.AdjustedCredits - a.AdjustedDebits; sum != a.Balance {
			t.Errorf("account %s: balance %s, but its totals add up to %s", id, a.Balance, sum)
		}
		if a.SelfExcluded != la.SelfExcluded {
			t.Errorf("account %s: self-excluded %v, ledger %v", id, a.SelfExcluded, la.SelfExcluded)
		}
		for _, when := range []time.Time{w.Now, w.Now.Add(w.Ledger.Settings.RaiseDelay() + time.Minute)} {
			for kind, got := range map[domain.LimitKind]*projections.Limit{domain.DepositLimit: a.DepositLimit, domain.StakeLimit: a.StakeLimit} {
				if l := la.Limits[domain.LimitKey{Kind: kind, Days: 7}]; l == nil || got == nil || got.At(when) != l.At(when) {
					t.Errorf("account %s: %s limit %+v at %s, ledger %+v", id, kind, got, when, l)
				}
			}
			if len(a.Limits) != len(la.Limits) {
				t.Errorf("account %s: %d limits, ledger %d", id, len(a.Limits), len(la.Limits))
			}
			for _, got := range a.Limits {
				if l := la.Limits[domain.LimitKey{Kind: got.Kind, Days: got.PeriodDays}]; l == nil || got.At(when) != l.At(when) {
					t.Errorf("account %s: %s %d-day limit %+v at %s, ledger %+v", id, got.Kind, got.PeriodDays, got, when, l)
				}
			}
		}
		if !sameTime(a.SelfExcludedUntil, la.ExcludedUntil) || len(a.Bans) != len(la.Bans) {
			t.Errorf("account %s: excluded until %v and bans %+v, ledger %v and %+v", id, a.SelfExcludedUntil, a.Bans, la.ExcludedUntil, la.Bans)
		}
		net += c - d
	}
	blocks, err := s.Blocks(ctx, "", projections.PageMax)
	if err != nil {
		t.Fatal(err)
	}
	house := []string{domain.HouseCashAccount()}
	for _, k := range domain.AdjustmentKinds {
		house = append(house, domain.AdjustmentAccount(k))
	}
	for _, acct := range append(house, blockAccounts(blocks)...) {
		c, d, err := s.AccountTotals(ctx, acct)
		if err != nil {
			t.Fatal(err)
		}
		net += c - d
	}
	if net != 0 {
		t.Errorf("debits and credits differ by %s", net)
	}
	// Blocks: the sold-out block paid exactly Article 3.
	if len(blocks) != len(w.Ledger.Blocks) {
		t.Fatalf("%d blocks, ledger has %d", len(blocks), len(w.Ledger.Blocks))
	}
	for _, b := range blocks {
		lb := w.Ledger.Blocks[b.ID]
		if b.State != lb.State || b.Sold != lb.Sold || b.Left != lb.Commitment.Units-lb.Sold || b.Commitment != lb.Commitment {
			t.Errorf("block %s: %s sold %d left %d, ledger %s sold %d", b.ID, b.State, b.Sold, b.Left, lb.State, lb.Sold)
		}
		if b.OpenedSeq != openedSeq[b.ID] {
			t.Errorf("block %s: opened at sequence %d, its BlockOpened is at %d", b.ID, b.OpenedSeq, openedSeq[b.ID])
		}
		if (b.Seed != nil) != (b.State == domain.BlockStateClosed) {
			t.Errorf("block %s (%s): seed shown: %v", b.ID, b.State, b.Seed != nil)
		}
		if b.Sales > 0 {
			rate := decimal.NewFromInt(int64(b.PrizesPaid)).DivRound(decimal.NewFromInt(int64(b.Sales)), projections.PayoutRateDecimals)
			if !b.PayoutRate.Equal(rate) {
				t.Errorf("block %s: payout rate %s, want %s", b.ID, b.PayoutRate, rate)
			}
		}
	}
	sold, err := s.Block(ctx, "E0001-B001")
	if err != nil {
		t.Fatal(err)
	}
	table, _ := w.Ledger.Rules.Table(100)
	for _, tr := range sold.Tiers {
		if tr.Lots != table.Lots[tr.Tier].Count || tr.Paid != tr.Lots || tr.Left != 0 {
			t.Errorf("sold-out block, tier %s: %+v, want %d lots all paid", tr.Tier, tr, table.Lots[tr.Tier].Count)
		}
	}
	if sold.PrizesPaid != table.Total || sold.Seed == nil || sold.Seed.Hash() != sold.Commitment.SeedHash {
		t.Errorf("sold-out block: prizes %s (want %s), seed %v", sold.PrizesPaid, table.Total, sold.Seed)
	}
	open, err := s.Block(ctx, "E0001-B002")
	if err != nil {
		t.Fatal(err)
	}
	if paidLots(open) != 1 || open.Seed != nil || open.State != domain.BlockStateOpen {
		t.Errorf("open block: %d lots paid (want the one settled play), seed %v", paidLots(open), open.Seed)
	}
	// Reconciliation: every difference is zero.
	var daySales, blockSales domain.Amount
	for _, scope := range []projections.Scope{projections.ScopeBlock, projections.ScopeEmission, projections.ScopeDay} {
		rows, err := s.Reconciliation(ctx, scope, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Difference != 0 {
				t.Errorf("reconciliation %s %s: difference %s", scope, r.Key, r.Difference)
			}
			if r.HouseMargin != r.Sales-r.PrizesOwed || r.PrizeFundLeft != r.PrizeFund-r.PrizesPaid {
				t.Errorf("reconciliation %s %s: %+v", scope, r.Key, r)
			}
			switch scope {
			case projections.ScopeDay:
				daySales += r.Sales
			case projections.ScopeBlock:
				blockSales += r.Sales
				if r.Key == "E0001-B001" && (r.PrizesOwed != table.Total || r.PrizesPaid != table.Total || r.UnitsSold != w.Ledger.Rules.BlockUnits) {
					t.Errorf("sold-out block reconciliation: %+v", r)
				}
			}
		}
		if scope == projections.ScopeDay && len(rows) != 2 {
			t.Errorf("%d days, want 2", len(rows))
		}
	}
	if daySales != blockSales {
		t.Errorf("sales per day %s, per block %s", daySales, blockSales)
	}
	emissionDays(t, s)
	var buf bytes.Buffer
	rows, _ := s.Reconciliation(ctx, projections.ScopeBlock, "")
	if err := projections.WriteReconciliationCSV(&buf, rows); err != nil {
		t.Fatal(err)
	}
	if recs, err := csv.NewReader(&buf).ReadAll(); err != nil || len(recs) != len(rows)+1 || recs[0][0] != "scope" {
		t.Errorf("csv: %d records, %v", len(recs), err)
	}
	// History: every play, newest first, as far as revealed.
	for player, ps := range stakes {
		hist := History(t, s, player, 2)
		if len(hist) != len(ps) {
			t.Fatalf("history of %s: %d plays, want %d", player, len(hist), len(ps))
		}
		last, err := s.LastPlay(ctx, player)
		if err != nil || last.ID != ps[len(ps)-1].Play {
			t.Errorf("last play of %s: %s, %v", player, last.ID, err)
		}
		for i, p := range hist {
			st := ps[len(ps)-1-i]
			checkPlay(t, w, p, st, throws[st.Play], settled[st.Play], paid[st.Play])
			if p.SettledSeq != lastSeq[st.Play] {
				t.Errorf("play %s: settled at sequence %d, want %d (its last event's; 0 in progress)", p.ID, p.SettledSeq, lastSeq[st.Play])
			}
			if byID, err := s.Play(ctx, player, p.ID); err != nil || !reflect.DeepEqual(byID, p) {
				t.Errorf("play %s by id: %+v, %v; want the history's %+v", p.ID, byID, err, p)
			}
			if _, err := s.Play(ctx, player+"-other", p.ID); !errors.Is(err, projections.ErrNotFound) {
				t.Errorf("play %s asked as another player: %v, want ErrNotFound", p.ID, err)
			}
		}
	}
}

// sameTime compares an optional time of the read side with the ledger's
// (zero for none), at the read side's precision.
func sameTime(got *time.Time, want time.Time) bool {
	if got == nil {
		return want.IsZero()
	}
	return got.Equal(want.Truncate(projections.Precision))
}

func blockAccounts(blocks []projections.BlockReport) []string {
	var out []string
	for _, b := range blocks {
		out = append(out, domain.BlockSalesAccount(b.ID), domain.BlockPrizeAccount(b.ID))
	}
	return out
}

func paidLots(b projections.BlockReport) int {
	n := 0
	for _, t := range b.Tiers {
		n += t.Paid
	}
	return n
}

func checkPlay(t *testing.T, w *World, p projections.Play, st *domain.StakePlaced, throws int, ps *domain.PlaySettled, pp *domain.PrizePaid) {
	t.Helper()
	if p.ID != st.Play || p.Stake != st.Stake || p.BalanceBefore != st.Balance+st.Stake || len(p.Throws) != throws {
		t.Errorf("play %s: %+v, stake %+v, %d throws", st.Play, p, st, throws)
	}
	b := w.Ledger.Blocks[p.Block]
	if p.Proof == nil {
		t.Fatalf("play %s: no proof", p.ID)
	}
	if err := domain.VerifyUnitProof(b.Commitment.Root, b.Commitment.Units, *p.Proof); err != nil {
		t.Errorf("play %s: %v", p.ID, err)
	}
	sc := p.Scenario()
	full := domain.GenerateScenario(p.Proof.Salt, p.Proof.Tier)
	shown := 0
	for i, c := range sc.Chests {
		if c.Cell != full.Chests[i].Cell {
			t.Errorf("play %s: chest %d at %v, scenario has %v", p.ID, i, c.Cell, full.Chests[i].Cell)
		}
		if c.Symbol != nil {
			shown++
			if *c.Symbol != full.Chests[i].Symbol {
				t.Errorf("play %s: chest %d shows %s, holds %s", p.ID, i, *c.Symbol, full.Chests[i].Symbol)
			}
		}
	}
	switch {
	case ps == nil:
		opened := 0
		for _, th := range p.Throws {
			if th.Result.Chest != domain.NoChest {
				opened++
			}
		}
		if p.Status != projections.StatusInProgress || p.Tier != nil || p.Prize != nil || shown != opened || p.BalanceAfter != st.Balance {
			t.Errorf("play %s in progress: %s, tier %v, %d chests shown for %d opened", p.ID, p.Status, p.Tier, shown, opened)
		}
	default:
		status := projections.StatusSettled
		if ps.BySystem {
			status = projections.StatusCompletedBySystem
		}
		after := st.Balance
		if pp != nil {
			after = pp.Balance
		}
		if p.Status != status || p.Tier == nil || *p.Tier != ps.Tier || *p.Prize != ps.Prize || shown != domain.ChestCount || p.BalanceAfter != after {
			t.Errorf("play %s settled: %s (want %s), tier %v (want %s), %d chests shown, balance after %s (want %s)",
				p.ID, p.Status, status, p.Tier, ps.Tier, shown, p.BalanceAfter, after)
		}
	}
}

// testOpenBlock projects two worlds whose block decks differ and whose plays
// on it are not settled: the block reports are the same but for the
// commitment, so they reveal nothing of the units' outcomes.
func testOpenBlock(t *testing.T, open Open, rules *domain.RuleSet, std *World) {
	reports := make([][]byte, 2)
	for salt := range 2 {
		w := NewWorld(t, rules, Start, byte(100+salt))
		w.Player("a", 5_000)
		w.Emission(100, 1)
		play := w.Stake("a", 100)
		w.Throws("a", play, 1)
		w.Stake("a", 100)
		s := open(t, rules, "open-block-"+string(rune('a'+salt)))
		Project(t, s, w.Events, 3)
		r, err := s.Block(context.Background(), "E0001-B001")
		if err != nil {
			t.Fatal(err)
		}
		if r.Seed != nil || paidLots(r) != 0 || r.Sold != 2 {
			t.Fatalf("open block report %+v", r)
		}
		r.Commitment = domain.Commitment{}
		if reports[salt], err = json.Marshal(r); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(reports[0], reports[1]) {
		t.Fatalf("open block reports of two decks differ:\n%s\n%s", reports[0], reports[1])
	}
}

func testGap(t *testing.T, open Open, rules *domain.RuleSet, w *World) {
	ctx := context.Background()
	s := open(t, rules, "gap")
	ev := w.Events
	mustApply := func(batch []projections.Envelope, want uint64) {
		t.Helper()
		if err := s.Apply(ctx, batch); err != nil {
			t.Fatalf("apply %d..%d: %v", batch[0].Seq, batch[len(batch)-1].Seq, err)
		}
		if cp, err := s.Checkpoint(ctx); err != nil || cp != want {
			t.Fatalf("checkpoint %d, %v; want %d", cp, err, want)
		}
	}
	mustApply(ev[:10], 10)
	before := TakeSnapshot(t, s)
	mustApply(ev[:5], 10)   // wholly covered: a no-op
	mustApply(ev[3:10], 10) // idem
	SameSnapshot(t, "after re-applying covered sequences", TakeSnapshot(t, s), before)
	for name, batch := range map[string][]projections.Envelope{
		"a batch after a missing sequence": ev[11:15],
		"a batch with a hole":              {ev[10], ev[12]},
		"a batch out of order":             {ev[11], ev[10]},
	} {
		if err := s.Apply(ctx, batch); !errors.Is(err, projections.ErrGap) {
			t.Fatalf("%s: %v, want ErrGap", name, err)
		}
	}
	SameSnapshot(t, "after refused batches", TakeSnapshot(t, s), before)
	mustApply(ev[5:20], 20) // overlapping: the covered part is skipped
	// An event naming a block the read models never saw is refused whole.
	fresh := open(t, rules, "gap-invalid")
	var stake domain.Event
	for _, env := range ev {
		if _, ok := env.Event.(*domain.StakePlaced); ok {
			stake = env.Event
			break
		}
	}
	if err := fresh.Apply(ctx, []projections.Envelope{{Seq: 1, At: Start, Event: stake}}); !errors.Is(err, projections.ErrInvalid) {
		t.Fatalf("stake on an unknown block: %v, want ErrInvalid", err)
	}
	if cp, _ := fresh.Checkpoint(ctx); cp != 0 {
		t.Fatalf("checkpoint %d after a refused batch", cp)
	}
}

// cancelling is a Source that cancels the projection's context at its n-th
// record, once the store has applied some of the first ones (so that every
// restart makes progress, n must be more than the Runner's first batch
// holds): the process killed while batches are on their way.
type cancelling struct {
	*Log
	store  projections.Store
	n      int
	cancel context.CancelFunc
}

// Read implements projections.Source.
func (c cancelling) Read(ctx context.Context, from uint64, fn func(projections.Envelope) error) error {
	seen := 0
	return c.Log.Read(ctx, from, func(env projections.Envelope) error {
		if seen++; seen == c.n {
			if err := c.store.WaitFor(ctx, from); err != nil {
				return err
			}
			c.cancel()
		}
		return fn(env)
	})
}

// longestAppend is the most records one append of events holds.
func longestAppend(events []projections.Envelope) int {
	n := 0
	for _, env := range events {
		n = max(n, env.AppendRemaining+1)
	}
	return n
}

func testKilled(t *testing.T, open Open, rules *domain.RuleSet, w *World) {
	straight := open(t, rules, "straight")
	Project(t, straight, w.Events, 5)
	want := TakeSnapshot(t, straight)
	head := uint64(len(w.Events))

	s := open(t, rules, "killed")
	log := NewLog(w.Events)
	log.FailAfter(13)
	for attempt := 0; ; attempt++ {
		if attempt > len(w.Events) {
			t.Fatal("no progress after as many restarts as events")
		}
		err := projections.NewRunner(log, s, projections.WithBatchMax(5)).RunTo(context.Background(), head)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrInjected) {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		// The restarted process opens its store again.
		s = open(t, rules, "killed")
	}
	SameSnapshot(t, "restarted after read failures", TakeSnapshot(t, s), want)

	c := open(t, rules, "cancelled")
	for attempt := 0; ; attempt++ {
		if attempt > len(w.Events) {
			t.Fatal("no progress after as many restarts as events")
		}
		ctx, cancel := context.WithCancel(context.Background())
		// A batch is 5 records and the rest of the append the fifth
		// belongs to: the source delivers that much before it cancels.
		src := cancelling{Log: NewLog(w.Events), store: c, n: 5 + longestAppend(w.Events), cancel: cancel}
		err := projections.NewRunner(src, c, projections.WithBatchMax(5)).RunTo(ctx, head)
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		c = open(t, rules, "cancelled")
	}
	SameSnapshot(t, "restarted after cancellations", TakeSnapshot(t, c), want)
}

func testWaitFor(t *testing.T, open Open, rules *domain.RuleSet, w *World) {
	s := open(t, rules, "wait")
	ctx := context.Background()
	events := WholeAppends(w.Events, 30)
	n := uint64(len(events))
	done := make(chan error, 1)
	go func() { done <- s.WaitFor(ctx, n) }()
	Project(t, s, events, 4)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("wait for %d: %v", n, err)
		}
	case <-time.After(projections.WaitMax):
		t.Fatal("WaitFor did not return after the position was applied")
	}
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if err := s.WaitFor(short, n+1); !errors.Is(err, projections.ErrNotReached) {
		t.Fatalf("wait for an unreached position: %v, want ErrNotReached", err)
	}
}

// partialWait is how long testWholeAppends gives a Runner to apply part
// of an append, which it must never do: a right Runner passes whatever the
// wait, so it bounds the test's time, not its verdict.
const partialWait = 5 * time.Millisecond

// testWholeAppends feeds the stream to a Runner one record at a time, with
// batches of one and two records, which a runner cutting batches by count
// alone would end inside appends, while a reader polls the store: the
// checkpoint never moves into an append, and every play read shows its
// stake with its unit, four throws with their settlement and a winner's
// settlement with its prize paid, never part of one command.
func testWholeAppends(t *testing.T, open Open, rules *domain.RuleSet, w *World) {
	plays := map[string]*domain.StakePlaced{}
	paid := map[string]domain.Amount{} // a winning play's balance once its prize is paid
	ends := map[uint64]bool{0: true}   // the sequences that end an append
	for _, env := range w.Events {
		switch e := env.Event.(type) {
		case *domain.StakePlaced:
			plays[e.Play] = e
		case *domain.PrizePaid:
			paid[e.Play] = e.Balance
		}
		if env.AppendRemaining == 0 {
			ends[env.Seq] = true
		}
	}
	if len(ends) > len(w.Events)*3/4 {
		t.Fatalf("%d appends in %d events: too few appends of several events to test", len(ends)-1, len(w.Events))
	}
	for _, batch := range []int{1, 2} {
		s := open(t, rules, fmt.Sprintf("whole-%d", batch))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		log := NewLog(nil)
		runErr := make(chan error, 1)
		go func() { runErr <- projections.NewRunner(log, s, projections.WithBatchMax(batch)).Run(ctx) }()
		fed := make(chan struct{})
		type polled struct {
			reads int
			err   error
		}
		pollErr := make(chan polled, 1)
		go func() {
			reads, err := pollWhole(ctx, s, plays, paid, ends, fed)
			pollErr <- polled{reads, err}
		}()
		var fault error
		for _, env := range w.Events {
			log.Append(env)
			if env.AppendRemaining == 0 {
				if err := s.WaitFor(ctx, env.Seq); err != nil {
					fault = err
					break
				}
				continue
			}
			short, stop := context.WithTimeout(ctx, partialWait)
			err := s.WaitFor(short, env.Seq)
			stop()
			if !errors.Is(err, projections.ErrNotReached) {
				fault = fmt.Errorf("waiting for sequence %d, inside an append: %v, want ErrNotReached", env.Seq, err)
				break
			}
		}
		close(fed)
		p := <-pollErr
		cancel()
		if err := <-runErr; !errors.Is(err, context.Canceled) {
			t.Fatalf("batches of %d: runner: %v", batch, err)
		}
		switch {
		case p.err != nil:
			t.Fatalf("batches of %d, after %d reads: %v", batch, p.reads, p.err)
		case fault != nil:
			t.Fatalf("batches of %d: %v", batch, fault)
		case p.reads < len(plays):
			t.Fatalf("batches of %d: the reader read %d plays, not even each once", batch, p.reads)
		}
	}
}

// testResumeInsideAnAppend starts a Runner on a store whose checkpoint
// sits inside an append, as a Runner that cut batches by count alone left
// it: the Runner takes the rest of that append as its first records and
// ends identical to a projection that never stopped.
func testResumeInsideAnAppend(t *testing.T, open Open, rules *domain.RuleSet, w *World) {
	straight := open(t, rules, "resume-straight")
	Project(t, straight, w.Events, projections.BatchMax)
	s := open(t, rules, "resume")
	cut := len(WholeAppends(w.Events, len(w.Events)/2)) + 1 // the first record of an append
	for w.Events[cut-1].AppendRemaining == 0 {
		cut++ // an append of one record: on to one of several
	}
	if err := s.Apply(context.Background(), w.Events[:cut]); err != nil {
		t.Fatal(err)
	}
	Project(t, s, w.Events, 3)
	SameSnapshot(t, "resumed inside an append", TakeSnapshot(t, s), TakeSnapshot(t, straight))
}

// pollWhole reads the store's checkpoint, every play and every block of
// the plays until fed is closed, and returns how many plays it read and the
// first thing it saw that is part of an append.
func pollWhole(ctx context.Context, s projections.Store, plays map[string]*domain.StakePlaced, paid map[string]domain.Amount,
	ends map[uint64]bool, fed <-chan struct{}) (int, error) {
	blocks := map[string]bool{}
	for _, st := range plays {
		blocks[st.Block] = true
	}
	reads := 0
	for {
		select {
		case <-fed:
			return reads, nil
		default:
		}
		cp, err := s.Checkpoint(ctx)
		if err != nil {
			return reads, err
		}
		if !ends[cp] {
			return reads, fmt.Errorf("the checkpoint is at %d, inside an append", cp)
		}
		for id, st := range plays {
			p, err := s.Play(ctx, st.Player, id)
			if errors.Is(err, projections.ErrNotFound) {
				continue
			}
			if err != nil {
				return reads, err
			}
			reads++
			if err := wholePlay(&p, paid); err != nil {
				return reads, err
			}
		}
		for id := range blocks {
			b, err := s.Block(ctx, id)
			if errors.Is(err, projections.ErrNotFound) {
				continue
			}
			if err != nil {
				return reads, err
			}
			// Each settlement counts its tier's lot and pays its prize in
			// one append: the lots paid are worth the prizes paid.
			var settled domain.Amount
			for _, tr := range b.Tiers {
				settled += domain.Amount(tr.Paid) * tr.Prize
			}
			if settled != b.PrizesPaid {
				return reads, fmt.Errorf("block %s: lots paid worth %s, prizes paid %s: a settlement without its prize, or the reverse",
					id, settled, b.PrizesPaid)
			}
		}
	}
}

// wholePlay returns an error when p shows part of the events of one
// command; paid is a winning play's balance once its prize is paid.
func wholePlay(p *projections.Play, paid map[string]domain.Amount) error {
	settled := p.Tier != nil
	switch {
	case p.Proof == nil:
		return fmt.Errorf("play %s: a stake without its unit", p.ID)
	case len(p.Throws) == domain.ThrowCount && (!settled || p.Status == projections.StatusInProgress):
		return fmt.Errorf("play %s: four throws without the settlement", p.ID)
	case settled && len(p.Throws) != domain.ThrowCount:
		return fmt.Errorf("play %s: a settlement after %d throws", p.ID, len(p.Throws))
	case settled && p.Prize != nil && *p.Prize > 0 && p.BalanceAfter != paid[p.ID]:
		return fmt.Errorf("play %s: a prize of %s settled with the balance at %s, not %s: the prize is not paid",
			p.ID, *p.Prize, p.BalanceAfter, paid[p.ID])
	}
	return nil
}

func testBounds(t *testing.T, open Open, rules *domain.RuleSet, w *World) {
	s := open(t, rules, "bounds")
	Project(t, s, w.Events, projections.BatchMax)
	ctx := context.Background()
	if _, err := s.Accounts(ctx, "", projections.PageMax+1); !errors.Is(err, projections.ErrInvalid) {
		t.Errorf("accounts page of %d: %v", projections.PageMax+1, err)
	}
	for _, bad := range []string{"not-a-cursor", "0", "-1", "18446744073709551616", "1e3", "+5", " 5"} {
		if _, err := s.History(ctx, "p1", bad, 5); !errors.Is(err, projections.ErrInvalid) {
			t.Errorf("history before %q: %v, want ErrInvalid", bad, err)
		}
	}
	// A cursor past every play, up to the largest a cursor can spell, is
	// the newest page; a cursor before every play is an empty one.
	newest, err := s.History(ctx, "p1", "", 2)
	if err != nil || len(newest.Plays) != 2 || newest.Next == "" {
		t.Fatalf("newest history page: %+v, %v", newest, err)
	}
	for _, far := range []string{"18446744073709551615", "9223372036854775808", "9223372036854775807"} {
		if page, err := s.History(ctx, "p1", far, 2); err != nil || !reflect.DeepEqual(page, newest) {
			t.Errorf("history before %s: %+v, %v; want the newest page %+v", far, page, err, newest)
		}
	}
	if page, err := s.History(ctx, "p1", "1", 2); err != nil || len(page.Plays) != 0 || page.Next != "" {
		t.Errorf("history before 1: %+v, %v; want an empty page", page, err)
	}
	if _, err := s.Journal(ctx, domain.PlayerAccount("p1"), projections.JournalCursor{}, -1); !errors.Is(err, projections.ErrInvalid) {
		t.Errorf("journal page of -1: %v", err)
	}
	if _, err := s.Reconciliation(ctx, "week", ""); !errors.Is(err, projections.ErrInvalid) {
		t.Errorf("reconciliation by week: %v", err)
	}
	for what, err := range map[string]error{
		"account": func() error { _, err := s.Account(ctx, "ghost"); return err }(),
		"block":   func() error { _, err := s.Block(ctx, "E9999-B001"); return err }(),
		"last":    func() error { _, err := s.LastPlay(ctx, "ghost"); return err }(),
		"play":    func() error { _, err := s.Play(ctx, "ghost", "E0001-B001-U000000"); return err }(),
	} {
		if !errors.Is(err, projections.ErrNotFound) {
			t.Errorf("%s of nobody: %v, want ErrNotFound", what, err)
		}
	}
	if page, err := s.History(ctx, "ghost", "", 0); err != nil || len(page.Plays) != 0 || page.Next != "" {
		t.Errorf("history of nobody: %+v, %v", page, err)
	}
}

// emissionDays checks reconciliation's day rows of each emission of
// Standard: they add up, to the cent, to the day rows of every emission
// and to the emission's own row, and both emissions sold on one day.
func emissionDays(t *testing.T, s projections.Store) {
	t.Helper()
	ctx := context.Background()
	all, err := s.Reconciliation(ctx, projections.ScopeDay, "")
	if err != nil {
		t.Fatal(err)
	}
	perDay := map[string]projections.Reconciliation{}
	sellers := map[string]int{}
	for _, e := range []string{"E0001", "E0002"} {
		own, err := s.Reconciliation(ctx, projections.ScopeEmission, e)
		if err != nil || len(own) != 1 || own[0].Key != e {
			t.Fatalf("reconciliation of emission %s: %+v, %v", e, own, err)
		}
		days, err := s.Reconciliation(ctx, projections.ScopeDay, e)
		if err != nil {
			t.Fatal(err)
		}
		var total projections.Reconciliation
		for _, d := range days {
			if d.Scope != projections.ScopeDay {
				t.Errorf("emission %s: row %+v", e, d)
			}
			addRow(&total, d)
			sum := perDay[d.Key]
			addRow(&sum, d)
			perDay[d.Key] = sum
			if d.Sales > 0 {
				sellers[d.Key]++
			}
		}
		total.Scope, total.Key = own[0].Scope, own[0].Key
		if total != own[0] {
			t.Errorf("emission %s: its days add up to %+v, its row is %+v", e, total, own[0])
		}
	}
	if len(perDay) != len(all) {
		t.Errorf("days of the emissions %v, of every emission %+v", perDay, all)
	}
	for _, d := range all {
		sum := perDay[d.Key]
		sum.Scope, sum.Key = d.Scope, d.Key
		if sum != d {
			t.Errorf("day %s: the emissions' rows add up to %+v, the day's row is %+v", d.Key, sum, d)
		}
	}
	if !slices.Contains(slices.Collect(maps.Values(sellers)), 2) {
		t.Errorf("no day when both emissions sold: %v", sellers)
	}
	if rows, err := s.Reconciliation(ctx, projections.ScopeDay, "E0009"); err != nil || len(rows) != 0 {
		t.Errorf("days of an unknown emission: %+v, %v", rows, err)
	}
}

// addRow adds a reconciliation row's figures to sum's.
func addRow(sum *projections.Reconciliation, r projections.Reconciliation) {
	sum.UnitsSold += r.UnitsSold
	sum.Sales += r.Sales
	sum.PrizesPaid += r.PrizesPaid
	sum.PrizesOwed += r.PrizesOwed
	sum.PrizeFund += r.PrizeFund
	sum.PrizeFundLeft += r.PrizeFundLeft
	sum.HouseMargin += r.HouseMargin
	sum.Difference += r.Difference
}
