package audit_test

import (
	"slices"
	"testing"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
)

// TestAuditChecksTheFourEyesOfEveryAdjustment forges, through the real
// committer with the operator's key, streams in which an adjustment moved
// money against its rules: approved by its proposer, after its expiry,
// without a proposal, with other terms, twice, on a closed account, below
// zero, or whose approval was removed while the money it moved was spent.
// The audit reports each, and nothing in a stream that kept the rules.
func TestAuditChecksTheFourEyesOfEveryAdjustment(t *testing.T) {
	evs := played(t)
	books := domain.NewBooks()
	for _, ev := range evs {
		if ev.Type == eventstore.SealType {
			continue
		}
		e, err := domain.DecodeEvent(ev.Type, ev.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if err := books.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	last := len(evs) - 1
	balance := books.Balances[domain.PlayerAccount("q1")]
	checker := &domain.Actor{Role: domain.RoleFinance, Subject: "checker"}
	proposed := func(id string, d domain.AdjustmentDirection, amount domain.Amount) *domain.AdjustmentProposed {
		return &domain.AdjustmentProposed{Adjustment: id, Player: "q1", Direction: d, Kind: domain.Chargeback, Amount: amount,
			Reference: "case-1", Reason: "the bank reversed a deposit", By: insider}
	}
	approved := func(id string, d domain.AdjustmentDirection, amount, after domain.Amount, by *domain.Actor) *domain.AdjustmentApproved {
		return &domain.AdjustmentApproved{Adjustment: id, Player: "q1", Direction: d, Kind: domain.Chargeback, Amount: amount,
			Balance: after, ProposedBy: insider, By: by}
	}
	credit := proposed("A1", domain.Credit, 200)
	approval := approved("A1", domain.Credit, 200, balance+200, checker)
	spent := &domain.FundsWithdrawn{Player: "q1", Amount: balance + 200, Key: "all", Balance: 0, By: insider}
	// at appends events after the stream's last, a microsecond apart, and
	// the last of them a delay later.
	at := func(delay time.Duration, es ...domain.Event) []eventstore.RecordedEvent {
		var forged []eventstore.RecordedEvent
		for k, e := range es {
			d := time.Duration(k+1) * time.Microsecond
			if k == len(es)-1 {
				d += delay
			}
			if p, ok := e.(*domain.AdjustmentProposed); ok {
				x := *p
				x.ExpiresAt = evs[last].RecordedAt.Add(d + 72*time.Hour)
				e = &x
			}
			forged = append(forged, forge(t, evs, last, d, e))
		}
		return append(slices.Clone(evs), forged...)
	}
	for _, tc := range []struct {
		name   string
		stream []eventstore.RecordedEvent
		code   audit.Code
		also   []audit.Code
	}{
		{"four eyes kept", at(0, credit, approval, spent, proposed("A2", domain.Debit, 100),
			&domain.AdjustmentRejected{Adjustment: "A2", Player: "q1", Reason: "no case", By: checker}), "", nil},
		{"the approval removed, its money spent", at(0, credit, spent), audit.CodeNegativeBalance, nil},
		{"approved without a proposal", at(0, approval, spent), audit.CodeAdjustmentInvalid, nil},
		{"approved by its proposer", at(0, credit, approved("A1", domain.Credit, 200, balance+200, insider)), audit.CodeFourEyesBroken, nil},
		{"the proposer under another role", at(0, credit, approved("A1", domain.Credit, 200, balance+200,
			&domain.Actor{Role: domain.RoleFinance, Subject: insider.Subject})), audit.CodeFourEyesBroken, nil},
		{"approved after its expiry", at(72*time.Hour, credit, approval), audit.CodeAdjustmentExpired, nil},
		{"approved with another amount", at(0, credit, approved("A1", domain.Credit, 2000, balance+2000, checker)), audit.CodeAdjustmentInvalid, nil},
		{"approved twice", at(0, credit, approval, approved("A1", domain.Credit, 200, balance+400, checker)), audit.CodeAdjustmentInvalid, nil},
		{"approved by a player", at(0, credit, approved("A1", domain.Credit, 200, balance+200, &domain.Actor{Role: domain.RolePlayer, Subject: "q1"})),
			audit.CodeAdjustmentInvalid, nil},
		{"a debit below zero", at(0, proposed("A1", domain.Debit, balance+1), approved("A1", domain.Debit, balance+1, -1, checker)),
			audit.CodeNegativeBalance, nil},
		{"approved on a closed account", at(0, credit, &domain.AccountClosed{Player: "q1", Reason: "leaves", By: insider}, approval),
			audit.CodeClosedAccountMoved, []audit.Code{audit.CodeClosureInvalid}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := auditStore(t, rewrite(t, tc.stream, operatorKey))
			if tc.code == "" {
				if !r.OK || r.Controls.AdjustmentsProposed != 2 || r.Controls.AdjustmentsApproved != 1 || r.Controls.AdjustmentsRejected != 1 || r.Adjustments != 200 {
					t.Fatalf("four eyes kept: %+v adjustments %s, %+v", r.Controls, r.Adjustments, r.Violations)
				}
				return
			}
			wantCode(t, r, tc.code, tc.also...)
		})
	}
}
