package personal_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/personal"
	"github.com/fdj/tresor/personal/personaltest"
	"github.com/fdj/tresor/settlement"
)

func TestSealedFieldsOpenUntilTheirKeyIsDestroyed(t *testing.T) {
	w := personaltest.New(t)
	ctx := context.Background()
	alice, bob := domain.Owner{Subject: "alice@fdj.fr"}, domain.Owner{Player: "p-42"}
	a1, err := w.Ring.Seal(alice, "alice@fdj.fr")
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := w.Ring.Seal(alice, "alice@fdj.fr")
	b1, _ := w.Ring.Seal(bob, "gambling problem reported by family")
	if a1 != a2 {
		t.Fatalf("the same text of the same person sealed twice: %q then %q, want equal (the decider compares them)", a1, a2)
	}
	if !domain.IsSealed(a1) || strings.Contains(a1, "alice") || strings.Contains(b1, "gambling") {
		t.Fatalf("sealed %q and %q: want the sealed form, without the text", a1, b1)
	}
	if domain.SealedKeyID(a1) == domain.SealedKeyID(b1) {
		t.Fatalf("two persons share the key %s", domain.SealedKeyID(a1))
	}
	// A second keyring (another process, cold caches) opens them too.
	other := personal.New(w.Keys, w.Sealer)
	if got := other.Reveal(ctx, b1); got != "gambling problem reported by family" {
		t.Fatalf("another keyring reads %q", got)
	}
	id, ok, err := w.Ring.KeyOf(bob)
	if err != nil || !ok || id != domain.SealedKeyID(b1) {
		t.Fatalf("KeyOf(bob) = %q, %v, %v; want %s", id, ok, err, domain.SealedKeyID(b1))
	}
	if err := w.Ring.Destroy(ctx, id, bob); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*personal.Keyring{"the eraser": w.Ring, "another process": personal.New(w.Keys, w.Sealer)} {
		if got := r.Reveal(ctx, b1); got != domain.ErasedText {
			t.Errorf("%s reads the erased field as %q, want %q", name, got, domain.ErasedText)
		}
		if got := r.Reveal(ctx, a1); got != "alice@fdj.fr" {
			t.Errorf("%s reads another person's field as %q: losing one key loses only that person's fields", name, got)
		}
	}
	if _, ok, err := w.Ring.KeyOf(bob); ok || err != nil {
		t.Fatalf("KeyOf(bob) after the erasure: %v, %v; want no key", ok, err)
	}
	if err := w.Ring.Destroy(ctx, id, bob); err != nil {
		t.Fatalf("destroying a key twice: %v, want no error (a retried erasure)", err)
	}
}

func TestDestroyedKeysLeaveNoByteOnDisk(t *testing.T) {
	w := personaltest.New(t)
	ctx := context.Background()
	p := domain.Owner{Player: "p-7"}
	if _, err := w.Ring.Seal(p, "x"); err != nil {
		t.Fatal(err)
	}
	id, _, _ := w.Ring.KeyOf(p)
	stored, _, err := w.Keys.Get(ctx, "k."+id)
	if err != nil {
		t.Fatal(err)
	}
	if eventstoretest.FileHolding(t, w.Dir, stored) == "" {
		t.Fatal("the wrapped key is not found on disk before its erasure: the search cannot fail")
	}
	if err := w.Ring.Destroy(ctx, id, p); err != nil {
		t.Fatal(err)
	}
	if f := eventstoretest.FileHolding(t, w.Dir, stored); f != "" {
		t.Fatalf("the destroyed key's bytes remain in %s", f)
	}
	if _, _, err := w.Keys.Get(ctx, "k."+id); !errors.Is(err, personal.ErrNotFound) {
		t.Fatalf("read of a destroyed key: %v, want not found", err)
	}
}

// An erasure applied again to a copy of the bucket that predates it (a
// restored backup's) destroys the erased persons' keys and the entries
// naming them, a staff subject's included (its entry's name is an HMAC
// the erasure never recorded), and nothing of anyone else's; the subject
// gets a fresh key at its next sealed field.
func TestDestroyErasedAppliesErasuresToAnOlderCopy(t *testing.T) {
	w := personaltest.New(t)
	ctx := context.Background()
	alice, bob, carol := domain.Owner{Subject: "alice@fdj.fr"}, domain.Owner{Player: "p-1"}, domain.Owner{Player: "p-2"}
	var sealed []string
	for _, o := range []domain.Owner{alice, bob, carol} {
		s, err := w.Ring.Seal(o, "the text of "+o.Player+o.Subject)
		if err != nil {
			t.Fatal(err)
		}
		sealed = append(sealed, s)
	}
	erased := map[string]bool{domain.SealedKeyID(sealed[0]): true, domain.SealedKeyID(sealed[1]): true}
	n, err := personal.DestroyErased(ctx, w.Keys, erased)
	if err != nil || n != 4 {
		t.Fatalf("DestroyErased: %d entries, %v; want 4 (two keys, two entries naming them)", n, err)
	}
	fresh := personal.New(w.Keys, w.Sealer) // cold caches: what the bucket holds
	for i, want := range []string{domain.ErasedText, domain.ErasedText, "the text of p-2"} {
		if got := fresh.Reveal(ctx, sealed[i]); got != want {
			t.Errorf("field %d reads %q, want %q", i, got, want)
		}
	}
	if n, err := personal.DestroyErased(ctx, w.Keys, erased); n != 0 || err != nil {
		t.Fatalf("DestroyErased again: %d, %v; want nothing left to do", n, err)
	}
	again, err := fresh.Seal(alice, "alice@fdj.fr")
	if err != nil || domain.SealedKeyID(again) == domain.SealedKeyID(sealed[0]) {
		t.Fatalf("alice's next sealed field: %q, %v; want one under a fresh key", again, err)
	}
}

func TestAMasterKeyRotationRewrapsDataKeysOnly(t *testing.T) {
	w := personaltest.New(t)
	ctx := context.Background()
	sealed, err := w.Ring.Seal(domain.Owner{Subject: "bob@fdj.fr"}, "bob@fdj.fr")
	if err != nil {
		t.Fatal(err)
	}
	next := personaltest.RandomKey(t)
	rotating, err := w.Sealer.Rotating(next)
	if err != nil {
		t.Fatal(err)
	}
	moved, err := personal.New(w.Keys, rotating).Rewrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if moved != 2 { // bob's key and the subjects' index key
		t.Fatalf("rewrapped %d keys, want 2", moved)
	}
	// Once the old master key is gone, the new one alone opens the same
	// sealed bytes: nothing on the stream was rewritten.
	after, err := settlement.NewSealer(next)
	if err != nil {
		t.Fatal(err)
	}
	ring := personal.New(w.Keys, after)
	if got := ring.Reveal(ctx, sealed); got != "bob@fdj.fr" {
		t.Fatalf("after the rotation the field reads %q", got)
	}
	again, err := ring.Seal(domain.Owner{Subject: "bob@fdj.fr"}, "bob@fdj.fr")
	if err != nil || again != sealed {
		t.Fatalf("bob sealed again after the rotation: %q, %v; want the same bytes %q", again, err, sealed)
	}
	if moved, err := ring.Rewrap(ctx); err != nil || moved != 0 {
		t.Fatalf("a second rewrap moved %d (%v), want 0", moved, err)
	}
	// The old master key alone opens nothing any more.
	if got := personal.New(w.Keys, w.Sealer).Reveal(ctx, sealed); got != personal.UnavailableText {
		t.Fatalf("the retired master key reads %q, want %q", got, personal.UnavailableText)
	}
}

// destroyedBeforeUpdate is a store on which every data key is destroyed
// by another process just before a rewrap's update of it: the moment
// between a rewrap's reading of a key and its writing it back.
type destroyedBeforeUpdate struct {
	personal.Store
	ring *personal.Keyring
	id   string
}

func (d destroyedBeforeUpdate) Update(ctx context.Context, name string, value []byte, rev uint64) error {
	if name == "k."+d.id {
		if err := d.ring.Destroy(ctx, d.id, domain.Owner{}); err != nil {
			return err
		}
	}
	return d.Store.Update(ctx, name, value, rev)
}

// TestARewrapBringsBackNoKeyErasedMeanwhile destroys a person's key while
// a master key rotation rewraps it (two nodes: one approving an erasure,
// one starting on the next master key): the key stays destroyed, and the
// rewrap moves the others.
func TestARewrapBringsBackNoKeyErasedMeanwhile(t *testing.T) {
	w := personaltest.New(t)
	ctx := context.Background()
	sealed, err := w.Ring.Seal(domain.Owner{Player: "p-1"}, "moving abroad")
	if err != nil {
		t.Fatal(err)
	}
	other, err := w.Ring.Seal(domain.Owner{Player: "p-2"}, "asked by phone")
	if err != nil {
		t.Fatal(err)
	}
	id := domain.SealedKeyID(sealed)
	rotating, err := w.Sealer.Rotating(personaltest.RandomKey(t))
	if err != nil {
		t.Fatal(err)
	}
	store := destroyedBeforeUpdate{Store: w.Keys, ring: personal.New(w.Keys, w.Sealer), id: id}
	moved, err := personal.New(store, rotating).Rewrap(ctx)
	if err != nil || moved != 1 { // p-2's key
		t.Fatalf("rewrap while p-1's key was destroyed: moved %d, %v; want 1, nil", moved, err)
	}
	if held, err := w.Ring.Holds(ctx, id); err != nil || held {
		t.Fatalf("p-1's key after its destruction during the rewrap: held %v, %v", held, err)
	}
	after := personal.New(w.Keys, rotating)
	if got := after.Reveal(ctx, sealed); got != domain.ErasedText {
		t.Fatalf("p-1's field after the rewrap reads %q, want %q", got, domain.ErasedText)
	}
	if got := after.Reveal(ctx, other); got != "asked by phone" {
		t.Fatalf("p-2's field after the rewrap reads %q", got)
	}
}

// BenchmarkSeal seals a staff subject whose key is cached, as the writer
// does for every command an operator gives after their first; the
// yardstick, measured in the same run, is a SHA-256 of the same bytes.
//
//	go test -run '^$' -bench Seal ./personal/
func BenchmarkSeal(b *testing.B) {
	w := personaltest.New(b)
	o := domain.Owner{Subject: "alice@fdj.fr"}
	if _, err := w.Ring.Seal(o, o.Subject); err != nil {
		b.Fatal(err)
	}
	b.Run("yardstick-sha256", func(b *testing.B) {
		for b.Loop() {
			sha256.Sum256([]byte(o.Subject))
		}
	})
	b.Run("seal", func(b *testing.B) {
		for b.Loop() {
			if _, err := w.Ring.Seal(o, o.Subject); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestAKeyIsDestroyedByItsIDAlone destroys a staff subject's key given
// only its id, as the approval of an erasure does: the entry naming it as
// the subject's goes too, for a key made now (which names its owner) and
// for one made before keys named their owners, once its erasure was
// proposed (Erasable). A destruction cut short after the owner's entry
// leaves the key, which the next one finds and destroys.
func TestAKeyIsDestroyedByItsIDAlone(t *testing.T) {
	w := personaltest.New(t)
	ctx := context.Background()
	alice, carol := domain.Owner{Subject: "alice@fdj.fr"}, domain.Owner{Subject: "carol@fdj.fr"}
	for _, o := range []domain.Owner{alice, carol} {
		if _, err := w.Ring.Seal(o, o.Subject); err != nil {
			t.Fatal(err)
		}
	}
	aliceKey, _, _ := w.Ring.KeyOf(alice)
	carolKey, _, _ := w.Ring.KeyOf(carol)
	forgetOwner(t, w, carolKey) // a key made before keys named their owners
	if err := w.Ring.Erasable(ctx, carolKey, carol); err != nil {
		t.Fatal(err)
	}
	for o, id := range map[domain.Owner]string{alice: aliceKey, carol: carolKey} {
		if err := w.Ring.Destroy(ctx, id, domain.Owner{}); err != nil {
			t.Fatal(err)
		}
		fresh := personal.New(w.Keys, w.Sealer)
		if _, ok, err := fresh.KeyOf(o); ok || err != nil {
			t.Fatalf("%s still has a key (%v) once %s is destroyed by its id", o.Subject, err, id)
		}
		if held, err := fresh.Holds(ctx, id); held || err != nil {
			t.Fatalf("the bucket holds %s after its destruction: %v", id, err)
		}
	}
	// A key whose owner's entry is gone already (a destruction cut short)
	// is held, and destroyed by the next destruction.
	bob := domain.Owner{Player: "p-9"}
	if _, err := w.Ring.Seal(bob, "moving abroad"); err != nil {
		t.Fatal(err)
	}
	bobKey, _, _ := w.Ring.KeyOf(bob)
	if err := w.Keys.Erase(ctx, "p.p-9"); err != nil {
		t.Fatal(err)
	}
	if held, err := w.Ring.Holds(ctx, bobKey); !held || err != nil {
		t.Fatalf("a key whose owner's entry alone is gone: held %v, %v", held, err)
	}
	if err := w.Ring.Destroy(ctx, bobKey, bob); err != nil {
		t.Fatal(err)
	}
	if held, _ := w.Ring.Holds(ctx, bobKey); held {
		t.Fatal("the key survives its second destruction")
	}
}

// forgetOwner rewrites a key's entry without its owner's name, as keys
// were stored before they named it.
func forgetOwner(tb testing.TB, w *personaltest.World, keyID string) {
	tb.Helper()
	ctx := context.Background()
	b, rev, err := w.Keys.Get(ctx, "k."+keyID)
	if err != nil {
		tb.Fatal(err)
	}
	var e map[string]any
	if err := json.Unmarshal(b, &e); err != nil || e["owner"] == nil {
		tb.Fatalf("key entry %s: %v, owner %v: want one naming its owner", keyID, err, e["owner"])
	}
	delete(e, "owner")
	b, _ = json.Marshal(e)
	if err := w.Keys.Update(ctx, "k."+keyID, b, rev); err != nil {
		tb.Fatal(err)
	}
}
