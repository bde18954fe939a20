package eventstoretest

import (
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// AppendStored appends to the stream of srv the messages src stores from
// sequence from to to, as stored (their subject, Tresor's headers and
// payload), each fenced on the one before, as plain messages: what a
// plain writer leaves when it stops in the middle of an append
// (eventstore.NATSStore.ReappendPlainAsync), to the message.
func AppendStored(tb testing.TB, srv *eventstore.EmbeddedServer, src *eventstore.NATSStore, from, to uint64) {
	tb.Helper()
	ctx := Ctx(tb, 10*time.Second)
	nc, err := srv.Conn()
	if err != nil {
		tb.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	for seq := from; seq <= to; seq++ {
		raw, err := src.Stream().GetMsg(ctx, seq)
		if err != nil {
			tb.Fatal(err)
		}
		h := nats.Header{}
		for k, vs := range raw.Header {
			if strings.HasPrefix(k, "Tresor-") {
				h[k] = vs
			}
		}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: raw.Subject, Header: h, Data: raw.Data}, jetstream.WithExpectLastSequence(seq-1)); err != nil {
			tb.Fatal(err)
		}
	}
}
