package audit_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/projections/projectionstest"
	"github.com/fdj/tresor/settlement"
)

// operatorKey signs the seals of the streams the tests build; insiderKey
// is someone else's key: an insider who rewrites the log without the
// operator's key can only sign with such a key.
var (
	operatorKey = ed25519.NewKeyFromSeed([]byte("operator-seal-key-for-the-tests!"))
	insiderKey  = ed25519.NewKeyFromSeed([]byte("insider-seal-key-not-the-real-1!"))
	operatorPub = operatorKey.Public().(ed25519.PublicKey)
)

// sealEvery makes the committers seal often, so that a small stream holds
// several seals.
const sealEvery = 40

// server is a real embedded nats-server on a test directory with a raw
// store on it (no Registry: what an auditor reads).
type server struct {
	srv   *eventstore.EmbeddedServer
	store *eventstore.NATSStore
}

// startServer starts a server; the test's cleanup stops it. Writes are
// synced lazily: these streams are rebuilt by every run, never recovered.
func startServer(tb testing.TB, reg *eventstore.Registry) *server {
	tb.Helper()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: filepath.Join(tb.TempDir(), "jetstream"), SyncInterval: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	nc, err := srv.Conn()
	if err != nil {
		srv.Shutdown()
		tb.Fatal(err)
	}
	s := &server{srv: srv}
	tb.Cleanup(func() {
		nc.Close()
		srv.Shutdown()
	})
	if s.store, err = eventstore.Open(eventstoretest.Ctx(tb, time.Minute), nc, eventstore.Config{Registry: reg}); err != nil {
		tb.Fatal(err)
	}
	return s
}

// raw opens a second store on the server without a Registry.
func (s *server) raw(tb testing.TB) *eventstore.NATSStore {
	tb.Helper()
	st, err := eventstore.Open(eventstoretest.Ctx(tb, time.Minute), s.store.Conn(), eventstore.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

var (
	builtOnce   sync.Once
	builtEvents []eventstore.RecordedEvent
	builtErr    string
)

// played returns the events of a stream written by the real write path
// (settlement.Writer over the group committer, sealing with operatorKey)
// under rules of 12-unit blocks: deposits, a withdrawal, a first block sold
// out and closed with its seed revealed, and a second block on sale with
// plays in progress. It is built once; tests tamper with copies.
func played(tb testing.TB) []eventstore.RecordedEvent {
	tb.Helper()
	builtOnce.Do(func() { builtEvents = build(tb) })
	if builtEvents == nil {
		tb.Fatal("the stream could not be built (see the first test's failure)")
	}
	return slices.Clone(builtEvents)
}

func build(tb testing.TB) []eventstore.RecordedEvent {
	reg, err := settlement.NewRegistry()
	if err != nil {
		tb.Fatal(err)
	}
	s := startServer(tb, reg)
	ctx := eventstoretest.Ctx(tb, 2*time.Minute)
	sealer, err := settlement.NewSealer([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		tb.Fatal(err)
	}
	log, err := settlement.OpenEventLog(ctx, s.store, eventstore.CommitterConfig{SealKey: operatorKey, SealEvery: sealEvery})
	if err != nil {
		tb.Fatal(err)
	}
	w, err := settlement.Open(ctx, log, settlement.Config{Rules: smallRules(tb), Sealer: sealer, SweepEvery: 20 * time.Millisecond})
	if err != nil {
		tb.Fatal(err)
	}
	// Fifteen plays of 1 €: the first block's 12 units and 3 of the next.
	// Simulate returns once every play settled and the sold-out block
	// closed.
	if _, err := settlement.Simulate(ctx, w, settlement.SimConfig{Price: 100, Plays: 15, Players: 3}); err != nil {
		tb.Fatal(err)
	}
	lim := domain.Amount(10_000)
	for _, c := range []domain.Command{
		domain.ConfigureAccount{Player: "q1", DepositLimit: &lim, StakeLimit: &lim},
		domain.Deposit{Player: "q1", Amount: 500, Key: "d1"},
		domain.Withdraw{Player: "q1", Amount: 120, Key: "w1"},
		domain.PlaceStake{Player: "q1", Stake: 100, Key: "s1"},
	} {
		if _, err := w.Execute(ctx, c); err != nil {
			tb.Fatalf("%T: %v", c, err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := log.Close(); err != nil { // seals the head
		tb.Fatal(err)
	}
	return eventstoretest.ReadAll(tb, s.raw(tb))
}

func smallRules(tb testing.TB) *domain.RuleSet { return projectionstest.SmallRules(tb) }

// rewrite is the insider's tamper: it writes events (minus their seals)
// into a fresh stream through the real committer, keeping their ids and
// times, so that every hash and link is right and the committer signs new
// seals with key. It returns the store holding the result, raw.
func rewrite(tb testing.TB, events []eventstore.RecordedEvent, key ed25519.PrivateKey) *eventstore.NATSStore {
	tb.Helper()
	s := startServer(tb, nil)
	commit(tb, s.store, events, key)
	return s.store
}

// commit appends events (minus their seals) to store through the real
// committer, as rewrite does, and closes the committer, which seals the
// head; a later commit continues the chain.
func commit(tb testing.TB, store *eventstore.NATSStore, events []eventstore.RecordedEvent, key ed25519.PrivateKey) {
	tb.Helper()
	ctx := eventstoretest.Ctx(tb, time.Minute)
	c, err := store.NewCommitter(ctx, settlement.Chain, eventstore.CommitterConfig{SealKey: key, SealEvery: sealEvery})
	if err != nil {
		tb.Fatal(err)
	}
	var results []<-chan eventstore.AppendResult
	for _, ev := range events {
		if ev.Type == eventstore.SealType {
			continue
		}
		e := ev.Event
		e.At = ev.RecordedAt
		results = append(results, c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{e}}))
	}
	for _, r := range results {
		if res := <-r; res.Err != nil {
			tb.Fatal(res.Err)
		}
	}
	if err := c.Close(); err != nil {
		tb.Fatal(err)
	}
}

// auditEvents audits events fed directly, as an export reader would.
func auditEvents(tb testing.TB, events []eventstore.RecordedEvent) *audit.Report {
	tb.Helper()
	a := newAuditor(tb)
	for _, ev := range events {
		a.Check(ev)
	}
	return a.Finish()
}

// auditStore audits a live stream from its first event.
func auditStore(tb testing.TB, store *eventstore.NATSStore) *audit.Report {
	tb.Helper()
	a := newAuditor(tb)
	if _, err := audit.ReadStore(eventstoretest.Ctx(tb, time.Minute), store, a, 1); err != nil {
		tb.Fatal(err)
	}
	return a.Finish()
}

func newAuditor(tb testing.TB) *audit.Auditor {
	tb.Helper()
	a, err := audit.New(audit.Config{Rules: smallRules(tb), PublicKey: operatorPub, ViolationsMax: 1000})
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// find returns the index of the n-th event (from 0) of type T that pred
// accepts, and its decoded payload.
func find[T domain.Event](tb testing.TB, events []eventstore.RecordedEvent, n int, pred func(T) bool) (int, T) {
	tb.Helper()
	for i, ev := range events {
		if ev.Type == eventstore.SealType {
			continue
		}
		e, err := domain.DecodeEvent(ev.Type, ev.Payload)
		if err != nil {
			tb.Fatal(err)
		}
		if t, ok := e.(T); ok && (pred == nil || pred(t)) {
			if n == 0 {
				return i, t
			}
			n--
		}
	}
	var zero T
	tb.Fatalf("no %T in the stream", zero)
	return -1, zero
}

// edit rewrites the payload of events[i] from e, the insider's way: the
// payload is valid, only a rewrite re-hashes it.
func edit(tb testing.TB, events []eventstore.RecordedEvent, i int, e domain.Event) {
	tb.Helper()
	p, err := json.Marshal(e)
	if err != nil {
		tb.Fatal(err)
	}
	events[i].Payload = p
}

// wantOnly asserts that the report holds violations of the code, and no
// violation of a code outside also.
func wantCode(tb testing.TB, r *audit.Report, code audit.Code, also ...audit.Code) audit.Violation {
	tb.Helper()
	var first *audit.Violation
	for i, v := range r.Violations {
		if v.Code == code && first == nil {
			first = &r.Violations[i]
		}
		if v.Code != code && !slices.Contains(also, v.Code) {
			tb.Errorf("unexpected violation %+v", v)
		}
	}
	if r.OK || first == nil {
		tb.Fatalf("want a %s violation; report ok=%t, counts %v", code, r.OK, r.ViolationCounts)
	}
	return *first
}

// ctx is a test context bounded by a minute.
func ctx(tb testing.TB) context.Context { return eventstoretest.Ctx(tb, time.Minute) }
