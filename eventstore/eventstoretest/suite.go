// Package eventstoretest is the conformance suite of the eventstore.Store
// port: every implementation (embedded NATS, a JetStream cluster, anything
// later) runs the same cases against real servers.
package eventstoretest

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
)

// Backend is what the suite needs from an implementation. It is more than
// an open func(tb) Store because two cases must reach past the port: one
// forges a message behind the store's back, one restarts the servers.
type Backend struct {
	// Open returns a store on the backend with cfg (stream and subject
	// prefix are set by the suite, one per case, so cases never share
	// data). The backend fills in what it owns (replicas) and closes the
	// store at cleanup.
	Open func(tb testing.TB, cfg eventstore.Config) eventstore.Store
	// Forge stores a copy of ev with its payload replaced by payload and
	// every header kept (so its Tresor-Hash no longer matches), directly on
	// the stream, bypassing the store: what an attacker with write access
	// to the server could do. It returns the stream sequence of the forgery.
	Forge func(tb testing.TB, store eventstore.Store, ev eventstore.RecordedEvent, payload []byte) uint64
	// Restart stops every server of the backend and starts them again on
	// the same data. Stores opened before may be unusable afterwards.
	Restart func(tb testing.TB)
	// PipelineDepth is the committers' CommitterConfig.PipelineDepth (0:
	// the default), so that the suite runs at depth 1 and pipelined.
	PipelineDepth int
}

// committer is cfg with the backend's pipeline depth.
func (b Backend) committer(cfg eventstore.CommitterConfig) eventstore.CommitterConfig {
	cfg.PipelineDepth = b.PipelineDepth
	return cfg
}

// Eventually polls fn until it returns nil or the deadline passes, then
// fails the test with fn's last error. Tests wait with it, never with a
// sleep.
func Eventually(tb testing.TB, d time.Duration, fn func() error) {
	tb.Helper()
	deadline := time.Now().Add(d)
	var err error
	for {
		if err = fn(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("not true after %s: %v", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Ctx is a test context bounded by d and cancelled at cleanup.
func Ctx(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// Ev builds a test event of type typ on aggregate kind/id with a JSON
// payload carrying n.
func Ev(typ, kind, id string, n int) eventstore.Event {
	return eventstore.Event{Type: typ, SchemaVersion: 1, Aggregate: eventstore.Aggregate{Kind: kind, ID: id},
		CorrelationID: "corr-1", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
}

// ReadAll reads the whole stream.
func ReadAll(tb testing.TB, store eventstore.Store) []eventstore.RecordedEvent {
	tb.Helper()
	var out []eventstore.RecordedEvent
	if _, err := store.ReadFrom(Ctx(tb, 30*time.Second), 1, func(ev eventstore.RecordedEvent) error {
		out = append(out, ev)
		return nil
	}); err != nil {
		tb.Fatalf("read all: %v", err)
	}
	return out
}

// Run runs every case against b.
func Run(t *testing.T, b Backend) {
	cases := []struct {
		name string
		fn   func(t *testing.T, b Backend, cfg eventstore.Config)
	}{
		{"AppendAndLoad", testAppendAndLoad},
		{"ConcurrentAppendsOneAggregate", testConcurrentOneAggregate},
		{"CommitterConcurrentExpectations", testCommitterConcurrentExpectations},
		{"BatchAtomicity", testBatchAtomicity},
		{"CommitterIsolatesBadRequests", testCommitterIsolatesBadRequests},
		{"SecondWriterCannotFork", testSecondWriterFenced},
		{"OrderAndGapFree", testOrderAndGapFree},
		{"HashChainAndSeals", testHashChainAndSeals},
		{"SealOnInterval", testSealOnInterval},
		{"SealsCountFromTheLastSeal", testSealsCountFromTheLastSeal},
		{"SealKeyRotation", testSealKeyRotation},
		{"TamperDetected", testTamperDetected},
		{"Registry", testRegistry},
		{"Follow", testFollow},
		{"AppendsReadWhole", testAppendsReadWhole},
		{"RestartLosesNothingAcknowledged", testRestart},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := eventstore.Config{Stream: fmt.Sprintf("CONF%d", i), SubjectPrefix: fmt.Sprintf("conf%d", i)}
			c.fn(t, b, cfg)
		})
	}
}

func testAppendAndLoad(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 30*time.Second)
	s := b.Open(t, cfg)
	a1 := Ev("test.Opened", "acct", "a1", 1)
	a1.CausationID = "cmd-7"
	seqs, err := s.Append(ctx, "c1", eventstore.AppendRequest{
		Events:      []eventstore.Event{a1, Ev("test.Opened", "acct", "a2", 2), Ev("test.Credited", "acct", "a1", 3)},
		ExpectChain: eventstore.ExpectLast(0),
	})
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	if len(seqs) != 3 || seqs[0] != 1 || seqs[2] != 3 {
		t.Fatalf("sequences %v, want [1 2 3]", seqs)
	}
	evs, err := s.LoadAggregate(ctx, "c1", eventstore.Aggregate{Kind: "acct", ID: "a1"})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if len(evs) != 2 || evs[0].Sequence != 1 || evs[1].Sequence != 3 {
		t.Fatalf("load a1: %+v", evs)
	}
	e := evs[0]
	if e.Type != "test.Opened" || e.CausationID != "cmd-7" || e.CorrelationID != "corr-1" || string(e.Payload) != `{"n":1}` ||
		e.ChainSeq != 1 || !e.PrevHash.IsZero() || e.ID == "" || e.RecordedAt.IsZero() {
		t.Fatalf("first event: %+v", e)
	}
	if evs[1].ChainSeq != 3 {
		t.Fatalf("a1's second event at chain position %d, want 3", evs[1].ChainSeq)
	}
	head, err := s.ChainHead(ctx, "c1")
	if err != nil || head.Sequence != 3 || head.ChainSeq != 3 || head.Hash != evs[1].Hash {
		t.Fatalf("head %+v, %v", head, err)
	}
	none, err := s.LoadAggregate(ctx, "c1", eventstore.Aggregate{Kind: "acct", ID: "nobody"})
	if err != nil || len(none) != 0 {
		t.Fatalf("load unknown aggregate: %v, %v", none, err)
	}
	if last, err := s.LastSequence(ctx); err != nil || last != 3 {
		t.Fatalf("last sequence %d, %v", last, err)
	}
	// A second chain in the same stream has its own head and links.
	if _, err := s.Append(ctx, "c2", eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.Opened", "acct", "a1", 4)},
		ExpectChain: eventstore.ExpectLast(0)}); err != nil {
		t.Fatalf("append chain c2: %v", err)
	}
	if _, err := eventstore.VerifyStore(ctx, s, eventstore.NewVerifier(nil), 1); err != nil {
		t.Fatalf("verify: %v", err)
	}
}

// testConcurrentOneAggregate races writers that all saw the same state.
func testConcurrentOneAggregate(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 30*time.Second)
	s := b.Open(t, cfg)
	agg := eventstore.Aggregate{Kind: "acct", ID: "hot"}
	seqs, err := s.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.Opened", "acct", "hot", 0)}})
	if err != nil {
		t.Fatal(err)
	}
	const writers = 8
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Go(func() {
			_, errs[i] = s.Append(ctx, "c1", eventstore.AppendRequest{
				Events:           []eventstore.Event{Ev("test.Debited", "acct", "hot", i), Ev("test.Credited", "acct", "house", i)},
				ExpectAggregates: []eventstore.AggregateExpectation{{Aggregate: agg, LastSeq: seqs[0]}},
			})
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, eventstore.ErrConflict):
			t.Fatalf("want nil or ErrConflict, got %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d writers won, want exactly 1", won)
	}
	if got := ReadAll(t, s); len(got) != 3 {
		t.Fatalf("stream holds %d events, want 3", len(got))
	}
}

func testCommitterConcurrentExpectations(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 30*time.Second)
	s := b.Open(t, cfg)
	c, err := s.NewCommitter(ctx, "c1", b.committer(eventstore.CommitterConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	agg := eventstore.Aggregate{Kind: "acct", ID: "hot"}
	first := <-c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.Opened", "acct", "hot", 0)},
		ExpectAggregates: []eventstore.AggregateExpectation{{Aggregate: agg, LastSeq: 0}}})
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	const writers = 16
	results := make([]<-chan eventstore.AppendResult, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			results[i] = c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.Debited", "acct", "hot", i)},
				ExpectAggregates: []eventstore.AggregateExpectation{{Aggregate: agg, LastSeq: first.Sequences[0]}}})
		})
	}
	wg.Wait()
	won := 0
	for _, ch := range results {
		r := <-ch
		switch {
		case r.Err == nil:
			won++
		case !errors.Is(r.Err, eventstore.ErrConflict):
			t.Fatalf("want nil or ErrConflict, got %v", r.Err)
		}
	}
	if won != 1 {
		t.Fatalf("%d writers won, want exactly 1", won)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("committer stopped: %v", err)
	}
}

func testBatchAtomicity(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 30*time.Second)
	s := b.Open(t, cfg)
	seqs, err := s.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.Opened", "acct", "x", 0)}})
	if err != nil {
		t.Fatal(err)
	}
	bad := []eventstore.AppendRequest{
		{ // the conflict is on the last event's aggregate
			Events: []eventstore.Event{Ev("test.A", "acct", "p", 1), Ev("test.A", "acct", "q", 2), Ev("test.A", "acct", "x", 3)},
			ExpectAggregates: []eventstore.AggregateExpectation{
				{Aggregate: eventstore.Aggregate{Kind: "acct", ID: "p"}, LastSeq: 0},
				{Aggregate: eventstore.Aggregate{Kind: "acct", ID: "x"}, LastSeq: seqs[0] + 5},
			},
		},
		{ // stale chain expectation
			Events:      []eventstore.Event{Ev("test.A", "acct", "p", 1), Ev("test.A", "acct", "q", 2)},
			ExpectChain: eventstore.ExpectLast(0),
		},
	}
	for i, req := range bad {
		_, err := s.Append(ctx, "c1", req)
		var ce *eventstore.ConflictError
		if !errors.As(err, &ce) || !errors.Is(err, eventstore.ErrConflict) {
			t.Fatalf("request %d: want *ConflictError, got %v", i, err)
		}
	}
	if last, err := s.LastSequence(ctx); err != nil || last != seqs[0] {
		t.Fatalf("after conflicts last sequence %d (%v), want %d: something was written", last, err, seqs[0])
	}
	for _, id := range []string{"p", "q"} {
		if evs, err := s.LoadAggregate(ctx, "c1", eventstore.Aggregate{Kind: "acct", ID: id}); err != nil || len(evs) != 0 {
			t.Fatalf("aggregate %s: %d events, %v", id, len(evs), err)
		}
	}
	// Too large a batch is refused before anything is sent.
	big := make([]eventstore.Event, eventstore.BatchEventsMax+1)
	for i := range big {
		big[i] = Ev("test.A", "acct", "p", i)
	}
	if _, err := s.Append(ctx, "c1", eventstore.AppendRequest{Events: big}); !errors.Is(err, eventstore.ErrInvalid) {
		t.Fatalf("oversized batch: want ErrInvalid, got %v", err)
	}
	// A full batch goes through in one piece.
	seqsBig, err := s.Append(ctx, "c1", eventstore.AppendRequest{Events: big[:eventstore.BatchEventsMax], ExpectChain: eventstore.ExpectLast(seqs[0])})
	if err != nil || len(seqsBig) != eventstore.BatchEventsMax || seqsBig[len(seqsBig)-1]-seqsBig[0] != eventstore.BatchEventsMax-1 {
		t.Fatalf("full batch: %d sequences, %v", len(seqsBig), err)
	}
}

func testCommitterIsolatesBadRequests(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 30*time.Second)
	s := b.Open(t, cfg)
	c, err := s.NewCommitter(ctx, "c1", b.committer(eventstore.CommitterConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	good1 := c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.A", "acct", "a", 1)}})
	bad := c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.A", "acct", "b", 2), Ev("test.A", "acct", "c", 3)},
		ExpectAggregates: []eventstore.AggregateExpectation{{Aggregate: eventstore.Aggregate{Kind: "acct", ID: "c"}, LastSeq: 42}}})
	good2 := c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.A", "acct", "d", 4)}})
	invalid := c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{{Type: "bad type!", SchemaVersion: 1}}})
	r1, rb, r2, ri := <-good1, <-bad, <-good2, <-invalid
	if r1.Err != nil || r2.Err != nil {
		t.Fatalf("good requests failed: %v, %v", r1.Err, r2.Err)
	}
	if !errors.Is(rb.Err, eventstore.ErrConflict) {
		t.Fatalf("bad request: want ErrConflict, got %v", rb.Err)
	}
	if !errors.Is(ri.Err, eventstore.ErrInvalid) {
		t.Fatalf("invalid request: want ErrInvalid, got %v", ri.Err)
	}
	if r2.Sequences[0] != r1.Sequences[0]+1 {
		t.Fatalf("sequences %v then %v: want contiguous", r1.Sequences, r2.Sequences)
	}
	for _, id := range []string{"b", "c"} {
		if evs, err := s.LoadAggregate(ctx, "c1", eventstore.Aggregate{Kind: "acct", ID: id}); err != nil || len(evs) != 0 {
			t.Fatalf("aggregate %s: %d events written by a refused request (%v)", id, len(evs), err)
		}
	}
}

// testOrderAndGapFree has many writers share a committer, then reads the
// stream back: contiguous sequences, each writer's requests in its order,
// each answer matching what is stored.
func testOrderAndGapFree(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 60*time.Second)
	s := b.Open(t, cfg)
	c, err := s.NewCommitter(ctx, "c1", b.committer(eventstore.CommitterConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	const writers, perWriter = 32, 40
	got := make([][]uint64, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			var chans []<-chan eventstore.AppendResult
			for i := range perWriter {
				id := fmt.Sprintf("w%d", w)
				chans = append(chans, c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{
					Ev("test.A", "acct", id, i), Ev("test.B", "acct", id, i)}}))
			}
			for _, ch := range chans {
				r := <-ch
				if r.Err != nil {
					t.Errorf("writer %d: %v", w, r.Err)
					return
				}
				got[w] = append(got[w], r.Sequences...)
			}
		})
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	all := ReadAll(t, s)
	if len(all) != writers*perWriter*2 {
		t.Fatalf("read %d events, want %d", len(all), writers*perWriter*2)
	}
	bySeq := map[uint64]eventstore.RecordedEvent{}
	for i, ev := range all {
		if ev.Sequence != uint64(i+1) {
			t.Fatalf("event %d has sequence %d", i, ev.Sequence)
		}
		bySeq[ev.Sequence] = ev
	}
	for w, seqs := range got {
		for i, seq := range seqs {
			ev := bySeq[seq]
			if ev.Aggregate.ID != fmt.Sprintf("w%d", w) || string(ev.Payload) != fmt.Sprintf(`{"n":%d}`, i/2) {
				t.Fatalf("writer %d answer %d: sequence %d holds %s %s", w, i, seq, ev.Aggregate, ev.Payload)
			}
			if i > 0 && seq <= seqs[i-1] {
				t.Fatalf("writer %d: sequences out of submit order: %v", w, seqs)
			}
		}
	}
}

func testHashChainAndSeals(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 60*time.Second)
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := b.Open(t, cfg)
	c, err := s.NewCommitter(ctx, "c1", b.committer(eventstore.CommitterConfig{SealKey: key, SealEvery: 100}))
	if err != nil {
		t.Fatal(err)
	}
	var chans []<-chan eventstore.AppendResult
	for i := range 600 {
		chans = append(chans, c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.A", "acct", fmt.Sprint(i%7), i)}}))
		if i%150 == 149 { // let batches commit so several seals are due
			for _, ch := range chans {
				if r := <-ch; r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			chans = chans[:0]
		}
	}
	for _, ch := range chans {
		if r := <-ch; r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	stats, err := eventstore.VerifyStore(ctx, s, eventstore.NewVerifier(pub), 1)
	if err != nil {
		t.Fatalf("verify from start: %v", err)
	}
	if stats.Seals < 3 {
		t.Fatalf("verified %d seals, want >= 3 (%+v)", stats.Seals, stats)
	}
	// The last event is the closing seal, covering every event before it.
	all := ReadAll(t, s)
	var seals []eventstore.RecordedEvent
	for _, ev := range all {
		if ev.Type == eventstore.SealType {
			seals = append(seals, ev)
		}
	}
	if last := all[len(all)-1]; last.Type != eventstore.SealType {
		t.Fatalf("last event %s, want the closing seal", last.Type)
	}
	// Start from a seal in the middle.
	v, from, err := eventstore.StartAt(seals[len(seals)/2], pub)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := eventstore.VerifyStore(ctx, s, v, from); err != nil || st.Seals == 0 {
		t.Fatalf("verify from seal at %d: %+v, %v", from, st, err)
	}
	// A seal checked with another key is refused.
	otherPub, _, _ := ed25519.GenerateKey(nil)
	if _, err := eventstore.VerifyStore(ctx, s, eventstore.NewVerifier(otherPub), 1); !errors.Is(err, eventstore.ErrIntegrity) {
		t.Fatalf("verify with the wrong key: want ErrIntegrity, got %v", err)
	}
	// A broken link is reported even when every hash is right, once: the
	// verifier goes on from the event as stored.
	v2 := eventstore.NewVerifier(pub)
	skipped := all[3]
	var violations []error
	for _, ev := range all {
		if ev.Sequence == skipped.Sequence {
			continue
		}
		if err := v2.Check(ev); err != nil {
			violations = append(violations, err)
		}
	}
	var ie *eventstore.IntegrityError
	if len(violations) != 1 || !errors.As(violations[0], &ie) || ie.Sequence != skipped.Sequence+1 || ie.What != "prev_hash" {
		t.Fatalf("missing event: want one prev_hash violation at %d, got %v", skipped.Sequence+1, violations)
	}
}

func testTamperDetected(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 30*time.Second)
	s := b.Open(t, cfg)
	seqs, err := s.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{
		Ev("test.Credited", "acct", "a1", 10), Ev("test.Credited", "acct", "a1", 20)}})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.LoadAggregate(ctx, "c1", eventstore.Aggregate{Kind: "acct", ID: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	forged := b.Forge(t, s, evs[1], []byte(`{"n":2000000}`))
	if forged <= seqs[1] {
		t.Fatalf("forgery stored at %d", forged)
	}
	_, err = s.ReadFrom(ctx, 1, func(eventstore.RecordedEvent) error { return nil })
	var ie *eventstore.IntegrityError
	if !errors.As(err, &ie) || !errors.Is(err, eventstore.ErrIntegrity) {
		t.Fatalf("read over a forged event: want *IntegrityError, got %v", err)
	}
	if ie.Sequence != forged || ie.What != "hash" || ie.Expected != evs[1].Hash.String() || ie.Found == ie.Expected {
		t.Fatalf("integrity error %+v: want hash mismatch at %d expecting %s", ie, forged, evs[1].Hash)
	}
	// FollowStored hands every event on as stored, the forgery too, and
	// CheckHash finds the forgery, and only it, as a checked read does.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var bad []error
	if err := s.FollowStored(fctx, 1, func(ev eventstore.RecordedEvent) error {
		if err := eventstore.CheckHash(&ev); err != nil {
			bad = append(bad, err)
		}
		if ev.Sequence == forged {
			cancel()
		}
		return nil
	}); !errors.Is(err, context.Canceled) {
		t.Fatalf("follow as stored: %v", err)
	}
	var fe *eventstore.IntegrityError
	if len(bad) != 1 || !errors.As(bad[0], &fe) || !errors.Is(bad[0], eventstore.ErrIntegrity) ||
		fe.Sequence != forged || fe.Expected != ie.Expected || fe.Found != ie.Found {
		t.Fatalf("CheckHash over a stored follow: %v, want only %v", bad, ie)
	}
	if _, err := s.LoadAggregate(ctx, "c1", eventstore.Aggregate{Kind: "acct", ID: "a1"}); !errors.Is(err, eventstore.ErrIntegrity) {
		t.Fatalf("load over a forged event: want ErrIntegrity, got %v", err)
	}
	// The chain head is the forgery: appending refuses to link to it.
	if _, err := s.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.A", "acct", "a1", 1)}}); !errors.Is(err, eventstore.ErrIntegrity) {
		t.Fatalf("append after a forgery: want ErrIntegrity, got %v", err)
	}
}

func testRegistry(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 30*time.Second)
	v1 := eventstore.NewRegistry()
	if err := v1.Register("test.Staked", 1); err != nil {
		t.Fatal(err)
	}
	cfgV1 := cfg
	cfgV1.Registry = v1
	w := b.Open(t, cfgV1)
	if _, err := w.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.Unknown", "acct", "a", 1)}}); !errors.Is(err, eventstore.ErrUnknownType) {
		t.Fatalf("writing an unregistered type: want ErrUnknownType, got %v", err)
	}
	if _, err := w.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.Staked", "acct", "a", 5)}}); err != nil {
		t.Fatal(err)
	}
	// v2 renames n to cents: the upcaster is the one place that knows.
	v2 := eventstore.NewRegistry()
	if err := v2.Register("test.Staked", 2, func(p json.RawMessage) (json.RawMessage, error) {
		var old struct{ N int }
		if err := json.Unmarshal(p, &old); err != nil {
			return nil, err
		}
		return json.Marshal(map[string]int{"cents": old.N})
	}); err != nil {
		t.Fatal(err)
	}
	cfgV2 := cfg
	cfgV2.Registry = v2
	r := b.Open(t, cfgV2)
	evs, err := r.LoadAggregate(ctx, "c1", eventstore.Aggregate{Kind: "acct", ID: "a"})
	if err != nil || len(evs) != 1 || evs[0].SchemaVersion != 2 || string(evs[0].Payload) != `{"cents":5}` {
		t.Fatalf("upcast read: %+v, %v", evs, err)
	}
	staked2 := Ev("test.Staked", "acct", "a", 6)
	staked2.SchemaVersion = 2
	if _, err := r.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{staked2}}); err != nil {
		t.Fatal(err)
	}
	// The old binary cannot read the new version, and says which type.
	_, err = w.LoadAggregate(ctx, "c1", eventstore.Aggregate{Kind: "acct", ID: "a"})
	var se *eventstore.SchemaError
	if !errors.Is(err, eventstore.ErrSchemaTooNew) || !errors.As(err, &se) || se.Type != "test.Staked" || se.Version != 2 {
		t.Fatalf("reading a newer schema: want ErrSchemaTooNew naming test.Staked, got %v", err)
	}
	// A binary that does not know the type at all says so.
	cfgNone := cfg
	cfgNone.Registry = eventstore.NewRegistry()
	n := b.Open(t, cfgNone)
	if _, err := n.ReadFrom(ctx, 1, func(eventstore.RecordedEvent) error { return nil }); !errors.Is(err, eventstore.ErrUnknownType) || !errors.As(err, &se) || se.Type != "test.Staked" {
		t.Fatalf("reading an unknown type: want ErrUnknownType naming test.Staked, got %v", err)
	}
}

func testFollow(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 30*time.Second)
	s := b.Open(t, cfg)
	if _, err := s.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.A", "acct", "a", 0)}}); err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := make(chan uint64, 64)
	done := make(chan error, 1)
	go func() {
		done <- s.Follow(fctx, 1, func(ev eventstore.RecordedEvent) error {
			seen <- ev.Sequence
			return nil
		})
	}()
	for i := 1; i <= 5; i++ {
		if i > 1 {
			if _, err := s.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.A", "acct", "a", i)}}); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case seq := <-seen:
			if seq != uint64(i) {
				t.Fatalf("followed sequence %d, want %d", seq, i)
			}
		case <-ctx.Done():
			t.Fatalf("event %d never followed", i)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("follow ended with %v, want context.Canceled", err)
	}
}

// WriteAppends appends to chain of store through Append (one request of
// three events) and through a committer sealing with key every 10 events
// (40 requests of 1 to 5 events, submitted together so that they share
// batches, single-event appends between longer ones), and returns, per
// stream sequence written, how many events of its request follow it. The
// committer's seals are not in it: each is an append of its own.
func WriteAppends(tb testing.TB, store eventstore.Store, chain string, key ed25519.PrivateKey) map[uint64]int {
	tb.Helper()
	ctx := Ctx(tb, 60*time.Second)
	want := map[uint64]int{}
	note := func(seqs []uint64) {
		for i, seq := range seqs {
			want[seq] = len(seqs) - 1 - i
		}
	}
	request := func(n, k int) eventstore.AppendRequest {
		req := eventstore.AppendRequest{}
		for j := range n {
			req.Events = append(req.Events, Ev("test.A", "acct", fmt.Sprint(k%3), k*10+j))
		}
		return req
	}
	seqs, err := store.Append(ctx, chain, request(3, 0))
	if err != nil {
		tb.Fatal(err)
	}
	note(seqs)
	c, err := store.NewCommitter(ctx, chain, eventstore.CommitterConfig{SealKey: key, SealEvery: 10})
	if err != nil {
		tb.Fatal(err)
	}
	var chans []<-chan eventstore.AppendResult
	for k := 1; k <= 40; k++ {
		chans = append(chans, c.Submit(ctx, request(1+k%5, k)))
	}
	for _, ch := range chans {
		r := <-ch
		if r.Err != nil {
			tb.Fatal(r.Err)
		}
		note(r.Sequences)
	}
	if err := c.Close(); err != nil {
		tb.Fatal(err)
	}
	return want
}

// testAppendsReadWhole checks that every reader learns where each atomic
// append ends: each event says how many events of its request follow it,
// whether the request went through Append or was merged with others into
// one committer batch, and a seal is an append of its own.
func testAppendsReadWhole(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 60*time.Second)
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := b.Open(t, cfg)
	want := WriteAppends(t, s, "c1", key)
	check := func(how string, ev eventstore.RecordedEvent) {
		t.Helper()
		if ev.AppendRemaining != want[ev.Sequence] {
			t.Fatalf("%s: sequence %d (%s) says %d events of its append follow, want %d",
				how, ev.Sequence, ev.Type, ev.AppendRemaining, want[ev.Sequence])
		}
	}
	all := ReadAll(t, s)
	seals := 0
	for _, ev := range all {
		check("ReadFrom", ev)
		if ev.Type == eventstore.SealType {
			seals++
		}
	}
	if seals == 0 || len(all) != len(want)+seals {
		t.Fatalf("read %d events with %d seals, want the %d appended and at least one seal", len(all), seals, len(want))
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	last := all[len(all)-1].Sequence
	if err := s.Follow(fctx, 1, func(ev eventstore.RecordedEvent) error {
		check("Follow", ev)
		if ev.Sequence == last {
			cancel()
		}
		return nil
	}); !errors.Is(err, context.Canceled) {
		t.Fatalf("follow: %v", err)
	}
}

// testRestart checks that every acknowledged event survives a restart of
// the servers.
func testRestart(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 60*time.Second)
	s := b.Open(t, cfg)
	c, err := s.NewCommitter(ctx, "c1", b.committer(eventstore.CommitterConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	acked := map[uint64]string{}
	var chans []<-chan eventstore.AppendResult
	var reqs []eventstore.AppendRequest
	for i := range 500 {
		ev := Ev("test.A", "acct", fmt.Sprint(i%13), i)
		ev.ID = fmt.Sprintf("restart-%d", i)
		req := eventstore.AppendRequest{Events: []eventstore.Event{ev}}
		reqs = append(reqs, req)
		chans = append(chans, c.Submit(ctx, req))
	}
	for i, ch := range chans {
		r := <-ch
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		acked[r.Sequences[0]] = reqs[i].Events[0].ID
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	b.Restart(t)
	s2 := b.Open(t, cfg)
	var all []eventstore.RecordedEvent
	Eventually(t, 30*time.Second, func() error {
		all = all[:0]
		_, err := s2.ReadFrom(ctx, 1, func(ev eventstore.RecordedEvent) error {
			all = append(all, ev)
			return nil
		})
		return err
	})
	found := map[uint64]string{}
	for _, ev := range all {
		found[ev.Sequence] = ev.ID
	}
	for seq, id := range acked {
		if found[seq] != id {
			t.Fatalf("acknowledged event %s at %d lost after restart (found %q)", id, seq, found[seq])
		}
	}
	// The chain goes on where it stopped.
	if _, err := s2.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.A", "acct", "z", 1)},
		ExpectChain: eventstore.ExpectLast(all[len(all)-1].Sequence)}); err != nil {
		t.Fatalf("append after restart: %v", err)
	}
}

// testSecondWriterFenced starts two committers on one chain, as a split
// brain would: the second to write is fenced out loudly and the chain does
// not fork.
func testSecondWriterFenced(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 30*time.Second)
	s := b.Open(t, cfg)
	c1, err := s.NewCommitter(ctx, "c1", b.committer(eventstore.CommitterConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := s.NewCommitter(ctx, "c1", b.committer(eventstore.CommitterConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	if r := <-c1.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.A", "acct", "a", 1)}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	r := <-c2.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.A", "acct", "b", 2)}})
	if !errors.Is(r.Err, eventstore.ErrFenced) || !errors.Is(r.Err, eventstore.ErrConflict) {
		t.Fatalf("second writer: want ErrFenced, got %v", r.Err)
	}
	if !errors.Is(c2.Err(), eventstore.ErrFenced) {
		t.Fatalf("second committer still running: Err() = %v", c2.Err())
	}
	if r := <-c2.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.A", "acct", "b", 3)}}); r.Err == nil {
		t.Fatal("a fenced committer accepted a request")
	}
	if err := c2.Close(); !errors.Is(err, eventstore.ErrFenced) {
		t.Fatalf("close of fenced committer: %v", err)
	}
	// The first writer goes on; the chain is linear.
	if r := <-c1.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.A", "acct", "a", 4)}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if all := ReadAll(t, s); len(all) != 2 {
		t.Fatalf("stream holds %d events, want 2", len(all))
	}
	if _, err := eventstore.VerifyStore(ctx, s, eventstore.NewVerifier(nil), 1); err != nil {
		t.Fatalf("verify: %v", err)
	}
}

// testSealsCountFromTheLastSeal starts committers on a chain whose tail no
// seal covers, as a writer killed before its closing seal leaves it: the
// next committer counts SealEvery from the chain's last seal, not from the
// head it starts on, and seals the tail when it closes even if it wrote
// nothing.
func testSealsCountFromTheLastSeal(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 30*time.Second)
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := b.Open(t, cfg)
	appendN := func(c eventstore.Committer, n int) {
		t.Helper()
		for i := range n {
			if r := <-c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.A", "acct", "a", i)}}); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	seals := func() (n int, last eventstore.Seal) {
		t.Helper()
		for _, ev := range ReadAll(t, s) {
			if ev.Type == eventstore.SealType {
				if last, err = eventstore.ParseSeal(&ev, pub); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
		return n, last
	}
	sealing := b.committer(eventstore.CommitterConfig{SealKey: key, SealEvery: 10, SealInterval: time.Hour})

	// Six events nobody sealed (a committer without a key stands in for
	// the killed writer: it closes without a seal).
	unsealed, err := s.NewCommitter(ctx, "c1", b.committer(eventstore.CommitterConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	appendN(unsealed, 6)
	if err := unsealed.Close(); err != nil {
		t.Fatal(err)
	}

	// A sealing committer closed without writing seals those six.
	c, err := s.NewCommitter(ctx, "c1", sealing)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n, last := seals(); n != 1 || last.ChainSeq != 6 {
		t.Fatalf("after a close with nothing written: %d seals, the last of position %d; want 1 of position 6", n, last.ChainSeq)
	}

	// Six more unsealed (positions 8 to 13, after the seal at 7), then a
	// sealing committer: its SealEvery (10) counts from the head the seal
	// sealed (6), so the third event it writes (position 16) is followed
	// by a seal before it closes; counted from its own start (13), none
	// would come before position 23.
	if unsealed, err = s.NewCommitter(ctx, "c1", b.committer(eventstore.CommitterConfig{})); err != nil {
		t.Fatal(err)
	}
	appendN(unsealed, 6)
	if err := unsealed.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err = s.NewCommitter(ctx, "c1", sealing); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	appendN(c, 5)
	Eventually(t, 10*time.Second, func() error {
		if n, last := seals(); n != 2 || last.ChainSeq < 16 {
			return fmt.Errorf("%d seals, the last of position %d; want a second one past position 16 before the close", n, last.ChainSeq)
		}
		return nil
	})
}

// testSealOnInterval checks that a quiet chain is sealed after
// SealInterval, not only every SealEvery events, and that a seal is never
// sealed again.
func testSealOnInterval(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 30*time.Second)
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := b.Open(t, cfg)
	c, err := s.NewCommitter(ctx, "c1", b.committer(eventstore.CommitterConfig{SealKey: key, SealEvery: 1_000_000, SealInterval: 50 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		if r := <-c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.A", "acct", "a", i)}}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// The interval may also fire between the submits (a slow machine):
	// what must hold is that the last event ends up a seal of the last
	// domain event, and that nothing follows it.
	var all []eventstore.RecordedEvent
	Eventually(t, 10*time.Second, func() error {
		all = ReadAll(t, s)
		last := all[len(all)-1]
		if last.Type != eventstore.SealType {
			return fmt.Errorf("last event is %s, no seal yet", last.Type)
		}
		seal, err := eventstore.ParseSeal(&last, pub)
		if err != nil {
			return err
		}
		if seal.ChainSeq != last.ChainSeq-1 {
			return fmt.Errorf("seal of position %d, last domain event at %d", seal.ChainSeq, last.ChainSeq-1)
		}
		return nil
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if after := ReadAll(t, s); len(after) != len(all) {
		t.Fatalf("%d events after close, %d before: a seal of a seal", len(after), len(all))
	}
	if st, err := eventstore.VerifyStore(ctx, s, eventstore.NewVerifier(pub), 1); err != nil || st.Seals == 0 {
		t.Fatalf("verify: %+v, %v", st, err)
	}
}
