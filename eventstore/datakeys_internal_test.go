package eventstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// embeddedDataKeys opens a data keys' bucket on an embedded server of the
// test's own.
func embeddedDataKeys(t *testing.T) *DataKeys {
	t.Helper()
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
	return keys
}

// Two nodes rewrapping the same data key both overwrite its previous
// revision: the second finds it gone, and that is no failure (a cluster
// whose nodes started on a next master key at once did not start).
func TestARevisionErasedByAnotherNodeIsErased(t *testing.T) {
	keys := embeddedDataKeys(t)
	revs, err := keys.revisions(t.Context(), "k.a")
	if err != nil || len(revs) != 0 {
		t.Fatalf("revisions of k.a before any: %v, %v", revs, err)
	}
	if err := keys.Create(t.Context(), "k.a", []byte("wrapped under the first key")); err != nil {
		t.Fatal(err)
	}
	revs, err = keys.revisions(t.Context(), "k.a")
	if err != nil || len(revs) != 1 {
		t.Fatalf("revisions of k.a: %v, %v", revs, err)
	}
	first := revs[0]
	if err := keys.Update(t.Context(), "k.a", []byte("wrapped under the next key"), first); err != nil {
		t.Fatal(err)
	}
	if err := keys.Update(t.Context(), "k.a", []byte("from a stale read"), first); !errors.Is(err, ErrKeyChanged) {
		t.Fatalf("an update from a revision replaced since: %v, want ErrKeyChanged", err)
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
	got, _, err := keys.Get(t.Context(), "k.a")
	if err != nil || string(got) != "wrapped under the next key" {
		t.Fatalf("k.a after the erasures: %q, %v", got, err)
	}
}

// Two destructions of the same data keys at once (two approvals of one
// erasure answered together) both end, each key gone, however their
// steps interleave: neither waits for a revision the other erased.
func TestDataKeysErasedTwiceAtOnce(t *testing.T) {
	keys := embeddedDataKeys(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for i := range 300 {
		name := fmt.Sprintf("k.%d", i)
		if err := keys.Create(ctx, name, []byte("wrapped")); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j := range errs {
			wg.Go(func() {
				ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				errs[j] = keys.Erase(ectx, name)
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil && !errors.Is(err, ErrKeyNotFound) {
				t.Fatalf("%s erased twice at once: %v", name, err)
			}
		}
		if _, _, err := keys.Get(ctx, name); !errors.Is(err, ErrKeyNotFound) {
			t.Fatalf("%s after its erasures: %v", name, err)
		}
	}
	names, err := keys.Names(ctx)
	if err != nil || len(names) != 0 {
		t.Fatalf("names left: %v, %v", names, err)
	}
	// An update of an entry erased since it was read brings nothing back.
	if err := keys.Update(ctx, "k.0", []byte("rewrapped"), 1); !errors.Is(err, ErrKeyChanged) {
		t.Fatalf("an update of an erased entry: %v, want ErrKeyChanged", err)
	}
	if _, _, err := keys.Get(ctx, "k.0"); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("k.0 after an update of it erased: %v", err)
	}
}

// A bucket made before its reads went to the leader (direct gets allowed)
// is opened and changed, keeping its entries: a node upgraded onto an
// existing cluster starts.
func TestABucketOfDirectGetsIsOpenedLeaderOnly(t *testing.T) {
	nc := embeddedConn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: dataKeysStream, Subjects: []string{"$KV." + DataKeysBucket + ".>"},
		MaxMsgsPerSubject: dataKeysHistory, Discard: jetstream.DiscardNew, AllowRollup: true, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), "$KV."+DataKeysBucket+".KEYS.k.a", []byte("wrapped")); err != nil {
		t.Fatal(err)
	}
	s := &NATSStore{cfg: Config{Stream: "KEYS", Replicas: 1}, nc: nc, js: js}
	keys, err := s.OpenDataKeys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	info, err := keys.stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.AllowDirect {
		t.Fatal("the bucket's stream still answers direct gets once opened")
	}
	if got, _, err := keys.Get(t.Context(), "k.a"); err != nil || string(got) != "wrapped" {
		t.Fatalf("k.a after the bucket was opened: %q, %v", got, err)
	}
}
