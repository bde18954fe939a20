package projectionstest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
)

// SeventyRules is the rule set in force with blocks of 100 units of which
// 40 win: 10 sapphire_x2, 10 skull_x2 and 20 chandelier_x1 — 70 % of a
// sold-out block's sales, as Article 3's tables pay, in a block a test
// sells out in a few hundred commands.
func SeventyRules(tb testing.TB) *domain.RuleSet {
	tb.Helper()
	r, err := domain.DefaultRules()
	if err != nil {
		tb.Fatal(err)
	}
	small := *r
	small.BlockUnits = 100
	small.Tables = append([]domain.PriceTable(nil), r.Tables...)
	counts := map[domain.Tier]int{domain.SapphireX2: 10, domain.SkullX2: 10, domain.ChandelierX1: 20}
	for i := range small.Tables {
		t := &small.Tables[i]
		t.TotalLots, t.Total = 0, 0
		for tier := range t.Lots {
			n := counts[domain.Tier(tier)]
			t.Lots[tier].Count, t.Lots[tier].Total = n, domain.Amount(n)*t.Lots[tier].Amount
			t.TotalLots += n
			t.Total += t.Lots[tier].Total
		}
		t.Lots[domain.TierNone].Count = small.BlockUnits - t.TotalLots
	}
	return &small
}

// testStatements holds every player's statement to the journal and the
// ledger: the closing balance of a statement to now is the account's; over
// any period the movements add up to the change of balance, each one
// continues the one before, and pages of any size list the same movements.
func testStatements(t *testing.T, s projections.Store, w *World) {
	ctx := context.Background()
	times := eventTimes(w)
	for id, la := range w.Ledger.Accounts {
		all := statement(t, s, projections.StatementQuery{Player: id})
		if all.Closing != la.Balance || all.Opening != 0 {
			t.Errorf("%s: statement from the start: opening %s closing %s, ledger balance %s", id, all.Opening, all.Closing, la.Balance)
		}
		for i, from := range times {
			for _, to := range times[i:] {
				st := statement(t, s, projections.StatementQuery{Player: id, From: from, To: to})
				var sum domain.Amount
				for k, m := range st.Movements {
					sum += m.Amount
					if m.BalanceBefore+m.Amount != m.BalanceAfter || (k > 0 && st.Movements[k-1].BalanceAfter != m.BalanceBefore) ||
						m.At.Before(from) || !m.At.Before(to) {
						t.Fatalf("%s from %s to %s: movement %d %+v does not continue", id, from, to, k, m)
					}
				}
				if st.Opening+sum != st.Closing {
					t.Fatalf("%s from %s to %s: opening %s + movements %s ≠ closing %s", id, from, to, st.Opening, sum, st.Closing)
				}
				if next := statement(t, s, projections.StatementQuery{Player: id, From: to}); next.Opening != st.Closing {
					t.Fatalf("%s: closing at %s %s, the next statement opens at %s", id, to, st.Closing, next.Opening)
				}
			}
		}
		var paged []projections.Movement
		for q := (projections.StatementQuery{Player: id, Limit: 2}); ; {
			page := statement(t, s, q)
			paged = append(paged, page.Movements...)
			if page.Next == 0 {
				break
			}
			q.After = page.Next
		}
		if fmt.Sprint(paged) != fmt.Sprint(all.Movements) {
			t.Errorf("%s: pages of 2 list %d movements, one page %d", id, len(paged), len(all.Movements))
		}
	}
	if _, err := s.Statement(ctx, projections.StatementQuery{Player: "nobody"}); !isNotFound(err) {
		t.Errorf("statement of no account: %v, want ErrNotFound", err)
	}
	if _, err := s.Statement(ctx, projections.StatementQuery{Player: "p1", From: Start, To: Start.Add(-time.Second)}); !isInvalid(err) {
		t.Errorf("statement ending before it starts: %v, want ErrInvalid", err)
	}
}

// eventTimes returns instants around the world's events: its start, every
// event's time and a microsecond after it, the end.
func eventTimes(w *World) []time.Time {
	var out []time.Time
	for _, e := range w.Events {
		at := e.At.UTC().Truncate(projections.Precision)
		out = append(out, at, at.Add(projections.Precision))
	}
	out = append(out, Start.Add(-time.Hour), w.Now.Add(time.Hour))
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	out = slices.Compact(out)
	// Every tenth: the pairs are quadratic.
	var kept []time.Time
	for i := 0; i < len(out); i += 10 {
		kept = append(kept, out[i])
	}
	return append(kept, out[len(out)-1])
}

func isNotFound(err error) bool { return errors.Is(err, projections.ErrNotFound) }
func isInvalid(err error) bool  { return errors.Is(err, projections.ErrInvalid) }

func statement(tb testing.TB, s projections.Store, q projections.StatementQuery) projections.Statement {
	tb.Helper()
	st, err := s.Statement(context.Background(), q)
	if err != nil {
		tb.Fatalf("statement %+v: %v", q, err)
	}
	return st
}

// testControls holds the bans, exclusions and limits of every period to
// the ledger's.
func testControls(t *testing.T, s projections.Store, w *World) {
	ctx := context.Background()
	for id, la := range w.Ledger.Accounts {
		bans, err := s.Bans(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var inForce []string
		for _, b := range bans {
			if b.LiftedAt == nil {
				inForce = append(inForce, b.Ban)
			}
			if b.By == nil || b.Reference == "" || b.Reason == "" || (b.LiftedAt != nil && (b.LiftedBy == nil || b.LiftReference == "")) {
				t.Errorf("%s: ban %+v does not say who, why and by which decision", id, b)
			}
		}
		var want []string
		for b := range la.Bans {
			want = append(want, b)
		}
		slices.Sort(inForce)
		slices.Sort(want)
		if !slices.Equal(inForce, want) {
			t.Errorf("%s: bans in force %v, ledger %v", id, inForce, want)
		}
	}
	if bans, _ := s.Bans(ctx, "p2"); len(bans) != 1 || bans[0].LiftedAt == nil || bans[0].LiftReason != "removed from the list" {
		t.Errorf("p2's lifted ban: %+v", bans)
	}
	testSuspensions(t, s, w)
	testAdjustments(t, s, w)
	testErasures(t, s, w)
	for player, closed := range map[string]bool{"p6": true, "p7": false, "p1": false} {
		a, err := s.Account(ctx, player)
		if err != nil {
			t.Fatal(err)
		}
		at, ledgerClosed := w.Ledger.Accounts[player].ClosedAt()
		if (a.ClosedAt != nil) != closed || ledgerClosed != closed || (closed && !a.ClosedAt.Equal(at.Truncate(projections.Precision))) {
			t.Errorf("%s: closed at %v, ledger %v at %s, want closed %t", player, a.ClosedAt, ledgerClosed, at, closed)
		}
	}
	a, err := s.Account(ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(a.Limits, func(l projections.PeriodLimit) bool { return l.Kind == domain.DepositLimit && l.PeriodDays == 1 }); i < 0 || a.Limits[i].Amount != 10_000 {
		t.Errorf("p1's daily deposit limit: %+v", a.Limits)
	}
}

// testSuspensions holds the suspensions of sales to the ledger's: those
// in force, and the one resumed with who ended it and why.
func testSuspensions(t *testing.T, s projections.Store, w *World) {
	ctx := context.Background()
	got, err := s.Suspensions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var inForce, want []string
	for _, x := range got {
		if x.ResumedAt == nil {
			inForce = append(inForce, x.ID+" "+x.Scope)
		}
		if x.By == nil || x.Reason == "" || x.Seq == 0 || (x.ResumedAt != nil && (x.ResumedBy == nil || x.ResumeReason == "" || x.ResumedSeq <= x.Seq)) {
			t.Errorf("suspension %+v does not say who, why and when", x)
		}
	}
	for id, x := range w.Ledger.Suspensions {
		want = append(want, id+" "+x.Scope.String())
	}
	slices.Sort(want)
	if !slices.Equal(inForce, want) || len(got) != 2 || got[0].ID != "S1" || got[0].ResumeReason != "screen fixed" || got[0].Scope != "price:2.00" {
		t.Errorf("suspensions %+v; in force %v, ledger %v", got, inForce, want)
	}
	d, err := s.ReportData(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(d.Suspensions, got, func(a, b projections.Suspension) bool { return a.ID == b.ID && a.ResumedSeq == b.ResumedSeq }) {
		t.Errorf("report data's suspensions %+v, listed %+v", d.Suspensions, got)
	}
	// The report lists the suspended periods that overlap its period: both
	// on their day, none the day before.
	day := projections.DayKey(got[0].At)
	rep, err := projections.BuildReport(ctx, s, w.Ledger.Rules, projections.ReportQuery{Kind: projections.ReportSuspensions, From: day, To: day, Now: w.Now})
	if err != nil {
		t.Fatal(err)
	}
	rows := rep.Rows.([]projections.SuspensionLine)
	if len(rows) != 2 || rows[0].To == nil || rows[0].ResumedBy != Operator.Subject || rows[1].To != nil || rows[1].Scope != "emission:E0002" {
		t.Errorf("suspensions report of %s: %+v", day, rows)
	}
	before := projections.DayKey(got[0].At.AddDate(0, 0, -1))
	if rep, err := projections.BuildReport(ctx, s, w.Ledger.Rules, projections.ReportQuery{Kind: projections.ReportSuspensions, From: before, To: before, Now: w.Now}); err != nil || len(rep.Rows.([]projections.SuspensionLine)) != 0 {
		t.Errorf("suspensions report of %s: %+v %v", before, rep, err)
	}
}

// testReports checks the report pack against the events: the liability of
// every day is the sum of the players' balances at its end, days without
// activity are listed as such, the plays in progress at the end are the
// ledger's, large wins are the settled prizes at or above the threshold.
func testReports(t *testing.T, s projections.Store, w *World) {
	ctx := context.Background()
	d, err := s.ReportData(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cp, _ := s.Checkpoint(ctx); d.Seq != cp || d.Seq != uint64(len(w.Events)) {
		t.Errorf("report data at %d, checkpoint %d, stream %d", d.Seq, cp, len(w.Events))
	}
	p, err := projections.NewPeriod("", projections.DayKey(w.Now.AddDate(0, 0, 2)), d.FirstDay(), w.Now)
	if err != nil {
		t.Fatal(err)
	}
	if p.From != projections.DayKey(Start) {
		t.Errorf("period %+v, want from the first day %s", p, projections.DayKey(Start))
	}
	liability := projections.LiabilityReport(&d, p)
	for _, l := range liability {
		end, _ := time.Parse(time.DateOnly, l.Day)
		var sum domain.Amount
		for id := range w.Ledger.Accounts {
			sum += statement(t, s, projections.StatementQuery{Player: id, To: end.AddDate(0, 0, 1)}).Closing
		}
		if l.Liability != sum {
			t.Errorf("liability at the end of %s: %s, the balances add up to %s", l.Day, l.Liability, sum)
		}
	}
	days := projections.DaysReport(&d, p, w.Ledger.Rules)
	if n := len(days); n != len(liability) || days[n-1].Activity || liability[n-1].Activity || !days[0].Activity {
		t.Errorf("days %+v: want every day of the period, the last two without activity", days)
	}
	// Each day's flows explain the liability's change, adjustments too.
	var adjusted domain.Amount
	for i := 0; i < min(len(days), len(liability)); i++ {
		x, l := days[i], liability[i]
		adjusted += x.AdjustedCredits - x.AdjustedDebits
		if flows := x.Deposits - x.Withdrawals - x.Stakes + x.PrizesPaid + x.AdjustedCredits - x.AdjustedDebits; flows != l.Change || x.Activity != l.Activity {
			t.Errorf("day %s: flows %s (activity %v), liability change %s (activity %v)", x.Day, flows, x.Activity, l.Change, l.Activity)
		}
	}
	if adjusted == 0 {
		t.Error("the days report shows no adjustment")
	}
	last := days[len(days)-1]
	var held domain.Amount
	for _, pl := range w.Ledger.Plays {
		held += pl.Stake
	}
	if last.PlaysInProgress != len(w.Ledger.Plays) || last.StakesInPlay != held {
		t.Errorf("plays in progress at the end: %d holding %s, ledger %d holding %s", last.PlaysInProgress, last.StakesInPlay, len(w.Ledger.Plays), held)
	}
	var want []string
	for _, e := range w.Events {
		if pp, ok := e.Event.(*domain.PrizePaid); ok && pp.Amount >= 1_000 {
			want = append(want, pp.Play)
		}
	}
	wins, seq, more, err := s.LargeWins(ctx, projections.LargeWinsQuery{Threshold: 1_000, From: p.Start(), To: p.End(), Limit: 100})
	if err != nil || more || seq != d.Seq {
		t.Fatalf("large wins: %v, more %v, seq %d", err, more, seq)
	}
	var got []string
	for _, win := range wins {
		got = append(got, win.Play)
	}
	slices.Sort(got)
	slices.Sort(want)
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("large wins %v, want %v", got, want)
	}
	if _, _, _, err := s.LargeWins(ctx, projections.LargeWinsQuery{Threshold: 0, From: p.Start(), To: p.End(), Limit: 1}); !isInvalid(err) {
		t.Errorf("large wins without a threshold: %v", err)
	}
}

// testArticle3Report sells out a block of SeventyRules and checks its
// report: theoretical return 70 %, actual 70 % once its plays settled.
func testArticle3Report(t *testing.T, open Open) {
	rules := SeventyRules(t)
	w := NewWorld(t, rules, Start, 3)
	w.Player("p1", 50_000)
	w.Emission(100, 1)
	var plays []string
	for range rules.BlockUnits {
		plays = append(plays, w.Stake("p1", 100))
	}
	check := func(name string, settled bool) {
		s := open(t, rules, name)
		Project(t, s, w.Events, 50)
		d, err := s.ReportData(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		p, _ := projections.NewPeriod("", "", d.FirstDay(), w.Now)
		b := projections.BlocksReport(&d, p)
		e := projections.EmissionsReport(&d, p)
		if len(b) != 1 || len(e) != 1 || b[0].TheoreticalReturn.String() != "0.7" || e[0].TheoreticalReturn.String() != "0.7" {
			t.Fatalf("theoretical return: %+v %+v", b, e)
		}
		f := b[0].SalesFigures
		switch {
		case settled && (f.ActualReturn == nil || f.ActualReturn.String() != "0.7" || f.PlaysInProgress != 0 || f.PrizesOutstanding != 0):
			t.Fatalf("sold out and settled: %+v, want an actual return of 0.7", f)
		case !settled && (f.PlaysInProgress != rules.BlockUnits || f.StakesInPlay != 10_000 || f.PrizesOutstanding != 7_000 || f.ActualReturn.Sign() != 0):
			t.Fatalf("sold out, nothing settled: %+v", f)
		}
		if f.UnitsSold != rules.BlockUnits || f.Stakes != 10_000 || e[0].SalesFigures.Stakes != f.Stakes {
			t.Fatalf("figures %+v, emission %+v", f, e[0].SalesFigures)
		}
	}
	check("seventy-sold", false)
	for i, play := range plays {
		if i%2 == 0 {
			w.Throws("p1", play, domain.ThrowCount)
		} else {
			w.Must(domain.CompletePlay{Play: play})
		}
	}
	check("seventy-settled", true)
}

// testAdjustments holds the adjustments to the ledger's: each with its
// terms, proposer and decision, selected by id, player or pending, and
// the approved ones in the player's statement.
func testAdjustments(t *testing.T, s projections.Store, w *World) {
	ctx := context.Background()
	all, err := s.Adjustments(ctx, projections.AdjustmentQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range all {
		got = append(got, x.ID+" "+x.Player+" "+string(x.Direction)+" "+string(x.Kind)+" "+x.Amount.String()+" "+x.StateAt(w.Now))
		if x.ProposedBy == nil || x.Reference == "" || x.Reason == "" || x.Seq == 0 || !x.ExpiresAt.After(x.ProposedAt) ||
			(x.State != domain.AdjustmentStatePending) != (x.DecidedAt != nil && x.DecidedBy != nil && x.DecidedSeq >= x.Seq) {
			t.Errorf("adjustment %+v does not say who, why and when", x)
		}
		if l := w.Ledger.Adjustments[x.ID]; l == nil || l.State != x.State {
			t.Errorf("adjustment %s %s, the ledger's %+v", x.ID, x.State, l)
		}
	}
	want := []string{"A1 p1 credit goodwill 5.00 approved", "A2 p1 debit chargeback 3.00 approved",
		"A3 p3 credit malfunction_refund 2.00 rejected", "A4 p1 credit correction 1.00 pending"}
	if !slices.Equal(got, want) || all[2].DecisionReason == "" || all[1].BalanceAfter == nil {
		t.Errorf("adjustments %q, want %q", got, want)
	}
	for q, ids := range map[projections.AdjustmentQuery]string{
		{ID: "A2"}: "A2", {Player: "p3"}: "A3", {Pending: true}: "A4", {Player: "p1", Pending: true}: "A4", {ID: "A9"}: "",
	} {
		xs, err := s.Adjustments(ctx, q)
		var ids2 []string
		for _, x := range xs {
			ids2 = append(ids2, x.ID)
		}
		if err != nil || strings.Join(ids2, " ") != ids {
			t.Errorf("adjustments %+v: %v %v, want %s", q, ids2, err, ids)
		}
	}
	st := statement(t, s, projections.StatementQuery{Player: "p1"})
	var moved []string
	for _, m := range st.Movements {
		if m.Kind == projections.MovementAdjustment {
			moved = append(moved, m.Ref+" "+m.Amount.String())
		}
	}
	if !slices.Equal(moved, []string{"A1 5.00", "A2 -3.00"}) {
		t.Errorf("p1's statement shows adjustments %q", moved)
	}
}

// testErasures holds the erasures to the ledger's: each with whose, its
// ground, proposer and decision, selected by id or pending.
func testErasures(t *testing.T, s projections.Store, w *World) {
	ctx := context.Background()
	all, err := s.Erasures(ctx, projections.ErasureQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range all {
		got = append(got, x.ID+" "+x.Player+x.KeyID+" "+x.Ground+" "+x.StateAt(w.Now))
		if x.ProposedBy == nil || x.LegalGround == "" || x.Seq == 0 || !x.ExpiresAt.After(x.ProposedAt) ||
			(x.State != domain.ProposalPending) != (x.DecidedAt != nil && x.DecidedBy != nil && x.DecidedSeq >= x.Seq) {
			t.Errorf("erasure %+v does not say who, why and when", x)
		}
		if l := w.Ledger.Erasures[x.ID]; l == nil || l.State != x.State {
			t.Errorf("erasure %s %s, the ledger's %+v", x.ID, x.State, l)
		}
	}
	want := []string{"ER1 p6 legal_ground approved", "ER2 0123456789abcdef legal_ground rejected", "ER3 fedcba9876543210 legal_ground pending"}
	if !slices.Equal(got, want) || all[1].DecisionReason == "" || all[0].ErasedGround != domain.GroundLegal {
		t.Errorf("erasures %q (%+v), want %q", got, all, want)
	}
	for q, ids := range map[projections.ErasureQuery]string{{ID: "ER2"}: "ER2", {Pending: true}: "ER3", {ID: "ER9"}: ""} {
		xs, err := s.Erasures(ctx, q)
		var ids2 []string
		for _, x := range xs {
			ids2 = append(ids2, x.ID)
		}
		if err != nil || strings.Join(ids2, " ") != ids {
			t.Errorf("erasures %+v: %v %v, want %s", q, ids2, err, ids)
		}
	}
}
