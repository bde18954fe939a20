package eventstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// appendPairs appends n appends of two events each to chain s0 and returns
// the chain's head.
func appendPairs(tb testing.TB, store *eventstore.NATSStore, n int) eventstore.Head {
	tb.Helper()
	ctx := eventstoretest.Ctx(tb, 30*time.Second)
	for i := range n {
		evs := []eventstore.Event{eventstoretest.Ev("test.Staked", "acct", "a", 2*i), eventstoretest.Ev("test.Assigned", "acct", "a", 2*i+1)}
		if _, err := store.Append(ctx, "s0", eventstore.AppendRequest{Events: evs}); err != nil {
			tb.Fatal(err)
		}
	}
	head, err := store.ChainHead(ctx, "s0")
	if err != nil {
		tb.Fatal(err)
	}
	return head
}

// markAt returns a high-water file in a fresh directory holding mark (none
// for the zero Head), closed at cleanup.
func markAt(tb testing.TB, mark eventstore.Head) *eventstore.HighWaterFile {
	tb.Helper()
	hw, err := eventstore.OpenHighWaterFile(filepath.Join(tb.TempDir(), "high-water"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { hw.Close() })
	if mark != (eventstore.Head{}) {
		hw.Advance(mark)
	}
	return hw
}

// A committer never starts on a stream that ends short of its evidence,
// or holds another event where the evidence names one; it names each
// piece it fails.
func TestACommitterStartsOnlyOnAStreamThatHoldsItsEvidence(t *testing.T) {
	srv := eventstoretest.RunEmbedded(t, t.TempDir())
	store := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{})
	head := appendPairs(t, store, 3)
	past := eventstore.Head{Sequence: head.Sequence + 4, ChainSeq: head.ChainSeq + 4}
	other := head
	other.Hash[0] ^= 1
	for _, tc := range []struct {
		name      string
		mark      eventstore.Head
		evidence  []eventstore.Evidence
		missing   []string
		differing []string
	}{
		{name: "no evidence"},
		{name: "mark at the head", mark: head},
		{name: "snapshot before the head", evidence: []eventstore.Evidence{{Source: "snapshot w", Head: eventstore.Head{Sequence: 2}}}},
		{name: "mark past the end", mark: past, missing: []string{"the high-water mark of acknowledged commits"}},
		{name: "snapshot past the end", mark: head, evidence: []eventstore.Evidence{{Source: "snapshot w", Head: past}}, missing: []string{"snapshot w"}},
		{name: "another event at the mark", mark: other, differing: []string{"the high-water mark of acknowledged commits"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := store.NewCommitter(eventstoretest.Ctx(t, 30*time.Second), "s0",
				eventstore.CommitterConfig{HighWater: markAt(t, tc.mark), Evidence: tc.evidence})
			if tc.missing == nil && tc.differing == nil {
				if err != nil {
					t.Fatal(err)
				}
				if got := c.Head(); got != head {
					t.Fatalf("head %+v, want %+v", got, head)
				}
				c.Close()
				return
			}
			var te *eventstore.TruncatedError
			if !errors.As(err, &te) || !errors.Is(err, eventstore.ErrTruncated) {
				t.Fatalf("want a *TruncatedError, got %v", err)
			}
			sources := func(evs []eventstore.Evidence) []string {
				var out []string
				for _, e := range evs {
					out = append(out, e.Source)
				}
				return out
			}
			if te.End != head.Sequence || !slices.Equal(sources(te.Missing), tc.missing) || !slices.Equal(sources(te.Differing), tc.differing) {
				t.Fatalf("end %d (want %d), missing %v (want %v), differing %v (want %v)", te.End, head.Sequence,
					sources(te.Missing), tc.missing, sources(te.Differing), tc.differing)
			}
			if !strings.Contains(err.Error(), "docs/operations.md") {
				t.Fatalf("the refusal says no way out: %v", err)
			}
		})
	}
	if after, err := store.ChainHead(eventstoretest.Ctx(t, 10*time.Second), "s0"); err != nil || after != head {
		t.Fatalf("a refused start wrote to the stream: head %+v, want %+v (%v)", after, head, err)
	}
}

// tearAppend publishes the first event of a two-event append after head,
// as a disk that tore it keeps it, and returns it.
func tearAppend(tb testing.TB, store *eventstore.NATSStore, head eventstore.Head) eventstore.RecordedEvent {
	tb.Helper()
	ev := eventstore.RecordedEvent{Event: eventstoretest.Ev("test.Staked", "acct", "a", 99), Chain: "s0",
		ChainSeq: head.ChainSeq + 1, RecordedAt: time.Now().UTC(), PrevHash: head.Hash}
	ev.ID = "torn-1"
	ev.Hash = eventstore.ComputeHash(&ev)
	ev.Sequence = publishMarked(tb, store, ev, 1)
	return ev
}

// An append cut short at the end of the stream is never handed to a
// reader as the ledger's: reads stop before it; a writer whose evidence
// ends before it voids it and goes on, readers then see its events marked
// Voided, and the Void; a writer whose evidence covers it refuses to start.
func TestATornAppendIsVoidedNeverApplied(t *testing.T) {
	srv := eventstoretest.RunEmbedded(t, t.TempDir())
	store := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{})
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	head := appendPairs(t, store, 2)
	torn := tearAppend(t, store, head)

	var read []eventstore.RecordedEvent
	last, err := store.ReadFrom(ctx, 1, func(ev eventstore.RecordedEvent) error {
		read = append(read, ev)
		return nil
	})
	if err != nil || last != head.Sequence || len(read) != int(head.Sequence) {
		t.Fatalf("read of a torn tail: last %d, %d events (want %d, %d): %v", last, len(read), head.Sequence, head.Sequence, err)
	}

	// The torn append was acknowledged, says the mark: it is a loss.
	acked := eventstore.Head{Sequence: torn.Sequence + 1, ChainSeq: torn.ChainSeq + 1}
	if _, err := store.NewCommitter(ctx, "s0", eventstore.CommitterConfig{HighWater: markAt(t, acked)}); !errors.Is(err, eventstore.ErrTruncated) {
		t.Fatalf("start with the torn append acknowledged: want ErrTruncated, got %v", err)
	}

	c, err := store.NewCommitter(ctx, "s0", eventstore.CommitterConfig{HighWater: markAt(t, head)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res := <-c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("test.Staked", "acct", "a", 100)}})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	all := eventstoretest.ReadAll(t, store)
	if len(all) != int(torn.Sequence)+2 {
		t.Fatalf("%d events after the void, want %d", len(all), torn.Sequence+2)
	}
	got, void, next := all[torn.Sequence-1], all[torn.Sequence], all[torn.Sequence+1]
	if !got.Voided || got.ID != torn.ID || void.Type != eventstore.VoidType || void.Voided || next.Voided || next.Sequence != res.Sequences[0] {
		t.Fatalf("torn %+v voided %t, then %s, then %s at %d", got.ID, got.Voided, void.Type, next.Type, next.Sequence)
	}
	v, err := eventstore.ParseVoid(void)
	if err != nil || v.FirstSeq != torn.Sequence || v.LastSeq != torn.Sequence || v.Announced != 2 || v.Found != 1 || v.Reason == "" {
		t.Fatalf("void %+v: %v", v, err)
	}
	for _, ev := range all {
		if ev.LedgerFact() != (ev.Sequence != torn.Sequence && ev.Sequence != void.Sequence) {
			t.Fatalf("sequence %d (%s, voided %t): ledger fact %t", ev.Sequence, ev.Type, ev.Voided, ev.LedgerFact())
		}
	}
	// The chain goes on through the voided event: the Void links to it.
	if void.PrevHash != torn.Hash || next.PrevHash != void.Hash {
		t.Fatal("the void does not continue the chain through the torn append")
	}
}

// WholeAppends hands on whole appends only, marks the events of a voided
// append, and keeps a torn tail back; a cut inside the stream or a Void
// of nothing is an integrity error, or a broken append told to an auditor.
func TestWholeAppends(t *testing.T) {
	ev := func(seq uint64, remaining int) eventstore.RecordedEvent {
		return eventstore.RecordedEvent{Event: eventstore.Event{Type: "test.E"}, Sequence: seq, AppendRemaining: remaining}
	}
	void := func(seq, first, last uint64) eventstore.RecordedEvent {
		return eventstore.RecordedEvent{Event: eventstore.Event{Type: eventstore.VoidType,
			Payload: fmt.Appendf(nil, `{"chain":"s0","first_seq":%d,"last_seq":%d,"announced":3,"found":%d}`, first, last, last-first+1)}, Sequence: seq}
	}
	for _, tc := range []struct {
		name   string
		in     []eventstore.RecordedEvent
		want   string // sequences handed on, v for voided
		torn   int
		broken bool
	}{
		{"single events", []eventstore.RecordedEvent{ev(1, 0), ev(2, 0)}, "1 2", 0, false},
		{"a whole append", []eventstore.RecordedEvent{ev(1, 2), ev(2, 1), ev(3, 0), ev(4, 0)}, "1 2 3 4", 0, false},
		{"a torn tail", []eventstore.RecordedEvent{ev(1, 0), ev(2, 2), ev(3, 1)}, "1", 2, false},
		{"a voided append", []eventstore.RecordedEvent{ev(1, 0), ev(2, 2), ev(3, 1), void(4, 2, 3), ev(5, 0)}, "1 2v 3v 4 5", 0, false},
		{"cut inside the stream", []eventstore.RecordedEvent{ev(1, 2), ev(2, 0)}, "", 0, true},
		{"a void of nothing", []eventstore.RecordedEvent{ev(1, 0), void(2, 1, 1)}, "1", 0, true},
		{"a void of another range", []eventstore.RecordedEvent{ev(1, 1), void(2, 5, 5)}, "", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, lenient := range []bool{false, true} {
				var got []string
				var told []*eventstore.IntegrityError
				var broken func(*eventstore.IntegrityError)
				if lenient {
					broken = func(e *eventstore.IntegrityError) { told = append(told, e) }
				}
				read, torn := eventstore.WholeAppends(func(e eventstore.RecordedEvent) error {
					s := fmt.Sprint(e.Sequence)
					if e.Voided {
						s += "v"
					}
					got = append(got, s)
					return nil
				}, broken)
				var err error
				for _, e := range tc.in {
					if err = read(e); err != nil {
						break
					}
				}
				switch {
				case tc.broken && !lenient:
					if !errors.Is(err, eventstore.ErrIntegrity) || strings.Join(got, " ") != tc.want {
						t.Fatalf("strict: handed on %v, err %v; want %q and an integrity error", got, err, tc.want)
					}
				case tc.broken:
					if err != nil || len(told) != 1 || len(got) != len(tc.in) {
						t.Fatalf("lenient: err %v, told %v, handed on %v (want all %d)", err, told, got, len(tc.in))
					}
				default:
					if err != nil || strings.Join(got, " ") != tc.want || len(torn()) != tc.torn || len(told) != 0 {
						t.Fatalf("handed on %v (want %q), %d torn (want %d), told %v: %v", got, tc.want, len(torn()), tc.torn, told, err)
					}
				}
			}
		})
	}
}

// The high-water file keeps the newest mark across a reopen, survives one
// slot torn by a power cut, and refuses a file whose slots both fail.
func TestTheHighWaterFileKeepsTheNewestMark(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "high-water")
	hw, err := eventstore.OpenHighWaterFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := hw.Load(ctx); ok || err != nil {
		t.Fatalf("a new file holds a mark (%t) or fails: %v", ok, err)
	}
	for seq := uint64(1); seq <= 5; seq++ {
		hw.Advance(eventstore.Head{Sequence: seq, ChainSeq: seq})
	}
	if err := hw.Close(); err != nil {
		t.Fatal(err)
	}
	mark, ok, err := eventstore.ReadHighWaterFile(path)
	if err != nil || !ok || mark.Sequence != 5 {
		t.Fatalf("mark %+v (%t), want sequence 5: %v", mark, ok, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Mark 5 went to the first slot (marks alternate from it): tearing it
	// leaves mark 4.
	half := len(b) / 2
	b[half-1] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if mark, ok, err = eventstore.ReadHighWaterFile(path); err != nil || !ok || mark.Sequence != 4 {
		t.Fatalf("one slot torn: mark %+v (%t), want sequence 4: %v", mark, ok, err)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err = eventstore.ReadHighWaterFile(path); !errors.Is(err, eventstore.ErrIntegrity) {
		t.Fatalf("both slots torn: want ErrIntegrity, got %v", err)
	}
}
