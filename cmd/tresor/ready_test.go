package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/projections"
)

// probe is one GET as a client sees it.
type probe struct {
	status     int
	retryAfter string
	body       map[string]any
	// raw is the body as it came.
	raw string
}

func (s *server) probe(path, token string) (probe, error) {
	req, err := http.NewRequest("GET", s.url+path, nil)
	if err != nil {
		return probe{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := contractClient.Do(req)
	if err != nil {
		return probe{}, err
	}
	defer resp.Body.Close()
	p := probe{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	p.raw = string(b)
	json.Unmarshal(b, &p.body)
	return p, nil
}

// TestReadsWaitUntilTheProjectionsHaveCaughtUp restarts serve on a stream of
// some 150 000 events and reads at once and all along: until /v1/ready says
// ready, every read answers 503 unavailable with Retry-After, never data
// from projections still catching up; once ready, the reads show the whole
// stream.
func TestReadsWaitUntilTheProjectionsHaveCaughtUp(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	const plays = 20000
	if _, stderr, code := run(t, "simulate", "--data", data, "--price", "0.50", "--plays", "20000", "--players", "64", "--quiet"); code != 0 {
		t.Fatalf("simulate: exit %d: %s", code, stderr)
	}
	s := startListening(t, data)
	op := s.token("operator", "")
	starting := 0
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ready, err := s.probe("/v1/ready", "")
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := s.probe("/v1/blocks", op)
		if err != nil {
			t.Fatal(err)
		}
		if ready.status == http.StatusOK {
			break
		}
		starting++
		if ready.status != http.StatusServiceUnavailable || ready.body["status"] != "starting" || ready.retryAfter == "" {
			t.Fatalf("readiness while starting: %+v", ready)
		}
		// A read answered before ready would be served from projections
		// still catching up: it must be refused. (The service may become
		// ready between the two requests: then the read is whole.)
		if blocks.status != http.StatusServiceUnavailable || blocks.body["code"] != "unavailable" || blocks.retryAfter == "" {
			if again, _ := s.probe("/v1/ready", ""); again.status != http.StatusOK {
				t.Fatalf("read while starting: %+v", blocks)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 2 minutes: %+v\n%s", ready, s.logs)
		}
		time.Sleep(5 * time.Millisecond) // well inside the token's rate limit
	}
	if starting == 0 {
		t.Fatalf("ready at the first look: the restart on %d plays was never seen starting", plays)
	}
	r, _ := s.probe("/v1/ready", "")
	if r.body["status"] != "ready" || r.body["projection_seq"].(float64) < r.body["start_seq"].(float64) || r.body["start_seq"].(float64) < plays*6 {
		t.Fatalf("ready: %+v", r)
	}
	b, _ := s.probe("/v1/blocks", op)
	if got := b.body["blocks"].([]any)[0].(map[string]any)["sold"]; got != float64(plays) {
		t.Fatalf("block sold %v once ready, want %d", got, plays)
	}
	// The line is logged by a watcher that looks every 20 ms.
	eventually(t, 10*time.Second, func() bool { return strings.Contains(s.logs.String(), "msg=ready") })
	t.Logf("%d looks while starting", starting)
}

// TestReadinessFallsWhenTheStreamIsGone: with every NATS node down, health
// stays up (liveness) but readiness answers 503; it comes back with NATS.
func TestReadinessFallsWhenTheStreamIsGone(t *testing.T) {
	natsDir := t.TempDir()
	nats, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: natsDir, ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	url := nats.ClientURL()
	data := externalKeys(t)
	s := startServe(t, data, "--nats", url)
	nats.Shutdown()
	eventually(t, 20*time.Second, func() bool {
		p, err := s.probe("/v1/ready", "")
		return err == nil && p.status == http.StatusServiceUnavailable && p.body["status"] == "unavailable" && p.retryAfter != ""
	})
	if h, err := s.probe("/v1/health", ""); err != nil || h.status != http.StatusOK || h.body["readiness"] != "unavailable" {
		t.Fatalf("health with NATS down: %+v %v", h, err)
	}
	host := strings.TrimPrefix(url, "nats://")
	back, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: natsDir, ListenAddr: host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(back.Shutdown)
	// Ready means the reads are whole again; the writes wait for the lease,
	// which this only node takes back once NATS is up (until then a command
	// answers 503 unavailable: reads go on without a writer).
	eventually(t, 30*time.Second, func() bool {
		p, err := s.probe("/v1/ready", "")
		cluster, _ := p.body["cluster"].(map[string]any)
		return err == nil && p.status == http.StatusOK && cluster["role"] == "writer"
	})
	op := s.token("operator", "")
	s.must(200, call{"PUT", "/v1/players/p-1", op, "", `{"weekly_deposit_limit":"10.00"}`})
	s.stop()
}

// TestAuditOfTheReadModelsAfterACleanStop: after SIGTERM the PostgreSQL
// projections hold the whole stream, the closing seal included, so that an
// audit comparing them with the stream finds nothing missing.
func TestAuditOfTheReadModelsAfterACleanStop(t *testing.T) {
	t.Parallel()
	data, db := t.TempDir(), freshDatabase(t)
	s := startServe(t, data, "--database-url", db)
	op, p := s.token("operator", ""), s.token("player", "p1")
	s.must(201, call{"POST", "/v1/emissions", op, "e", `{"price":"2.00","blocks":1}`})
	s.must(200, call{"PUT", "/v1/players/p1", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"100.00"}`})
	s.must(200, call{"POST", "/v1/players/p1/deposits", op, "d", `{"amount":"20.00"}`})
	play := s.must(201, call{"POST", "/v1/players/p1/plays", p, "s", `{"stake":"2.00"}`})["play_id"].(string)
	for n := 1; n <= 4; n++ {
		s.must(200, call{"POST", "/v1/players/p1/plays/" + play + "/throws", p, "", `{"throw":` + string(rune('0'+n)) + `}`})
	}
	s.stop()
	if r := auditReport(t, 0, "--data", data, "--database-url", db); !r.OK || r.Plays != 1 {
		t.Fatalf("audit after a clean stop: %+v", r)
	}
}

// externalKeys makes a data directory with the keys an external stream's
// writers bring.
func externalKeys(t *testing.T) string {
	t.Helper()
	data := t.TempDir()
	if err := os.MkdirAll(filepath.Join(data, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"master.key", "seal.ed25519", "token.key"} {
		if err := os.WriteFile(filepath.Join(data, "keys", name), []byte(strings.Repeat("k", 32)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return data
}

// externalNATS runs a nats-server of its own for a test's `serve --nats`,
// stopped at cleanup, and returns its URL.
func externalNATS(tb testing.TB) string {
	tb.Helper()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: tb.TempDir(), ListenAddr: "127.0.0.1:0"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Shutdown)
	return srv.ClientURL()
}

// eventually polls ok until it holds or the timeout passes.
func eventually(tb testing.TB, timeout time.Duration, ok func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			tb.Fatalf("still not so after %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// flickeringWriter is a writer side whose error comes and goes from one
// call to the next, as a cluster node's does while it sees the lease
// renewed.
type flickeringWriter struct {
	writerSide
	calls atomic.Int64
}

func (f *flickeringWriter) Err() error {
	if f.calls.Add(1)%2 == 1 {
		return errors.New("the writer lease has not been seen renewed yet")
	}
	return nil
}

func (f *flickeringWriter) LastSeq() uint64 { return 0 }

// Readiness reads the writer's error once: read twice, a node's error
// that was there at the first read and gone at the second made state
// dereference nil, and serve panic at its start.
func TestReadinessReadsTheWritersErrorOnce(t *testing.T) {
	t.Parallel()
	gate := &writerGate{}
	gate.open(&flickeringWriter{})
	rd := &readiness{gate: gate, runner: projections.NewRunner(nil, nil)}
	got := rd.state()
	if got.Status != api.StatusUnavailable || got.Reason != "the writer lease has not been seen renewed yet" {
		t.Fatalf("readiness %q (%s), want unavailable with the writer's error", got.Status, got.Reason)
	}
}

// A writer side that takes commands again is ready only once it has for
// readyHold: a node's readiness does not flap with its forward's answers
// while a takeover is under way.
func TestReadinessHoldsAfterTheWriterSideFailed(t *testing.T) {
	t.Parallel()
	nc, done := embeddedConn(t, t.TempDir())
	defer done()
	gate := &writerGate{}
	w := &flickeringWriter{}
	gate.open(w)
	rd := &readiness{gate: gate, runner: projections.NewRunner(nil, nil), conn: nc}
	failed := time.Now() // no later than the failure state records
	if got := rd.state(); got.Status != api.StatusUnavailable {
		t.Fatalf("readiness %q with the writer failing", got.Status)
	}
	w.calls.Store(1) // its next calls find no error
	var got api.Readiness
	for got = rd.state(); got.Status != api.StatusReady; got = rd.state() {
		if !strings.Contains(got.Reason, "taken again") {
			t.Fatalf("readiness %q (%s) while held", got.Status, got.Reason)
		}
		w.calls.Store(1)
		time.Sleep(readyPoll) // polling the clock, not waiting for an event
	}
	if held := time.Since(failed); held < readyHold {
		t.Fatalf("ready %s after the writer side failed, want at least %s", held, readyHold)
	}
}
