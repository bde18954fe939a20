package audit_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
)

// forge builds an event of the insider's: e, on the aggregate of events[i]
// and at its time plus d, with a fresh id. A rewrite hashes and seals it
// like any other.
func forge(tb testing.TB, events []eventstore.RecordedEvent, i int, d time.Duration, e domain.Event) eventstore.RecordedEvent {
	tb.Helper()
	p, err := json.Marshal(e)
	if err != nil {
		tb.Fatal(err)
	}
	ev := events[i]
	ev.ID += "-forged-" + e.EventType()
	ev.Type, ev.SchemaVersion, ev.Payload = e.EventType(), uint32(domain.SchemaVersion[e.EventType()]), p
	ev.RecordedAt = ev.RecordedAt.Add(d)
	ev.AppendRemaining = 0
	kind, id, _ := strings.Cut(e.AggregateID(), ".")
	ev.Aggregate = eventstore.Aggregate{Kind: kind, ID: id}
	return ev
}

var insider = &domain.Actor{Role: domain.RoleOperator, Subject: "insider"}

// TestAuditRederivesTheControls forges, through the real committer with
// the operator's key, streams in which a deposit or a stake was accepted
// against a control, or a control was changed against its rules: the
// audit re-derives the controls from the events and reports each, and
// finds nothing in a stream that respected them.
func TestAuditRederivesTheControls(t *testing.T) {
	// q1 sets limits of 100.00, deposits 5.00, withdraws 1.20, stakes 1.00.
	limitsOf := func(evs []eventstore.RecordedEvent) int {
		i, _ := find[*domain.LimitChanged](t, evs, 0, func(l *domain.LimitChanged) bool { return l.Player == "q1" })
		return i
	}
	depositOf := func(evs []eventstore.RecordedEvent) int {
		i, _ := find[*domain.FundsDeposited](t, evs, 0, func(d *domain.FundsDeposited) bool { return d.Player == "q1" })
		return i
	}
	stakeOf := func(evs []eventstore.RecordedEvent) int {
		i, _ := find[*domain.StakePlaced](t, evs, 0, func(s *domain.StakePlaced) bool { return s.Player == "q1" })
		return i
	}
	for _, tc := range []struct {
		name   string
		tamper func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent
		code   audit.Code
	}{
		{"a ban lifted before the stake", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			i := depositOf(evs)
			return slices.Insert(evs, i+1,
				forge(t, evs, i, time.Millisecond, &domain.PlayerBanned{Player: "q1", Ban: "B1", Reference: "R1", Reason: "list", By: insider}),
				forge(t, evs, i, 2*time.Millisecond, &domain.BanLifted{Player: "q1", Ban: "B1", Reference: "R2", Reason: "off the list", By: insider}),
				forge(t, evs, i, 3*time.Millisecond, &domain.TokenRevoked{Subject: "clerk", Reason: "left the company", By: insider}))
		}, ""},
		{"a deposit while self-excluded for a term", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			i := depositOf(evs)
			until := evs[i].RecordedAt.Add(48 * time.Hour)
			return slices.Insert(evs, i, forge(t, evs, i, -time.Millisecond, &domain.SelfExcludedUntil{Player: "q1", Until: until}))
		}, audit.CodeExclusionBreached},
		{"a stake while banned", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			i := stakeOf(evs)
			return slices.Insert(evs, i, forge(t, evs, i, -time.Millisecond, &domain.PlayerBanned{Player: "q1", Ban: "B1", Reference: "R1", Reason: "list", By: insider}))
		}, audit.CodeExclusionBreached},
		{"a stake above the limit", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			i := stakeOf(evs)
			return slices.Insert(evs, i, forge(t, evs, i, -time.Millisecond, &domain.LimitChanged{Player: "q1", Kind: domain.StakeLimit,
				Limit: 50, EffectiveAt: evs[i].RecordedAt.Add(-time.Millisecond), PeriodDays: 7, By: insider}))
		}, audit.CodeLimitBreached},
		{"a raise effective at once", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			i := limitsOf(evs) + 1
			return slices.Insert(evs, i+1, forge(t, evs, i, time.Millisecond, &domain.LimitChanged{Player: "q1", Kind: domain.StakeLimit,
				Limit: 1_000_000, EffectiveAt: evs[i].RecordedAt.Add(time.Millisecond), PeriodDays: 7, By: insider}))
		}, audit.CodeLimitChangeInvalid},
		{"a term shortened", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			j := stakeOf(evs)
			at := evs[j].RecordedAt
			return slices.Insert(evs, j+2,
				forge(t, evs, j, 2*time.Millisecond, &domain.SelfExcludedUntil{Player: "q1", Until: at.Add(72 * time.Hour)}),
				forge(t, evs, j, 3*time.Millisecond, &domain.SelfExcludedUntil{Player: "q1", Until: at.Add(48 * time.Hour)}))
		}, audit.CodeExclusionInvalid},
		{"a ban lifted twice", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			j := stakeOf(evs) + 2
			return slices.Insert(evs, j,
				forge(t, evs, j-2, 2*time.Millisecond, &domain.PlayerBanned{Player: "q1", Ban: "B1", Reference: "R1", Reason: "list", By: insider}),
				forge(t, evs, j-2, 3*time.Millisecond, &domain.BanLifted{Player: "q1", Ban: "B1", Reference: "R2", Reason: "off", By: insider}),
				forge(t, evs, j-2, 4*time.Millisecond, &domain.BanLifted{Player: "q1", Ban: "B1", Reference: "R2", Reason: "off", By: insider}))
		}, audit.CodeBanInvalid},
		{"an exclusion recorded by the operator without a reason", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			j := stakeOf(evs) + 2
			return slices.Insert(evs, j, forge(t, evs, j-2, 2*time.Millisecond, &domain.SelfExcluded{Player: "q1", By: insider}))
		}, audit.CodeReasonMissing},
		{"a token revoked by finance", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			j := stakeOf(evs) + 2
			return slices.Insert(evs, j, forge(t, evs, j-2, 2*time.Millisecond, &domain.TokenRevoked{JTI: "t1", Reason: "left",
				By: &domain.Actor{Role: domain.RoleFinance, Subject: "accounts"}}))
		}, audit.CodeRevocationInvalid},
		{"a revocation naming a token and a subject", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			j := stakeOf(evs) + 2
			return slices.Insert(evs, j, forge(t, evs, j-2, 2*time.Millisecond, &domain.TokenRevoked{JTI: "t1", Subject: "clerk", Reason: "left", By: insider}))
		}, audit.CodeRevocationInvalid},
		{"a revocation without a reason", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			j := stakeOf(evs) + 2
			return slices.Insert(evs, j, forge(t, evs, j-2, 2*time.Millisecond, &domain.TokenRevoked{Subject: "clerk", By: insider}))
		}, audit.CodeReasonMissing},
		{"settings out of bounds", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			s := domain.BaselineSettings()
			s.Version, s.LimitPeriodsDays = "bad", []int{90}
			return slices.Insert(evs, 0, forge(t, evs, 0, 0, &domain.SettingsAdopted{Settings: s}))
		}, audit.CodeSettingsInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := auditStore(t, rewrite(t, tc.tamper(played(t)), operatorKey))
			if tc.code == "" {
				if !r.OK || r.Controls.Bans != 1 || r.Controls.BansLifted != 1 {
					t.Fatalf("controls respected: %+v %+v", r.Controls, r.Violations)
				}
				return
			}
			wantCode(t, r, tc.code)
		})
	}
}
