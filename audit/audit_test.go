package audit_test

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/settlement"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// Naive tampers edit an export's lines without re-hashing, as someone
// editing an export or the stream's files would: the hash chain catches
// them at the event touched.
func TestNaiveTamperOfAnExportBreaksTheHashChain(t *testing.T) {
	events := played(t)
	prize, _ := find[*domain.PrizePaid](t, events, 0, nil)
	seal := slices.IndexFunc(events, func(ev eventstore.RecordedEvent) bool { return ev.Type == eventstore.SealType })
	for _, tc := range []struct {
		name   string
		tamper func(lines [][]byte) [][]byte
		code   audit.Code
		seq    uint64
	}{
		{"untouched", func(lines [][]byte) [][]byte { return lines }, "", 0},
		{"changed amount", func(lines [][]byte) [][]byte {
			i := bytes.Index(lines[prize], []byte(`"amount":"`)) + len(`"amount":"`)
			lines[prize][i]++
			return lines
		}, audit.CodeHashMismatch, events[prize].Sequence},
		{"deleted event", func(lines [][]byte) [][]byte {
			return slices.Delete(lines, prize, prize+1)
		}, audit.CodeChainBroken, events[prize+1].Sequence},
		{"reordered pair", func(lines [][]byte) [][]byte {
			lines[prize], lines[prize-1] = lines[prize-1], lines[prize]
			return lines
		}, audit.CodeChainBroken, events[prize-1].Sequence},
		{"forged seal", func(lines [][]byte) [][]byte {
			i := bytes.Index(lines[seal], []byte(`"signature":"`)) + len(`"signature":"`)
			lines[seal][i] ^= 1 // a hex digit of the signature
			return lines
		}, audit.CodeHashMismatch, events[seal].Sequence},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := bytes.Join(tc.tamper(exportLines(t, played(t))), []byte("\n"))
			a := newAuditor(t)
			if _, err := audit.ReadExport(bytes.NewReader(file), a, 1); err != nil {
				t.Fatal(err)
			}
			r := a.Finish()
			if tc.code == "" {
				if !r.OK || r.Events != uint64(len(events)) {
					t.Fatalf("untouched export: %d events, %+v", r.Events, r.Violations)
				}
				return
			}
			v := wantCode(t, r, tc.code, audit.CodeChainBroken, audit.CodeSequenceGap, audit.CodePlaySequence, audit.CodePrizePayment,
				audit.CodeBalanceMismatch, audit.CodeBooksUnbalanced, audit.CodeSealInvalid, audit.CodeAppendTorn)
			if v.Sequence != tc.seq {
				t.Fatalf("first %s at sequence %d, want %d: %+v", tc.code, v.Sequence, tc.seq, r.Violations)
			}
		})
	}
}

// exportLines writes events as an NDJSON export and returns its lines.
func exportLines(tb testing.TB, events []eventstore.RecordedEvent) [][]byte {
	tb.Helper()
	var buf bytes.Buffer
	x := eventstore.NewExportWriter(&buf)
	for _, ev := range events {
		if err := x.Write(ev); err != nil {
			tb.Fatal(err)
		}
	}
	if err := x.Flush(); err != nil {
		tb.Fatal(err)
	}
	return bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
}

// From a seal, the chain is verified from the sealed head on, and what
// begins after it in full; a seal that does not verify is refused.
func TestAuditFromASeal(t *testing.T) {
	events := played(t)
	var seals []int
	for i, ev := range events {
		if ev.Type == eventstore.SealType {
			seals = append(seals, i)
		}
	}
	if len(seals) < 2 {
		t.Fatalf("%d seals, want 2 or more", len(seals))
	}
	mid := events[seals[0]]
	file := bytes.Join(exportLines(t, events), []byte("\n"))
	fromSeal := func(t *testing.T, file []byte, pub ed25519.PublicKey) (*audit.Report, error) {
		seal, err := audit.SealAt(audit.ExportEvent(bytes.NewReader(file)), mid.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		a, from, err := audit.NewFromSeal(audit.Config{Rules: smallRules(t), PublicKey: pub}, seal)
		if err != nil {
			return nil, err
		}
		if _, err := audit.ReadExport(bytes.NewReader(file), a, from); err != nil {
			t.Fatal(err)
		}
		return a.Finish(), nil
	}
	r, err := fromSeal(t, file, operatorPub)
	if err != nil || !r.OK || r.FromSeal != mid.Sequence || r.Unanchored == 0 || r.Events >= uint64(len(events)) || r.Seals == 0 {
		t.Fatalf("from the seal at %d: %v %+v", mid.Sequence, err, r)
	}
	// A tamper after the seal is caught; one before it is not looked at.
	lines := exportLines(t, events)
	after := slices.IndexFunc(lines[seals[0]:], func(l []byte) bool { return bytes.Contains(l, []byte(`"amount":"`)) })
	if after < 0 {
		t.Fatalf("no movement of money after the seal at %d", mid.Sequence)
	}
	l := lines[seals[0]+after]
	l[bytes.Index(l, []byte(`"amount":"`))+len(`"amount":"`)]++
	r, err = fromSeal(t, bytes.Join(lines, []byte("\n")), operatorPub)
	if err != nil {
		t.Fatal(err)
	}
	// The altered amount is still applied: the balances after it disagree too.
	wantCode(t, r, audit.CodeHashMismatch, audit.CodeBalanceMismatch, audit.CodePrizePayment, audit.CodeBooksUnbalanced)
	if _, err := fromSeal(t, file, insiderKey.Public().(ed25519.PublicKey)); !errors.Is(err, eventstore.ErrIntegrity) {
		t.Fatalf("a seal checked with another key: want ErrIntegrity, got %v", err)
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
		{"deleted settlement", func(t *testing.T, evs []eventstore.RecordedEvent) []eventstore.RecordedEvent {
			// A settlement in the block still on sale: the play stays
			// four throws in, unsettled (and unpaid, if it won).
			i, _ := find[*domain.PlaySettled](t, evs, 0, func(s *domain.PlaySettled) bool { return s.Block == "E0001-B002" })
			return slices.Delete(evs, i, i+1)
		}, audit.CodePlaySequence, []audit.Code{audit.CodePrizePayment}},
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

// An insider without the operator's key can also leave seals out: a chain
// running longer than the gap allowed without a seal is reported.
func TestInsiderWithoutTheOperatorKeyLeavesSealsOut(t *testing.T) {
	events := played(t)
	gapped := func(events []eventstore.RecordedEvent) *audit.Report {
		a, err := audit.New(audit.Config{Rules: smallRules(t), PublicKey: operatorPub, SealGapMax: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range events {
			a.Check(ev)
		}
		return a.Finish()
	}
	if r := gapped(events); !r.OK {
		t.Fatalf("sealed every %d events: %+v", sealEvery, r.Violations)
	}
	r := gapped(eventstoretest.ReadAll(t, rewrite(t, events, nil)))
	if v := wantCode(t, r, audit.CodeSealMissing); r.Seals != 0 || v.Found != fmt.Sprintf("%d events since the last one", r.Events) {
		t.Fatalf("no seal: %+v", r)
	}
}

func TestInsiderWithoutTheOperatorKeyForgesSeals(t *testing.T) {
	r := auditStore(t, rewrite(t, played(t), insiderKey))
	v := wantCode(t, r, audit.CodeSealInvalid)
	if r.Seals != 0 || v.Expected != eventstore.KeyID(operatorPub) {
		t.Fatalf("seals verified %d, violations %v, first %+v", r.Seals, r.ViolationCounts, v)
	}
}

// Messages published into a live stream behind Tresor's back: one without
// the envelope's headers, which the store cannot even parse, and a copy of
// an event with another payload. The audit reports both and reads on.
func TestForgedMessagesInALiveStreamAreReported(t *testing.T) {
	events := played(t)
	store := rewrite(t, events, operatorKey)
	js, err := jetstream.New(store.Conn())
	if err != nil {
		t.Fatal(err)
	}
	i, prize := find[*domain.PrizePaid](t, events, 0, nil)
	copied := events[i]
	for _, m := range []*nats.Msg{
		{Subject: store.Subject(settlement.Chain, eventstore.Aggregate{Kind: "player", ID: prize.Player}), Data: []byte(`{}`)},
		{Subject: store.Subject(copied.Chain, copied.Aggregate), Header: nats.Header{
			eventstore.HeaderID: {copied.ID + "-forged"}, eventstore.HeaderType: {copied.Type}, eventstore.HeaderSchema: {"1"},
			eventstore.HeaderChainSeq: {fmt.Sprint(copied.ChainSeq)}, eventstore.HeaderRecordedAt: {copied.RecordedAt.Format(time.RFC3339Nano)},
			eventstore.HeaderPrevHash: {copied.PrevHash.String()}, eventstore.HeaderHash: {copied.Hash.String()},
		}, Data: bytes.Replace(copied.Payload, []byte(`"amount":"`), []byte(`"amount":"9`), 1)},
	} {
		if _, err := js.PublishMsg(ctx(t), m); err != nil {
			t.Fatal(err)
		}
	}
	r := auditStore(t, store)
	wantCode(t, r, audit.CodeMalformedEvent, audit.CodeHashMismatch, audit.CodeChainBroken, audit.CodeBalanceMismatch,
		audit.CodePrizePayment, audit.CodeBooksUnbalanced, audit.CodeBlockState)
	if r.ViolationCounts[audit.CodeHashMismatch] != 1 || r.LastSequence != r.Events+1 {
		t.Fatalf("counts %v, %d events up to %d", r.ViolationCounts, r.Events, r.LastSequence)
	}
}
