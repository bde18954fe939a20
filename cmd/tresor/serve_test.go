package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/jackc/pgx/v5"
)

// server is a running `tresor serve`.
type server struct {
	tb   testing.TB
	cmd  *exec.Cmd
	url  string
	data string
	// logs is read by the test while the process writes it.
	logs *eventstoretest.LogBuffer
	// drained is closed once the process's stderr is read to its end.
	drained chan struct{}
	done    chan error
	// retryUnavailable makes must retry a 503 unavailable, as a client of
	// a cluster does (with the same key): a takeover may start at any
	// moment on a loaded machine, and a test that does not test takeovers
	// must not fail on one.
	retryUnavailable bool
	// written is the highest position a write answered through this
	// server (shared by the nodes of one stream): every later read
	// without a min_seq of its own waits for it, as a client that reads
	// its writes does, so that no test reads a projection still behind.
	written *atomic.Uint64
}

// startServe runs the real binary on a random port and waits until it is
// ready: listening, its writer rebuilt and its projections caught up.
func startServe(tb testing.TB, data string, args ...string) *server {
	tb.Helper()
	s := startListening(tb, data, args...)
	s.waitReady(60 * time.Second)
	return s
}

// waitReady polls GET /v1/ready until it answers 200.
func (s *server) waitReady(timeout time.Duration) {
	s.tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := contractClient.Get(s.url + "/v1/ready")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("tresor serve not ready after %s (last: %v)\n%s", timeout, err, s.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startListening runs the real binary on a random port and waits for its
// "listening on" line, which comes before it is ready.
func startListening(tb testing.TB, data string, args ...string) *server {
	tb.Helper()
	s, addr := launchServe(tb, data, args...)
	s.awaitListening(addr, "tresor serve")
	return s
}

// awaitListening sets s.url once addr receives the address the command
// (what) listens on, or fails the test when it exits or takes a minute.
func (s *server) awaitListening(addr <-chan string, what string) {
	s.tb.Helper()
	select {
	case a := <-addr:
		s.url = "http://" + a
	case err := <-s.done:
		s.tb.Fatalf("%s exited before listening: %v\n%s", what, err, s.logs)
	case <-time.After(60 * time.Second):
		s.tb.Fatalf("%s not listening after 60s\n%s", what, s.logs)
	}
}

// launchServe runs the real binary on a random port; addr receives the
// address it listens on, once it does. A serve that must refuse to start
// never listens or never becomes ready: its caller watches both.
func launchServe(tb testing.TB, data string, args ...string) (*server, <-chan string) {
	tb.Helper()
	s, addr := launch(tb, exec.Command(serveBin(), append([]string{"serve", "--data", data, "--http", "127.0.0.1:0"}, args...)...), data)
	// A serve on a NATS cluster holds the writer by a lease, which a loaded
	// machine may let lapse: it takes it back, answering 503 meanwhile.
	s.retryUnavailable = slices.Contains(args, "--nats")
	return s, addr
}

// launch starts cmd, a command of the real binary that logs "listening on
// ADDR" once its HTTP server listens (serve, vault), on data.
func launch(tb testing.TB, cmd *exec.Cmd, data string) (*server, <-chan string) {
	tb.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	s := &server{tb: tb, cmd: cmd, data: data, logs: &eventstoretest.LogBuffer{}, done: make(chan error, 1), drained: make(chan struct{}), written: new(atomic.Uint64)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(s.logs, line)
			if _, a, ok := strings.Cut(line, "listening on "); ok {
				addr <- strings.Trim(a, `"`)
			}
		}
		close(s.drained)
		s.done <- cmd.Wait()
	}()
	tb.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	})
	return s, addr
}

// serveBin is the binary `tresor serve` runs from: TRESOR_SERVE_BIN, to
// measure another build under the same tests (tokens, exports and audits
// still come from this tree's), or the one built for the tests.
func serveBin() string {
	if bin := os.Getenv("TRESOR_SERVE_BIN"); bin != "" {
		return bin
	}
	return tresorBin
}

// lastLogs kills the process if it still runs and returns its logs once
// read to their end: a failed test shows the lines written just before
// its failing answer, which a reader of a running process may not have
// reached yet.
func (s *server) lastLogs() *eventstoretest.LogBuffer {
	if s.cmd.ProcessState == nil {
		s.cmd.Process.Kill()
	}
	select {
	case <-s.drained:
	case <-time.After(10 * time.Second):
	}
	return s.logs
}

// stop sends SIGTERM and expects a clean exit.
func (s *server) stop() {
	s.tb.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			s.tb.Fatalf("tresor serve after SIGTERM: %v\n%s", err, s.logs)
		}
	case <-time.After(30 * time.Second):
		s.tb.Fatalf("tresor serve still running 30s after SIGTERM")
	}
}

// token mints a token with the real `tresor token`.
func (s *server) token(role, player string) string {
	s.tb.Helper()
	args := []string{"token", "--data", s.data, "--role", role}
	if player != "" {
		args = append(args, "--player", player)
	} else {
		args = append(args, "--subject", role+"@tests")
	}
	out, errOut, code := run(s.tb, args...)
	if code != 0 {
		s.tb.Fatalf("tresor token: %d %s", code, errOut)
	}
	return strings.TrimSpace(out)
}

// call is one HTTP request; key is the Idempotency-Key ("" for none).
type call struct {
	method, path, token, key, body string
}

// do sends c and returns the status and the decoded JSON answer.
func (s *server) do(c call) (int, map[string]any) {
	s.tb.Helper()
	return s.doWith(c, nil)
}

// doWith sends c with extra headers (Content-Type, Tresor-Min-Seq...).
func (s *server) doWith(c call, header http.Header) (int, map[string]any) {
	s.tb.Helper()
	status, m, err := s.sendWith(c, header)
	if err != nil {
		s.tb.Fatal(err)
	}
	return status, m
}

// send is do for any goroutine: it returns what do would fail the test on.
func (s *server) send(c call) (int, map[string]any, error) { return s.sendWith(c, nil) }

func (s *server) sendWith(c call, header http.Header) (int, map[string]any, error) {
	return s.sendVia(contractClient, c, header)
}

// sendVia sends c through client: one of its own opens its own
// connections.
func (s *server) sendVia(client *http.Client, c call, header http.Header) (int, map[string]any, error) {
	return s.sendUntil(client, c, header, time.Now().Add(takeoverRetryMax))
}

// sendUntil is sendVia retrying a read the harness gave a position until
// deadline.
func (s *server) sendUntil(client *http.Client, c call, header http.Header, deadline time.Time) (int, map[string]any, error) {
	req, err := http.NewRequest(c.method, s.url+c.path, strings.NewReader(c.body))
	if err != nil {
		return 0, nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	waits := s.readsWritten(req)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.key != "" {
		req.Header.Set("Idempotency-Key", c.key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", c.method, c.path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil && resp.StatusCode != http.StatusOK {
		return 0, nil, fmt.Errorf("%s %s: %d %q: %w", c.method, c.path, resp.StatusCode, b, err)
	}
	if resp.StatusCode >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
		return 0, nil, fmt.Errorf("%s %s: %d with Content-Type %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if seq, ok := m["seq"].(float64); ok && c.method != http.MethodGet && resp.StatusCode < 300 { // float-ok: a JSON number
		s.sawWrite(uint64(seq))
	}
	// A position the test did not ask for must not fail it: projections
	// that have not reached it in the server's bounded wait (a loaded
	// machine) answer 503, which a client reading its writes retries.
	if waits && resp.StatusCode == http.StatusServiceUnavailable && m["code"] == "unavailable" && time.Now().Before(deadline) {
		time.Sleep(takeoverRetryPause)
		return s.sendUntil(client, c, header, deadline)
	}
	return resp.StatusCode, m, nil
}

// readsWritten gives a read without a position of its own the last one
// written through s, and says whether it did.
func (s *server) readsWritten(req *http.Request) bool {
	if req.Method != http.MethodGet || req.URL.Query().Has("min_seq") || req.Header.Get("Tresor-Min-Seq") != "" {
		return false
	}
	seq := s.written.Load()
	if seq > 0 {
		req.Header.Set("Tresor-Min-Seq", strconv.FormatUint(seq, 10))
	}
	return seq > 0
}

// sawWrite raises s.written to seq.
func (s *server) sawWrite(seq uint64) {
	for {
		cur := s.written.Load()
		if seq <= cur || s.written.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// must sends c and fails unless the status is want.
func (s *server) must(want int, c call) map[string]any {
	s.tb.Helper()
	got, m := s.do(c)
	for deadline := time.Now().Add(takeoverRetryMax); s.retryUnavailable && want != http.StatusServiceUnavailable &&
		got == http.StatusServiceUnavailable && m["code"] == "unavailable" && time.Now().Before(deadline); {
		time.Sleep(takeoverRetryPause)
		got, m = s.do(c)
	}
	if got != want {
		s.tb.Fatalf("%s %s: status %d, want %d: %v%s", c.method, c.path, got, want, m, s.failureLog(got))
	}
	return m
}

// failureLog is, for an answer of the server's own failure (5xx), the end
// of its log, where it wrote why: a failed test shows its cause.
func (s *server) failureLog(status int) string {
	if status < http.StatusInternalServerError {
		return ""
	}
	time.Sleep(200 * time.Millisecond) // the log's reader may be a line behind the answer
	lines := strings.Split(strings.TrimRight(s.logs.String(), "\n"), "\n")
	return "\nthe server's last log lines:\n" + strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// How long and how often must retries a cluster node's 503 unavailable.
const (
	takeoverRetryMax   = 30 * time.Second
	takeoverRetryPause = 100 * time.Millisecond
)

// problem sends c and checks the problem's status and code.
func (s *server) problem(status int, code string, c call) {
	s.tb.Helper()
	got, m := s.do(c)
	if got != status || m["code"] != code {
		s.tb.Errorf("%s %s %s: %d %v, want %d %s%s", c.method, c.path, c.body, got, m, status, code, s.failureLog(got))
	}
}

// freshDatabases numbers the databases this process creates, so that tests
// running in parallel never pick one name; the pid and the clock keep runs
// on one server apart, a database left by a killed run included.
var freshDatabases atomic.Int64

// freshDatabase creates a database on TRESOR_TEST_DATABASE_URL, dropped at
// the end of the test; PostgreSQL tests fail, never skip, without it.
func freshDatabase(tb testing.TB) string {
	tb.Helper()
	admin := os.Getenv("TRESOR_TEST_DATABASE_URL")
	if admin == "" {
		admin = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("serve tests need PostgreSQL at TRESOR_TEST_DATABASE_URL (%s): %v", admin, err)
	}
	name := fmt.Sprintf("tresor_serve_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000, freshDatabases.Add(1))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		conn.Exec(dctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		conn.Close(dctx)
	})
	u, err := url.Parse(admin)
	if err != nil {
		tb.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

func TestServeMemory(t *testing.T) { testPlayerLife(t) }

func TestServePostgres(t *testing.T) { testPlayerLife(t, "--database-url", freshDatabase(t)) }

// testPlayerLife drives a player's whole life, every role boundary and
// every error code over HTTP, then restarts on the same data.
func testPlayerLife(t *testing.T, args ...string) {
	t.Parallel()
	data := t.TempDir()
	s := startServe(t, data, args...)
	op, fin, reg := s.token("operator", ""), s.token("finance", ""), s.token("regulator", "")
	p42, p43 := s.token("player", "p-42"), s.token("player", "p-43")

	em := s.must(201, call{"POST", "/v1/emissions", op, "", `{"price":"1.00","blocks":2}`})
	block := em["opened_blocks"].([]any)[0].(string)
	s.problem(422, "invalid_stake", call{"POST", "/v1/emissions", op, "", `{"price":"0.70","blocks":1}`})

	s.must(200, call{"PUT", "/v1/players/p-42", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"1.00"}`})
	s.must(200, call{"PUT", "/v1/players/p-43", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"10.00","self_excluded":true,"reason":"asked at registration"}`})
	acct := s.must(200, call{"POST", "/v1/players/p-42/deposits", op, "d1", `{"amount":"20.00"}`})
	if acct["balance"] != "20.00" {
		t.Fatalf("after deposit: %v", acct)
	}
	s.must(200, call{"POST", "/v1/players/p-42/deposits", op, "d1", `{"amount":"20.00"}`})
	s.problem(422, "limit_exceeded", call{"POST", "/v1/players/p-42/deposits", op, "d2", `{"amount":"90.00"}`})

	s.problem(409, "no_open_block", call{"POST", "/v1/players/p-42/plays", p42, "k0", `{"stake":"0.50"}`})
	play := s.must(201, call{"POST", "/v1/players/p-42/plays", p42, "k1", `{"stake":"1.00"}`})
	if play["throws_left"] != 4.0 || play["status"] != "in_progress" || play["balance"] != "19.00" || play["block_id"] != block || len(play["chests"].([]any)) != 9 {
		t.Fatalf("play answer: %v", play)
	}
	for _, c := range play["chests"].([]any) {
		if _, ok := c.(map[string]any)["symbol"]; ok {
			t.Fatalf("a chest's content shown before it is opened: %v", play)
		}
	}
	id := play["play_id"].(string)
	again := s.must(200, call{"POST", "/v1/players/p-42/plays", p42, "k1", `{"stake":"1.00"}`})
	if again["play_id"] != id {
		t.Fatalf("retried play %v, want %s", again["play_id"], id)
	}
	last := s.must(200, call{"GET", "/v1/players/p-42/plays/last", p42, "", ""})
	if last["play_id"] != id {
		t.Fatalf("last play %v, want %s (read your writes)", last["play_id"], id)
	}
	var th map[string]any
	for i := 1; i <= 4; i++ {
		th = s.must(200, call{"POST", "/v1/players/p-42/plays/" + id + "/throws", p42, "", ""})
		if th["throws_left"] != float64(4-i) {
			t.Fatalf("throw %d: %v", i, th)
		}
	}
	if th["status"] != "settled" || th["tier"] == nil || th["prize"] == nil {
		t.Fatalf("4th throw: %v", th)
	}
	s.problem(409, "play_finished", call{"POST", "/v1/players/p-42/plays/" + id + "/throws", p42, "", ""})
	hist := s.must(200, call{"GET", "/v1/players/p-42/plays?limit=10&min_seq=" + fmt.Sprint(th["seq"]), reg, "", ""})
	plays := hist["plays"].([]any)
	if len(plays) != 1 || plays[0].(map[string]any)["status"] != "settled" {
		t.Fatalf("history: %v", hist)
	}
	s.must(200, call{"GET", "/v1/players/p-42/plays/" + id, op, "", ""})
	s.problem(404, "not_found", call{"GET", "/v1/players/p-42/plays/" + block + "-U000099", p42, "", ""})
	s.problem(422, "insufficient_funds", call{"POST", "/v1/players/p-42/withdrawals", op, "w0", `{"amount":"500.00"}`})
	wd := s.must(200, call{"POST", "/v1/players/p-42/withdrawals", op, "w1", `{"amount":"5.00"}`})
	s.problem(422, "limit_exceeded", call{"POST", "/v1/players/p-42/plays", p42, "k2", `{"stake":"1.00"}`})
	s.problem(422, "invalid_stake", call{"POST", "/v1/players/p-42/plays", p42, "k3", `{"stake":"0.70"}`})
	s.problem(403, "self_excluded", call{"POST", "/v1/players/p-43/plays", p43, "k1", `{"stake":"1.00"}`})
	s.must(200, call{"GET", "/v1/blocks", fin, "", ""})
	s.must(200, call{"GET", "/v1/blocks/" + block, reg, "", ""})
	s.must(200, call{"GET", "/v1/reconciliation?emission=" + em["emission_id"].(string), fin, "", ""})
	s.must(200, call{"GET", "/v1/health", "", "", ""})

	// Role boundaries: a player never learns whether another exists.
	for _, c := range []call{
		{"GET", "/v1/players/p-43/account", p42, "", ""},
		{"GET", "/v1/players/nobody/account", p42, "", ""},
		{"GET", "/v1/players/p-43/plays", p42, "", ""},
		{"GET", "/v1/players/p-43/plays/last", p42, "", ""},
		{"POST", "/v1/players/p-43/plays", p42, "k9", `{"stake":"1.00"}`},
		{"POST", "/v1/players/p-42/deposits", p42, "d9", `{"amount":"1.00"}`},
		{"PUT", "/v1/players/p-43", p42, "", `{}`},
		{"POST", "/v1/emissions", fin, "", `{"price":"1.00","blocks":1}`},
		{"GET", "/v1/blocks", p42, "", ""},
		{"GET", "/v1/reconciliation", op, "", ""},
		{"POST", "/v1/players/p-42/plays", op, "k9", `{"stake":"1.00"}`},
		{"GET", "/v1/significant-events", fin, "", ""},
		{"POST", "/v1/blocks/" + block + "/close", fin, "", ""},
	} {
		s.problem(403, "forbidden", c)
	}
	_, other := s.do(call{"GET", "/v1/players/p-43/account", p42, "", ""})
	_, nobody := s.do(call{"GET", "/v1/players/nobody/account", p42, "", ""})
	if fmt.Sprint(other) != fmt.Sprint(nobody) {
		t.Errorf("a player learns whether another exists: %v vs %v", other, nobody)
	}
	s.problem(401, "unauthorized", call{"GET", "/v1/players/p-42/account", "", "", ""})
	s.problem(401, "unauthorized", call{"GET", "/v1/players/p-42/account", p42 + "x", "", ""})
	s.problem(404, "not_found", call{"GET", "/v1/blocks/E0009-B001", op, "", ""})
	s.problem(400, "invalid_request", call{"POST", "/v1/blocks/" + block + "/close", op, "", ""})
	closedOnce := s.must(200, call{"POST", "/v1/blocks/" + block + "/close", op, "", `{"reason":"test: closed early"}`})
	// A retry of the close is safe: the same closed block, nothing recorded.
	closedTwice := s.must(200, call{"POST", "/v1/blocks/" + block + "/close", op, "", ""})
	if closedTwice["state"] != "closed" || closedTwice["seed"] != closedOnce["seed"] || closedTwice["closed_at"] != closedOnce["closed_at"] {
		t.Errorf("second close: %v, first %v", closedTwice, closedOnce)
	}

	metrics := s.getText("/metrics", "")
	for _, m := range []string{"tresor_http_requests_total", "tresor_append_seconds", "tresor_projection_lag_events"} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	s.stop()
	s = startServe(t, data, args...)
	after := s.must(200, call{"GET", "/v1/players/p-42/account?min_seq=" + fmt.Sprint(wd["seq"]), op, "", ""})
	if after["balance"] != wd["balance"] || after["plays"] != 1.0 {
		t.Fatalf("after restart: %v", after)
	}
	s.stop()
}

// getText returns a GET's body as is, with token ("" for none); it fails
// unless the status is 200.
func (s *server) getText(path, token string) string {
	s.tb.Helper()
	status, _, b := s.getBody(path, token, "")
	if status != http.StatusOK {
		s.tb.Fatalf("GET %s: %d %s", path, status, b)
	}
	return string(b)
}

// getBody GETs path as it is answered, not decoded (accept, when given, is
// the Accept header), waiting as sendVia does for the last position written
// through s.
func (s *server) getBody(path, token, accept string) (int, http.Header, []byte) {
	s.tb.Helper()
	for deadline := time.Now().Add(takeoverRetryMax); ; time.Sleep(takeoverRetryPause) {
		req, err := http.NewRequest(http.MethodGet, s.url+path, nil)
		if err != nil {
			s.tb.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		waits := s.readsWritten(req)
		resp, err := contractClient.Do(req)
		if err != nil {
			s.tb.Fatal(err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if !waits || resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return resp.StatusCode, resp.Header, b
		}
	}
}

// TestMalformedRequestsRecordNothing throws malformed requests at every
// endpoint: each is a 4xx problem, and the stream does not move.
func TestMalformedRequestsRecordNothing(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir())
	op, p42 := s.fundedPlayer()
	before := s.must(200, call{"GET", "/v1/health", "", "", ""})["writer_seq"]
	big := `{"amount":"` + strings.Repeat("1", 5000) + `"}`
	bodies := []string{``, `{`, `[]`, `null`, `{"amount":"1.00"} {}`, `{"amount":"1.00","x":1}`, `{"amount":1}`,
		`{"amount":"1.001"}`, `{"amount":"-1.00"}`, `{"amount":"1e2"}`, `{"amount":"+1"}`, `{"amount":" 1"}`, big,
		`{"stake":"1.001"}`, `{"stake":"-1"}`, `{"stake":"1E0"}`, `{"price":"1.00","blocks":0}`, `{"price":"1.00","blocks":"2"}`,
		`{"weekly_deposit_limit":"1.5e1"}`, `{"self_excluded":"yes"}`}
	paths := []struct{ method, path, token string }{
		{"PUT", "/v1/players/p-42", op}, {"PUT", "/v1/players/bad%20id", op},
		{"POST", "/v1/players/p-42/deposits", op}, {"POST", "/v1/players/p-42/withdrawals", op},
		{"POST", "/v1/players/p-42/plays", p42}, {"POST", "/v1/emissions", op},
		{"POST", "/v1/players/p-42/plays/nope/throws", p42}, {"POST", "/v1/blocks/bad%20id/close", op},
	}
	for _, p := range paths {
		for i, b := range bodies {
			got, m := s.do(call{p.method, p.path, p.token, fmt.Sprintf("m%d", i), b})
			if got < 400 || got >= 500 {
				t.Errorf("%s %s %.40q: %d %v, want a 4xx", p.method, p.path, b, got, m)
			}
		}
	}
	for _, c := range []call{
		{"POST", "/v1/players/p-42/deposits", op, "", `{"amount":"1.00"}`},
		{"DELETE", "/v1/players/p-42", op, "", ""},
		{"GET", "/v1/players/p-42/plays?limit=101", op, "", ""},
		{"GET", "/v1/players/p-42/plays?limit=x", op, "", ""},
		{"GET", "/v1/players/p-42/plays?min_seq=-1", op, "", ""},
		{"GET", "/v1/players/bad%20id/account", op, "", ""},
		{"GET", "/v1/players/p-42/plays/nope", op, "", ""},
		{"GET", "/v1/blocks?limit=0", op, "", ""},
		{"GET", "/v1/blocks/bad%20id", op, "", ""},
		{"GET", "/v1/reconciliation?from=yesterday", s.token("finance", ""), "", ""},
		{"GET", "/v1/nothing", op, "", ""},
	} {
		if got, m := s.do(c); got < 400 || got >= 500 {
			t.Errorf("%s %s: %d %v, want a 4xx", c.method, c.path, got, m)
		}
	}
	// The scheme's name is case-insensitive: not a malformed request.
	if got, m := s.doWith(call{"GET", "/v1/players/p-42/account", "", "", ""}, http.Header{"Authorization": {"bearer " + op}}); got != 200 {
		t.Errorf("Authorization: bearer <token>: %d %v, want 200", got, m)
	}
	// Two Idempotency-Key fields: which one was meant is not ours to guess.
	twoKeys := http.Header{"Idempotency-Key": {"k1", "k2"}, "Content-Type": {"application/json"}}
	for _, c := range []call{
		{"POST", "/v1/players/p-42/deposits", op, "", `{"amount":"1.00"}`},
		{"POST", "/v1/emissions", op, "", `{"price":"1.00","blocks":1}`},
	} {
		if got, m := s.doWith(c, twoKeys); got != 400 || m["code"] != "invalid_request" {
			t.Errorf("%s %s with two Idempotency-Key fields: %d %v, want 400 invalid_request", c.method, c.path, got, m)
		}
	}
	if after := s.must(200, call{"GET", "/v1/health", "", "", ""})["writer_seq"]; after != before {
		t.Fatalf("malformed requests recorded events: writer at %v, was %v", after, before)
	}
	// Bursts of concurrent requests, each answer only read for its status:
	// the limit is met whatever one request's latency on a loaded machine
	// (the contract's checks of each answer cost more than the limit lets
	// through).
	// Every 429 says when to come back (README: "429 rate_limited with
	// Retry-After").
	limited := false
	for i := 0; i < 10 && !limited; i++ {
		var wg sync.WaitGroup
		var hits atomic.Int32
		for range 100 {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodGet, s.url+"/v1/players/p-42/account", nil)
				req.Header.Set("Authorization", "Bearer "+p42)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					var p struct{ Code string }
					if resp.StatusCode == http.StatusTooManyRequests && json.NewDecoder(resp.Body).Decode(&p) == nil && p.Code == "rate_limited" {
						hits.Add(1)
						if ra := resp.Header.Get("Retry-After"); ra != "1" {
							t.Errorf("429 rate_limited with Retry-After %q, want 1", ra)
						}
					}
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		limited = hits.Load() > 0
	}
	if !limited {
		t.Error("1 000 requests of one token were never rate limited")
	}
	s.stop()
}

// BenchmarkAPIPlays drives whole plays (stake and 4 throws) through the
// HTTP API of the real binary from 32 concurrent players and reports
// plays/s and the p99 latency of one request.
func BenchmarkAPIPlays(b *testing.B) {
	s := startServe(b, b.TempDir())
	s.must(201, call{"POST", "/v1/emissions", s.token("operator", ""), "", `{"price":"0.50","blocks":1}`})
	drivePlays(b, "b", s)
	s.stop()
}

// playRounds numbers the calls of drivePlays.
var playRounds atomic.Uint64

// drivePlays drives b.N whole plays (stake and 4 throws) from 32
// concurrent players, player i through nodes[i%len(nodes)], on the open
// emission, and reports plays/s and the p99 latency of one request. The
// players' accounts are set up through the first node, named by prefix and
// a round number: a sub-benchmark runs several times on the same nodes (its
// ramp-up, -count), and a player's keys must be new each time.
func drivePlays(b *testing.B, prefix string, nodes ...*server) {
	const players = 32
	prefix = fmt.Sprint(prefix, playRounds.Add(1))
	s := nodes[0]
	op := s.token("operator", "")
	tokens := make([]string, players)
	for i := range tokens {
		p := fmt.Sprintf("%s-%d", prefix, i)
		s.must(200, call{"PUT", "/v1/players/" + p, op, "", `{"weekly_deposit_limit":"100000.00","weekly_stake_limit":"100000.00"}`})
		s.must(200, call{"POST", "/v1/players/" + p + "/deposits", op, "d", `{"amount":"50000.00"}`})
		tokens[i] = s.token("player", p)
	}
	lat := make([][]time.Duration, players)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range players {
		wg.Go(func() {
			node := nodes[i%len(nodes)]
			p := fmt.Sprintf("/v1/players/%s-%d/plays", prefix, i)
			for n := i; n < b.N; n += players {
				t0 := time.Now()
				play := node.must(201, call{"POST", p, tokens[i], fmt.Sprint("k", n), `{"stake":"0.50"}`})
				lat[i] = append(lat[i], time.Since(t0))
				for range 4 {
					t0 = time.Now()
					node.must(200, call{"POST", p + "/" + play["play_id"].(string) + "/throws", tokens[i], "", ""})
					lat[i] = append(lat[i], time.Since(t0))
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	if len(all) == 0 {
		b.Fatalf("no request answered of %d plays (see the failures above)", b.N)
	}
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "plays/s")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
}

// TestASecondServeOnAStreamIsAStandby starts two `tresor serve` on one
// external stream, as a deployment mistake (or a second node) would: they
// do not both write. One holds the writer lease, the other is a standby
// that forwards its commands to it, so both answer writes and every write
// is on the one chain; neither exits. (A writer that lost its lease and
// still appends is fenced and steps down: cluster's tests.)
func TestASecondServeOnAStreamIsAStandby(t *testing.T) {
	t.Parallel()
	nats := externalNATS(t)
	// an external stream brings its own keys: both nodes share them
	data := externalKeys(t)
	first := startServe(t, data, "--nats", nats, "--node-name", "first")
	second := startServe(t, data, "--nats", nats, "--node-name", "second")
	role := func(s *server) (string, any) {
		c, _ := s.must(200, call{"GET", "/v1/health", "", "", ""})["cluster"].(map[string]any)
		return fmt.Sprint(c["role"]), c["lease_holder"]
	}
	eventstoretest.Eventually(t, 20*time.Second, func() error {
		r1, h1 := role(first)
		r2, h2 := role(second)
		if r1 != "writer" || r2 != "standby" || h1 != "first" || h2 != "first" {
			return fmt.Errorf("roles %s/%s, holders %v/%v: want writer/standby, both first", r1, r2, h1, h2)
		}
		return nil
	})
	op := first.token("operator", "")
	limits := `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"10.00"}`
	first.must(200, call{"PUT", "/v1/players/p-1", op, "", limits})
	second.must(200, call{"PUT", "/v1/players/p-2", op, "", limits})
	for _, s := range []*server{first, second} {
		for _, p := range []string{"p-1", "p-2"} {
			path := "/v1/players/" + p + "/account?min_seq=" + fmt.Sprint(s.must(200, call{"GET", "/v1/health", "", "", ""})["writer_seq"])
			if got := s.must(200, call{"GET", path, op, "", ""}); got["player"] != p {
				t.Fatalf("account %s: %v", p, got)
			}
		}
	}
	// The same deposit, same key, sent at once through both nodes: one
	// deposit, both answered with it.
	var wg sync.WaitGroup
	answers := make([]map[string]any, 2)
	for i, s := range []*server{first, second} {
		wg.Go(func() {
			status, m, err := s.send(call{"POST", "/v1/players/p-1/deposits", op, "twice", `{"amount":"7.00"}`})
			if err != nil || status != 200 {
				t.Errorf("deposit through node %d: %d %v %v", i, status, m, err)
			}
			answers[i] = m
		})
	}
	wg.Wait()
	if t.Failed() || answers[0]["balance_after"] != "7.00" || answers[1]["balance_after"] != "7.00" {
		t.Fatalf("the same deposit through both nodes: %v and %v, want both balance_after 7.00", answers[0], answers[1])
	}
	if got := second.must(200, call{"GET", "/v1/players/p-1/account?min_seq=" + fmt.Sprint(first.must(200, call{"GET", "/v1/health", "", "", ""})["writer_seq"]), op, "", ""}); got["balance"] != "7.00" {
		t.Fatalf("balance after the same deposit twice: %v, want 7.00", got["balance"])
	}
	select {
	case err := <-second.done:
		t.Fatalf("the standby exited: %v\n%s", err, second.logs)
	default:
	}
	second.stop()
	first.stop()
}
