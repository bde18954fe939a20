package eventstore

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// Two nodes rewrapping the same data key both overwrite its previous
// revision: the second finds it gone, and that is no failure (a cluster
// whose nodes started on a next master key at once did not start).
func TestARevisionErasedByAnotherNodeIsErased(t *testing.T) {
	nc := embeddedConn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s := &NATSStore{cfg: Config{Stream: "KEYS", Replicas: 1}, nc: nc, js: js}
	keys, err := s.OpenDataKeys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.Create(t.Context(), "k.a", []byte("wrapped under the first key")); err != nil {
		t.Fatal(err)
	}
	hist, err := keys.kv.History(t.Context(), keys.prefix+"k.a")
	if err != nil || len(hist) != 1 {
		t.Fatalf("history of k.a: %d revisions, %v", len(hist), err)
	}
	first := hist[0].Revision()
	if err := keys.Put(t.Context(), "k.a", []byte("wrapped under the next key")); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.stream.GetMsg(t.Context(), first); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the first wrapping outlived its replacement: %v", err)
	}
	if err := keys.eraseRevision(t.Context(), first); err != nil {
		t.Fatalf("erasing a revision another node erased: %v", err)
	}
	if err := keys.eraseRevision(t.Context(), first+99); err != nil {
		t.Fatalf("erasing a revision never written: %v", err)
	}
	got, err := keys.Get(t.Context(), "k.a")
	if err != nil || string(got) != "wrapped under the next key" {
		t.Fatalf("k.a after the erasures: %q, %v", got, err)
	}
}
