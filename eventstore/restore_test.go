package eventstore_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"reflect"
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
// last sequence refuses a batch that does not follow it, while two in
// flight land in order.
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
	// Two batches in flight: the second is sent, fenced on the first's
	// end, before the first is committed.
	first, err := dst.ReappendAsync(want[:6])
	if err != nil {
		t.Fatal(err)
	}
	second, err := dst.ReappendAsync(want[6:])
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(first(ctx), second(ctx)); err != nil {
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

// On a stream being restored, ReappendRestoringAsync sends plain
// messages, several batches in flight, and the stream reads as recorded;
// a store not opened to restore refuses it, and a batch that does not
// follow the stream fails its fences, landing nothing, after which the
// stream is abandoned.
func TestReappendRestoringSendsPlainMessages(t *testing.T) {
	src := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	appendPairs(t, src, 4)
	want := storedEvents(t, src)
	if _, err := src.ReappendRestoringAsync(want[:2]); !errors.Is(err, eventstore.ErrInvalid) {
		t.Fatalf("reappend without a batch to a store not opened to restore: %v, want ErrInvalid", err)
	}

	srv := eventstoretest.RunEmbedded(t, t.TempDir())
	dst := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{Restore: true})
	if err := dst.BeginRestore(ctx); err != nil {
		t.Fatal(err)
	}
	var waits []func(context.Context) error
	for _, batch := range [][]eventstore.RecordedEvent{want[:2], want[2:6], want[6:]} {
		wait, err := dst.ReappendRestoringAsync(batch)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, wait)
	}
	for _, wait := range waits {
		if err := wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := dst.FinishRestore(ctx); err != nil {
		t.Fatal(err)
	}
	got := storedEvents(t, eventstoretest.OpenEmbedded(t, srv, eventstore.Config{}))
	if len(got) != len(want) {
		t.Fatalf("restored %d events, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Hash != want[i].Hash || got[i].Sequence != want[i].Sequence || string(got[i].Payload) != string(want[i].Payload) {
			t.Fatalf("event %d: restored %+v, want %+v", i, got[i], want[i])
		}
	}

	gap := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{Restore: true})
	if err := gap.BeginRestore(ctx); err != nil {
		t.Fatal(err)
	}
	wait, err := gap.ReappendRestoringAsync(want[2:4])
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(ctx); !errors.Is(err, eventstore.ErrConflict) {
		t.Fatalf("reappend after a gap: %v, want a conflict", err)
	}
	// Each message is fenced: none of the batch lands at a sequence that
	// is not its own.
	if last, err := gap.LastSequence(ctx); err != nil || last != 0 {
		t.Fatalf("after a batch refused for a gap the stream ends at %d (%v), want 0: an event landed at another's sequence", last, err)
	}
	if err := gap.AbandonRestore(ctx); err != nil {
		t.Fatal(err)
	}
}

// The envelope of every restored message is the recorded one, header for
// header, when a batch follows a larger one whose events carried headers
// its own do not (a correlation, a causation, an append marker): the
// messages a batch reuses keep nothing of the one before.
func TestReappendRestoringStoresEveryEnvelopeAsRecorded(t *testing.T) {
	src := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	appendPairs(t, src, 3)
	bare := eventstoretest.Ev("test.Bare", "acct", "b", 0)
	bare.CorrelationID = ""
	for range 2 {
		if _, err := src.Append(ctx, "s1", eventstore.AppendRequest{Events: []eventstore.Event{bare}}); err != nil {
			t.Fatal(err)
		}
	}
	want := storedEvents(t, src)

	_, dst := beginRestore(t)
	for _, batch := range [][]eventstore.RecordedEvent{want[:6], want[6:]} {
		wait, err := dst.ReappendRestoringAsync(batch)
		if err != nil {
			t.Fatal(err)
		}
		if err := wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for seq := uint64(1); seq <= uint64(len(want)); seq++ {
		recorded, restored := tresorHeaders(t, src, seq), tresorHeaders(t, dst, seq)
		if !reflect.DeepEqual(restored, recorded) {
			t.Fatalf("sequence %d: restored headers %v, recorded %v", seq, restored, recorded)
		}
	}
}

// tresorHeaders is the envelope (the Tresor headers) of the message
// stored at seq.
func tresorHeaders(tb testing.TB, store *eventstore.NATSStore, seq uint64) map[string][]string {
	tb.Helper()
	m, err := store.Stream().GetMsg(eventstoretest.Ctx(tb, 10*time.Second), seq)
	if err != nil {
		tb.Fatal(err)
	}
	h := map[string][]string{}
	for k, v := range m.Header {
		if strings.HasPrefix(k, "Tresor-") {
			h[k] = v
		}
	}
	return h
}

// A stream a restore creates has the server's shortest duplicate window,
// so that the server's next start reads none of the messages the restore
// stored to rebuild their ids; readers leave it so, and the writer's
// store sets its own window back as it opens the stream.
func TestARestoredStreamGetsTheWritersDuplicateWindowBack(t *testing.T) {
	src := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	appendPairs(t, src, 2)
	want := storedEvents(t, src)
	window := func(store *eventstore.NATSStore) time.Duration {
		info, err := store.Stream().Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.Config.Duplicates
	}

	srv, dst := beginRestore(t)
	if err := dst.Reappend(ctx, want); err != nil {
		t.Fatal(err)
	}
	if err := dst.FinishRestore(ctx); err != nil {
		t.Fatal(err)
	}
	restored := window(dst)
	reader := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{ReadOnly: true})
	read := window(reader)
	writer := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{DuplicateWindow: 90 * time.Second})
	if restored != 100*time.Millisecond || read != restored || window(writer) != 90*time.Second || window(reader) != 90*time.Second {
		t.Fatalf("duplicate window restored %s, after a reader's open %s, after the writer's %s, want 100ms, 100ms, 1m30s", restored, read, window(writer))
	}
}

// beginRestore is an embedded server and, on it, an empty stream begun to
// restore.
func beginRestore(tb testing.TB) (*eventstore.EmbeddedServer, *eventstore.NATSStore) {
	tb.Helper()
	srv := eventstoretest.RunEmbedded(tb, tb.TempDir())
	dst := eventstoretest.OpenEmbedded(tb, srv, eventstore.Config{Restore: true})
	if err := dst.BeginRestore(eventstoretest.Ctx(tb, 30*time.Second)); err != nil {
		tb.Fatal(err)
	}
	return srv, dst
}

// WholeEnd reads a stream that ends inside an append, whose rest a plain
// writer is still storing, up to the append's end once it is in; one whose
// rest never comes, up to its last sequence after the wait, for the
// reader to report the append cut short.
func TestWholeEndWaitsForTheRestOfAnAppend(t *testing.T) {
	src := eventstoretest.OpenEmbedded(t, eventstoretest.RunEmbedded(t, t.TempDir()), eventstore.Config{})
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	appendPairs(t, src, 2)
	srv := eventstoretest.RunEmbedded(t, t.TempDir())
	dst := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{})
	eventstoretest.AppendStored(t, srv, src, 1, 3)
	const short = 200 * time.Millisecond
	start := time.Now()
	if end, err := dst.WholeEnd(ctx, short); err != nil || end != 3 || time.Since(start) < short {
		t.Fatalf("a stream cut inside an append: end %d (%v) after %s, want 3 after %s", end, err, time.Since(start), short)
	}
	done := make(chan uint64, 1)
	go func() {
		end, err := dst.WholeEnd(ctx, 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- end
	}()
	time.Sleep(100 * time.Millisecond)
	eventstoretest.AppendStored(t, srv, src, 4, 4)
	if end := <-done; end != 4 {
		t.Fatalf("the rest of the append stored: end %d, want 4", end)
	}
}
