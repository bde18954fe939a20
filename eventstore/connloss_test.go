package eventstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// TestConnectionLossSurfaces stops the server under a follower and a
// writer: both get an error within their bounds instead of hanging or
// silently missing events.
func TestConnectionLossSurfaces(t *testing.T) {
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := srv.Open(eventstoretest.Ctx(t, 10*time.Second), eventstore.Config{RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := eventstoretest.Ctx(t, 30*time.Second)
	if _, err := s.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("test.A", "acct", "a", 1)}}); err != nil {
		t.Fatal(err)
	}
	seen := make(chan uint64, 16)
	done := make(chan error, 1)
	go func() {
		done <- s.Follow(ctx, 1, func(ev eventstore.RecordedEvent) error {
			seen <- ev.Sequence
			return nil
		})
	}()
	if seq := <-seen; seq != 1 {
		t.Fatalf("followed %d", seq)
	}
	srv.Shutdown()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("follow after connection loss: want a connection error, got %v", err)
		}
		t.Log(err)
	case <-ctx.Done():
		t.Fatal("follow did not report the connection loss")
	}
	_, err = s.Append(ctx, "c1", eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("test.A", "acct", "a", 2)}})
	if err == nil {
		t.Fatal("append without a server succeeded")
	}
	t.Log(err)
}
