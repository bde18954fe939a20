package eventstore_test

import (
	"crypto/ed25519"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// TestCommitterBatchesAboveServerDefault commits batches of more than the
// server's default 1 000 messages on the embedded server (which allows
// CommitBatchEventsMax), with seals made while such a batch is in flight,
// and checks that the stream verifies, seals included: a seal then points
// back over a whole big batch, within what a verifier accepts. A request
// itself still holds at most BatchEventsMax-1 events.
func TestCommitterBatchesAboveServerDefault(t *testing.T) {
	s := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	// The first batch is held at the sender for a while, so that what is
	// submitted meanwhile fills the next ones whatever the machine's pace
	// (unheld, a slow submitter met fast commits in batches of 889 on
	// average in one CI run).
	var sends atomic.Int32
	holdFirst := func() error {
		if sends.Add(1) == 1 {
			time.Sleep(300 * time.Millisecond)
		}
		return nil
	}
	c := sealedUnderLoad(t, s, eventstore.CommitterConfig{BatchEventsMax: eventstore.CommitBatchEventsMax, MaySend: holdFirst})
	st := c.Stats()
	// More than BatchEventsMax on average, in whole numbers: an integer
	// mean rounds 8 002 events in 8 batches down to exactly 1 000.
	if st.Batches == 0 || st.Events <= st.Batches*eventstore.BatchEventsMax {
		t.Fatalf("%d events in %d batches: want batches of more than %d on average", st.Events, st.Batches, eventstore.BatchEventsMax)
	}
	big := make([]eventstore.Event, eventstore.BatchEventsMax)
	for i := range big {
		big[i] = eventstoretest.Ev("test.A", "acct", "big", i)
	}
	if r := <-c.Submit(ctx, eventstore.AppendRequest{Events: big}); !errors.Is(r.Err, eventstore.ErrInvalid) {
		t.Fatalf("request of %d events: got %v, want ErrInvalid", len(big), r.Err)
	}
}

// TestSealsStayVerifiableWithManyEventsInFlight: at depth 8 with full
// batches, or with batches of 2 000 at depth 4, the stream verifies, seals
// included (the committer holds back a batch that would leave 4 000 events
// or more unacknowledged: TestSpanFullKeepsSealsWithinWhatAVerifierAccepts;
// whether a run here fills the pipeline depends on the machine's speed).
func TestSealsStayVerifiableWithManyEventsInFlight(t *testing.T) {
	for _, cfg := range []eventstore.CommitterConfig{
		{BatchEventsMax: eventstore.BatchEventsMax, PipelineDepth: 8},
		{BatchEventsMax: 2 * eventstore.BatchEventsMax, PipelineDepth: 4},
	} {
		s := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
		sealedUnderLoad(t, s, cfg)
	}
}

// sealedUnderLoad submits 8 000 events back to back (the batches after
// the first are full) to a committer with cfg, sealing every 1 000 events,
// closes it and verifies the stream with the seals' key; it returns the
// closed committer.
func sealedUnderLoad(t *testing.T, s eventstore.Store, cfg eventstore.CommitterConfig) eventstore.Committer {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	cfg.SealKey, cfg.SealEvery = key, 1000
	c, err := s.NewCommitter(ctx, "c1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const requests = 4000
	for i, r := range submitAll(t, c, 0, requests, pipeRequest) {
		if r.Err != nil {
			t.Fatalf("request %d: %v", i, r.Err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	vs, err := eventstore.VerifyStore(ctx, s, eventstore.NewVerifier(pub), 1)
	if err != nil {
		t.Fatalf("batches of %d at depth %d: %v", cfg.BatchEventsMax, cfg.PipelineDepth, err)
	}
	if all := c.Stats().Events; vs.Events != all || vs.Seals < 2 {
		t.Fatalf("verified %d events, %d seals: want the %d committed, a seal at least every 1 000", vs.Events, vs.Seals, all)
	}
	return c
}

// TestCommitterBatchEventsMaxBounds checks the limits of a committer's
// batch: at most CommitBatchEventsMax, at any depth.
func TestCommitterBatchEventsMaxBounds(t *testing.T) {
	s := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	ctx := eventstoretest.Ctx(t, 30*time.Second)
	for _, tc := range []struct {
		cfg eventstore.CommitterConfig
		ok  bool
	}{
		{eventstore.CommitterConfig{BatchEventsMax: eventstore.CommitBatchEventsMax}, true},
		{eventstore.CommitterConfig{BatchEventsMax: eventstore.CommitBatchEventsMax + 1}, false},
		{eventstore.CommitterConfig{BatchEventsMax: 2 * eventstore.BatchEventsMax, PipelineDepth: 2}, true},
		{eventstore.CommitterConfig{BatchEventsMax: eventstore.BatchEventsMax, PipelineDepth: 4}, true},
	} {
		c, err := s.NewCommitter(ctx, "c1", tc.cfg)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, eventstore.ErrInvalid)) {
			t.Fatalf("batch of %d at depth %d: got %v, want accepted %t", tc.cfg.BatchEventsMax, tc.cfg.PipelineDepth, err, tc.ok)
		}
		if c != nil {
			c.Close()
		}
	}
}
