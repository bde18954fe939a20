package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/settlement"
	"github.com/nats-io/nats.go/micro"
)

// writerAndForwarder opens a writer serving the execute subject on an
// embedded server, and a forwarder on another connection.
func writerAndForwarder(tb testing.TB) (*settlement.Writer, *Forwarder, micro.Service) {
	tb.Helper()
	srv := embedded(tb)
	tb.Cleanup(srv.Shutdown)
	w := openWriter(tb, openStore(tb, srv.ClientURL(), 1))
	f, svc := serveAndForward(tb, srv.ClientURL(), 2, w)
	return w, f, svc
}

// embedded runs a NATS server.
func embedded(tb testing.TB) *eventstore.EmbeddedServer {
	tb.Helper()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: tb.TempDir(), ListenAddr: "127.0.0.1:0"})
	if err != nil {
		tb.Fatal(err)
	}
	return srv
}

// serveAndForward serves w as the writer of term on url, and returns a
// forwarder to it on another connection.
func serveAndForward(tb testing.TB, url string, term uint64, w api.Writer) (*Forwarder, micro.Service) {
	tb.Helper()
	nc := openStore(tb, url, 1).Conn()
	svc, err := Serve(nc, "s0", term, w, slog.Default())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { svc.Stop() })
	// The service's subscriptions leave on their connection's own time:
	// a command forwarded on another one could reach the server first
	// and find nobody serving.
	if err := nc.Flush(); err != nil {
		tb.Fatal(err)
	}
	f := NewForwarder(openStore(tb, url, 1).Conn(), "s0")
	f.SetTerm(term)
	return f, svc
}

// swallower is a writer that never answers: one frozen, or dead with the
// command in hand.
type swallower struct{ got chan struct{} }

func (s swallower) Execute(ctx context.Context, _ domain.Command) (settlement.Result, error) {
	s.got <- struct{}{}
	<-ctx.Done()
	return settlement.Result{}, ctx.Err()
}

func (swallower) LastSeq() uint64 { return 0 }

// TestForwardReachesOnlyTheTermsWriter: a writer of an earlier term that
// still serves (frozen past the lease's TTL, then resumed, not yet aware
// that it lost the lease) is sent none of the commands meant for the
// writer of the current term. When both served one subject, the server
// spread the commands between them, and those given to the stale writer
// were swallowed until the client's deadline.
func TestForwardReachesOnlyTheTermsWriter(t *testing.T) {
	w, f, _ := writerAndForwarder(t)
	stale := swallower{got: make(chan struct{}, 64)}
	svc, err := Serve(f.nc, "s0", 1, stale, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	for i := range 20 {
		ctx := eventstoretest.Ctx(t, time.Second)
		if _, err := deposit(ctx, f, "p1", 100, fmt.Sprint("k", i)); err != nil {
			t.Fatalf("deposit %d through the forwarder of term 2: %v", i, err)
		}
	}
	if len(stale.got) != 0 || w.LastSeq() == 0 {
		t.Fatalf("the writer of term 1 was sent %d commands; the writer of term 2 is at %d", len(stale.got), w.LastSeq())
	}
	f.SetTerm(0)
	if _, err := deposit(eventstoretest.Ctx(t, time.Second), f, "p1", 100, "no-term"); !errors.Is(err, ErrNoWriter) {
		t.Fatalf("with no term known: %v, want ErrNoWriter", err)
	}
}

// TestForwarder: a command sent through the forwarder is executed by the
// writer that serves the subject and answered as the writer answered it: a
// result, the first result for a retried key, a refusal with its code. With
// nobody serving, the forwarder answers ErrNoWriter at once.
func TestForwarder(t *testing.T) {
	w, f, svc := writerAndForwarder(t)
	ctx := eventstoretest.Ctx(t, 30*time.Second)

	res, err := deposit(ctx, f, "p1", 5000, "k1")
	if err != nil {
		t.Fatal(err)
	}
	dep, ok := res.Events[0].(*domain.FundsDeposited)
	if !ok || dep.Amount != 5000 || dep.Balance != 5000 || len(res.Seqs) != 1 || res.Seqs[0] != w.LastSeq() {
		t.Fatalf("forwarded deposit: %+v, want a FundsDeposited of 50.00 at the writer's last sequence %d", res, w.LastSeq())
	}
	if f.LastSeq() != w.LastSeq() {
		t.Fatalf("forwarder's last sequence %d, writer's %d", f.LastSeq(), w.LastSeq())
	}
	again, err := f.Execute(ctx, domain.Deposit{Player: "p1", Amount: 5000, Key: "k1", By: operator})
	if err != nil || again.Replay == nil || again.Replay.Balance != 5000 || len(again.Events) != 0 {
		t.Fatalf("retry of k1: %+v, %v; want the first result replayed", again, err)
	}
	if again.LastSeq() < res.LastSeq() {
		t.Fatalf("retry of k1 answered at %d, want the writer's position, at or past the deposit's %d", again.LastSeq(), res.LastSeq())
	}
	_, err = f.Execute(ctx, domain.Withdraw{Player: "p1", Amount: 9000, Key: "w1", By: operator})
	if !errors.Is(err, domain.ErrInsufficientFunds) {
		t.Fatalf("withdrawal over the balance: %v, want insufficient_funds", err)
	}
	if _, err := f.Execute(ctx, domain.CloseBlock{Block: "B1", Seed: domain.Seed{1}}); !errors.Is(err, domain.ErrInvalidRequest) {
		t.Fatalf("a command carrying a seed: %v, want invalid_request before sending", err)
	}

	svc.Stop()
	// The server drops the writer's subscription a moment after Stop (its
	// unsubscribe travels on another connection than the request).
	eventstoretest.Eventually(t, 5*time.Second, func() error {
		_, err := f.Execute(ctx, domain.Deposit{Player: "p1", Amount: 100, Key: "k2", By: operator})
		if !errors.Is(err, ErrNoWriter) {
			return fmt.Errorf("with no writer serving: %v, want ErrNoWriter", err)
		}
		return nil
	})
	start := time.Now()
	if _, err = f.Execute(ctx, domain.Deposit{Player: "p1", Amount: 100, Key: "k3", By: operator}); !errors.Is(err, ErrNoWriter) {
		t.Fatalf("with no writer serving: %v, want ErrNoWriter", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("ErrNoWriter took %s, want at once", d)
	}
}

// BenchmarkDeposit compares a deposit executed on the writer with one
// forwarded to it over NATS request/reply: the difference is forwarding's
// cost per command. Sequential, so each figure is a latency.
func BenchmarkDeposit(b *testing.B) {
	w, f, _ := writerAndForwarder(b)
	ctx := context.Background()
	if _, err := deposit(ctx, w, "p1", 1, "setup"); err != nil {
		b.Fatal(err)
	}
	for _, side := range []struct {
		name string
		w    interface {
			Execute(context.Context, domain.Command) (settlement.Result, error)
		}
	}{{"local", w}, {"forwarded", f}} {
		b.Run(side.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, err := side.w.Execute(ctx, domain.Deposit{Player: "p1", Amount: 1, Key: fmt.Sprint(side.name, i), By: operator}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestForwardGivesUpWhenTheConnectionDrops: a command forwarded on a NATS
// connection that drops while the writer has it answers at once that the
// client may retry with its key, instead of waiting ForwardWaitMax for an
// answer that cannot come on it; a command forwarded while the connection
// is down answers so without being sent.
func TestForwardGivesUpWhenTheConnectionDrops(t *testing.T) {
	srv := embedded(t)
	stale := swallower{got: make(chan struct{}, 1)}
	f, _ := serveAndForward(t, srv.ClientURL(), 1, stale)
	// The server goes down once the writer has the command.
	shut := make(chan struct{})
	go func() {
		defer close(shut)
		select {
		case <-stale.got:
		case <-time.After(time.Minute):
		}
		srv.Shutdown()
	}()
	start := time.Now()
	_, err := deposit(eventstoretest.Ctx(t, time.Minute), f, "p1", 100, "k1")
	if took := time.Since(start); !errors.Is(err, api.ErrNotReady) || errors.Is(err, ErrNoWriter) || took >= ForwardWaitMax/2 {
		t.Fatalf("forward when the connection dropped: %v after %s, want api.ErrNotReady from the writer at once (ForwardWaitMax %s)", err, took, ForwardWaitMax)
	}
	<-shut
	start = time.Now()
	_, err = deposit(eventstoretest.Ctx(t, time.Minute), f, "p1", 100, "k2")
	if took := time.Since(start); !errors.Is(err, api.ErrNotReady) || took >= time.Second {
		t.Fatalf("forward with the connection down: %v after %s, want api.ErrNotReady at once", err, took)
	}
}

// instant is a writer that answers at once, recording nothing: forwarding
// alone is measured against it.
type instant struct{}

func (instant) Execute(context.Context, domain.Command) (settlement.Result, error) {
	return settlement.Result{}, nil
}

func (instant) LastSeq() uint64 { return 0 }

// BenchmarkForward is forwarding's own cost per command: a NATS
// request/reply to a writer that answers at once, one at a time
// (sequential, a latency) and 64 in flight (the cost per command under
// load).
func BenchmarkForward(b *testing.B) {
	srv := embedded(b)
	b.Cleanup(srv.Shutdown)
	f, _ := serveAndForward(b, srv.ClientURL(), 1, instant{})
	cmd := domain.Deposit{Player: "p1", Amount: 1, Key: "k", By: operator}
	b.Run("sequential", func(b *testing.B) {
		for b.Loop() {
			if _, err := f.Execute(context.Background(), cmd); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("64-in-flight", func(b *testing.B) {
		b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := f.Execute(context.Background(), cmd); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
