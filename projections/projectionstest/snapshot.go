package projectionstest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
)

// Snapshot is every row a store serves, read through its public queries:
// two stores that applied the same stream must produce equal snapshots.
type Snapshot struct {
	Checkpoint uint64                               `json:"checkpoint"`
	Accounts   []projections.Account                `json:"accounts"`
	Journals   map[string][]projections.JournalLine `json:"journals"`
	Totals     map[string][2]domain.Amount          `json:"totals"`
	Blocks     []projections.BlockReport            `json:"blocks"`
	Histories  map[string][]projections.Play        `json:"histories"`
	// Reconciliation holds each scope's rows, by scope, then by scope
	// and emission ("day E0001").
	Reconciliation map[string][]projections.Reconciliation `json:"reconciliation"`
	Bans           map[string][]projections.Ban            `json:"bans"`
	Statements     map[string]projections.Statement        `json:"statements"`
	Reports        projections.ReportData                  `json:"reports"`
	Suspensions    []projections.Suspension                `json:"suspensions"`
	Adjustments    []projections.Adjustment                `json:"adjustments"`
	Erasures       []projections.Erasure                   `json:"erasures"`
}

// TakeSnapshot reads every row of a store, page by page (small pages, so
// that paging is exercised too).
func TakeSnapshot(tb testing.TB, s projections.Store) *Snapshot {
	tb.Helper()
	ctx := context.Background()
	snap := &Snapshot{Journals: map[string][]projections.JournalLine{}, Totals: map[string][2]domain.Amount{},
		Histories: map[string][]projections.Play{}, Reconciliation: map[string][]projections.Reconciliation{},
		Bans: map[string][]projections.Ban{}, Statements: map[string]projections.Statement{}}
	var err error
	if snap.Checkpoint, err = s.Checkpoint(ctx); err != nil {
		tb.Fatalf("checkpoint: %v", err)
	}
	for after := ""; ; {
		page, err := s.Accounts(ctx, after, 3)
		if err != nil {
			tb.Fatalf("accounts after %q: %v", after, err)
		}
		snap.Accounts = append(snap.Accounts, page...)
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].Player
	}
	for after := ""; ; {
		page, err := s.Blocks(ctx, after, 2)
		if err != nil {
			tb.Fatalf("blocks after %q: %v", after, err)
		}
		snap.Blocks = append(snap.Blocks, page...)
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].ID
	}
	ledger := []string{domain.HouseCashAccount()}
	for _, b := range snap.Blocks {
		ledger = append(ledger, domain.BlockSalesAccount(b.ID), domain.BlockPrizeAccount(b.ID))
	}
	for _, a := range snap.Accounts {
		ledger = append(ledger, domain.PlayerAccount(a.Player))
		snap.Histories[a.Player] = History(tb, s, a.Player, 4)
		if snap.Bans[a.Player], err = s.Bans(ctx, a.Player); err != nil {
			tb.Fatalf("bans of %s: %v", a.Player, err)
		}
		if snap.Statements[a.Player], err = s.Statement(ctx, projections.StatementQuery{Player: a.Player, Limit: projections.StatementPageMax}); err != nil {
			tb.Fatalf("statement of %s: %v", a.Player, err)
		}
	}
	if snap.Reports, err = s.ReportData(ctx); err != nil {
		tb.Fatalf("report data: %v", err)
	}
	if snap.Suspensions, err = s.Suspensions(ctx); err != nil {
		tb.Fatalf("suspensions: %v", err)
	}
	if snap.Adjustments, err = s.Adjustments(ctx, projections.AdjustmentQuery{}); err != nil {
		tb.Fatalf("adjustments: %v", err)
	}
	if snap.Erasures, err = s.Erasures(ctx, projections.ErasureQuery{}); err != nil {
		tb.Fatalf("erasures: %v", err)
	}
	for _, acct := range ledger {
		var lines []projections.JournalLine
		for after := (projections.JournalCursor{}); ; {
			page, err := s.Journal(ctx, acct, after, 7)
			if err != nil {
				tb.Fatalf("journal of %s: %v", acct, err)
			}
			lines = append(lines, page...)
			if len(page) < 7 {
				break
			}
			after = page[len(page)-1].Cursor()
		}
		snap.Journals[acct] = lines
		c, d, err := s.AccountTotals(ctx, acct)
		if err != nil {
			tb.Fatalf("totals of %s: %v", acct, err)
		}
		snap.Totals[acct] = [2]domain.Amount{c, d}
	}
	emissions := []string{""}
	for _, scope := range []projections.Scope{projections.ScopeEmission, projections.ScopeBlock, projections.ScopeDay} {
		for _, e := range emissions {
			rows, err := s.Reconciliation(ctx, scope, e)
			if err != nil {
				tb.Fatalf("reconciliation by %s of emission %q: %v", scope, e, err)
			}
			snap.Reconciliation[strings.TrimSpace(string(scope)+" "+e)] = rows
		}
		if scope == projections.ScopeEmission {
			for _, r := range snap.Reconciliation[string(scope)] {
				emissions = append(emissions, r.Key)
			}
		}
	}
	return snap
}

// History reads a player's whole history, newest first, in pages of size.
func History(tb testing.TB, s projections.Store, player string, size int) []projections.Play {
	tb.Helper()
	var plays []projections.Play
	for before, pages := "", 0; ; pages++ {
		if pages > 10_000 {
			tb.Fatalf("history of %s: more than 10 000 pages", player)
		}
		page, err := s.History(context.Background(), player, before, size)
		if err != nil {
			tb.Fatalf("history of %s before %q: %v", player, before, err)
		}
		plays = append(plays, page.Plays...)
		if page.Next == "" {
			return plays
		}
		before = page.Next
	}
}

// SameSnapshot fails the test with the first differing line when two
// snapshots differ.
func SameSnapshot(tb testing.TB, name string, got, want *Snapshot) {
	tb.Helper()
	g, err := json.MarshalIndent(got, "", " ")
	if err != nil {
		tb.Fatal(err)
	}
	w, err := json.MarshalIndent(want, "", " ")
	if err != nil {
		tb.Fatal(err)
	}
	if string(g) == string(w) {
		return
	}
	gl, wl := strings.Split(string(g), "\n"), strings.Split(string(w), "\n")
	for i := 0; i < len(gl) && i < len(wl); i++ {
		if gl[i] != wl[i] {
			lo := max(0, i-8)
			tb.Fatalf("%s: snapshots differ at line %d:\ngot:\n%s\nwant:\n%s", name, i+1,
				strings.Join(gl[lo:min(i+3, len(gl))], "\n"), strings.Join(wl[lo:min(i+3, len(wl))], "\n"))
		}
	}
	tb.Fatalf("%s: snapshots differ in length: %d lines, want %d", name, len(gl), len(wl))
}
