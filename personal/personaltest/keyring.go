// Package personaltest opens keyrings on a real embedded JetStream for
// tests: the data keys' bucket in a fresh data directory, under a fresh
// master key.
package personaltest

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/personal"
	"github.com/fdj/tresor/settlement"
)

// World is a keyring, the bucket it keeps its keys in, the data directory
// that holds the bucket, and the master key's sealer.
type World struct {
	Dir    string
	Keys   *eventstore.DataKeys
	Sealer *settlement.Sealer
	Ring   *personal.Keyring
}

// New starts an embedded server in a fresh directory and opens a keyring
// on it; both end with the test.
func New(tb testing.TB) *World {
	tb.Helper()
	dir := tb.TempDir()
	srv := eventstoretest.RunEmbedded(tb, dir)
	store := eventstoretest.OpenEmbedded(tb, srv, eventstore.Config{})
	keys, err := store.OpenDataKeys(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	sealer, err := settlement.NewSealer(RandomKey(tb))
	if err != nil {
		tb.Fatal(err)
	}
	return &World{Dir: dir, Keys: keys, Sealer: sealer, Ring: personal.New(keys, sealer)}
}

// RandomKey is a fresh master key.
func RandomKey(tb testing.TB) []byte {
	tb.Helper()
	k := make([]byte, settlement.MasterKeySize)
	if _, err := rand.Read(k); err != nil {
		tb.Fatal(err)
	}
	return k
}
