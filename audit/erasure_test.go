package audit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
)

// TestAuditChecksErasures forges, through the real committer with the
// operator's key, erasures against the rules: each is reported, and an
// erasure on a legal ground of a closed account passes, approved by
// another subject than its proposer, or recorded at once before erasures
// took four eyes (schema 1).
func TestAuditChecksErasures(t *testing.T) {
	after := func(es ...domain.Event) func([]eventstore.RecordedEvent) []eventstore.RecordedEvent {
		return forgedAfter(t, q1Opened(t), es...)
	}
	closed := &domain.AccountClosed{Player: "q1", Reason: "leaves", By: insider}
	reopened := &domain.AccountReopened{Player: "q1", Reason: "back", By: insider}
	other := &domain.Actor{Role: domain.RoleOperator, Subject: "other"}
	const key = "0123456789abcdef"
	erased := func(ground, legal string, by *domain.Actor) *domain.PersonalDataErased {
		return &domain.PersonalDataErased{Player: "q1", KeyID: key, Ground: ground, LegalGround: legal, By: by}
	}
	// proposed and approved are ER1 of q1 on a legal ground, proposed by
	// the insider, forged after its closure (+1µs) at +2µs, and approved at
	// +3µs: the proposal expires 72 hours after it (the settings' expiry).
	proposed := func(evs []eventstore.RecordedEvent) *domain.PersonalDataErasureProposed {
		return &domain.PersonalDataErasureProposed{Erasure: "ER1", Player: "q1", KeyID: key, Ground: domain.GroundLegal, LegalGround: "GDPR art. 17",
			ExpiresAt: evs[q1Opened(t)(evs)].RecordedAt.Add(2*time.Microsecond + 72*time.Hour), By: insider}
	}
	approved := func(by *domain.Actor) *domain.PersonalDataErased {
		e := erased(domain.GroundLegal, "GDPR art. 17", by)
		e.Erasure, e.ProposedBy = "ER1", insider
		return e
	}
	proposal := func(change func(*domain.PersonalDataErasureProposed), decisions ...domain.Event) func([]eventstore.RecordedEvent) []eventstore.RecordedEvent {
		return func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			p := proposed(evs)
			change(p)
			return after(append(append([]domain.Event{closed, p}, decisions...), reopened)...)(evs)
		}
	}
	same := func(*domain.PersonalDataErasureProposed) {}
	anotherGround := approved(other)
	anotherGround.LegalGround = "a court's order"
	for _, tc := range []struct {
		name   string
		tamper func([]eventstore.RecordedEvent) []eventstore.RecordedEvent
		code   audit.Code
		// says is in what the violation expected or found.
		says string
	}{
		{"a closed account erased on a legal ground before four eyes", schema1(after(closed, erased(domain.GroundLegal, "GDPR art. 17", insider), reopened)), "", ""},
		{"an open account erased", schema1(after(erased(domain.GroundLegal, "GDPR art. 17", insider))), audit.CodeErasureInvalid, ""},
		{"the retention said ended a moment after the closure", schema1(after(closed, erased(domain.GroundRetentionEnded, "", insider), reopened)), audit.CodeErasureInvalid, ""},
		{"a legal ground without its text", schema1(after(closed, erased(domain.GroundLegal, "", insider), reopened)), audit.CodeErasureInvalid, ""},
		{"an erasure by the player", schema1(after(closed, erased(domain.GroundLegal, "mine", &domain.Actor{Role: domain.RolePlayer, Subject: "q1"}), reopened)), audit.CodeErasureInvalid, ""},
		{"a staff subject's erasure naming no data key", schema1(after(&domain.PersonalDataErased{KeyID: "not-a-key", Ground: domain.GroundLegal, LegalGround: "left", By: insider})), audit.CodeErasureInvalid, ""},
		{"an erasure approved by another subject", proposal(same, approved(other)), "", ""},
		{"an erasure without a proposal", after(closed, erased(domain.GroundLegal, "GDPR art. 17", insider), reopened), audit.CodeErasureInvalid, "the proposal it approves"},
		{"an erasure approved by its proposer", proposal(same, approved(insider)), audit.CodeFourEyesBroken, ""},
		{"an erasure of a proposal never made", after(closed, approved(other), reopened), audit.CodeErasureInvalid, "no PersonalDataErasureProposed"},
		{"an erasure approved twice", proposal(same, approved(other), approved(other)), audit.CodeErasureInvalid, "decided again"},
		{"an erasure with another legal ground", proposal(same, anotherGround), audit.CodeErasureInvalid, `legal ground "a court's order"`},
		{"an erasure of a staff subject's key proposed for q1", proposal(func(p *domain.PersonalDataErasureProposed) { p.Player = "" }, approved(other)), audit.CodeErasureInvalid, "erasure of q1"},
		{"an erasure approved past its expiry", proposal(func(p *domain.PersonalDataErasureProposed) { p.ExpiresAt = p.ExpiresAt.Add(-72 * time.Hour) }, approved(other)), audit.CodeErasureInvalid, "a decision before"},
		{"a rejection without a reason", proposal(same, &domain.PersonalDataErasureRejected{Erasure: "ER1", Player: "q1", KeyID: key, By: other}), audit.CodeErasureInvalid, "a rejection with a reason"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := auditStore(t, rewrite(t, tc.tamper(played(t)), operatorKey))
			if tc.code == "" {
				if !r.OK {
					t.Fatalf("a lawful erasure: %+v", r.Violations)
				}
				return
			}
			wantCode(t, r, tc.code)
			for _, v := range r.Violations {
				if strings.Contains(v.Expected+" "+v.Found, tc.says) {
					return
				}
			}
			t.Fatalf("no violation says %q: %+v", tc.says, r.Violations)
		})
	}
}

// schema1 writes the erasures a tamper forges as schema 1: recorded at
// once, before erasures took four eyes.
func schema1(f func([]eventstore.RecordedEvent) []eventstore.RecordedEvent) func([]eventstore.RecordedEvent) []eventstore.RecordedEvent {
	return func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
		out := f(evs)
		for i := range out {
			if out[i].Type == domain.TypePersonalDataErased && strings.Contains(out[i].ID, "-forged-") {
				out[i].SchemaVersion = 1
			}
		}
		return out
	}
}
