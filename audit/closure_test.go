package audit_test

import (
	"slices"
	"testing"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
)

// TestAuditFindsMovementsOnClosedAccounts forges, through the real
// committer with the operator's key, streams in which money moved on a
// closed account, or an account was closed or reopened against the rules:
// the audit reports each, and nothing where the account was reopened
// before it moved.
func TestAuditFindsMovementsOnClosedAccounts(t *testing.T) {
	// q1 opens its account, sets limits, deposits, withdraws and stakes.
	opened := q1Opened(t)
	deposited := func(evs []eventstore.RecordedEvent) int {
		i, _ := find[*domain.FundsDeposited](t, evs, 0, func(d *domain.FundsDeposited) bool { return d.Player == "q1" })
		return i
	}
	closed := &domain.AccountClosed{Player: "q1", Reason: "leaves", By: insider}
	reopened := &domain.AccountReopened{Player: "q1", Reason: "back", By: insider}
	after := func(at func([]eventstore.RecordedEvent) int, es ...domain.Event) func([]eventstore.RecordedEvent) []eventstore.RecordedEvent {
		return forgedAfter(t, at, es...)
	}
	for _, tc := range []struct {
		name   string
		tamper func([]eventstore.RecordedEvent) []eventstore.RecordedEvent
		code   audit.Code
		also   []audit.Code
	}{
		{"money moved on a closed account", after(opened, closed), audit.CodeClosedAccountMoved, nil},
		{"closed and reopened before any movement", after(opened, closed, reopened), "", nil},
		{"an account closed with money on it", after(deposited, closed), audit.CodeClosureInvalid, []audit.Code{audit.CodeClosedAccountMoved}},
		{"an account closed twice", after(opened, closed, closed, reopened), audit.CodeClosureInvalid, nil},
		{"an open account reopened", after(opened, reopened), audit.CodeClosureInvalid, nil},
		{"an account reopened by its player", after(opened, closed, &domain.AccountReopened{Player: "q1", Reason: "back", By: &domain.Actor{Role: domain.RolePlayer, Subject: "q1"}}),
			audit.CodeClosureInvalid, nil},
		{"a closure without a reason", after(opened, &domain.AccountClosed{Player: "q1", By: insider}, reopened), audit.CodeClosureInvalid, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := auditStore(t, rewrite(t, tc.tamper(played(t)), operatorKey))
			if tc.code == "" {
				if !r.OK || r.Controls.Closures != 1 || r.Controls.Reopenings != 1 {
					t.Fatalf("closure respected: %+v %+v", r.Controls, r.Violations)
				}
				return
			}
			wantCode(t, r, tc.code, tc.also...)
		})
	}
}

// q1Opened finds where q1 opens its account.
func q1Opened(t *testing.T) func([]eventstore.RecordedEvent) int {
	return func(evs []eventstore.RecordedEvent) int {
		i, _ := find[*domain.AccountOpened](t, evs, 0, func(a *domain.AccountOpened) bool { return a.Player == "q1" })
		return i
	}
}

// forgedAfter inserts events right after the event at(evs), in order,
// each a microsecond after the one before.
func forgedAfter(t *testing.T, at func([]eventstore.RecordedEvent) int, es ...domain.Event) func([]eventstore.RecordedEvent) []eventstore.RecordedEvent {
	return func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
		i := at(evs)
		var forged []eventstore.RecordedEvent
		for k, e := range es {
			forged = append(forged, forge(t, evs, i, time.Duration(k+1)*time.Microsecond, e))
		}
		return slices.Insert(evs, i+1, forged...)
	}
}
