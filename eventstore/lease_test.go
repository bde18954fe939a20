package eventstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// openLeases opens one lease handle per holder on a fresh embedded server.
func openLeases(tb testing.TB, holders ...string) []*eventstore.Lease {
	tb.Helper()
	srv := eventstoretest.RunEmbedded(tb, tb.TempDir())
	var out []*eventstore.Lease
	for _, h := range holders {
		nc, err := srv.Conn()
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(nc.Close)
		l, err := eventstore.OpenLease(eventstoretest.Ctx(tb, 10*time.Second), nc, "s0", eventstore.LeaseConfig{Holder: h, TTL: time.Second})
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// TestLeaseAcquireRenewRelease: one holder at a time; renewals keep the
// term; a release lets the other acquire at once with a larger term.
func TestLeaseAcquireRenewRelease(t *testing.T) {
	ls := openLeases(t, "a", "b")
	a, b := ls[0], ls[1]
	ctx := eventstoretest.Ctx(t, 20*time.Second)
	term, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx); !errors.Is(err, eventstore.ErrLeaseHeld) {
		t.Fatalf("second acquire: got %v, want ErrLeaseHeld", err)
	}
	// Renewals well inside the TTL keep it past several TTLs.
	for range 6 {
		time.Sleep(300 * time.Millisecond) // the renewal period under test, not a wait for a condition
		if err := a.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !a.Valid() || a.Term() != term {
		t.Fatalf("after renewals: valid %v term %d, want true %d", a.Valid(), a.Term(), term)
	}
	info, err := b.Info(ctx)
	if err != nil || info != (eventstore.LeaseInfo{Holder: "a", Term: term}) {
		t.Fatalf("info: %+v, %v; want holder a term %d", info, err, term)
	}
	if _, err := b.Acquire(ctx); !errors.Is(err, eventstore.ErrLeaseHeld) {
		t.Fatalf("acquire of a renewed lease: got %v, want ErrLeaseHeld", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	term2, err := b.Acquire(ctx)
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	if term2 <= term {
		t.Fatalf("term after takeover %d, want more than %d", term2, term)
	}
	if err := a.Renew(ctx); !errors.Is(err, eventstore.ErrLeaseLost) {
		t.Fatalf("renew after release: got %v, want ErrLeaseLost", err)
	}
}

// TestLeaseExpiresAndWatchTells: a lease not renewed expires after its TTL,
// the other node's watch sees it free, and the old holder's renewal then
// fails (compare-and-set on its revision) instead of taking it back.
func TestLeaseExpiresAndWatchTells(t *testing.T) {
	ls := openLeases(t, "a", "b")
	a, b := ls[0], ls[1]
	ctx := eventstoretest.Ctx(t, 20*time.Second)
	watch, err := b.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	sawHolder := false
	for info := range watch {
		if info.Holder == "a" {
			sawHolder = true
		}
		if info.Holder == "" && sawHolder {
			break
		}
	}
	expired := time.Since(acquired)
	if expired < time.Second || expired > 4*time.Second {
		t.Fatalf("watch saw the lease free %s after acquisition, want between the TTL (1s) and 4s", expired)
	}
	if a.Valid() {
		t.Fatal("a lease past its TTL is still valid")
	}
	if _, err := b.Acquire(ctx); err != nil {
		t.Fatalf("acquire an expired lease: %v", err)
	}
	if err := a.Renew(ctx); !errors.Is(err, eventstore.ErrLeaseLost) {
		t.Fatalf("renew of an expired lease taken by b: got %v, want ErrLeaseLost", err)
	}
	info, err := a.Info(ctx)
	if err != nil || info.Holder != "b" {
		t.Fatalf("holder after the failed renewal: %+v, %v; want b", info, err)
	}
}

// TestLeaseTakeOverIsConditionalOnTheRevisionRead: a takeover over the
// revision a standby read succeeds only while nobody wrote the lease since:
// a renewal it did not see keeps the holder's lease, and a takeover over
// the current revision makes the old holder's next renewal fail.
func TestLeaseTakeOverIsConditionalOnTheRevisionRead(t *testing.T) {
	ls := openLeases(t, "a", "b")
	a, b := ls[0], ls[1]
	ctx := eventstoretest.Ctx(t, 20*time.Second)
	if _, err := a.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	read, err := b.Read(ctx)
	if err != nil || read.Holder != "a" {
		t.Fatalf("read: %+v, %v; want holder a", read, err)
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TakeOver(ctx, read.Revision); !errors.Is(err, eventstore.ErrLeaseHeld) {
		t.Fatalf("takeover over a revision renewed since: got %v, want ErrLeaseHeld", err)
	}
	if read, err = b.Read(ctx); err != nil {
		t.Fatal(err)
	}
	term, err := b.TakeOver(ctx, read.Revision)
	if err != nil {
		t.Fatalf("takeover over the current revision: %v", err)
	}
	if term <= read.Revision || b.Term() != term || !b.Valid() {
		t.Fatalf("after the takeover: term %d (read at revision %d), handle's term %d, valid %v", term, read.Revision, b.Term(), b.Valid())
	}
	if err := a.Renew(ctx); !errors.Is(err, eventstore.ErrLeaseLost) {
		t.Fatalf("the old holder's renewal after a takeover: got %v, want ErrLeaseLost", err)
	}
	if info, err := a.Info(ctx); err != nil || info != (eventstore.LeaseInfo{Holder: "b", Term: term}) {
		t.Fatalf("lease after the takeover: %+v, %v; want b at term %d", info, err, term)
	}
}

// TestARenewalWhoseAnswerWasLostKeepsTheLease: a renewal written by the
// server but answered too late (here, written behind the handle's back with
// the value it sends) leaves the key a revision ahead of the handle; the
// next renewal and the release still find the lease their own.
func TestARenewalWhoseAnswerWasLostKeepsTheLease(t *testing.T) {
	srv := eventstoretest.RunEmbedded(t, t.TempDir())
	nc, err := srv.Conn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx := eventstoretest.Ctx(t, 20*time.Second)
	a, err := eventstore.OpenLease(ctx, nc, "s0", eventstore.LeaseConfig{Holder: "a", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	term, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, eventstore.LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	landed := func() uint64 {
		value, _ := json.Marshal(eventstore.LeaseInfo{Holder: "a", Term: term})
		rev, err := kv.Update(ctx, "s0", value, a.Revision())
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	ahead := landed()
	if err := a.Renew(ctx); err != nil {
		t.Fatalf("renewal after one whose answer was lost: %v", err)
	}
	if !a.Valid() || a.Term() != term || a.Revision() <= ahead {
		t.Fatalf("after the renewal: valid %v term %d revision %d; want true, %d, past %d", a.Valid(), a.Term(), a.Revision(), term, ahead)
	}
	landed()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := a.Info(ctx); err != nil || info.Holder != "" {
		t.Fatalf("after the release: %+v, %v; want nobody", info, err)
	}
	// Another holder's value is never taken for this handle's own.
	b, err := eventstore.OpenLease(ctx, nc, "s0", eventstore.LeaseConfig{Holder: "b", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if term, err = a.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	value, _ := json.Marshal(eventstore.LeaseInfo{Holder: "b", Term: term})
	if _, err := kv.Update(ctx, "s0", value, a.Revision()); err != nil {
		t.Fatal(err)
	}
	if err := a.Renew(ctx); !errors.Is(err, eventstore.ErrLeaseLost) {
		t.Fatalf("renewal over another holder's value: got %v, want ErrLeaseLost", err)
	}
	if info, err := b.Info(ctx); err != nil || info.Holder != "b" {
		t.Fatalf("lease after the refused renewal: %+v, %v; want b", info, err)
	}
}

// TestLeaseReleaseKeepsOthers: releasing a lease already taken by another
// node leaves that node's lease alone.
func TestLeaseReleaseKeepsOthers(t *testing.T) {
	ls := openLeases(t, "a", "b")
	a, b := ls[0], ls[1]
	ctx := eventstoretest.Ctx(t, 20*time.Second)
	if _, err := a.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	eventstoretest.Eventually(t, 5*time.Second, func() error {
		_, err := b.Acquire(ctx)
		return err
	})
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if info, err := b.Info(ctx); err != nil || info.Holder != "b" {
		t.Fatalf("after a stale release: %+v, %v; want b to hold", info, err)
	}
}

// TestANodeNameIsClaimedByOneProcessAtATime: a name claimed and renewed is
// refused to a second claimant after claimLapseTTLs TTLs, naming who holds
// it; released, it is claimed at once; its holder cut off from NATS (as
// killed), it is claimed once the holder's claim has lapsed.
func TestANodeNameIsClaimedByOneProcessAtATime(t *testing.T) {
	srv := eventstoretest.RunEmbedded(t, t.TempDir())
	conn := func() *nats.Conn {
		nc, err := srv.Conn()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ctx := eventstoretest.Ctx(t, time.Minute)
	cfg := eventstore.LeaseConfig{TTL: time.Second}
	first, err := eventstore.ClaimName(ctx, conn(), "node-1", "first", cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = eventstore.ClaimName(ctx, conn(), "node-1", "second", cfg)
	waited := time.Since(start)
	if !errors.Is(err, eventstore.ErrNameInUse) || !strings.Contains(err.Error(), `node name "node-1" is held by another process (first)`) {
		t.Fatalf("a second claim of a held name: %v", err)
	}
	if waited < 2*time.Second {
		t.Fatalf("the second claim was refused after %s, before the holder's claim could lapse", waited)
	}
	other, err := eventstore.ClaimName(ctx, conn(), "node-2", "other", cfg)
	if err != nil {
		t.Fatalf("another name: %v", err)
	}
	defer other.Release(ctx)

	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Claimed at once: held still, the first's claim would lapse a TTL
	// after its last renewal.
	start = time.Now()
	cut := conn()
	third, err := eventstore.ClaimName(ctx, cut, "node-1", "third", cfg)
	if err != nil || time.Since(start) >= cfg.TTL {
		t.Fatalf("a released name claimed after %s: %v", time.Since(start), err)
	}
	defer third.Release(ctx)
	// third is cut off (its connection closed: its renewals fail, as a
	// killed process's would stop); its claim lapses after the TTL.
	cut.Close()
	fourth, err := eventstore.ClaimName(ctx, conn(), "node-1", "fourth", cfg)
	if err != nil {
		t.Fatalf("a name whose holder was cut off: %v", err)
	}
	fourth.Release(ctx)
}
