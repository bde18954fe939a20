package eventstore_test

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// storedEvents reads the whole stream as stored.
func storedEvents(tb testing.TB, store *eventstore.NATSStore) []eventstore.RecordedEvent {
	tb.Helper()
	ctx := eventstoretest.Ctx(tb, 30*time.Second)
	last, err := store.LastSequence(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	var out []eventstore.RecordedEvent
	if err := store.ReadStored(ctx, 1, last, func(r eventstore.RecordedEvent) error {
		out = append(out, r)
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	return out
}

// A restore re-appends a stream of two chains, with a seal, at the same
// sequences and with the same envelopes; the stream is refused to every
// other store until the restore finishes, and a fence on the stream's
// last sequence refuses a batch that does not follow it.
func TestReappendRestoresAStreamAsRecorded(t *testing.T) {
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	src := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	appendPairs(t, src, 3)
	if _, err := src.Append(ctx, "s1", eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("test.Other", "acct", "b", 0)}}); err != nil {
		t.Fatal(err)
	}
	c, err := src.NewCommitter(ctx, "s0", eventstore.CommitterConfig{SealKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if r := <-c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("test.Staked", "acct", "a", 9)}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := c.Close(); err != nil { // the closing seal
		t.Fatal(err)
	}
	want := storedEvents(t, src)

	srv := eventstoretest.RunEmbedded(t, t.TempDir())
	dst := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{Restore: true})
	if err := dst.BeginRestore(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Open(ctx, eventstore.Config{ReadOnly: true}); !errors.Is(err, eventstore.ErrRestoreIncomplete) {
		t.Fatalf("open a stream being restored: %v, want ErrRestoreIncomplete", err)
	}
	if err := dst.Reappend(ctx, want[2:4]); !errors.Is(err, eventstore.ErrConflict) {
		t.Fatalf("reappend after a gap: %v, want a conflict", err)
	}
	if err := dst.Reappend(ctx, want[:1]); !errors.Is(err, eventstore.ErrInvalid) {
		t.Fatalf("reappend half an append: %v, want ErrInvalid", err)
	}
	if err := dst.Reappend(ctx, want[:6]); err != nil {
		t.Fatal(err)
	}
	if err := dst.Reappend(ctx, want[6:]); err != nil {
		t.Fatal(err)
	}
	if err := dst.FinishRestore(ctx); err != nil {
		t.Fatal(err)
	}
	again := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{})
	got := storedEvents(t, again)
	if len(got) != len(want) {
		t.Fatalf("restored %d events, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Hash != want[i].Hash || got[i].Sequence != want[i].Sequence || got[i].AppendRemaining != want[i].AppendRemaining ||
			string(got[i].Payload) != string(want[i].Payload) || got[i].ID != want[i].ID {
			t.Fatalf("event %d: restored %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := eventstore.VerifyStore(ctx, again, eventstore.NewVerifier(key.Public().(ed25519.PublicKey)), 1); err != nil {
		t.Fatal(err)
	}
	// The writer continues the restored chain.
	if _, err := again.Append(ctx, "s0", eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("test.Staked", "acct", "a", 10)}}); err != nil {
		t.Fatal(err)
	}
	restore := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{Restore: true})
	if err := restore.BeginRestore(ctx); err == nil || !strings.Contains(err.Error(), "is not empty") {
		t.Fatalf("restore into a stream that is not empty: %v", err)
	}
}
