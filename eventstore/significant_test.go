package eventstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/nats-io/nats.go"
)

// logServer returns a connection to an embedded server of the test's own.
func logServer(t *testing.T) *nats.Conn {
	t.Helper()
	srv := eventstoretest.RunEmbedded(t, t.TempDir())
	nc, err := srv.Conn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestSignificantLogIsBoundedPerKind floods one kind past its bound: the
// oldest entries of that kind go, the other kind's stay, and reads page
// through what is kept, oldest first.
func TestSignificantLogIsBoundedPerKind(t *testing.T) {
	nc := logServer(t)
	ctx := eventstoretest.Ctx(t, time.Minute)
	if _, err := eventstore.OpenSignificantLog(ctx, nc, eventstore.SignificantConfig{Stream: "TRESOR"}); !errors.Is(err, eventstore.ErrInvalid) {
		t.Fatalf("a significant-event log named like the event log: %v", err)
	}
	log, err := eventstore.OpenSignificantLog(ctx, nc, eventstore.SignificantConfig{MaxPerKind: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := log.Append(ctx, "forbidden", []byte(`{"n":0}`)); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := log.Append(ctx, "authentication_failed", []byte(fmt.Sprintf(`{"n":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	all, err := log.Read(ctx, 0, time.Time{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range all {
		got = append(got, e.Kind+string(e.Data))
	}
	want := []string{`forbidden{"n":0}`, `authentication_failed{"n":7}`, `authentication_failed{"n":8}`, `authentication_failed{"n":9}`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
	page, err := log.Read(ctx, all[1].Seq, time.Time{}, 1)
	if err != nil || len(page) != 1 || page[0].Seq != all[2].Seq {
		t.Fatalf("the page after %d: %+v %v", all[1].Seq, page, err)
	}
	if rest, err := log.Read(ctx, all[3].Seq, time.Time{}, 10); err != nil || len(rest) != 0 {
		t.Fatalf("after the last entry: %+v %v", rest, err)
	}
	if _, err := log.Append(ctx, "a.b", nil); !errors.Is(err, eventstore.ErrInvalid) {
		t.Fatalf("a kind with a dot: %v", err)
	}
}

// TestALogReadsSomeKindsAlone: a log of two-token kinds reads one kind,
// or several, without waiting for entries of the others past its last: a
// read that waited would wait for the minute of its request timeout, and
// fail when the reads' context ends first.
func TestALogReadsSomeKindsAlone(t *testing.T) {
	nc := logServer(t)
	ctx := eventstoretest.Ctx(t, time.Minute)
	log, err := eventstore.OpenSignificantLog(ctx, nc, eventstore.SignificantConfig{Stream: "TRESOR_ACCESS", SubjectPrefix: "tresor-access",
		KindTokens: 2, RequestTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"player.p-1", "player.p-2", "dropped.all", "player.p-1", "player.p-2", "player.p-2"} {
		if _, err := log.Append(ctx, k, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"player", "player.p.1", "player."} {
		if _, err := log.Append(ctx, bad, nil); !errors.Is(err, eventstore.ErrInvalid) {
			t.Fatalf("kind %q: %v", bad, err)
		}
	}
	reads := eventstoretest.Ctx(t, 20*time.Second)
	for _, tc := range []struct {
		kinds []string
		after uint64
		want  string
	}{
		{[]string{"player.p-1"}, 0, "[1 player.p-1 4 player.p-1]"},
		{[]string{"player.p-1", "dropped.all"}, 1, "[3 dropped.all 4 player.p-1]"},
		{[]string{"player.*"}, 4, "[5 player.p-2 6 player.p-2]"},
		{[]string{"player.p-1"}, 4, "[]"},
		{[]string{"player.p-3"}, 0, "[]"},
	} {
		entries, err := log.ReadKinds(reads, tc.kinds, tc.after, time.Time{}, 10)
		if err != nil {
			t.Fatal(err)
		}
		got := []string{}
		for _, e := range entries {
			got = append(got, fmt.Sprint(e.Seq, " ", e.Kind))
		}
		if fmt.Sprint(got) != tc.want {
			t.Errorf("%v after %d: %v, want %s", tc.kinds, tc.after, got, tc.want)
		}
	}
}
