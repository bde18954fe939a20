package vault_test

import (
	"crypto/ed25519"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/vault"
)

// cosignatureVector is the worked example of docs/vault.md: the seed
// 00 01 … 1f cosigning the head of docs/events.md's example.
var cosignatureVector = struct {
	seed, bytes, signature string
	c                      vault.Cosignature
}{
	seed: "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
	c: vault.Cosignature{Chain: "s0", Sequence: 7, ChainSeq: 1,
		Hash: "1379bf09e4152b088cd137ccfe66eba917bf1fcc6646e1bab16a60ab01f5c23c"},
}

// TestCosignatureVector pins the bytes a cosignature signs and its
// signature, and keeps docs/vault.md's worked example equal to them.
func TestCosignatureVector(t *testing.T) {
	v := cosignatureVector
	seed, _ := hex.DecodeString(v.seed)
	key := ed25519.NewKeyFromSeed(seed)
	msg, err := v.c.CosignedBytes()
	if err != nil {
		t.Fatal(err)
	}
	sig := ed25519.Sign(key, msg)
	v.c.KeyID, v.c.Signature = eventstore.KeyID(key.Public().(ed25519.PublicKey)), hex.EncodeToString(sig)
	if err := v.c.Verify(key.Public().(ed25519.PublicKey)); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/vault.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{hex.EncodeToString(msg), v.c.Signature, v.c.KeyID, hex.EncodeToString(key.Public().(ed25519.PublicKey))} {
		if !strings.Contains(strings.ReplaceAll(string(doc), "\n    ", ""), want) {
			t.Errorf("docs/vault.md does not show %s", want)
		}
	}
}
