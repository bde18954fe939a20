package eventstore_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestOldServerRefused uses the machine's system nats-server (2.9, no
// atomic batches) when one listens on 127.0.0.1:4222, and skips otherwise.
func TestOldServerRefused(t *testing.T) {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:4222", 200*time.Millisecond)
	if err != nil {
		t.Skip("no nats-server on 127.0.0.1:4222")
	}
	conn.Close()
	_, err = eventstore.Connect(eventstoretest.Ctx(t, 10*time.Second), "nats://127.0.0.1:4222", eventstore.Config{Stream: "NEVER_CREATED"})
	if err == nil {
		t.Skip("the server on 127.0.0.1:4222 is recent enough")
	}
	if !errors.Is(err, eventstore.ErrServerTooOld) || !strings.Contains(err.Error(), "nats-server 2.") {
		t.Fatalf("want ErrServerTooOld naming the version, got %v", err)
	}
	t.Log(err)
}

// TestUnsafeStreamReported creates the stream by hand with settings that
// lose events and checks that opening reports each one and changes nothing.
func TestUnsafeStreamReported(t *testing.T) {
	srv := eventstoretest.RunEmbedded(t, t.TempDir())
	nc, err := srv.Conn()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := eventstoretest.Ctx(t, 10*time.Second)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TRESOR", Subjects: []string{"tresor.>"},
		Storage: jetstream.MemoryStorage, MaxAge: time.Hour, MaxMsgsPerSubject: 10}); err != nil {
		t.Fatal(err)
	}
	_, err = srv.Open(ctx, eventstore.Config{})
	var ue *eventstore.UnsafeStreamError
	if !errors.As(err, &ue) || !errors.Is(err, eventstore.ErrUnsafeStream) {
		t.Fatalf("want *UnsafeStreamError, got %v", err)
	}
	joined := strings.Join(ue.Diffs, "\n")
	for _, want := range []string{"storage", "max_age", "max_msgs_per_subject", "deny_delete", "deny_purge", "allow_atomic"} {
		if !strings.Contains(joined, want) {
			t.Errorf("diffs do not mention %s: %v", want, ue.Diffs)
		}
	}
	st, err := js.Stream(context.Background(), "TRESOR")
	if err != nil || st.CachedInfo().Config.MaxAge != time.Hour {
		t.Fatalf("stream was changed: %v", err)
	}
}

// TestNoListenerByDefault checks that the embedded default opens no TCP
// port and still serves in-process clients.
func TestNoListenerByDefault(t *testing.T) {
	srv := eventstoretest.RunEmbedded(t, t.TempDir())
	if u := srv.ClientURL(); u != "" {
		t.Fatalf("embedded default listens on %s", u)
	}
	s, err := srv.Open(eventstoretest.Ctx(t, 10*time.Second), eventstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}
