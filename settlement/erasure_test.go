package settlement

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/personal"
)

// personalNode is a node whose writer seals personal fields under data
// keys kept in the node's own JetStream, on a clock the test moves.
type personalNode struct {
	*node
	ring  *personal.Keyring
	clock *atomic.Int64
}

func startPersonalNode(tb testing.TB, dir string, clock *atomic.Int64) *personalNode {
	tb.Helper()
	return startPersonalNodeOn(tb, dir, clock, func(s personal.Store) personal.Store { return s })
}

// startPersonalNodeOn is startPersonalNode with the keyring's store
// wrapped by wrap.
func startPersonalNodeOn(tb testing.TB, dir string, clock *atomic.Int64, wrap func(personal.Store) personal.Store) *personalNode {
	tb.Helper()
	p := &personalNode{clock: clock}
	p.node = startNodeWith(tb, dir, func(n *node, c *Config) {
		keys, err := n.store.OpenDataKeys(context.Background())
		if err != nil {
			tb.Fatal(err)
		}
		p.ring = personal.New(wrap(keys), c.Sealer)
		c.Personal = p.ring
		c.Clock = func() time.Time { return time.Unix(0, clock.Load()) }
	})
	return p
}

// erase proposes an erasure by one staff subject and has another approve
// it, and returns the erasure recorded.
func erase(tb testing.TB, w *Writer, c domain.ErasePersonalData, approver *domain.Actor) *domain.PersonalDataErased {
	tb.Helper()
	p := exec(tb, w, c).Events[0].(*domain.PersonalDataErasureProposed)
	return exec(tb, w, domain.ApproveErasure{Erasure: p.Erasure, By: approver}).Events[0].(*domain.PersonalDataErased)
}

func execErr(tb testing.TB, w *Writer, c domain.Command) error {
	tb.Helper()
	_, err := w.Execute(eventstoretest.Ctx(tb, time.Minute), c)
	return err
}

// TestErasingAPlayerAndAStaffSubjectKeepsTheLedger records a player's
// ban, adjustment and closure by two staff members, then erases the
// player and one of the staff: their fields read as erased, the other
// staff member's as written, the ledger replays the same, and neither the
// data directory nor the stream ever held any of it in clear.
func TestErasingAPlayerAndAStaffSubjectKeepsTheLedger(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	clock.Store(start.UnixNano())
	n := startPersonalNode(t, dir, &clock)
	alice := &domain.Actor{Role: domain.RoleOperator, Subject: "alice@fdj.fr"}
	bob := &domain.Actor{Role: domain.RoleFinance, Subject: "bob@fdj.fr"}
	lim := domain.Amount(100_00)
	exec(t, n.w, domain.ConfigureAccount{Player: "p1", DepositLimit: &lim, StakeLimit: &lim, By: alice})
	exec(t, n.w, domain.BanPlayer{Player: "p1", Reference: "ANJ-2026-0042", Reason: "gambling problem told by his mother", By: alice})
	exec(t, n.w, domain.LiftBan{Player: "p1", Ban: "B1", Reference: "ANJ-2026-0043", Reason: "ban ended by the regulator", By: alice})
	res := exec(t, n.w, domain.ProposeAdjustment{Player: "p1", Direction: domain.Credit, Kind: domain.Goodwill,
		Amount: 5_00, Reference: "TICKET-77", Reason: "goodwill after an outage", By: alice})
	id := res.Events[0].(*domain.AdjustmentProposed).Adjustment
	if err := execErr(t, n.w, domain.ApproveAdjustment{Adjustment: id, By: alice}); !errors.Is(err, domain.ErrFourEyes) {
		t.Fatalf("the proposer approving her own sealed proposal: %v, want four_eyes", err)
	}
	exec(t, n.w, domain.ApproveAdjustment{Adjustment: id, By: bob})
	exec(t, n.w, domain.Withdraw{Player: "p1", Amount: 5_00, Key: "w1", By: bob})
	exec(t, n.w, domain.CloseAccount{Player: "p1", Reason: "asked by the player", By: alice})

	if err := execErr(t, n.w, domain.ErasePersonalData{Player: "p1", By: bob}); !errors.Is(err, domain.ErrConflict) {
		t.Fatalf("erasure within the retention period without a legal ground: %v, want conflict", err)
	}
	proposed := exec(t, n.w, domain.ErasePersonalData{Player: "p1", LegalGround: "GDPR art. 17 request of 2026-11-30", By: bob})
	er := proposed.Events[0].(*domain.PersonalDataErasureProposed).Erasure
	if err := execErr(t, n.w, domain.ApproveErasure{Erasure: er, By: bob}); !errors.Is(err, domain.ErrFourEyes) {
		t.Fatalf("the proposer approving his own sealed erasure: %v, want four_eyes", err)
	}
	e := exec(t, n.w, domain.ApproveErasure{Erasure: er, By: alice}).Events[0].(*domain.PersonalDataErased)
	if e.Ground != domain.GroundLegal || !domain.ValidKeyID(e.KeyID) || !domain.IsSealed(e.LegalGround) || e.Erasure != er {
		t.Fatalf("erasure recorded as %+v: want the legal ground, the key, the sealed text and the proposal", e)
	}
	if again := exec(t, n.w, domain.ErasePersonalData{Player: "p1", LegalGround: "again", By: bob}); len(again.Events) != 0 {
		t.Fatalf("a second erasure of p1 recorded %d events", len(again.Events))
	}
	carol := &domain.Actor{Role: domain.RoleOperator, Subject: "carol@fdj.fr"}
	alices := erase(t, n.w, domain.ErasePersonalData{Subject: "alice@fdj.fr", LegalGround: "left the company, asked for erasure", By: bob}, carol)
	// Destroyed by its id alone, alice's key takes the entry naming it
	// as hers along: she has no key any more.
	if err := execErr(t, n.w, domain.ErasePersonalData{Subject: "alice@fdj.fr", LegalGround: "again", By: bob}); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("a second erasure of alice: %v, want not_found", err)
	}

	_, l, events := n.replay()
	if got := l.Accounts["p1"]; got == nil || got.Balance != 0 {
		t.Fatalf("p1 after the erasure: %+v", got)
	}
	if _, ok := l.Accounts["p1"].ErasedAt(); !ok {
		t.Fatal("the replayed ledger does not know p1 erased")
	}
	reader := personal.New(mustDataKeys(t, n.node), n.w.cfg.Sealer)
	for _, key := range []string{e.KeyID, alices.KeyID} {
		if held, err := reader.Holds(context.Background(), key); held || err != nil {
			t.Fatalf("the bucket holds the erased key %s (%v)", key, err)
		}
	}
	for _, ev := range events {
		switch ev := ev.(type) {
		case *domain.PlayerBanned:
			wantRevealed(t, reader, ev.Reason, domain.ErasedText)
			wantRevealed(t, reader, ev.By.Subject, domain.ErasedText)
		case *domain.AdjustmentApproved:
			wantRevealed(t, reader, ev.By.Subject, "bob@fdj.fr")
			wantRevealed(t, reader, ev.ProposedBy.Subject, domain.ErasedText)
		}
	}
	n.stop()
	for _, s := range []string{"gambling problem", "alice@fdj.fr", "bob@fdj.fr", "ANJ-2026-0042", "TICKET-77", "GDPR art. 17"} {
		if f := eventstoretest.FileHolding(t, dir, []byte(s)); f != "" {
			t.Errorf("%q is in clear in %s", s, f)
		}
	}
}

func mustDataKeys(tb testing.TB, n *node) personal.Store {
	tb.Helper()
	keys, err := n.store.OpenDataKeys(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return keys
}

func wantRevealed(tb testing.TB, r *personal.Keyring, sealed, want string) {
	tb.Helper()
	if !domain.IsSealed(sealed) {
		tb.Fatalf("%q is in clear on the stream", sealed)
	}
	if got := r.Reveal(context.Background(), sealed); got != want {
		tb.Errorf("a sealed field reads %q, want %q", got, want)
	}
}

// TestRetentionEndsFiveYearsAfterTheClosure erases a player without a
// legal ground only once the settings' retention after the closure has
// run out, and keeps the account closed for good.
func TestRetentionEndsFiveYearsAfterTheClosure(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	clock.Store(start.UnixNano())
	n := startPersonalNode(t, t.TempDir(), &clock)
	op := &domain.Actor{Role: domain.RoleOperator, Subject: "carol@fdj.fr"}
	lim := domain.Amount(100_00)
	exec(t, n.w, domain.ConfigureAccount{Player: "p2", DepositLimit: &lim, StakeLimit: &lim, By: op})
	if err := execErr(t, n.w, domain.ErasePersonalData{Player: "p2", LegalGround: "request", By: op}); !errors.Is(err, domain.ErrConflict) {
		t.Fatalf("erasure of an open account: %v, want conflict", err)
	}
	exec(t, n.w, domain.CloseAccount{Player: "p2", Reason: "dormant", By: op})
	clock.Store(start.AddDate(5, 0, 0).Add(-time.Second).UnixNano())
	if err := execErr(t, n.w, domain.ErasePersonalData{Player: "p2", By: op}); !errors.Is(err, domain.ErrConflict) {
		t.Fatalf("erasure a second before the five years: %v, want conflict", err)
	}
	clock.Store(start.AddDate(5, 0, 0).UnixNano())
	e := erase(t, n.w, domain.ErasePersonalData{Player: "p2", By: op}, &domain.Actor{Role: domain.RoleOperator, Subject: "dan@fdj.fr"})
	if e.Ground != domain.GroundRetentionEnded || e.LegalGround != "" {
		t.Fatalf("erasure after the retention recorded as %+v", e)
	}
	if err := execErr(t, n.w, domain.ReopenAccount{Player: "p2", Reason: "mistake", By: op}); !errors.Is(err, domain.ErrConflict) {
		t.Fatalf("reopening an erased account: %v, want conflict", err)
	}
}

// TestPersonalFieldsAreCheckedInClearBeforeTheyAreSealed refuses what the
// decider would have refused in clear, and text that would pass for a
// sealed field: the decider sees only the sealed form.
func TestPersonalFieldsAreCheckedInClearBeforeTheyAreSealed(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixNano())
	n := startPersonalNode(t, t.TempDir(), &clock)
	op := &domain.Actor{Role: domain.RoleOperator, Subject: "dave@fdj.fr"}
	lim := domain.Amount(100_00)
	exec(t, n.w, domain.ConfigureAccount{Player: "p3", DepositLimit: &lim, StakeLimit: &lim, By: op})
	for name, c := range map[string]domain.Command{
		"a reason too long":         domain.BanPlayer{Player: "p3", Reference: "R1", Reason: strings.Repeat("x", domain.ReasonMax+1), By: op},
		"a reference too long":      domain.BanPlayer{Player: "p3", Reference: strings.Repeat("x", domain.ReferenceMax+1), Reason: "r", By: op},
		"a control character":       domain.BanPlayer{Player: "p3", Reference: "R1", Reason: "a\nb", By: op},
		"a reason of blanks":        domain.BanPlayer{Player: "p3", Reference: "R1", Reason: " \u200b ", By: op},
		"a forged sealed reason":    domain.BanPlayer{Player: "p3", Reference: "R1", Reason: domain.SealedPrefix + "0123456789abcdef:AAAA", By: op},
		"a subject not a subject":   domain.BanPlayer{Player: "p3", Reference: "R1", Reason: "r", By: &domain.Actor{Role: domain.RoleOperator, Subject: "two words"}},
		"a forged sealed subject":   domain.BanPlayer{Player: "p3", Reference: "R1", Reason: "r", By: &domain.Actor{Role: domain.RoleOperator, Subject: domain.SealedPrefix + "0123456789abcdef:AAAA"}},
		"an erasure of both":        domain.ErasePersonalData{Player: "p3", Subject: "dave@fdj.fr", LegalGround: "g", By: op},
		"a player's own sealed key": domain.ErasePersonalData{Player: "p3", LegalGround: "g", By: &domain.Actor{Role: domain.RolePlayer, Subject: "p3"}},
	} {
		err := execErr(t, n.w, c)
		if !errors.Is(err, domain.ErrInvalidRequest) && !errors.Is(err, domain.ErrForbidden) {
			t.Errorf("%s: %v, want invalid_request or forbidden", name, err)
		}
	}
	res := exec(t, n.w, domain.BanPlayer{Player: "p3", Reference: "R1", Reason: "national list", By: op})
	again := exec(t, n.w, domain.BanPlayer{Player: "p3", Reference: "R1", Reason: "national list", By: op})
	if len(again.Events) != 0 || res.Events[0].(*domain.PlayerBanned).Reference == "R1" {
		t.Fatalf("a ban asked again with its sealed reference recorded %d events (first: %+v)", len(again.Events), res.Events[0])
	}
}

// TestAProposalInClearIsNotDecidedSealed proposes an adjustment on a
// writer that leaves subjects in clear, then restarts it sealing them: the
// decision is refused, since a clear proposer and a sealed decider cannot
// be compared, and the same adjustment proposed again is decided.
func TestAProposalInClearIsNotDecidedSealed(t *testing.T) {
	dir := t.TempDir()
	var clock atomic.Int64
	clock.Store(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixNano())
	n := startNode(t, dir, func(c *Config) { c.Clock = func() time.Time { return time.Unix(0, clock.Load()) } })
	alice := &domain.Actor{Role: domain.RoleOperator, Subject: "alice@fdj.fr"}
	bob := &domain.Actor{Role: domain.RoleFinance, Subject: "bob@fdj.fr"}
	lim := domain.Amount(100_00)
	exec(t, n.w, domain.ConfigureAccount{Player: "p4", DepositLimit: &lim, StakeLimit: &lim, By: alice})
	propose := domain.ProposeAdjustment{Player: "p4", Direction: domain.Credit, Kind: domain.Goodwill, Amount: 1_00, Reference: "T1", Reason: "r", By: alice}
	clear := exec(t, n.w, propose).Events[0].(*domain.AdjustmentProposed).Adjustment
	n.stop()
	p := startPersonalNode(t, dir, &clock)
	if err := execErr(t, p.w, domain.ApproveAdjustment{Adjustment: clear, By: alice}); !errors.Is(err, domain.ErrConflict) {
		t.Fatalf("alice approving her own proposal in clear, sealed: %v, want conflict", err)
	}
	again := exec(t, p.w, propose).Events[0].(*domain.AdjustmentProposed).Adjustment
	if err := execErr(t, p.w, domain.ApproveAdjustment{Adjustment: again, By: alice}); !errors.Is(err, domain.ErrFourEyes) {
		t.Fatalf("alice approving her own sealed proposal: %v, want four_eyes", err)
	}
	exec(t, p.w, domain.ApproveAdjustment{Adjustment: again, By: bob})
}

// failingErase is a data keys store whose erasures fail while failing is
// set: a bucket out of reach between an erasure and its key's
// destruction.
type failingErase struct {
	personal.Store
	failing *atomic.Bool
}

var errBucketUnreachable = errors.New("data keys bucket unreachable")

func (f failingErase) Erase(ctx context.Context, name string) error {
	if f.failing.Load() {
		return errBucketUnreachable
	}
	return f.Store.Erase(ctx, name)
}

// TestAnErasureWhoseKeyOutlivedItIsFinished records erasures whose data
// key the bucket refuses to destroy: the approval says so, the erasure
// stays recorded, and the key is destroyed without anyone asking, by the
// writer's next approval, or by the writer as it opens again.
func TestAnErasureWhoseKeyOutlivedItIsFinished(t *testing.T) {
	dir := t.TempDir()
	var clock atomic.Int64
	clock.Store(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixNano())
	var failing atomic.Bool
	wrap := func(s personal.Store) personal.Store { return failingErase{Store: s, failing: &failing} }
	n := startPersonalNodeOn(t, dir, &clock, wrap)
	alice := &domain.Actor{Role: domain.RoleOperator, Subject: "alice@fdj.fr"}
	bob := &domain.Actor{Role: domain.RoleOperator, Subject: "bob@fdj.fr"}
	keys := map[string]string{}
	for _, p := range []string{"p1", "p2", "p3"} {
		exec(t, n.w, domain.ConfigureAccount{Player: p, Reason: "asked by phone", By: alice})
		exec(t, n.w, domain.CloseAccount{Player: p, Reason: "leaves", By: alice})
		keys[p] = exec(t, n.w, domain.ErasePersonalData{Player: p, LegalGround: "GDPR art. 17", By: alice}).Events[0].(*domain.PersonalDataErasureProposed).KeyID
	}
	held := func(p string) bool {
		t.Helper()
		h, err := personal.New(mustDataKeys(t, n.node), n.w.cfg.Sealer).Holds(context.Background(), keys[p])
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	// p1's key outlives its erasure, and p2's approval finishes it.
	failing.Store(true)
	if err := execErr(t, n.w, domain.ApproveErasure{Erasure: "ER1", By: bob}); !errors.Is(err, errBucketUnreachable) {
		t.Fatalf("an approval whose key the bucket keeps: %v, want the bucket's error", err)
	}
	if !held("p1") {
		t.Fatal("p1's key is gone although its destruction failed: the test proves nothing")
	}
	failing.Store(false)
	exec(t, n.w, domain.ApproveErasure{Erasure: "ER2", By: bob})
	if held("p1") || held("p2") {
		t.Fatalf("after p2's erasure: p1's key held %v, p2's %v; want both destroyed", held("p1"), held("p2"))
	}
	// p3's key outlives its erasure, and the writer opening again
	// finishes it.
	failing.Store(true)
	if err := execErr(t, n.w, domain.ApproveErasure{Erasure: "ER3", By: bob}); !errors.Is(err, errBucketUnreachable) {
		t.Fatalf("an approval whose key the bucket keeps: %v", err)
	}
	n.stop()
	failing.Store(false)
	n = startPersonalNodeOn(t, dir, &clock, wrap)
	if held("p3") {
		t.Fatal("p3's key is still held once the writer has opened again")
	}
	if _, l, _ := n.replay(); l.Erasures["ER3"].State != domain.ProposalApproved {
		t.Fatalf("p3's erasure reads %+v on the stream", l.Erasures["ER3"])
	}
}

// TestACommandWhoseDataKeysCannotBeReachedIsNotRecorded: while the data
// keys' bucket does not answer (its stream gone, as a stream between two
// leaders answers no one), a staff command is answered not ready and
// records nothing; sent again once the bucket answers, it is recorded.
func TestACommandWhoseDataKeysCannotBeReachedIsNotRecorded(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixNano())
	n := startPersonalNode(t, t.TempDir(), &clock)
	ctx := eventstoretest.Ctx(t, time.Minute)
	js, err := jetstream.New(n.store.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, "KV_"+eventstore.DataKeysBucket); err != nil {
		t.Fatal(err)
	}
	before := n.w.LastSeq()
	cmd := domain.ConfigureAccount{Player: "p1", Reason: "asked by phone", By: &domain.Actor{Role: domain.RoleOperator, Subject: "alice@fdj.fr"}}
	if err := execErr(t, n.w, cmd); !errors.Is(err, ErrNotReady) {
		t.Fatalf("a command whose data keys cannot be reached: %v, want not ready", err)
	}
	if got := n.w.LastSeq(); got != before {
		t.Fatalf("the stream moved from %d to %d for a command answered not ready", before, got)
	}
	if _, err := n.store.OpenDataKeys(ctx); err != nil {
		t.Fatal(err)
	}
	res := exec(t, n.w, cmd)
	if len(res.Events) != 1 {
		t.Fatalf("the command sent again recorded %d events, want 1", len(res.Events))
	}
}
