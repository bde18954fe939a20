package audit_test

import (
	"slices"
	"testing"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
)

func TestUntouchedStreamAuditsClean(t *testing.T) {
	events := played(t)
	for name, r := range map[string]*audit.Report{
		"events": auditEvents(t, events),
		// The insider's rewrite with the operator's key and no change is
		// clean too: what the tamper tests catch is the tamper.
		"rewritten": auditStore(t, rewrite(t, events, operatorKey)),
	} {
		if !r.OK {
			t.Fatalf("%s: %d violations: %+v", name, r.ViolationsTotal, r.Violations)
		}
		if r.Plays != 16 || r.PlaysSettled != 15 || r.Blocks.Opened != 2 || r.Blocks.SoldOut != 1 || r.Blocks.Closed != 1 || r.Seals < 1 {
			t.Fatalf("%s: %+v", name, r)
		}
		if len(r.Prices) != 1 || r.Prices[0].Plays != 16 || r.Prices[0].Stakes != 1600 || r.Prices[0].Prizes != r.Prizes || r.Withdrawals != 120 {
			t.Fatalf("%s: prices %+v, withdrawals %s", name, r.Prices, r.Withdrawals)
		}
	}
}

// Naive tampers edit the stored events without re-hashing them, as someone
// editing an export or the stream's files would: the hash chain catches
// them at the event touched.
func TestNaiveTamperBreaksTheHashChain(t *testing.T) {
	events := played(t)
	prize, _ := find[*domain.PrizePaid](t, events, 0, nil)
	seal := slices.IndexFunc(events, func(ev eventstore.RecordedEvent) bool { return ev.Type == eventstore.SealType })
	for _, tc := range []struct {
		name   string
		tamper func([]eventstore.RecordedEvent) []eventstore.RecordedEvent
		code   audit.Code
		seq    uint64
	}{
		{"changed amount", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			p := slices.Clone(evs[prize].Payload)
			i := slices.Index(p, '.') // "amount":"X.YZ": the first decimal point is the amount's
			p[i-1]++
			evs[prize].Payload = p
			return evs
		}, audit.CodeHashMismatch, events[prize].Sequence},
		{"deleted event", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			return slices.Delete(evs, prize, prize+1)
		}, audit.CodeChainBroken, events[prize+1].Sequence},
		{"reordered pair", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			evs[prize], evs[prize-1] = evs[prize-1], evs[prize]
			return evs
		}, audit.CodeChainBroken, events[prize-1].Sequence},
		{"forged seal", func(evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			p := slices.Clone(evs[seal].Payload)
			p[len(p)-3] ^= 1 // a hex digit of the signature
			evs[seal].Payload = p
			return evs
		}, audit.CodeHashMismatch, events[seal].Sequence},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := auditEvents(t, tc.tamper(played(t)))
			v := wantCode(t, r, tc.code, audit.CodeChainBroken, audit.CodeSequenceGap, audit.CodePlaySequence, audit.CodePrizePayment,
				audit.CodeBalanceMismatch, audit.CodeBooksUnbalanced, audit.CodeSealInvalid)
			if v.Sequence != tc.seq {
				t.Fatalf("first %s at sequence %d, want %d: %+v", tc.code, v.Sequence, tc.seq, r.Violations)
			}
		})
	}
}

// Insider tampers change events and write them into a fresh stream
// through the real committer, so that every hash and link is right: the
// semantic checks catch them, or the seals when the insider lacks the
// operator's key.
func TestInsiderTamperIsCaughtBySemanticChecks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, evs []eventstore.RecordedEvent) []eventstore.RecordedEvent
		code   audit.Code
		also   []audit.Code
	}{
		{"changed amount", func(t *testing.T, evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			// A prize paid 1 € more than the settlement says, its
			// balance_after consistent with it.
			i, p := find[*domain.PrizePaid](t, evs, 0, nil)
			p.Amount += 100
			p.Balance += 100
			edit(t, evs, i, p)
			return evs
		}, audit.CodePrizePayment, []audit.Code{audit.CodeBalanceMismatch}},
		{"changed tier", func(t *testing.T, evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			// A losing unit turned into the jackpot, its settlement and
			// prize made to match.
			i, u := find[*domain.UnitAssigned](t, evs, 0, func(u *domain.UnitAssigned) bool { return u.Proof.Tier == domain.TierNone })
			u.Proof.Tier = domain.ChandelierX3
			edit(t, evs, i, u)
			j, s := find[*domain.PlaySettled](t, evs, 0, func(s *domain.PlaySettled) bool { return s.Play == u.Play })
			s.Tier, s.Prize = domain.ChandelierX3, 1_000_000
			edit(t, evs, j, s)
			return evs
		}, audit.CodeProofInvalid, []audit.Code{audit.CodeScenarioMismatch, audit.CodeUnitMismatch, audit.CodeArticle3,
			audit.CodePrizePayment, audit.CodeBooksUnbalanced}},
		{"deleted event", func(t *testing.T, evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			i, _ := find[*domain.ThrowMade](t, evs, 0, func(m *domain.ThrowMade) bool { return m.Throw == 2 })
			return slices.Delete(evs, i, i+1)
		}, audit.CodePlaySequence, nil},
		{"reordered pair", func(t *testing.T, evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			i, m := find[*domain.ThrowMade](t, evs, 0, func(m *domain.ThrowMade) bool { return m.Throw == 2 })
			j, _ := find[*domain.ThrowMade](t, evs, 0, func(n *domain.ThrowMade) bool { return n.Play == m.Play && n.Throw == 3 })
			evs[i], evs[j] = evs[j], evs[i]
			return evs
		}, audit.CodePlaySequence, nil},
		{"duplicated unit assignment", func(t *testing.T, evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			i, _ := find[*domain.UnitAssigned](t, evs, 1, nil)
			dup := evs[i]
			dup.ID += "-again"
			return slices.Insert(evs, i+1, dup)
		}, audit.CodeUnitReassigned, nil},
		{"unit sold twice", func(t *testing.T, evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			// The second play of the block claims the first one's unit.
			_, u0 := find[*domain.UnitAssigned](t, evs, 0, nil)
			i, st := find[*domain.StakePlaced](t, evs, 1, nil)
			j, u := find[*domain.UnitAssigned](t, evs, 1, nil)
			st.Play, u.Play, u.Proof = u0.Play, u0.Play, u0.Proof
			edit(t, evs, i, st)
			edit(t, evs, j, u)
			return evs
		}, audit.CodeUnitReassigned, []audit.Code{audit.CodeUnitOrder, audit.CodePlaySequence, audit.CodeArticle3,
			audit.CodeBlockState, audit.CodeBooksUnbalanced, audit.CodePrizePayment}},
		{"seed not matching its commitment", func(t *testing.T, evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			i, c := find[*domain.BlockClosed](t, evs, 0, nil)
			c.Seed[0] ^= 1
			edit(t, evs, i, c)
			return evs
		}, audit.CodeSeedMismatch, nil},
		{"prize above Article 4.5", func(t *testing.T, evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			// Settlement and payment agree with each other, not with the
			// table.
			i, s := find[*domain.PlaySettled](t, evs, 0, func(s *domain.PlaySettled) bool { return s.Prize > 0 })
			j, p := find[*domain.PrizePaid](t, evs, 0, func(p *domain.PrizePaid) bool { return p.Play == s.Play })
			s.Prize += 100
			p.Amount += 100
			p.Balance += 100
			edit(t, evs, i, s)
			edit(t, evs, j, p)
			return evs
		}, audit.CodePrizeAmount, []audit.Code{audit.CodeBalanceMismatch, audit.CodeArticle3}},
		{"scenario shown not the unit's", func(t *testing.T, evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			i, m := find[*domain.ThrowMade](t, evs, 0, nil)
			m.Result.Steps = m.Result.Steps%3 + 1
			edit(t, evs, i, m)
			return evs
		}, audit.CodeScenarioMismatch, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := auditStore(t, rewrite(t, tc.tamper(t, played(t)), operatorKey))
			wantCode(t, r, tc.code, tc.also...)
		})
	}
}

func TestInsiderWithoutTheOperatorKeyForgesSeals(t *testing.T) {
	r := auditStore(t, rewrite(t, played(t), insiderKey))
	v := wantCode(t, r, audit.CodeSealInvalid)
	if r.Seals != 0 || v.Expected != eventstore.KeyID(operatorPub) {
		t.Fatalf("seals verified %d, violations %v, first %+v", r.Seals, r.ViolationCounts, v)
	}
}
