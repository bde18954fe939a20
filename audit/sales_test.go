package audit_test

import (
	"slices"
	"testing"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
)

// TestAuditFindsStakesInsideASuspension forges, through the real committer
// with the operator's key, streams in which a stake was accepted while a
// suspension of sales covered it, or a suspension was recorded or ended
// against its rules: the audit reports each, and finds nothing where the
// suspension did not cover the stake or had ended before it.
func TestAuditFindsStakesInsideASuspension(t *testing.T) {
	// q1's first stake, and the block it bought from.
	stakeOf := func(evs []eventstore.RecordedEvent) (int, *domain.StakePlaced) {
		return find[*domain.StakePlaced](t, evs, 0, func(s *domain.StakePlaced) bool { return s.Player == "q1" })
	}
	scope := func(s string) domain.SalesScope {
		sc, err := domain.ParseSalesScope(s)
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	suspended := func(id, s string) *domain.SalesSuspended {
		return &domain.SalesSuspended{Suspension: id, Scope: scope(s), Reason: "screen fault", By: insider}
	}
	resumed := func(id, s string) *domain.SalesResumed {
		return &domain.SalesResumed{Suspension: id, Scope: scope(s), Reason: "fixed", By: insider}
	}
	// before inserts events just before q1's first stake, in order.
	before := func(scopeOf func(*domain.StakePlaced) []domain.Event) func([]eventstore.RecordedEvent) []eventstore.RecordedEvent {
		return func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			i, st := stakeOf(evs)
			var forged []eventstore.RecordedEvent
			for k, e := range scopeOf(st) {
				forged = append(forged, forge(t, evs, i, time.Duration(k-10)*time.Millisecond, e))
			}
			return slices.Insert(evs, i, forged...)
		}
	}
	emissionOf := func(st *domain.StakePlaced) string {
		e, _ := domain.BlockEmission(st.Block)
		return e
	}
	for _, tc := range []struct {
		name   string
		tamper func([]eventstore.RecordedEvent) []eventstore.RecordedEvent
		code   audit.Code
	}{
		{"every sale suspended", before(func(*domain.StakePlaced) []domain.Event { return []domain.Event{suspended("S1", "all")} }), audit.CodeSuspensionBreached},
		{"the stake's price suspended", before(func(st *domain.StakePlaced) []domain.Event {
			return []domain.Event{suspended("S1", "price:"+st.Stake.String())}
		}), audit.CodeSuspensionBreached},
		{"the stake's block suspended", before(func(st *domain.StakePlaced) []domain.Event {
			return []domain.Event{suspended("S1", "block:"+st.Block)}
		}), audit.CodeSuspensionBreached},
		{"the stake's emission suspended", before(func(st *domain.StakePlaced) []domain.Event {
			return []domain.Event{suspended("S1", "emission:"+emissionOf(st))}
		}), audit.CodeSuspensionBreached},
		{"one scope resumed, another still in force", before(func(st *domain.StakePlaced) []domain.Event {
			return []domain.Event{suspended("S1", "block:"+st.Block), suspended("S2", "price:"+st.Stake.String()), resumed("S1", "block:"+st.Block)}
		}), audit.CodeSuspensionBreached},
		{"another price suspended", before(func(*domain.StakePlaced) []domain.Event { return []domain.Event{suspended("S1", "price:2.00")} }), ""},
		{"a suspension resumed before the stake", before(func(*domain.StakePlaced) []domain.Event {
			return []domain.Event{suspended("S1", "all"), resumed("S1", "all")}
		}), ""},
		{"a suspension id recorded twice", before(func(*domain.StakePlaced) []domain.Event {
			return []domain.Event{suspended("S1", "price:2.00"), suspended("S1", "price:0.50")}
		}), audit.CodeSuspensionInvalid},
		{"the end of no suspension", before(func(*domain.StakePlaced) []domain.Event { return []domain.Event{resumed("S1", "all")} }), audit.CodeSuspensionInvalid},
		{"an end twice", before(func(*domain.StakePlaced) []domain.Event {
			return []domain.Event{suspended("S1", "price:2.00"), resumed("S1", "price:2.00"), resumed("S1", "price:2.00")}
		}), audit.CodeSuspensionInvalid},
		{"an end of another scope", before(func(*domain.StakePlaced) []domain.Event {
			return []domain.Event{suspended("S1", "price:2.00"), resumed("S1", "price:0.50")}
		}), audit.CodeSuspensionInvalid},
		{"a suspension without a reason", before(func(*domain.StakePlaced) []domain.Event {
			return []domain.Event{&domain.SalesSuspended{Suspension: "S1", Scope: scope("price:2.00"), By: insider}}
		}), audit.CodeSuspensionInvalid},
		{"a suspension by nobody", before(func(*domain.StakePlaced) []domain.Event {
			return []domain.Event{&domain.SalesSuspended{Suspension: "S1", Scope: scope("price:2.00"), Reason: "r"}}
		}), audit.CodeSuspensionInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := auditStore(t, rewrite(t, tc.tamper(played(t)), operatorKey))
			if tc.code == "" {
				if !r.OK || r.Controls.Suspensions == 0 {
					t.Fatalf("suspensions respected: %+v %+v", r.Controls, r.Violations)
				}
				return
			}
			wantCode(t, r, tc.code)
			if tc.code == audit.CodeSuspensionBreached && len(r.ViolationCounts) != 1 {
				t.Fatalf("only the stake should be reported: %+v", r.Violations)
			}
		})
	}
}
