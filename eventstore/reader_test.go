package eventstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/internal/bench"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// runWithReaders starts an embedded server advertising its read-only
// listener on dir, and a store on it holding n events.
func runWithReaders(tb testing.TB, dir string, n int) (*eventstore.EmbeddedServer, *eventstore.NATSStore) {
	tb.Helper()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: dir, Holder: "tresor serve", Readers: &eventstore.ReaderAccess{}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Shutdown)
	store := eventstoretest.OpenEmbedded(tb, srv, eventstore.Config{})
	appendEvents(tb, store, 0, n)
	return srv, store
}

// appendEvents appends events from..to-1 to chain s0, one per append.
func appendEvents(tb testing.TB, store eventstore.Store, from, to int) {
	tb.Helper()
	ctx := eventstoretest.Ctx(tb, time.Minute)
	for i := from; i < to; i++ {
		if _, err := store.Append(ctx, "s0", eventstore.AppendRequest{Events: []eventstore.Event{eventstoretest.Ev("Deposited", "player", "p1", i)}}); err != nil {
			tb.Fatal(err)
		}
	}
}

// join opens dir as a reader while another server holds it.
func join(tb testing.TB, dir string, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	srv, nc, err := eventstore.RunOrJoin(eventstoretest.Ctx(tb, 30*time.Second), eventstore.EmbeddedConfig{DataDir: dir}, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	if srv != nil {
		tb.Fatal("RunOrJoin started a second server on a directory in use")
	}
	tb.Cleanup(nc.Close)
	return nc
}

// TestReaderReadsALiveStream reads, through the holder's advertised
// listener, the events written so far and then those written while it
// follows the stream.
func TestReaderReadsALiveStream(t *testing.T) {
	dir := t.TempDir()
	_, writer := runWithReaders(t, dir, 5)
	ctx := eventstoretest.Ctx(t, 30*time.Second)
	reader, err := eventstore.Open(ctx, join(t, dir), eventstore.Config{ReadOnly: true})
	if err != nil {
		t.Fatalf("open the stream read-only through the listener: %v", err)
	}
	var seen []uint64
	if err := reader.ReadStored(ctx, 1, 5, func(r eventstore.RecordedEvent) error {
		seen = append(seen, r.Sequence)
		return nil
	}); err != nil || len(seen) != 5 {
		t.Fatalf("read %v: %v", seen, err)
	}
	followed := make(chan uint64, 16)
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	go reader.Follow(fctx, 5, func(r eventstore.RecordedEvent) error {
		followed <- r.Sequence
		return nil
	})
	appendEvents(t, writer, 5, 7)
	for want := uint64(5); want <= 7; want++ {
		select {
		case got := <-followed:
			if got != want {
				t.Fatalf("followed sequence %d, want %d", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("sequence %d not followed", want)
		}
	}
}

// TestAdvertisedReaderCannotWrite has a client with the advertised
// credentials try every write (each refused by its permissions) and copy
// the stream out of the holder's account (the server accepts the push
// consumer, which delivers inside the holder's account only).
func TestAdvertisedReaderCannotWrite(t *testing.T) {
	dir := t.TempDir()
	srv, store := runWithReaders(t, dir, 3)
	eventstoretest.RequireWritesRefused(t, func(opts ...nats.Option) *nats.Conn { return join(t, dir, opts...) },
		"TRESOR", store.Subject("s0", eventstore.Aggregate{Kind: "player", ID: "p1"}))
	owner, err := srv.Conn()
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	eventstoretest.RequireCopiesConfined(t, join(t, dir), owner, "TRESOR", "_INBOX_reader")
	if last, err := store.LastSequence(eventstoretest.Ctx(t, 10*time.Second)); err != nil || last != 3 {
		t.Fatalf("the stream changed: last sequence %d, %v", last, err)
	}
}

// TestKeeperReadsTheDataKeys has the keeper the holder advertises read
// the data keys bucket of the stream (what tresor backup carries): the
// newest value of each entry, none of an erased one; a write into the
// bucket is refused. The reader may not read it (RequireWritesRefused).
func TestKeeperReadsTheDataKeys(t *testing.T) {
	dir := t.TempDir()
	_, store := runWithReaders(t, dir, 1)
	ctx := eventstoretest.Ctx(t, 30*time.Second)
	keys, err := store.OpenDataKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{keys.Create(ctx, "k.01", []byte("first")), keys.Update(ctx, "k.01", []byte("rewrapped"), 1),
		keys.Create(ctx, "p.p1", []byte(`{"key_id":"01"}`)), keys.Create(ctx, "k.02", []byte("erased")), keys.Erase(ctx, "k.02")} {
		if err != nil {
			t.Fatal(err)
		}
	}
	violations := make(chan string, 4)
	srv, nc, err := eventstore.RunOrJoin(ctx, eventstore.EmbeddedConfig{DataDir: dir, Keeper: true},
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err.Error() }))
	if err != nil || srv != nil {
		t.Fatalf("join as the keeper: server %v, %v", srv, err)
	}
	defer nc.Close()
	keeper, err := eventstore.Open(ctx, nc, eventstore.Config{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := keeper.ReadDataKeys(ctx)
	want := []eventstore.DataKeyEntry{{Name: "k.01", Value: []byte("rewrapped")}, {Name: "p.p1", Value: []byte(`{"key_id":"01"}`)}}
	if err != nil || fmt.Sprint(entries) != fmt.Sprint(want) {
		t.Fatalf("the keeper reads %q, %v; want %q", entries, err, want)
	}
	if err := nc.Publish("$KV."+eventstore.DataKeysBucket+".TRESOR.k.03", []byte("forged")); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-violations:
		if !strings.Contains(v, "Permissions Violation for Publish") {
			t.Fatalf("a write into the bucket as the keeper: %s", v)
		}
	case <-ctx.Done():
		t.Fatal("a write into the bucket as the keeper was not refused")
	}
}

// TestReaderTrustsNoStaleAdvertisement plants, in a directory held by a
// server that advertises nothing, an advertisement of another holding
// that points at a server anyone may use: the reader waits for its
// holder's own and never connects there.
func TestReaderTrustsNoStaleAdvertisement(t *testing.T) {
	decoy, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: t.TempDir(), ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer decoy.Shutdown()
	dir := t.TempDir()
	holder := eventstoretest.RunEmbedded(t, dir)
	eventstoretest.OpenEmbedded(t, holder, eventstore.Config{})
	stale, err := json.Marshal(map[string]string{"url": decoy.ClientURL(), "user": "", "password": "", "inbox_prefix": "_INBOX", "instance": "from-a-killed-holder"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tresor-reader.json"), stale, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	srv, nc, err := eventstore.RunOrJoin(ctx, eventstore.EmbeddedConfig{DataDir: dir})
	if srv != nil || nc != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RunOrJoin with a stale advertisement: server %v, connection %v, %v; want to be still waiting for the holder's", srv, nc, err)
	}
}

// TestReadersOnAStreamWrittenWithout reopens, with readers, a data
// directory written by a server without them: the stream is where it was
// (the global account) and the writer goes on appending.
func TestReadersOnAStreamWrittenWithout(t *testing.T) {
	dir := t.TempDir()
	before := eventstoretest.RunEmbedded(t, dir)
	appendEvents(t, eventstoretest.OpenEmbedded(t, before, eventstore.Config{}), 0, 3)
	before.Shutdown()
	_, store := runWithReaders(t, dir, 0)
	appendEvents(t, store, 3, 4)
	if got := eventstoretest.ReadAll(t, store); len(got) != 4 {
		t.Fatalf("read %d events after the restart with readers, want 4", len(got))
	}
}

// BenchmarkRegulatorRead runs a nats-server with the regulator's
// configuration (RegulatorConf, docs/export.md), writes 200 000 events as
// Tresor's user and reads them over TCP, raw (MeasureOrderedRead) and as an
// export, as Tresor's user (in the stream's account: what a regulator's
// user in a shared account read like) and as the regulator (through the
// account boundary, as the read-only commands also read a directory that
// tresor serve holds): the cost of the boundary. Run it with -benchtime 1x.
func BenchmarkRegulatorRead(b *testing.B) {
	b.Setenv("TRESOR_NATS_PASSWORD", "tresor-secret")
	b.Setenv("REGULATOR_NATS_PASSWORD", "regulator-secret")
	opts := &server.Options{}
	if err := opts.ProcessConfigString(eventstore.RegulatorConf(eventstore.ReaderAccess{})); err != nil {
		b.Fatal(err)
	}
	opts.JetStream, opts.StoreDir, opts.Host, opts.Port, opts.NoLog, opts.NoSigs = true, b.TempDir(), "127.0.0.1", server.RANDOM_PORT, true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		b.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats-server not ready")
	}
	ctx := context.Background()
	writer, err := eventstore.Connect(ctx, srv.ClientURL(), eventstore.Config{}, nats.UserInfo("tresor", "tresor-secret"))
	if err != nil {
		b.Fatal(err)
	}
	defer writer.Close()
	committerPipelined(b, writer, "s0", 200_000)
	last, err := writer.LastSequence(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, user := range []struct{ name, password, inbox string }{
		{"tresor", "tresor-secret", "_INBOX"},
		{"regulator", "regulator-secret", "_INBOX_reader"},
	} {
		reader, err := eventstore.Connect(ctx, srv.ClientURL(), eventstore.Config{ReadOnly: true},
			nats.UserInfo(user.name, user.password), nats.CustomInboxPrefix(user.inbox))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(user.name+"/raw_ordered_consumer", func(b *testing.B) {
			var rate float64
			for b.Loop() {
				if rate, err = bench.MeasureOrderedRead(ctx, reader, 1, last); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(rate, "events/s")
		})
		b.Run(user.name+"/export", func(b *testing.B) {
			var rate float64
			for b.Loop() {
				start := time.Now()
				x := eventstore.NewExportWriter(io.Discard)
				if err := errors.Join(reader.ReadStored(ctx, 1, last, x.Write), x.Flush()); err != nil {
					b.Fatal(err)
				}
				rate = float64(last) / time.Since(start).Seconds()
			}
			b.ReportMetric(rate, "events/s")
		})
		reader.Close()
	}
}
