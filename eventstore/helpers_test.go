package eventstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// forge publishes a copy of ev with another payload straight to the stream.
func forge(tb testing.TB, store eventstore.Store, ev eventstore.RecordedEvent, payload []byte) uint64 {
	tb.Helper()
	ev.ID += "-forged"
	ev.Payload = payload
	return publishRaw(tb, store, ev)
}

// publishRaw publishes ev straight to the stream, bypassing the store, with
// the envelope headers of the first stored format: no append marker, as
// every event stored before it existed.
func publishRaw(tb testing.TB, store eventstore.Store, ev eventstore.RecordedEvent) uint64 {
	tb.Helper()
	return publishMarked(tb, store, ev, 0)
}

// publishMarked is publishRaw with the append marker announcing remaining
// events after ev (none for 0): what a disk that tore an append keeps of
// its first events.
func publishMarked(tb testing.TB, store eventstore.Store, ev eventstore.RecordedEvent, remaining int) uint64 {
	tb.Helper()
	ns := store.(*eventstore.NATSStore)
	js, err := jetstream.New(ns.Conn())
	if err != nil {
		tb.Fatal(err)
	}
	msg := &nats.Msg{Subject: ns.Subject(ev.Chain, ev.Aggregate), Header: nats.Header{
		eventstore.HeaderID:         {ev.ID},
		eventstore.HeaderType:       {ev.Type},
		eventstore.HeaderSchema:     {fmt.Sprint(ev.SchemaVersion)},
		eventstore.HeaderChainSeq:   {fmt.Sprint(ev.ChainSeq)},
		eventstore.HeaderRecordedAt: {ev.RecordedAt.Format(time.RFC3339Nano)},
		eventstore.HeaderPrevHash:   {ev.PrevHash.String()},
		eventstore.HeaderHash:       {ev.Hash.String()},
	}, Data: ev.Payload}
	if ev.CorrelationID != "" {
		msg.Header.Set(eventstore.HeaderCorrelation, ev.CorrelationID)
	}
	if remaining > 0 {
		msg.Header.Set(eventstore.HeaderAppendRemaining, fmt.Sprint(remaining))
	}
	ack, err := js.PublishMsg(eventstoretest.Ctx(tb, 10*time.Second), msg)
	if err != nil {
		tb.Fatalf("publish %s straight to the stream: %v", ev.ID, err)
	}
	return ack.Sequence
}

// embeddedBackend runs the suite against one embedded server.
func embeddedBackend(tb testing.TB) eventstoretest.Backend {
	dir := tb.TempDir()
	srv := eventstoretest.RunEmbedded(tb, dir)
	return eventstoretest.Backend{
		Open: func(tb testing.TB, cfg eventstore.Config) eventstore.Store {
			return eventstoretest.OpenEmbedded(tb, srv, cfg)
		},
		Forge: forge,
		Restart: func(tb testing.TB) {
			srv.Shutdown()
			srv = eventstoretest.RunEmbedded(tb, dir)
		},
	}
}

// clusterBackend runs the suite against cluster c.
func clusterBackend(c *eventstoretest.Cluster) eventstoretest.Backend {
	return eventstoretest.Backend{
		Open: func(tb testing.TB, cfg eventstore.Config) eventstore.Store {
			return eventstoretest.OpenOnCluster(tb, c, cfg)
		},
		Forge: forge,
		Restart: func(tb testing.TB) {
			for i := range c.Nodes {
				c.Stop(i)
			}
			c.StartAll(tb)
		},
	}
}
