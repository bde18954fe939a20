package cluster

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/settlement"
	"github.com/nats-io/nats.go"
)

var (
	testMasterKey = []byte("0123456789abcdef0123456789abcdef")
	testSealKey   = ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	operator      = &domain.Actor{Role: domain.RoleOperator, Subject: "alice@fdj"}
)

// writerConfig is the settlement configuration every test node uses.
func writerConfig(tb testing.TB) settlement.Config {
	tb.Helper()
	rules, err := domain.DefaultRules()
	if err != nil {
		tb.Fatal(err)
	}
	sealer, err := settlement.NewSealer(testMasterKey)
	if err != nil {
		tb.Fatal(err)
	}
	return settlement.Config{Rules: rules, Sealer: sealer}
}

// openStore connects a store to urls (a cluster's list), closed at cleanup.
func openStore(tb testing.TB, urls string, replicas int, opts ...nats.Option) *eventstore.NATSStore {
	tb.Helper()
	reg, err := settlement.NewRegistry()
	if err != nil {
		tb.Fatal(err)
	}
	var s *eventstore.NATSStore
	eventstoretest.Eventually(tb, 30*time.Second, func() error {
		s, err = eventstore.Connect(eventstoretest.Ctx(tb, 15*time.Second), urls, eventstore.Config{Registry: reg, Replicas: replicas, RequestTimeout: 2 * time.Second}, opts...)
		return err
	})
	tb.Cleanup(func() { s.Close() })
	return s
}

// openWriter opens a settlement writer on store, closed at cleanup.
func openWriter(tb testing.TB, store *eventstore.NATSStore) *settlement.Writer {
	tb.Helper()
	return openWriterWith(tb, store, writerConfig(tb))
}

// openWriterWith opens a settlement writer configured by cfg on store,
// closed at cleanup.
func openWriterWith(tb testing.TB, store *eventstore.NATSStore, cfg settlement.Config) *settlement.Writer {
	tb.Helper()
	ctx := eventstoretest.Ctx(tb, 30*time.Second)
	log, err := settlement.OpenEventLog(ctx, store, eventstore.CommitterConfig{SealKey: testSealKey})
	if err != nil {
		tb.Fatal(err)
	}
	w, err := settlement.Open(ctx, log, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		w.Close()
		log.Close()
	})
	return w
}

// deposit opens p's account (if needed) and deposits amount with key
// through w.
func deposit(ctx context.Context, w interface {
	Execute(context.Context, domain.Command) (settlement.Result, error)
}, p string, amount domain.Amount, key string) (settlement.Result, error) {
	limit := domain.Amount(1_000_000)
	if _, err := w.Execute(ctx, domain.ConfigureAccount{Player: p, DepositLimit: &limit, StakeLimit: &limit, By: operator}); err != nil {
		return settlement.Result{}, err
	}
	return w.Execute(ctx, domain.Deposit{Player: p, Amount: amount, Key: key, By: operator})
}
