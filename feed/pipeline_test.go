package feed_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/feed"
)

// recorder is a target that keeps what it is given; from failAt on (when
// not 0) it refuses every batch, as a target taken by another feed does.
type recorder struct {
	msgs       []feed.Message
	checkpoint uint64
	failAt     uint64
}

func (r *recorder) Checkpoint(context.Context) (uint64, error) { return r.checkpoint, nil }

func (r *recorder) Publish(_ context.Context, msgs []feed.Message, to uint64) error {
	if r.failAt != 0 && to >= r.failAt {
		return fmt.Errorf("batch up to %d: %w", to, feed.ErrFenced)
	}
	r.msgs, r.checkpoint = append(r.msgs, msgs...), to
	return nil
}

func (r *recorder) Close() error { return nil }

// run runs a feed to the head of store into r, within a minute.
func (r *recorder) run(t *testing.T, store eventstore.Store, batch int) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := feed.Run(ctx, store, r, feed.Config{Name: "test", UntilCaughtUp: true, BatchMax: batch})
	if ctx.Err() != nil {
		t.Fatalf("the feed did not stop: %v", err)
	}
	return err
}

// The reader, the builder and the publisher run on three goroutines: the
// messages still come in stream order, the same whatever the batch size,
// and the checkpoint ends at the head.
func TestFeedKeepsStreamOrder(t *testing.T) {
	const plays = 300
	store := writeStream(t, plays)
	head, err := store.LastSequence(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var first []feed.Message
	for _, batch := range []int{1, 7, 500} {
		r := &recorder{}
		if err := r.run(t, store, batch); err != nil {
			t.Fatal(err)
		}
		// A stake and a settlement a play, a prize one play in four, a
		// deposit every ten plays, and the approval of an adjustment.
		if want := plays*2 + plays/4 + plays/10 + 1; len(r.msgs) != want || r.checkpoint != head {
			t.Fatalf("batch %d: %d messages, checkpoint %d; want %d, %d", batch, len(r.msgs), r.checkpoint, want, head)
		}
		for i := 1; i < len(r.msgs); i++ {
			if r.msgs[i].Seq <= r.msgs[i-1].Seq {
				t.Fatalf("batch %d: message %d at sequence %d after %d", batch, i, r.msgs[i].Seq, r.msgs[i-1].Seq)
			}
		}
		last := r.msgs[len(r.msgs)-1]
		if last.Kind != feed.KindPostings || last.EventType != domain.TypeAdjustmentApproved || last.Player != "p0" ||
			!strings.Contains(string(last.Payload), `"player":"p0","adjustment":"A1","lines":[{"account":"house.goodwill","side":"debit","amount":"5.00"}`) {
			t.Fatalf("batch %d: the adjustment's message %+v %s", batch, last, last.Payload)
		}
		if first == nil {
			first = r.msgs
		} else if !reflect.DeepEqual(r.msgs, first) {
			t.Fatalf("batch %d: other messages than with batch 1", batch)
		}
	}
}

// An event that does not decode, in the middle of the stream, stops the
// feed with an error naming it; everything before it is published and
// checkpointed, nothing after it.
func TestFeedStopsAtAnEventItCannotRead(t *testing.T) {
	store := writeStream(t, 100)
	ctx := context.Background()
	agg := eventstore.Aggregate{Kind: "player", ID: "p1"}
	bad, err := store.Append(ctx, "s0", eventstore.AppendRequest{Events: []eventstore.Event{
		{Type: domain.TypeStakePlaced, SchemaVersion: 1, Aggregate: agg, Payload: []byte(`{"play":1}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, "s0", eventstore.AppendRequest{Events: []eventstore.Event{
		{Type: domain.TypeFundsDeposited, SchemaVersion: 1, Aggregate: agg, Payload: []byte(`{"player":"p1","amount":"1.00","idempotency_key":"k","balance_after":"1.00"}`)}}}); err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	err = r.run(t, store, 7)
	if named := fmt.Sprintf("event %d (%s", bad[0], domain.TypeStakePlaced); err == nil || !strings.Contains(err.Error(), named) {
		t.Fatalf("error %v, want one naming %s", err, named)
	}
	if last := r.msgs[len(r.msgs)-1].Seq; r.checkpoint != bad[0]-1 || last >= bad[0] {
		t.Fatalf("checkpoint %d, last message at %d; want the checkpoint just before %d", r.checkpoint, last, bad[0])
	}
}

// A target that fails for good mid-way stops the feed at once, with the
// checkpoint at the last batch it confirmed.
func TestFeedStopsWhenTheTargetFails(t *testing.T) {
	store := writeStream(t, 300)
	r := &recorder{failAt: 1000}
	err := r.run(t, store, 7)
	if !errors.Is(err, feed.ErrFenced) {
		t.Fatalf("error %v, want the target's", err)
	}
	if r.checkpoint == 0 || r.checkpoint >= r.failAt || r.msgs[len(r.msgs)-1].Seq > r.checkpoint {
		t.Fatalf("checkpoint %d, last message at %d; want the last batch before %d", r.checkpoint, r.msgs[len(r.msgs)-1].Seq, r.failAt)
	}
}
