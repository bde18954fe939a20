package projections_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/projections/projectionstest"
)

func TestFoldRefusesAnotherRulesVersion(t *testing.T) {
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	other := *rules
	other.Version = "another-version"
	_, err := projections.NewProjector(&other).Fold(0, w.Events)
	if !errors.Is(err, projections.ErrInvalid) {
		t.Fatalf("fold under another rules version: %v, want ErrInvalid", err)
	}
}

// TestRecordsWithoutEventsMoveTheCheckpoint interleaves records that carry
// no domain event (the hash chain's Seals, each an append of its own,
// between two appends) with the stream: they take sequences, move the
// checkpoint, and change no row.
func TestRecordsWithoutEventsMoveTheCheckpoint(t *testing.T) {
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	var sealed []projections.Envelope
	appends := 0
	for i, env := range w.Events {
		if i == 0 || w.Events[i-1].AppendRemaining == 0 {
			if appends%5 == 0 {
				sealed = append(sealed, projections.Envelope{Seq: uint64(len(sealed) + 1), At: env.At})
			}
			appends++
		}
		env.Seq = uint64(len(sealed) + 1)
		sealed = append(sealed, env)
	}
	plain, withSeals := memstore.New(rules), memstore.New(rules)
	projectionstest.Project(t, plain, w.Events, 13)
	projectionstest.Project(t, withSeals, sealed, 13)
	ctx := context.Background()
	if cp, err := withSeals.Checkpoint(ctx); err != nil || cp != uint64(len(sealed)) {
		t.Fatalf("checkpoint %d, %v; want %d", cp, err, len(sealed))
	}
	for id := range w.Ledger.Accounts {
		a, err := plain.Account(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		b, err := withSeals.Account(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if a.Balance != b.Balance || a.Staked != b.Staked || a.Won != b.Won || a.Plays != b.Plays {
			t.Errorf("account %s: %+v with seals, %+v without", id, b, a)
		}
	}
	for _, scope := range []projections.Scope{projections.ScopeBlock, projections.ScopeDay} {
		a, _ := plain.Reconciliation(ctx, scope, "")
		b, _ := withSeals.Reconciliation(ctx, scope, "")
		if len(a) != len(b) {
			t.Fatalf("%s: %d rows with seals, %d without", scope, len(b), len(a))
		}
		for i := range a {
			if a[i] != b[i] {
				t.Errorf("%s %s: %+v with seals, %+v without", scope, a[i].Key, b[i], a[i])
			}
		}
	}
}

// TestLimitsReplayAsTheWriteSideDecides folds limit changes the write side
// made (a raise, a second raise replacing it, a lowering) and compares the
// limits in force with the ledger's, hour by hour over the next two days.
func TestLimitsReplayAsTheWriteSideDecides(t *testing.T) {
	rules := projectionstest.SmallRules(t)
	w := projectionstest.NewWorld(t, rules, projectionstest.Start, 0)
	amount := func(a domain.Amount) *domain.Amount { return &a }
	w.Must(domain.ConfigureAccount{Player: "p", DepositLimit: amount(10_000), StakeLimit: amount(10_000)})
	w.Advance(time.Hour)
	w.Must(domain.ConfigureAccount{Player: "p", StakeLimit: amount(20_000)})
	w.Advance(12 * time.Hour)
	w.Must(domain.ConfigureAccount{Player: "p", StakeLimit: amount(30_000), DepositLimit: amount(5_000)})
	s := memstore.New(rules)
	projectionstest.Project(t, s, w.Events, 2)
	a, err := s.Account(context.Background(), "p")
	if err != nil {
		t.Fatal(err)
	}
	ledger := w.Ledger.Accounts["p"].Limits
	for h := range 48 {
		at := w.Now.Add(time.Duration(h) * time.Hour)
		if got, want := a.StakeLimit.At(at), ledger[domain.LimitKey{Kind: domain.StakeLimit, Days: 7}].At(at); got != want {
			t.Errorf("stake limit at +%dh: %s, ledger %s", h, got, want)
		}
		if got, want := a.DepositLimit.At(at), ledger[domain.LimitKey{Kind: domain.DepositLimit, Days: 7}].At(at); got != want {
			t.Errorf("deposit limit at +%dh: %s, ledger %s", h, got, want)
		}
	}
	if a.StakeLimit.Pending == nil || *a.StakeLimit.Pending != 30_000 || a.StakeLimit.Amount != 10_000 {
		t.Errorf("stake limit %+v: want 10.00 in force and 300.00 pending", a.StakeLimit)
	}
}
