package eventstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// TestSignificantLogIsBoundedPerKind floods one kind past its bound: the
// oldest entries of that kind go, the other kind's stay, and reads page
// through what is kept, oldest first.
func TestSignificantLogIsBoundedPerKind(t *testing.T) {
	srv := eventstoretest.RunEmbedded(t, t.TempDir())
	nc, err := srv.Conn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
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
