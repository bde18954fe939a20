package settlement_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/settlement"
)

// A rotating Sealer seals under the new key, opens under either, and
// moves a seed sealed under the old key to the new one; the new key alone
// then opens it and the old key alone does not.
func TestASealerRotatesItsMasterKey(t *testing.T) {
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	old, err := settlement.NewSealer(oldKey)
	if err != nil {
		t.Fatal(err)
	}
	rot, err := old.Rotating(newKey)
	if err != nil {
		t.Fatal(err)
	}
	only, err := settlement.NewSealer(newKey)
	if err != nil {
		t.Fatal(err)
	}
	seed := domain.Seed{7, 7, 7}
	h := seed.Hash()
	sealedOld, err := old.Seal(seed)
	if err != nil {
		t.Fatal(err)
	}
	resealed, moved, err := rot.Reseal(sealedOld, h)
	if err != nil || !moved {
		t.Fatalf("reseal a seed of the old key: moved %t, %v", moved, err)
	}
	if again, moved, err := rot.Reseal(resealed, h); err != nil || moved || !bytes.Equal(again, resealed) {
		t.Fatalf("reseal a seed of the new key: moved %t, %v", moved, err)
	}
	if got, err := only.Unseal(resealed, h); err != nil || got != seed {
		t.Fatalf("the new key alone: %v", err)
	}
	if _, err := old.Unseal(resealed, h); !errors.Is(err, settlement.ErrUnseal) {
		t.Fatalf("the old key alone: want ErrUnseal, got %v", err)
	}
	if rot.KeyID() != only.KeyID() || rot.KeyID() == old.KeyID() || !bytes.Equal(rot.SnapshotKey(), only.SnapshotKey()) {
		t.Fatalf("key ids %s %s %s: the rotating sealer must be named and snapshot as the new key", old.KeyID(), rot.KeyID(), only.KeyID())
	}
}
