package api

import (
	"context"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// accessStore is the access log's stream as the API sees it.
type accessStore struct{ log *eventstore.SignificantLog }

func (s accessStore) Append(ctx context.Context, kind string, data []byte) (uint64, error) {
	return s.log.Append(ctx, kind, data)
}

func (s accessStore) Read(ctx context.Context, kinds []string, after uint64, since time.Time, limit int) ([]StoredEntry, error) {
	entries, err := s.log.ReadKinds(ctx, kinds, after, since, limit)
	out := make([]StoredEntry, len(entries))
	for i, e := range entries {
		out[i] = StoredEntry{Seq: e.Seq, At: e.At, Kind: e.Kind, Data: e.Data}
	}
	return out, err
}

// openAccessStore opens an access log's stream on an embedded server of
// the test's own.
func openAccessStore(tb testing.TB) accessStore {
	tb.Helper()
	srv := eventstoretest.RunEmbedded(tb, tb.TempDir())
	nc, err := srv.Conn()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	log, err := eventstore.OpenSignificantLog(context.Background(), nc, eventstore.SignificantConfig{Stream: "TRESOR_ACCESS", SubjectPrefix: "tresor-access", KindTokens: 2})
	if err != nil {
		tb.Fatal(err)
	}
	return accessStore{log}
}

// TestTheAccessLogSaysWhatItDropped: reads past the queue's bound are
// answered, counted, and recorded as one dropped entry that every
// selection of the log shows; the rest is selected by player, subject and
// time.
func TestTheAccessLogSaysWhatItDropped(t *testing.T) {
	ctx := eventstoretest.Ctx(t, time.Minute)
	a := newAccessLog(openAccessStore(t), nil, 4)
	start := time.Now().UTC()
	read := func(subject, player string, at time.Time) AccessEntry {
		return AccessEntry{At: at, Kind: AccessRead, Subject: subject, Role: "operator", Player: player, Method: "GET",
			Route: "GET /v1/players/{player}/account", Path: "/v1/players/" + player + "/account", Status: 200}
	}
	for i, e := range []AccessEntry{
		read("alice", "p-1", start), read("bob", "p-1", start.Add(time.Second)), read("alice", "p-2", start.Add(2*time.Second)),
		read("alice", "", start.Add(3*time.Second)), read("bob", "p-1", start.Add(4*time.Second)), read("bob", "p-2", start.Add(5*time.Second)),
	} {
		a.record(e)
		if want := uint64(max(0, i-3)); a.droppedTotal.Load() != want {
			t.Fatalf("after %d reads, %d dropped, want %d", i+1, a.droppedTotal.Load(), want)
		}
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(rctx)
	}()
	stop()
	<-done
	if a.q.recorded.Load() != 5 {
		t.Fatalf("%d entries stored, want the 4 queued and the dropped one", a.q.recorded.Load())
	}
	for name, tc := range map[string]struct {
		q    AccessQuery
		want []string
	}{
		"all":                 {AccessQuery{Limit: 100}, []string{"alice p-1", "bob p-1", "alice p-2", "alice ", "dropped 2"}},
		"p-1":                 {AccessQuery{Player: "p-1", Limit: 100}, []string{"alice p-1", "bob p-1", "dropped 2"}},
		"p-1 by alice":        {AccessQuery{Player: "p-1", Subject: "alice", Limit: 100}, []string{"alice p-1", "dropped 2"}},
		"from the 2nd second": {AccessQuery{From: start.Add(time.Second), To: start.Add(3 * time.Second), Limit: 100}, []string{"bob p-1", "alice p-2"}},
		"a page of 2":         {AccessQuery{Limit: 2}, []string{"alice p-1", "bob p-1"}},
	} {
		page, err := a.Read(ctx, tc.q)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range page.Entries {
			if e.Kind == AccessDropped {
				got = append(got, "dropped "+string(rune('0'+e.Count)))
				continue
			}
			got = append(got, e.Subject+" "+e.Player)
		}
		if len(got) != len(tc.want) || (tc.q.Limit == 2) != (page.Next != "") {
			t.Errorf("%s: %v next %q, want %v", name, got, page.Next, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: %v, want %v", name, got, tc.want)
				break
			}
		}
	}
}
