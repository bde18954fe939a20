package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// TestReplayedBatchResolves replays an acknowledged batch, as a writer does
// after losing the acknowledgement: JetStream answers 10201 (duplicate id)
// and the store checks the stream and returns the original sequences
// instead of writing twice or reporting a false failure.
func TestReplayedBatchResolves(t *testing.T) {
	srv, err := RunEmbedded(EmbeddedConfig{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := srv.Open(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	events := []Event{
		{Type: "test.A", SchemaVersion: 1, Aggregate: Aggregate{Kind: "acct", ID: "a"}, Payload: json.RawMessage(`{}`)},
		{Type: "test.A", SchemaVersion: 1, Aggregate: Aggregate{Kind: "acct", ID: "b"}, Payload: json.RawMessage(`{}`)},
	}
	recs, _ := s.record("c1", Head{}, events, time.Now().UTC(), nil)
	first, err := s.commitBatch(ctx, "c1", 0, recs, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.commitBatch(ctx, "c1", 0, recs, nil)
	if err != nil {
		t.Fatalf("replay: want the original sequences, got %v", err)
	}
	if len(again) != 2 || again[0] != first[0] || again[1] != first[1] {
		t.Fatalf("replay answered %v, first commit %v", again, first)
	}
	if last, err := s.LastSequence(ctx); err != nil || last != 2 {
		t.Fatalf("after replay last sequence %d (%v): written twice", last, err)
	}
	// The same events fenced on a stale head from another writer's view:
	// a conflict, nothing written.
	other, _ := s.record("c1", Head{}, events[:1], time.Now().UTC(), nil)
	if _, err := s.commitBatch(ctx, "c1", 0, other, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale fence: want ErrConflict, got %v", err)
	}
}
