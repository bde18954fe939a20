package eventstore_test

import (
	"crypto/ed25519"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// TestAppendMarkerRoundTrips starts a chain as a writer did before the
// append marker existed (one append of three events, no marker), then
// appends through Append and a sealing committer. The marker is stored only
// on events that more of their append follow; ReadFrom, ReadStored and an
// export read back all see the same grouping, the old events each as an
// append of its own; and an export without the field, as written before it
// existed, reads and verifies the same but for the grouping.
func TestAppendMarkerRoundTrips(t *testing.T) {
	srv := eventstoretest.RunEmbedded(t, t.TempDir())
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	store := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{})
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	var prev eventstore.Hash
	for i := range 3 {
		ev := eventstore.RecordedEvent{Event: eventstoretest.Ev("test.Legacy", "acct", "old", i), Chain: "s0",
			ChainSeq: uint64(i + 1), RecordedAt: time.Date(2025, 1, 1, 0, 0, i, 0, time.UTC), PrevHash: prev}
		ev.ID = fmt.Sprintf("legacy-%d", i)
		ev.Hash = eventstore.ComputeHash(&ev)
		prev = ev.Hash
		publishRaw(t, store, ev)
	}
	// The legacy events and the seals are not in want: single-event
	// appends.
	want := eventstoretest.WriteAppends(t, store, "s0", key)

	all := eventstoretest.ReadAll(t, store)
	marked := 0
	for _, ev := range all {
		if ev.AppendRemaining != want[ev.Sequence] {
			t.Fatalf("sequence %d (%s): %d events of its append follow, want %d", ev.Sequence, ev.Type, ev.AppendRemaining, want[ev.Sequence])
		}
		// On the wire: a header on events that more follow, nothing on
		// the last event of an append.
		m, err := store.Stream().GetMsg(ctx, ev.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		hdr, ok := m.Header[eventstore.HeaderAppendRemaining]
		if w := want[ev.Sequence]; (w > 0) != ok || (ok && (len(hdr) != 1 || hdr[0] != strconv.Itoa(w))) {
			t.Fatalf("sequence %d: header %s %q, want %d events following", ev.Sequence, eventstore.HeaderAppendRemaining, hdr, w)
		}
		if ok {
			marked++
		}
	}
	if marked == 0 || all[len(all)-1].Type != eventstore.SealType {
		t.Fatalf("%d marked events, last %s: want some, and the closing seal", marked, all[len(all)-1].Type)
	}

	file := exportStored(t, store, 1, all[len(all)-1].Sequence)
	if got := readExport(t, file); !reflect.DeepEqual(got, all) {
		t.Fatalf("the export read back differs from the stream:\n got %+v\nwant %+v", got, all)
	}
	member := regexp.MustCompile(`,"append_remaining":[0-9]+`)
	if n := len(member.FindAll(file, -1)); n != marked {
		t.Fatalf("%d lines carry append_remaining, want the %d marked events", n, marked)
	}
	old := readExport(t, member.ReplaceAll(file, nil))
	v := eventstore.NewVerifier(pub)
	for i, ev := range old {
		want := all[i]
		want.AppendRemaining = 0
		if !reflect.DeepEqual(ev, want) {
			t.Fatalf("an export without append_remaining: record %d\n got %+v\nwant %+v", i, ev, want)
		}
		if err := v.Check(ev); err != nil {
			t.Fatalf("an export without append_remaining does not verify: %v", err)
		}
	}
}
