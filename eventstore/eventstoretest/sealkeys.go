package eventstoretest

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
)

// newSealKey returns a fresh Ed25519 key pair.
func newSealKey(tb testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	tb.Helper()
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		tb.Fatal(err)
	}
	return pub, key
}

// submitN commits n events on c and waits for them.
func submitN(ctx context.Context, tb testing.TB, c eventstore.Committer, from, n int) {
	tb.Helper()
	if err := commitN(ctx, c, from, n); err != nil {
		tb.Fatal(err)
	}
}

// commitN submits n events on c at once and returns the first error.
func commitN(ctx context.Context, c eventstore.Committer, from, n int) error {
	var chans []<-chan eventstore.AppendResult
	for i := from; i < from+n; i++ {
		chans = append(chans, c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{Ev("test.A", "acct", fmt.Sprint(i%7), i)}}))
	}
	var first error
	for _, ch := range chans {
		if r := <-ch; r.Err != nil && first == nil {
			first = r.Err
		}
	}
	return first
}

// testSealKeyRotation: a chain rotates its seal key twice while events
// flow; the whole stream verifies from the first public key alone; a
// writer given only a retired key refuses to start, one given the key
// the chain rotated to (as its next key) seals with it; a revoked key's
// seals are named.
func testSealKeyRotation(t *testing.T, b Backend, cfg eventstore.Config) {
	ctx := Ctx(t, 60*time.Second)
	pub1, k1 := newSealKey(t)
	_, k2 := newSealKey(t)
	_, k3 := newSealKey(t)
	s := b.Open(t, cfg)
	c, err := s.NewCommitter(ctx, "c1", b.committer(eventstore.CommitterConfig{SealKey: k1, SealEvery: 50}))
	if err != nil {
		t.Fatal(err)
	}
	submitN(ctx, t, c, 0, 150)
	// Requests in flight while the rotation waits its turn: it goes
	// between batches, and nothing is lost or reordered.
	done := make(chan error, 1)
	go func() { done <- commitN(ctx, c, 150, 150) }()
	if _, err := c.RotateSealKey(ctx, k2); err != nil {
		t.Fatalf("rotate to the second key: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("requests around the rotation: %v", err)
	}
	if _, err := c.RotateSealKey(ctx, k2); !errors.Is(err, eventstore.ErrInvalid) {
		t.Fatalf("rotate to the current key: want ErrInvalid, got %v", err)
	}
	submitN(ctx, t, c, 300, 200)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// A writer holding only the retired key refuses to seal.
	if _, err := s.NewCommitter(ctx, "c1", b.committer(eventstore.CommitterConfig{SealKey: k1})); !errors.Is(err, eventstore.ErrSealKeyRetired) {
		t.Fatalf("start with the retired key: want ErrSealKeyRetired, got %v", err)
	}
	// One whose files were not moved yet finds the new key as its next.
	c, err = s.NewCommitter(ctx, "c1", b.committer(eventstore.CommitterConfig{SealKey: k1, SealKeyNext: k2, SealEvery: 50}))
	if err != nil {
		t.Fatalf("start with the new key as next: %v", err)
	}
	submitN(ctx, t, c, 500, 100)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// A writer started with a next key the chain does not use yet rotates
	// to it before it takes a request.
	c, err = s.NewCommitter(ctx, "c1", b.committer(eventstore.CommitterConfig{SealKey: k2, SealKeyNext: k3, SealEvery: 50}))
	if err != nil {
		t.Fatalf("start with a third key as next: %v", err)
	}
	submitN(ctx, t, c, 600, 100)
	if _, err := c.RevokeSealKey(ctx, eventstore.Revocation{KeyID: eventstore.KeyID(k3.Public().(ed25519.PublicKey)), FromChainSeq: 1, Reason: "x"}); !errors.Is(err, eventstore.ErrInvalid) {
		t.Fatalf("revoke the current key: want ErrInvalid, got %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	stats, err := eventstore.VerifyStore(ctx, s, eventstore.NewVerifier(pub1), 1)
	if err != nil {
		t.Fatalf("verify across two rotations from the first key: %v", err)
	}
	keys := map[string]int{}
	for _, ev := range ReadAll(t, s) {
		if ev.Type == eventstore.SealType {
			var seal eventstore.Seal
			if err := json.Unmarshal(ev.Payload, &seal); err != nil {
				t.Fatal(err)
			}
			keys[seal.KeyID]++
		}
	}
	if stats.Seals < 3 || len(keys) != 3 {
		t.Fatalf("%d seals by keys %v, want seals by each of the three keys", stats.Seals, keys)
	}

	// Revoking the second key from its first position withdraws its
	// seals: the verifier names them.
	c, err = s.NewCommitter(ctx, "c1", b.committer(eventstore.CommitterConfig{SealKey: k3, SealEvery: 50}))
	if err != nil {
		t.Fatal(err)
	}
	id2 := eventstore.KeyID(k2.Public().(ed25519.PublicKey))
	if _, err := c.RevokeSealKey(ctx, eventstore.Revocation{KeyID: id2, FromChainSeq: 1, Reason: "key file found on a lost laptop"}); err != nil {
		t.Fatalf("revoke the second key: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	var revoked *eventstore.RevokedSealsError
	if _, err := eventstore.VerifyStore(ctx, s, eventstore.NewVerifier(pub1), 1); !errors.As(err, &revoked) || len(revoked.Seals) != keys[id2] {
		t.Fatalf("verify after the revocation: want the %d seals of key %s named, got %v", keys[id2], id2, err)
	}
}
