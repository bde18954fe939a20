package eventstoretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RequireWritesRefused connects as a read-only NATS user
// (eventstore.ReaderAccess) with connect, which must pass the options it
// is given to nats.Connect, and has it try every way of changing the
// stream: publishing into it (on subject, one of its subjects), deleting a
// message, purging, deleting it, updating it to lift deny_delete, and
// creating another stream; and reading the bucket of personal data keys,
// which is not the reader's business. Each must be refused with a
// permissions violation naming its API subject; looking the stream up must
// work.
func RequireWritesRefused(tb testing.TB, connect func(...nats.Option) *nats.Conn, stream, subject string) {
	tb.Helper()
	violations := make(chan string, 16)
	nc := connect(nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			violations <- err.Error()
		}
	}))
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	st, err := js.Stream(Ctx(tb, 30*time.Second), stream)
	if err != nil {
		tb.Fatalf("the read-only user cannot look up the stream: %v", err)
	}
	// A refused request gets no answer: each attempt runs until the
	// server's violation for its subject arrives, then is cancelled.
	for _, tc := range []struct {
		what, subject string
		call          func(context.Context) error
	}{
		{"publish into the stream", subject, func(ctx context.Context) error {
			_, err := js.Publish(ctx, subject, []byte(`{}`))
			return err
		}},
		{"delete a message", "$JS.API.STREAM.MSG.DELETE." + stream, func(ctx context.Context) error { return st.DeleteMsg(ctx, 1) }},
		{"purge the stream", "$JS.API.STREAM.PURGE." + stream, func(ctx context.Context) error { return st.Purge(ctx) }},
		{"delete the stream", "$JS.API.STREAM.DELETE." + stream, func(ctx context.Context) error { return js.DeleteStream(ctx, stream) }},
		{"lift deny_delete", "$JS.API.STREAM.UPDATE." + stream, func(ctx context.Context) error {
			cfg := st.CachedInfo().Config
			cfg.DenyDelete = false
			_, err := js.UpdateStream(ctx, cfg)
			return err
		}},
		{"create a stream", "$JS.API.STREAM.CREATE.READER", func(ctx context.Context) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "READER", Subjects: []string{"reader.>"}})
			return err
		}},
		{"read the data keys", "$JS.API.STREAM.INFO.KV_" + eventstore.DataKeysBucket, func(ctx context.Context) error {
			_, err := js.Stream(ctx, "KV_"+eventstore.DataKeysBucket)
			return err
		}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		done := make(chan error, 1)
		go func() { done <- tc.call(ctx) }()
		select {
		case v := <-violations:
			if !strings.Contains(v, "Publish to \""+tc.subject+"\"") {
				tb.Errorf("%s: violation %q, want one for %s", tc.what, v, tc.subject)
			}
			cancel()
			<-done
		case err := <-done:
			tb.Errorf("%s: answered %v, want a permissions violation", tc.what, err)
		}
		cancel()
	}
}

// RequireCopiesConfined checks that a read-only user (reader) cannot have
// the server hand the stream to anyone else, by the two routes
// permissions do not close (nats-server checks neither a push consumer's
// deliver subject nor a pull request's reply subject against the
// requester's permissions), with owner a connection of the stream's own
// account:
//   - a push consumer the reader creates, delivering to a subject under
//     inbox, reaches that subject in the stream's account only (owner
//     receives the copy), never in the reader's (the reader does not);
//   - a pull request whose reply subject the reader names is answered in
//     the reader's account only (the reader receives the message, owner
//     does not).
//
// The stream must hold at least one message.
func RequireCopiesConfined(tb testing.TB, reader, owner *nats.Conn, stream, inbox string) {
	tb.Helper()
	ctx := Ctx(tb, 30*time.Second)
	subscribe := func(nc *nats.Conn, subject string) *nats.Subscription {
		sub, err := nc.SubscribeSync(subject)
		if err == nil {
			err = nc.Flush()
		}
		if err != nil {
			tb.Fatalf("subscribe to %s: %v", subject, err)
		}
		return sub
	}
	// received reports whether sub holds a message once nc has made a
	// round trip: a PONG comes after everything the server queued before.
	received := func(nc *nats.Conn, sub *nats.Subscription) bool {
		if err := nc.Flush(); err != nil {
			tb.Fatal(err)
		}
		n, _, err := sub.Pending()
		if err != nil {
			tb.Fatal(err)
		}
		return n > 0
	}

	copySubject := inbox + ".copy"
	ownerCopy, readerCopy := subscribe(owner, copySubject), subscribe(reader, copySubject)
	req := fmt.Sprintf(`{"stream_name":%q,"config":{"name":"copy","deliver_subject":%q,"deliver_policy":"all","ack_policy":"none"}}`,
		stream, copySubject)
	resp, err := reader.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE."+stream+".copy", []byte(req))
	if err != nil {
		tb.Fatalf("create a push consumer: %v", err)
	}
	var created struct {
		Error *struct{ Description string } `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &created); err != nil || created.Error != nil {
		tb.Fatalf("create a push consumer: %s (%v); nats-server refuses it now: tighten this check", resp.Data, err)
	}
	if _, err := ownerCopy.NextMsg(10 * time.Second); err != nil {
		tb.Fatalf("the push consumer delivers nothing, even in the stream's account: %v", err)
	}
	if received(reader, readerCopy) {
		tb.Error("a push consumer of the read-only user delivered the stream into its account")
	}

	pullReply := inbox + ".pull"
	ownerPull, readerPull := subscribe(owner, pullReply), subscribe(reader, pullReply)
	js, err := jetstream.New(reader)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Name: "pull", AckPolicy: jetstream.AckNonePolicy}); err != nil {
		tb.Fatalf("create a pull consumer: %v", err)
	}
	if err := reader.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+stream+".pull", pullReply, []byte(`{"batch":1}`)); err != nil {
		tb.Fatal(err)
	}
	if _, err := readerPull.NextMsg(10 * time.Second); err != nil {
		tb.Fatalf("a pull request of the read-only user is not answered: %v", err)
	}
	if received(owner, ownerPull) {
		tb.Error("a pull request of the read-only user was answered into the stream's account")
	}
}
