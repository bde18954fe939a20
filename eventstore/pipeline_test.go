package eventstore_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/nats-io/nats.go/jetstream"
)

// Pipelined committers in these tests take batches of at most 3 events and
// requests of 2, so that every request is a batch of its own.
const (
	pipeBatchEventsMax = 3
	pipeRequestEvents  = 2
)

// pipelined starts a committer on chain c1 with pipelinedDepth batches in
// flight, closed at cleanup.
func pipelined(tb testing.TB, s eventstore.Store) eventstore.Committer {
	tb.Helper()
	c, err := s.NewCommitter(eventstoretest.Ctx(tb, 10*time.Second), "c1",
		eventstore.CommitterConfig{PipelineDepth: pipelinedDepth, BatchEventsMax: pipeBatchEventsMax})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// pipeRequest is request k: pipeRequestEvents events carrying k.
func pipeRequest(k int) eventstore.AppendRequest {
	req := eventstore.AppendRequest{}
	for range pipeRequestEvents {
		req.Events = append(req.Events, eventstoretest.Ev("test.A", "acct", fmt.Sprint(k%3), k))
	}
	return req
}

// requestOf reads back which request an event belongs to.
func requestOf(tb testing.TB, ev eventstore.RecordedEvent) int {
	tb.Helper()
	var p struct{ N int }
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		tb.Fatal(err)
	}
	return p.N
}

// submitAll submits requests from..to-1 back to back, so that several
// batches are in flight at once, and returns their answers in order.
func submitAll(tb testing.TB, c eventstore.Committer, from, to int, req func(int) eventstore.AppendRequest) []eventstore.AppendResult {
	tb.Helper()
	ctx := eventstoretest.Ctx(tb, 60*time.Second)
	var chans []<-chan eventstore.AppendResult
	for k := from; k < to; k++ {
		chans = append(chans, c.Submit(ctx, req(k)))
	}
	out := make([]eventstore.AppendResult, len(chans))
	for i, ch := range chans {
		select {
		case out[i] = <-ch:
		case <-ctx.Done():
			tb.Fatalf("request %d not answered", from+i)
		}
	}
	return out
}

// requireLinearPrefix checks that the stream holds whole requests 0..n-1 in
// submission order, every acknowledged one where its answer said, and that
// the hash chain verifies. It returns n.
func requireLinearPrefix(tb testing.TB, s eventstore.Store, results []eventstore.AppendResult) int {
	tb.Helper()
	all := eventstoretest.ReadAll(tb, s)
	if len(all)%pipeRequestEvents != 0 {
		tb.Fatalf("stream holds %d events: a request was split", len(all))
	}
	n := len(all) / pipeRequestEvents
	for i, ev := range all {
		if k := requestOf(tb, ev); k != i/pipeRequestEvents {
			tb.Fatalf("event %d belongs to request %d, want %d: out of submission order", i, k, i/pipeRequestEvents)
		}
	}
	for k, r := range results {
		if r.Err == nil && (k >= n || r.Sequences[0] != all[k*pipeRequestEvents].Sequence) {
			tb.Fatalf("request %d acknowledged at %v but not on the stream there (stream holds %d requests)", k, r.Sequences, n)
		}
		if r.Err != nil && k < n && !errors.Is(r.Err, eventstore.ErrOutcomeUnknown) {
			tb.Fatalf("request %d is on the stream but was answered %v", k, r.Err)
		}
	}
	if _, err := eventstore.VerifyStore(eventstoretest.Ctx(tb, 30*time.Second), s, eventstore.NewVerifier(nil), 1); err != nil {
		tb.Fatalf("verify: %v", err)
	}
	return n
}

// requireRestartAt checks that a new committer on the chain resumes at
// request n-1's last event and appends after it.
func requireRestartAt(tb testing.TB, s eventstore.Store, n int) {
	tb.Helper()
	all := eventstoretest.ReadAll(tb, s)
	c := pipelined(tb, s)
	if h := c.Head(); h.Sequence != all[len(all)-1].Sequence || h.ChainSeq != uint64(n*pipeRequestEvents) {
		tb.Fatalf("restart at %+v, want the end of request %d (sequence %d)", h, n-1, all[len(all)-1].Sequence)
	}
	if r := <-c.Submit(eventstoretest.Ctx(tb, 10*time.Second), pipeRequest(n)); r.Err != nil {
		tb.Fatalf("append after restart: %v", r.Err)
	}
	if _, err := eventstore.VerifyStore(eventstoretest.Ctx(tb, 30*time.Second), s, eventstore.NewVerifier(nil), 1); err != nil {
		tb.Fatalf("verify after restart: %v", err)
	}
}

// TestPipelineRefusedBatchStopsTheRest has the server refuse the second of
// three batches in flight (its message is over the stream's size limit):
// the third, fenced on where the second would have ended, does not commit,
// the committer stops, and a new one resumes after the first.
func TestPipelineRefusedBatchStopsTheRest(t *testing.T) {
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	s := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	c := pipelined(t, s)
	first := <-c.Submit(ctx, pipeRequest(0))
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	js, err := jetstream.New(s.Conn())
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.Stream().CachedInfo().Config
	cfg.MaxMsgSize = 4096
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	results := submitAll(t, c, 1, 4, func(k int) eventstore.AppendRequest {
		req := pipeRequest(k)
		if k == 2 {
			req.Events[1].Payload = json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":"%s"}`, k, strings.Repeat("x", 8192)))
		}
		return req
	})
	if results[0].Err != nil {
		t.Fatalf("first batch: %v", results[0].Err)
	}
	refused := results[1].Err
	if refused == nil || errors.Is(refused, eventstore.ErrOutcomeUnknown) || errors.Is(refused, eventstore.ErrConflict) {
		t.Fatalf("second batch: want the server's refusal, got %v", refused)
	}
	if results[2].Err == nil || results[2].Err.Error() != refused.Error() {
		t.Fatalf("third batch: want the second's error %v, got %v", refused, results[2].Err)
	}
	if c.Err() == nil || c.Err().Error() != refused.Error() {
		t.Fatalf("committer still running or stopped by another error: %v", c.Err())
	}
	if r := <-c.Submit(ctx, pipeRequest(4)); r.Err == nil {
		t.Fatal("a stopped committer accepted a request")
	}
	if n := requireLinearPrefix(t, s, append([]eventstore.AppendResult{first}, results...)); n != 2 {
		t.Fatalf("stream holds %d requests, want 2 (up to the first batch)", n)
	}
	requireRestartAt(t, s, 2)
}

// TestPipelineServerRestartWithBatchesInFlight stops the server while
// batches are in flight: what was acknowledged is on the stream after a
// restart, the stream holds a prefix of the submissions in order, anything
// committed but not acknowledged was answered ErrOutcomeUnknown, and a new
// committer resumes at the prefix's end.
func TestPipelineServerRestartWithBatchesInFlight(t *testing.T) {
	dir := t.TempDir()
	srv := eventstoretest.RunEmbedded(t, dir)
	s := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{RequestTimeout: 2 * time.Second})
	c := pipelined(t, s)
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	const requests = 3000
	chans := make([]<-chan eventstore.AppendResult, requests)
	for k := range requests {
		chans[k] = c.Submit(ctx, pipeRequest(k))
	}
	results := make([]eventstore.AppendResult, requests)
	for k := range requests {
		results[k] = <-chans[k]
		if k == 50 {
			srv.Shutdown()
		}
	}
	if c.Err() == nil {
		t.Fatal("committer still running without a server")
	}
	if results[requests-1].Err == nil {
		t.Fatal("every request acknowledged: the server stopped too late to test anything")
	}
	srv = eventstoretest.RunEmbedded(t, dir)
	s = eventstoretest.OpenEmbedded(t, srv, eventstore.Config{})
	n := requireLinearPrefix(t, s, results)
	t.Logf("%d of %d requests on the stream; the committer stopped with %v", n, requests, c.Err())
	requireRestartAt(t, s, n)
}

// TestPipelineFencedOutWithBatchesInFlight has another writer append while
// a pipelined committer holds an older head: its first batch is refused by
// the fence, every batch in flight behind it too, and the chain stays
// linear.
func TestPipelineFencedOutWithBatchesInFlight(t *testing.T) {
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	s := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	c := pipelined(t, s)
	if r := <-c.Submit(ctx, pipeRequest(0)); r.Err != nil {
		t.Fatal(r.Err)
	}
	// The other writer appends one event: the committer's predictions are
	// then one short, so no batch of it can pass a fence.
	other := eventstoretest.Ev("test.B", "acct", "other", -1)
	if _, err := s.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{other}}); err != nil {
		t.Fatal(err)
	}
	results := submitAll(t, c, 1, 20, pipeRequest)
	for k, r := range results {
		if !errors.Is(r.Err, eventstore.ErrFenced) {
			t.Fatalf("request %d: want ErrFenced, got %v", k+1, r.Err)
		}
	}
	if !errors.Is(c.Err(), eventstore.ErrFenced) {
		t.Fatalf("committer: want ErrFenced, got %v", c.Err())
	}
	all := eventstoretest.ReadAll(t, s)
	if len(all) != pipeRequestEvents+1 || all[len(all)-1].Type != "test.B" {
		t.Fatalf("stream holds %d events, want request 0 and the other writer's event", len(all))
	}
	if _, err := eventstore.VerifyStore(ctx, s, eventstore.NewVerifier(nil), 1); err != nil {
		t.Fatalf("verify: %v", err)
	}
}

// TestPipelineForkReported has another writer append exactly as many
// events as the committer's next batch: the batches in flight behind it
// were fenced on the sequence that batch would have ended on, which the
// other writer's append now ends on, so they can pass their fence (the
// limit PipelineDepth documents). Any that does is answered ErrIntegrity,
// never success, and the verifier flags the broken link.
func TestPipelineForkReported(t *testing.T) {
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	s := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	c := pipelined(t, s)
	if r := <-c.Submit(ctx, pipeRequest(0)); r.Err != nil {
		t.Fatal(r.Err)
	}
	var others []eventstore.Event
	for range pipeRequestEvents {
		others = append(others, eventstoretest.Ev("test.B", "acct", "other", -1))
	}
	if _, err := s.Append(ctx, "c1", eventstore.AppendRequest{Events: others}); err != nil {
		t.Fatal(err)
	}
	results := submitAll(t, c, 1, 20, pipeRequest)
	if !errors.Is(results[0].Err, eventstore.ErrFenced) {
		t.Fatalf("first batch after the other writer: want ErrFenced, got %v", results[0].Err)
	}
	onStream := map[int]bool{}
	for _, ev := range eventstoretest.ReadAll(t, s)[pipeRequestEvents+len(others):] {
		onStream[requestOf(t, ev)] = true
	}
	for i, r := range results {
		k := i + 1
		switch {
		case onStream[k] && !errors.Is(r.Err, eventstore.ErrIntegrity):
			t.Fatalf("request %d forked the chain but was answered %v", k, r.Err)
		case !onStream[k] && !errors.Is(r.Err, eventstore.ErrFenced):
			t.Fatalf("request %d: want ErrFenced, got %v", k, r.Err)
		}
	}
	_, err := eventstore.VerifyStore(ctx, s, eventstore.NewVerifier(nil), 1)
	if len(onStream) > 0 && !errors.Is(err, eventstore.ErrIntegrity) {
		t.Fatalf("%d requests forked the chain; verify: %v", len(onStream), err)
	}
	if len(onStream) == 0 && err != nil {
		t.Fatalf("verify: %v", err)
	}
	t.Logf("%d requests committed on the fork, each answered ErrIntegrity", len(onStream))
}

// TestAppendTimingSplitsARequestsTime holds the first batch with the
// sender for a while (MaySend, on its first call), so that a second request waits for it in
// the batch being built: its answer tells that wait (Held), the first's
// tells its long commit (Committed), and neither adds up to more than its
// caller saw.
func TestAppendTimingSplitsARequestsTime(t *testing.T) {
	const hold = 100 * time.Millisecond
	ctx := eventstoretest.Ctx(t, 30*time.Second)
	s := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	var sends atomic.Int32
	holdFirst := func() error {
		if sends.Add(1) == 1 {
			time.Sleep(hold)
		}
		return nil
	}
	cm, err := s.NewCommitter(ctx, "c1", eventstore.CommitterConfig{BatchEventsMax: 100, MaySend: holdFirst})
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	start := time.Now()
	first := cm.Submit(ctx, pipeRequest(0))
	time.Sleep(20 * time.Millisecond) // the first batch is with the sender
	secondAt := time.Now()
	r2 := <-cm.Submit(ctx, pipeRequest(1))
	secondTook := time.Since(secondAt)
	r1 := <-first
	firstTook := time.Since(start)
	if r1.Err != nil || r2.Err != nil {
		t.Fatal(r1.Err, r2.Err)
	}
	for i, c := range []struct {
		tm   eventstore.AppendTiming
		took time.Duration
	}{{r1.Timing, firstTook}, {r2.Timing, secondTook}} {
		if sum := c.tm.Queued + c.tm.Held + c.tm.Committed; c.tm.Queued < 0 || c.tm.Held < 0 || c.tm.Committed <= 0 || sum > c.took {
			t.Fatalf("request %d: timing %+v (sum %s) against %s seen by its caller", i, c.tm, sum, c.took)
		}
	}
	if r1.Timing.Committed < hold {
		t.Fatalf("first request: committed in %s, but its batch was held %s with the sender", r1.Timing.Committed, hold)
	}
	if r2.Timing.Held < hold/2 {
		t.Fatalf("second request: %s in its batch, but the first was in flight ~%s more", r2.Timing.Held, hold-20*time.Millisecond)
	}
}

// TestPipelineReusedBatchesKeepTheirEvents submits hundreds of requests
// back to back at depth pipelinedDepth, so that the committer reuses its
// acknowledged batches (their arrays, messages and header maps) many times
// over while others are in flight. A batch reused before its
// acknowledgement would have its events or messages overwritten while
// being published or checked, and a header map not cleared on reuse would
// carry a header of an earlier event (here the optional correlation and
// causation ids, present on some events and not others): either shows as
// an event out of place, an event with another's ids, or a hash that no
// longer verifies.
func TestPipelineReusedBatchesKeepTheirEvents(t *testing.T) {
	s := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	c := pipelined(t, s)
	ids := func(k, i int) (corr, cause string) {
		if (k+i)%2 == 0 {
			corr = fmt.Sprintf("corr-%d-%d", k, i)
		}
		if (k+i)%3 == 0 {
			cause = fmt.Sprintf("cause-%d-%d", k, i)
		}
		return corr, cause
	}
	const n = 600
	results := submitAll(t, c, 0, n, func(k int) eventstore.AppendRequest {
		req := pipeRequest(k)
		for i := range req.Events {
			req.Events[i].CorrelationID, req.Events[i].CausationID = ids(k, i)
		}
		return req
	})
	for k, r := range results {
		if r.Err != nil {
			t.Fatalf("request %d: %v", k, r.Err)
		}
	}
	if got := requireLinearPrefix(t, s, results); got != n {
		t.Fatalf("stream holds %d requests, want %d", got, n)
	}
	for j, ev := range eventstoretest.ReadAll(t, s) {
		k, i := j/pipeRequestEvents, j%pipeRequestEvents
		if corr, cause := ids(k, i); ev.CorrelationID != corr || ev.CausationID != cause {
			t.Fatalf("event %d of request %d has ids %q, %q, want %q, %q", i, k, ev.CorrelationID, ev.CausationID, corr, cause)
		}
	}
	if st := c.Stats(); st.Batches < n {
		t.Fatalf("%d batches for %d requests of one batch each", st.Batches, n)
	}
}
