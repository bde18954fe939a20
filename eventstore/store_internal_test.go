package eventstore

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestWaitForResponderWaitsForTheStreamsAnswer stands a responder in for
// the stream on a real server: Open's probe waits while nothing answers on
// the stream's subjects, returns once the stream's refusal comes, and
// takes no other answer (a probe that was stored would be an event nobody
// wrote).
func TestWaitForResponderWaitsForTheStreamsAnswer(t *testing.T) {
	nc := embeddedConn(t)
	s := &NATSStore{cfg: Config{Stream: "LATE"}, nc: nc, subj: subjects{prefix: "late"}}
	answer := func(data string) func(*nats.Msg) {
		return func(m *nats.Msg) {
			reply := data
			if m.Header.Get("Nats-Expected-Stream") != "LATE.probe" {
				reply = `{"error":{"code":400,"err_code":10000,"description":"probe without its header"}}`
			}
			_ = m.Respond([]byte(reply))
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	err := s.waitForResponder(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no responder on late.probe") {
		t.Fatalf("nobody answering: want no responder at the deadline, got %v", err)
	}

	refusal := `{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"}}`
	time.AfterFunc(200*time.Millisecond, func() { _, _ = nc.Subscribe("late.probe", answer(refusal)) })
	start := time.Now()
	if err := s.waitForResponder(t.Context()); err != nil {
		t.Fatalf("the stream answering after 200 ms: %v", err)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Fatalf("returned after %v, before anything answered", waited)
	}

	s.subj.prefix = "stored"
	if _, err := nc.Subscribe("stored.probe", answer(`{"stream":"LATE","seq":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.waitForResponder(t.Context()); err == nil || !strings.Contains(err.Error(), "unexpected answer") {
		t.Fatalf("an acknowledgement of the probe: want an error, got %v", err)
	}
}

// TestOpenPatientlyTriesAgainAndSaysWhy: OpenPatiently tries again until
// an open succeeds, logging failed tries with what it opens (at most one
// line every openAttempt); gives up at
// once on a finalError, with its error; and when its time is up returns the
// last error saying how long it tried and what to check.
func TestOpenPatientlyTriesAgainAndSaysWhy(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	tries := 0
	v, err := OpenPatiently(context.Background(), log, "stream T", func(context.Context) (int, error) {
		if tries++; tries < 3 {
			return 0, errors.New("no answer")
		}
		return 7, nil
	})
	if v != 7 || err != nil || tries != 3 {
		t.Fatalf("got %d, %v after %d tries; want 7 on the third", v, err, tries)
	}
	// The second try, 100 ms after the first, within openAttempt of the
	// first line: not logged.
	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `level=WARN msg="not open yet: trying again" open="stream T" try=1`) || !strings.Contains(lines[0], `err="no answer"`) {
		t.Fatalf("the two failed tries logged as:\n%s", logged.String())
	}
	refused := errors.New("refused")
	tries = 0
	if _, err := OpenPatiently(context.Background(), nil, "stream T", func(context.Context) (int, error) {
		tries++
		return 0, finalError{refused}
	}); err != refused || tries != 1 {
		t.Fatalf("a final error: %v after %d tries; want it at once", err, tries)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	tries = 0
	_, err = OpenPatiently(ctx, nil, "stream T", func(context.Context) (int, error) {
		tries++
		return 0, errors.New("no answer")
	})
	if tries < 2 || err == nil || !strings.HasPrefix(err.Error(), "no answer (tried for ") || !strings.Contains(err.Error(), "a quorum, or as many as --replicas to create a stream?)") {
		t.Fatalf("time up: %v after %d tries", err, tries)
	}
}

// embeddedConn starts an embedded sync-always server on a temporary
// directory, stopped when tb ends, and returns a connection to it.
func embeddedConn(tb testing.TB) *nats.Conn {
	tb.Helper()
	srv, err := RunEmbedded(EmbeddedConfig{DataDir: tb.TempDir()})
	var nc *nats.Conn
	if err == nil {
		tb.Cleanup(srv.Shutdown)
		nc, err = srv.Conn()
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	return nc
}
