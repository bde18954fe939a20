package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/projections"
)

// The crash suite: clients play, deposit and withdraw over HTTP against the
// real binary, sending some requests twice at once, while the binary is
// killed with SIGKILL at random moments and restarted on the same data
// directory. After each kill, the export of the stream alone must hold
// every write a client saw acknowledged, with the answer it saw, once; the
// audit must pass; at the end every play must be settled.
//
// TRESOR_CRASH_CYCLES and TRESOR_CRASH_CLIENTS size a run (make crash runs a
// long one); TRESOR_CRASH_SEED replays a run's random choices (not the
// machine's timing).
const (
	crashCyclesDefault  = 5
	crashClientsDefault = 16
	crashCyclesMax      = 1000
	crashClientsMax     = 64
	// crashNodesMax bounds the nodes a run's clients send to: a write
	// starts on a node picked below it, modulo the nodes there are.
	crashNodesMax = 3
	// The clients play between crashKillAfterMin and Max before each kill.
	crashKillAfterMin = 300 * time.Millisecond
	crashKillAfterMax = 3 * time.Second
	// crashEarlyKillPercent of the restarts are killed sooner, within
	// crashEarlyKillMax of listening: while serve replays the stream, catches
	// up and completes the plays the kill interrupted.
	crashEarlyKillPercent = 25
	crashEarlyKillMax     = 2 * time.Second
	// crashAbandonAfter is serve's --abandon-after: short, so that the plays
	// left by their players (and those interrupted by a kill) are completed
	// by the system during the run.
	crashAbandonAfter = "2s"
	// crashAnswerWait bounds how long a client retries one request: the
	// server is down from a kill until the restart is ready, a few seconds.
	crashAnswerWait = 2 * time.Minute
	crashBackoffMin = 20 * time.Millisecond
	crashBackoffMax = 500 * time.Millisecond
	// crashTwinPercent of the writes are sent twice at once, with the same
	// key or throw number, on two connections.
	crashTwinPercent = 50
	// crashAbandonPercent of the plays are left after 0 to 3 throws.
	crashAbandonPercent = 10
	// crashProblemsShown bounds the problems printed; all are counted.
	crashProblemsShown = 30
	// crashLimits lets every player deposit and stake all the run long.
	crashLimits = `{"weekly_deposit_limit":"1000000.00","weekly_stake_limit":"1000000.00"}`
	// crashStake is the price of the emission's block, 0.50.
	crashStake domain.Amount = 50
	// crashSnapshotEvery makes the writer take snapshots every few hundred
	// events, so that restarts after a kill start from one taken mid-load
	// (or from an older one, when the kill cut a store short) and replay
	// only the tail: the snapshots are checked by the same kills.
	crashSnapshotEvery = "300"
)

// Kinds of client write.
const (
	kindLimits     = "limits"
	kindDeposit    = "deposit"
	kindWithdrawal = "withdrawal"
	kindStake      = "stake"
	kindThrow      = "throw"
)

// TestCrashKeepsEveryAcknowledgedWrite is the crash suite; see above.
func TestCrashKeepsEveryAcknowledgedWrite(t *testing.T) {
	r := newCrashRun(t)
	t.Logf("crash suite: %d cycles, %d clients, seed %d (TRESOR_CRASH_SEED replays its choices)", r.cycles, r.clients, r.seed)
	start := time.Now()
	s := startServe(t, r.data, r.serveArgs...)
	r.setUp(s)
	// The restarts must have a snapshot to begin from, however slowly a
	// loaded machine lets the clients write: the first kill waits for the
	// writer's first snapshot.
	eventually(t, crashAnswerWait, func() bool { return strings.Contains(s.logs.String(), `msg="snapshot taken"`) })
	label := "cycle %d"
	killAfter := r.between(crashKillAfterMin, crashKillAfterMax)
	for cycle := 1; cycle <= r.cycles; cycle++ {
		select {
		case <-time.After(killAfter):
		case err := <-s.done:
			t.Fatalf("cycle %d: tresor serve exited by itself: %v\n%s", cycle, err, s.logs)
		}
		r.kill(s)
		r.countStart(s)
		r.check(fmt.Sprintf(label, cycle), false)
		// The restart after the last kill must become ready for the end.
		if cycle < r.cycles && r.rng.IntN(100) < crashEarlyKillPercent {
			s = startListening(t, r.data, r.serveArgs...)
			label, killAfter = "cycle %d (killed while starting)", r.between(0, crashEarlyKillMax)
			r.earlyKills++
		} else {
			s = startServe(t, r.data, r.serveArgs...)
			label, killAfter = "cycle %d", r.between(crashKillAfterMin, crashKillAfterMax)
		}
		r.urls.Store(&[]string{s.url})
	}
	r.stopClients()
	r.waitSettled(s)
	s.stop()
	r.countStart(s)
	r.report(r.check("end", true), time.Since(start))
	if r.cycles > 1 && r.fromSnapshot == 0 {
		t.Errorf("no restart began from a snapshot in %d cycles: the suite did not exercise them", r.cycles)
	}
}

// TestAKilledWritersTailIsSealedByItsSuccessor kills serve (kill -9)
// before its closing seal, after a few writes; a second serve on the same
// data, stopped cleanly without a write of its own, seals the tail the
// first left: the stream's last event is a Seal of the one before, and the
// audit passes. A successor that took the head it started on for sealed
// left it unsealed, and a writer killed again and again left a stream the
// audit read as cut short.
func TestAKilledWritersTailIsSealedByItsSuccessor(t *testing.T) {
	data := t.TempDir()
	s := startServe(t, data)
	op := s.token("operator", "")
	s.must(200, call{"PUT", "/v1/players/p-1", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"10.00"}`})
	for i := range 3 {
		s.must(200, call{"POST", "/v1/players/p-1/deposits", op, fmt.Sprintf("d%d", i), `{"amount":"5.00"}`})
	}
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.done
	startServe(t, data).stop()
	out := filepath.Join(t.TempDir(), "stream.ndjson")
	if _, stderr, code := run(t, "export", "--data", data, "--out", out); code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(mustRead(t, out))), "\n")
	var last, before struct {
		Type     string `json:"type"`
		ChainSeq uint64 `json:"chain_seq"`
		Payload  struct {
			ChainSeq uint64 `json:"chain_seq"`
		} `json:"payload"`
	}
	if len(lines) < 2 || json.Unmarshal([]byte(lines[len(lines)-1]), &last) != nil || json.Unmarshal([]byte(lines[len(lines)-2]), &before) != nil {
		t.Fatalf("export of %d lines: %q", len(lines), lines)
	}
	if last.Type != eventstore.SealType || last.Payload.ChainSeq != before.ChainSeq {
		t.Fatalf("the stream ends with %s (sealing position %d) after position %d: want a Seal of the event before it", last.Type, last.Payload.ChainSeq, before.ChainSeq)
	}
	if stdout, stderr, code := run(t, "audit", "--data", data, "--quiet"); code != 0 {
		t.Fatalf("audit: exit %d\n%s%s", code, stdout, stderr)
	}
}

// crashRun is one run of the crash suite: its server's address, its
// clients and what they sent and were answered, and the stream as exported.
type crashRun struct {
	t         *testing.T
	data      string
	serveArgs []string
	cycles    int
	clients   int
	seed      uint64
	rng       *rand.Rand // the kill moments
	// urls are the nodes the clients send to: a write starts on a node of
	// its own choosing and each retry moves to the next.
	urls atomic.Pointer[[]string]
	// stored says where export and audit read the stream: --data, or
	// --nats for a cluster, whose audit is also given the seal's public
	// key (auditKey).
	stored, auditKey []string
	http             *http.Client
	ctx              context.Context
	// cancel ends the clients' requests at once, answered or not.
	cancel   context.CancelFunc
	stopping atomic.Bool
	wg       sync.WaitGroup
	finance  string
	journal  crashJournal
	stream   *crashStream
	export   string
	audits   int
	// earlyKills counts the kills while starting.
	earlyKills int
	// fromSnapshot counts the restarted servers whose writer had begun
	// from a snapshot.
	fromSnapshot int
	lost         map[int]bool // answers found missing from the stream at a check
	// reported holds the problems already reported: each check looks at
	// every answer again, but says each problem once.
	reported map[string]bool
}

// newCrashRun sizes a run from the environment and makes its HTTP client;
// the clients stop when the test ends, however it ends.
func newCrashRun(t *testing.T) *crashRun {
	r := &crashRun{
		t: t, data: t.TempDir(), serveArgs: []string{"--abandon-after", crashAbandonAfter, "--snapshot-every", crashSnapshotEvery},
		cycles:  crashSize(t, "TRESOR_CRASH_CYCLES", crashCyclesDefault, crashCyclesMax),
		clients: crashSize(t, "TRESOR_CRASH_CLIENTS", crashClientsDefault, crashClientsMax),
		seed:    rand.Uint64(), lost: map[int]bool{}, reported: map[string]bool{},
	}
	r.stored = []string{"--data", r.data}
	if testing.Short() {
		r.cycles = 1
	}
	if v := os.Getenv("TRESOR_CRASH_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TRESOR_CRASH_SEED %q: %v", v, err)
		}
		r.seed = seed
	}
	r.rng = rand.New(rand.NewPCG(r.seed, 0))
	r.export = filepath.Join(t.TempDir(), "stream.ndjson")
	r.stream = newCrashStream()
	r.journal.sentKeys = map[crashKey]bool{}
	r.http = &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 2*r.clients + 4,
	}}
	ctx, cancel := context.WithCancel(context.Background())
	r.ctx, r.cancel = ctx, cancel
	t.Cleanup(func() {
		cancel()
		r.wg.Wait()
	})
	return r
}

// countStart counts s, exited, if its writer began from a snapshot: its
// logs are whole once it has exited.
func (r *crashRun) countStart(s *server) {
	if strings.Contains(s.logs.String(), "starting from a snapshot") {
		r.fromSnapshot++
	}
}

// between returns a random duration in [lo, hi).
func (r *crashRun) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.rng.Int64N(int64(hi-lo)))
}

// crashSize reads a positive size from the environment.
func crashSize(t *testing.T, env string, def, most int) int {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		t.Fatalf("%s %q: want 1 to %d", env, v, most)
	}
	return n
}

// setUp opens the emission the clients play on through s and starts them,
// sending to the nodes (s alone when none is given).
func (r *crashRun) setUp(s *server, nodes ...*server) {
	op := s.token("operator", "")
	r.finance = s.token("finance", "")
	s.must(201, call{"POST", "/v1/emissions", op, "crash-emission", `{"price":"` + crashStake.String() + `","blocks":1}`})
	urls := []string{s.url}
	if len(nodes) > 0 {
		urls = nil
		for _, n := range nodes {
			urls = append(urls, n.url)
		}
	}
	r.urls.Store(&urls)
	for i := range r.clients {
		player := fmt.Sprintf("crash-%d", i)
		c := &crashClient{run: r, player: player, op: op, token: s.token("player", player), rng: rand.New(rand.NewPCG(r.seed, uint64(i)+1))}
		r.wg.Go(c.live)
	}
}

// kill ends serve with SIGKILL, as a crash would, and waits for it to be
// gone, so that every answer a client holds was given before the check.
func (r *crashRun) kill(s *server) {
	r.t.Helper()
	s.kill()
	r.http.Transport.(*http.Transport).CloseIdleConnections()
}

// kill ends serve with SIGKILL and waits for it to be gone.
func (s *server) kill() {
	s.tb.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		s.tb.Fatalf("kill -9 tresor serve: %v", err)
	}
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.tb.Fatalf("tresor serve still running 30s after SIGKILL")
	}
}

// stopClients lets each client finish (or leave) its play and return.
func (r *crashRun) stopClients() {
	r.t.Helper()
	r.stopping.Store(true)
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(crashAnswerWait + time.Minute):
		r.t.Fatalf("clients still running %s after the stop", crashAnswerWait+time.Minute)
	}
}

// waitSettled waits until the block reports every play sold settled: the
// plays left by their players are completed by the system.
func (r *crashRun) waitSettled(s *server) {
	r.t.Helper()
	eventually(r.t, time.Minute, func() bool {
		var page struct {
			Blocks []struct {
				Sold  int `json:"sold"`
				Tiers []struct {
					Paid int `json:"paid"`
				} `json:"tiers"`
			} `json:"blocks"`
		}
		status, b, err := r.exchange(s.url, call{"GET", "/v1/blocks", r.finance, "", ""})
		if err != nil || status != http.StatusOK || json.Unmarshal(b, &page) != nil {
			return false
		}
		for _, blk := range page.Blocks {
			settled := 0
			for _, tier := range blk.Tiers {
				settled += tier.Paid
			}
			if settled != blk.Sold {
				return false
			}
		}
		return true
	})
}

// exchange sends one request to base and returns the status and the body.
func (r *crashRun) exchange(base string, c call) (int, []byte, error) {
	req, err := http.NewRequestWithContext(r.ctx, c.method, base+c.path, strings.NewReader(c.body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("Idempotency-Key", c.key)
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		// The answer was cut: the client does not know it, as after a
		// transport error.
		return 0, nil, err
	}
	return resp.StatusCode, b, nil
}

// deliver sends one copy of w, first to node node, until it gets an
// answer, retrying with the same key or throw number on the next node after
// a transport error, a 503 or a 429, as a client should; it records every
// attempt and the answer. It returns false when the run is cancelled or no
// answer came within crashAnswerWait.
func (r *crashRun) deliver(w *crashWrite, node int) (crashAnswer, bool) {
	deadline := time.Now().Add(crashAnswerWait)
	backoff := crashBackoffMin
	var earlier []int // statuses of the attempts before, 0 for a transport error
	for {
		urls := *r.urls.Load()
		sent := time.Now()
		status, b, err := r.exchange(urls[node%len(urls)], w.call)
		node++
		acked := err == nil && status/100 == 2
		r.journal.attempted(crashAttempt{sent: sent, answered: time.Now(), acked: acked,
			failed: err != nil || status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests})
		if err == nil && status != http.StatusServiceUnavailable && status != http.StatusTooManyRequests {
			a := crashAnswer{w: w, status: status, earlier: earlier}
			a.decode(b)
			r.journal.answered(a)
			return a, true
		}
		earlier = append(earlier, status)
		if time.Now().After(deadline) {
			r.journal.problem(fmt.Sprintf("%s: no answer in %s, %d attempts: last %d %s %v", w, crashAnswerWait, len(earlier), status, b, err))
			return crashAnswer{}, false
		}
		select {
		case <-time.After(backoff):
		case <-r.ctx.Done():
			return crashAnswer{}, false
		}
		backoff = min(2*backoff, crashBackoffMax)
	}
}

// crashClient is one client: one player, its operator and its own random
// choices.
type crashClient struct {
	run    *crashRun
	player string
	op     string
	token  string
	rng    *rand.Rand
	n      int // keys made so far
}

// live sets the account up, then deposits, withdraws and plays until the
// run stops.
func (c *crashClient) live() {
	if _, ok := c.send(&crashWrite{call: call{"PUT", "/v1/players/" + c.player, c.op, "", crashLimits}, kind: kindLimits, player: c.player}); !ok {
		return
	}
	for c.run.ctx.Err() == nil && !c.run.stopping.Load() {
		switch n := c.rng.IntN(10); {
		case n < 2:
			c.money(kindDeposit, "deposits", domain.Amount(500+c.rng.IntN(4500)))
		case n < 3:
			c.money(kindWithdrawal, "withdrawals", domain.Amount(100+c.rng.IntN(900)))
		default:
			c.play()
		}
	}
}

// key makes a fresh idempotency key.
func (c *crashClient) key(kind string) string {
	c.n++
	return fmt.Sprintf("%s-%d", kind, c.n)
}

// money deposits or withdraws a.
func (c *crashClient) money(kind, path string, a domain.Amount) {
	c.send(&crashWrite{
		call: call{"POST", "/v1/players/" + c.player + "/" + path, c.op, c.key(kind), `{"amount":"` + a.String() + `"}`},
		kind: kind, player: c.player, amount: a,
	})
}

// play stakes and throws four times, or leaves the play after 0 to 3 throws.
func (c *crashClient) play() {
	as, ok := c.send(&crashWrite{
		call: call{"POST", "/v1/players/" + c.player + "/plays", c.token, c.key(kindStake), `{"stake":"` + crashStake.String() + `"}`},
		kind: kindStake, player: c.player, amount: crashStake,
	})
	if !ok {
		return
	}
	id := ""
	for _, a := range as {
		if a.status/100 == 2 {
			id = a.body.PlayID
		}
	}
	if id == "" {
		return // refused (no funds yet): the next deposit fixes it
	}
	throws := domain.ThrowCount
	if c.rng.IntN(100) < crashAbandonPercent {
		throws = c.rng.IntN(domain.ThrowCount)
		c.run.journal.abandon(id)
	}
	for n := 1; n <= throws; n++ {
		w := &crashWrite{
			call: call{"POST", "/v1/players/" + c.player + "/plays/" + id + "/throws", c.token, "", fmt.Sprintf(`{"throw":%d}`, n)},
			kind: kindThrow, player: c.player, play: id, throw: n,
		}
		if _, ok := c.send(w); !ok {
			return
		}
	}
}

// send delivers w once, or twice at once on two connections, and returns
// the answers once every copy has one.
func (c *crashClient) send(w *crashWrite) ([]crashAnswer, bool) {
	copies := 1
	if w.kind != kindLimits && c.rng.IntN(100) < crashTwinPercent {
		copies = 2
	}
	c.run.journal.sending(w)
	as := make([]crashAnswer, copies)
	oks := make([]bool, copies)
	// Twin copies start on two nodes.
	node := c.rng.IntN(crashNodesMax)
	var wg sync.WaitGroup
	for i := range as {
		wg.Go(func() { as[i], oks[i] = c.run.deliver(w, node+i) })
	}
	wg.Wait()
	for _, ok := range oks {
		if !ok {
			return nil, false
		}
	}
	c.run.journal.completed(w, as)
	return as, true
}

// crashWrite is one request of a client: an idempotency key (or a throw number)
// sent once or twice at once, retried until it is answered.
type crashWrite struct {
	call
	kind   string
	player string
	amount domain.Amount // of a deposit, a withdrawal or a stake
	play   string        // of a throw
	throw  int           // 1 to 4
}

func (w *crashWrite) String() string {
	if w.kind == kindThrow {
		return fmt.Sprintf("%s: throw %d of play %s", w.player, w.throw, w.play)
	}
	return fmt.Sprintf("%s: %s %s key %q", w.player, w.kind, w.amount, w.key)
}

// crashKey names a keyed write: a key is scoped to its player and kind.
type crashKey struct{ kind, player, key string }

func (w *crashWrite) keyOf() crashKey { return crashKey{w.kind, w.player, w.key} }

// String says how the answer came: at once or after retries.
func (a crashAnswer) String() string {
	if len(a.earlier) == 0 {
		return fmt.Sprintf("answered %d", a.status)
	}
	return fmt.Sprintf("answered %d after retries %v", a.status, a.earlier)
}

// crashAnswer is the answer one copy of a write got.
type crashAnswer struct {
	w      *crashWrite
	status int
	// earlier are the statuses of the attempts retried before this
	// answer: 0 for a transport error, 503 or 429.
	earlier []int
	body    crashAnswerBody
	// bad says why the body is not what the write should be answered,
	// "" when it is.
	bad string
}

// crashAnswerBody is the part of an answer the suite checks.
type crashAnswerBody struct {
	// Deposits and withdrawals.
	BalanceAfter *domain.Amount `json:"balance_after"`
	// Stakes (and throws: play_id).
	PlayID  string        `json:"play_id"`
	BlockID string        `json:"block_id"`
	Unit    uint32        `json:"unit"`
	Stake   domain.Amount `json:"stake"`
	// Throws.
	Throw      int                    `json:"throw"`
	Direction  domain.Direction       `json:"direction"`
	Steps      int                    `json:"steps"`
	Pawn       domain.Cell            `json:"pawn"`
	Chest      *crashChest            `json:"chest"`
	ThrowsLeft int                    `json:"throws_left"`
	Status     projections.PlayStatus `json:"status"`
	Tier       *domain.Tier           `json:"tier"`
	Prize      *domain.Amount         `json:"prize"`
	// Problems.
	Code string `json:"-"`
}

// crashChest is the chest a throw's answer says it opened.
type crashChest struct {
	Index  int           `json:"index"`
	Cell   domain.Cell   `json:"cell"`
	Symbol domain.Symbol `json:"symbol"`
}

// decode reads the body and says whether it is an answer the write may
// get: a 2xx with the write's result, or a refusal the client expects.
func (a *crashAnswer) decode(b []byte) {
	if a.status >= 400 {
		var p struct {
			Code string `json:"code"`
		}
		json.Unmarshal(b, &p)
		a.body.Code = p.Code
		switch {
		case a.status == http.StatusUnprocessableEntity && p.Code == string(domain.CodeInsufficientFunds) &&
			(a.w.kind == kindWithdrawal || a.w.kind == kindStake):
		default:
			a.bad = fmt.Sprintf("refused: %d %.300s", a.status, b)
		}
		return
	}
	if err := json.Unmarshal(b, &a.body); err != nil {
		a.bad = fmt.Sprintf("%d %.300s: %v", a.status, b, err)
		return
	}
	w, v := a.w, a.body
	switch {
	case a.status != http.StatusOK && !(w.kind == kindStake && a.status == http.StatusCreated):
		a.bad = fmt.Sprintf("status %d", a.status)
	case (w.kind == kindDeposit || w.kind == kindWithdrawal) && v.BalanceAfter == nil:
		a.bad = "no balance_after"
	case w.kind == kindStake && (v.PlayID == "" || v.Stake != w.amount):
		a.bad = fmt.Sprintf("play %q of stake %s", v.PlayID, v.Stake)
	case w.kind == kindThrow && (v.PlayID != w.play || v.Throw != w.throw || v.ThrowsLeft != domain.ThrowCount-w.throw):
		a.bad = fmt.Sprintf("throw %d of play %s, %d left", v.Throw, v.PlayID, v.ThrowsLeft)
	case w.kind == kindThrow && (w.throw == domain.ThrowCount) != (v.Tier != nil && v.Prize != nil):
		a.bad = fmt.Sprintf("throw %d answered tier %v prize %v", w.throw, v.Tier, v.Prize)
	}
	if a.bad != "" {
		a.bad += fmt.Sprintf(" (%.300s)", b)
	}
}

// crashJournal is what the clients sent and were answered.
type crashJournal struct {
	mu       sync.Mutex
	requests int            // HTTP requests sent, retries included
	attempts []crashAttempt // each request, for the times to recover from a fault
	answers  []crashAnswer  // each copy's answer, in the order they came
	done     []completedWrite
	sentKeys map[crashKey]bool // every keyed write sent
	left     []string          // plays left by their player
	problems []string          // found by the clients
}

// completedWrite is a write all of whose copies are answered.
type completedWrite struct {
	w       *crashWrite
	answers []crashAnswer
}

// crashAttempt is one HTTP request of a write: when it was sent and
// answered, and whether it was acknowledged (2xx) or failed (a transport
// error, 503 or 429: the client retries).
type crashAttempt struct {
	sent, answered time.Time
	acked, failed  bool
}

func (j *crashJournal) attempted(a crashAttempt) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.requests++
	j.attempts = append(j.attempts, a)
}

// recovery returns, for a fault at t, how long until the first request sent
// after it was acknowledged, and how many requests sent after it failed
// before that; ok is false while none is acknowledged.
func (j *crashJournal) recovery(t time.Time) (took time.Duration, failed int, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	first := time.Time{}
	for _, a := range j.attempts {
		if a.acked && !a.sent.Before(t) && (first.IsZero() || a.answered.Before(first)) {
			first = a.answered
		}
	}
	if first.IsZero() {
		return 0, 0, false
	}
	for _, a := range j.attempts {
		if a.failed && !a.sent.Before(t) && a.sent.Before(first) {
			failed++
		}
	}
	return first.Sub(t), failed, true
}

// between counts the requests sent within [from, to], and those of them
// that failed: where a measuring run's recovery went.
func (j *crashJournal) between(from, to time.Time) (sent, failed int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, a := range j.attempts {
		if !a.sent.Before(from) && a.sent.Before(to) {
			sent++
			if a.failed {
				failed++
			}
		}
	}
	return sent, failed
}

// stall returns the longest time within [from, to] in which no request
// was acknowledged (from the start of the span to the first answer, between
// two answers, or from the last answer to its end): how long writes stopped
// however the clients' requests were spread over the nodes.
func (j *crashJournal) stall(from, to time.Time) time.Duration {
	j.mu.Lock()
	var acked []time.Time
	for _, a := range j.attempts {
		if a.acked && a.answered.After(from) && a.answered.Before(to) {
			acked = append(acked, a.answered)
		}
	}
	j.mu.Unlock()
	slices.SortFunc(acked, time.Time.Compare)
	longest, last := time.Duration(0), from
	for _, at := range append(acked, to) {
		longest, last = max(longest, at.Sub(last)), at
	}
	return longest
}

// acknowledgedAfter returns the first answer acknowledged after t, whenever
// its request was sent; ok is false while none is.
func (j *crashJournal) acknowledgedAfter(t time.Time) (first time.Time, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, a := range j.attempts {
		if a.acked && a.answered.After(t) && (first.IsZero() || a.answered.Before(first)) {
			first = a.answered
		}
	}
	return first, !first.IsZero()
}

func (j *crashJournal) sending(w *crashWrite) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if w.key != "" {
		j.sentKeys[w.keyOf()] = true
	}
}

func (j *crashJournal) answered(a crashAnswer) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.answers = append(j.answers, a)
}

func (j *crashJournal) completed(w *crashWrite, as []crashAnswer) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.done = append(j.done, completedWrite{w, as})
}

func (j *crashJournal) abandon(play string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.left = append(j.left, play)
}

func (j *crashJournal) problem(p string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.problems = append(j.problems, p)
}

// journalCopy is the journal as it stands; the clients only append to it.
type journalCopy struct {
	requests int
	answers  []crashAnswer
	done     []completedWrite
	sentKeys map[crashKey]bool
	left     []string
	problems []string
}

func (j *crashJournal) snapshot() journalCopy {
	j.mu.Lock()
	defer j.mu.Unlock()
	keys := make(map[crashKey]bool, len(j.sentKeys))
	for k := range j.sentKeys {
		keys[k] = true
	}
	return journalCopy{j.requests, j.answers[:len(j.answers):len(j.answers)], j.done[:len(j.done):len(j.done)], keys,
		j.left[:len(j.left):len(j.left)], j.problems[:len(j.problems):len(j.problems)]}
}

// playThrow names throw n of a play.
type playThrow struct {
	play string
	n    int
}

// crashMoney is a FundsDeposited or a FundsWithdrawn.
type crashMoney struct{ amount, balance domain.Amount }

// crashStream is the stream as read from the export, by what the checks
// look up. The export grows by --resume after each kill; the index reads
// the new lines only.
type crashStream struct {
	read    int64  // bytes of the export read
	last    uint64 // last stream sequence read
	money   map[crashKey][]crashMoney
	stakes  map[crashKey][]*domain.StakePlaced
	units   map[string][]*domain.UnitAssigned
	throws  map[playThrow][]*domain.ThrowMade
	settled map[string][]*domain.PlaySettled
	plays   []string // in the order they were staked
	// whole hands add whole appends only, a voided append's events
	// marked, across the reads of the growing export.
	whole func(eventstore.RecordedEvent) error
}

func newCrashStream() *crashStream {
	x := &crashStream{
		money: map[crashKey][]crashMoney{}, stakes: map[crashKey][]*domain.StakePlaced{},
		units: map[string][]*domain.UnitAssigned{}, throws: map[playThrow][]*domain.ThrowMade{},
		settled: map[string][]*domain.PlaySettled{},
	}
	x.whole, _ = eventstore.WholeAppends(x.add, nil)
	return x
}

// readExport reads the lines of the export file after those already read.
// Sequences must go on without a gap from the last line read: a resumed
// export starts after the last line of the file, so a hole would be a lost
// event.
func (x *crashStream) readExport(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if _, err := f.Seek(x.read, io.SeekStart); err != nil {
		return err
	}
	err = eventstore.ReadExport(io.LimitReader(f, st.Size()-x.read), func(r eventstore.RecordedEvent) error {
		if r.Sequence != x.last+1 {
			return fmt.Errorf("export: sequence %d after %d", r.Sequence, x.last)
		}
		x.last = r.Sequence
		return x.whole(r)
	})
	if err != nil {
		return err
	}
	x.read = st.Size()
	return nil
}

// add indexes one event of the stream, unless a Void voided it.
func (x *crashStream) add(r eventstore.RecordedEvent) error {
	if r.Voided {
		return nil
	}
	switch r.Type {
	case domain.TypeFundsDeposited, domain.TypeFundsWithdrawn, domain.TypeStakePlaced,
		domain.TypeUnitAssigned, domain.TypeThrowMade, domain.TypePlaySettled:
	default:
		return nil
	}
	e, err := domain.DecodeEvent(r.Type, r.Payload)
	if err != nil {
		return fmt.Errorf("sequence %d: %w", r.Sequence, err)
	}
	switch e := e.(type) {
	case *domain.FundsDeposited:
		k := crashKey{kindDeposit, e.Player, e.Key}
		x.money[k] = append(x.money[k], crashMoney{e.Amount, e.Balance})
	case *domain.FundsWithdrawn:
		k := crashKey{kindWithdrawal, e.Player, e.Key}
		x.money[k] = append(x.money[k], crashMoney{e.Amount, e.Balance})
	case *domain.StakePlaced:
		k := crashKey{kindStake, e.Player, e.Key}
		x.stakes[k] = append(x.stakes[k], e)
		x.plays = append(x.plays, e.Play)
	case *domain.UnitAssigned:
		x.units[e.Play] = append(x.units[e.Play], e)
	case *domain.ThrowMade:
		k := playThrow{e.Play, e.Throw}
		x.throws[k] = append(x.throws[k], e)
	case *domain.PlaySettled:
		x.settled[e.Play] = append(x.settled[e.Play], e)
	}
	return nil
}

// Verdicts of a check.
const (
	verdictOK        = ""
	verdictLost      = "lost"
	verdictDuplicate = "duplicate"
	verdictMismatch  = "mismatch"
)

// verify checks one acknowledged write against the stream: exactly one
// event (or one per kind for a stake and a fourth throw) with the content
// the client was answered.
func (x *crashStream) verify(a crashAnswer) (verdict, detail string) {
	w, v := a.w, a.body
	one := func(n int, what string) bool {
		switch {
		case n == 0:
			verdict, detail = verdictLost, what+" missing"
		case n > 1:
			verdict, detail = verdictDuplicate, fmt.Sprintf("%s %d times", what, n)
		}
		return n == 1
	}
	mismatch := func(format string, args ...any) (string, string) {
		return verdictMismatch, fmt.Sprintf(format, args...)
	}
	switch w.kind {
	case kindDeposit, kindWithdrawal:
		evs := x.money[w.keyOf()]
		if !one(len(evs), w.kind) {
			return verdict, detail
		}
		if e := evs[0]; e.amount != w.amount || e.balance != *v.BalanceAfter {
			return mismatch("stream has %s, balance after %s; answered balance_after %s", e.amount, e.balance, *v.BalanceAfter)
		}
	case kindStake:
		sps := x.stakes[w.keyOf()]
		if !one(len(sps), "StakePlaced") {
			return verdict, detail
		}
		sp := sps[0]
		if sp.Play != v.PlayID || sp.Block != v.BlockID || sp.Stake != w.amount {
			return mismatch("stream has play %s on %s for %s; answered play %s on %s", sp.Play, sp.Block, sp.Stake, v.PlayID, v.BlockID)
		}
		us := x.units[sp.Play]
		if !one(len(us), "UnitAssigned of "+sp.Play) {
			return verdict, detail
		}
		if us[0].Proof.Unit != v.Unit || us[0].Block != v.BlockID {
			return mismatch("stream assigned unit %d of %s; answered unit %d", us[0].Proof.Unit, us[0].Block, v.Unit)
		}
	case kindThrow:
		ths := x.throws[playThrow{w.play, w.throw}]
		if !one(len(ths), fmt.Sprintf("ThrowMade %d", w.throw)) {
			return verdict, detail
		}
		got := ths[0].Result
		want := domain.ThrowResult{Direction: v.Direction, Steps: v.Steps, Pawn: v.Pawn, Chest: domain.NoChest}
		if c := v.Chest; c != nil {
			want.Chest, want.Symbol = c.Index, c.Symbol
			if c.Cell != v.Pawn {
				return mismatch("answered chest at %v, pawn at %v", c.Cell, v.Pawn)
			}
		}
		if ths[0].Player != w.player || got != want {
			return mismatch("stream has %+v of %s; answered %+v", got, ths[0].Player, want)
		}
		if w.throw < domain.ThrowCount {
			return verdictOK, ""
		}
		pss := x.settled[w.play]
		if !one(len(pss), "PlaySettled") {
			return verdict, detail
		}
		ps := pss[0]
		status := projections.StatusSettled
		if ps.BySystem {
			status = projections.StatusCompletedBySystem
		}
		if ps.Tier != *v.Tier || ps.Prize != *v.Prize || status != v.Status {
			return mismatch("stream settled %s for %s (%s); answered %s for %s (%s)", ps.Tier, ps.Prize, status, *v.Tier, *v.Prize, v.Status)
		}
	}
	return verdictOK, ""
}

// Kinds of problem a check finds.
const (
	problemWrongAnswer = "wrong answers"
	problemUnanswered  = "unanswered"
	problemLost        = "lost"
	problemDuplicate   = "duplicates"
	problemMismatch    = "mismatched"
	problemPhantom     = "phantom writes"
	problemUnsettled   = "unsettled"
	problemAudit       = "audit failures"
)

// problemKinds is the order problems are reported in.
var problemKinds = []string{problemLost, problemDuplicate, problemMismatch, problemPhantom, problemUnsettled,
	problemWrongAnswer, problemUnanswered, problemAudit}

// crashFindings are the problems a check finds, counted by kind. Each check
// looks at every answer and the whole stream again; a problem is shown
// once in a run, at the first check that finds it.
type crashFindings struct {
	r      *crashRun
	counts map[string]int
	shown  map[string][]string
}

func (f *crashFindings) add(kind, format string, args ...any) {
	f.counts[kind]++
	p := fmt.Sprintf(format, args...)
	if !f.r.reported[p] && len(f.shown[kind]) < crashProblemsShown {
		f.r.reported[p] = true
		f.shown[kind] = append(f.shown[kind], p)
	}
}

// crashFigures are what a check counted.
type crashFigures struct {
	requests, answers, checked, writes, events int
	plays, bySystem, left                      int
	problems                                   map[string]int
}

// check exports the stream (serve is stopped), checks every acknowledged
// write and every refusal against it, then audits the data directory. At
// the end (final) every play must be settled, those left by their players
// by the system.
func (r *crashRun) check(label string, final bool) crashFigures {
	t := r.t
	t.Helper()
	if _, stderr, code := run(t, append([]string{"export", "--out", r.export, "--resume"}, r.stored...)...); code != 0 {
		t.Fatalf("%s: export: exit %d: %s", label, code, stderr)
	}
	if err := r.stream.readExport(r.export); err != nil {
		t.Fatalf("%s: %v", label, err)
	}
	j := r.journal.snapshot()
	fs := &crashFindings{r: r, counts: map[string]int{}, shown: map[string][]string{}}
	f := crashFigures{requests: j.requests, answers: len(j.answers), events: int(r.stream.last), plays: len(r.stream.plays), left: len(j.left)}
	for _, p := range j.problems {
		fs.add(problemUnanswered, "%s", p)
	}
	written := r.verifyAnswers(j.answers, fs)
	f.checked, f.writes = 0, len(written)
	for _, n := range written {
		f.checked += n
	}
	// A write refused on every copy recorded nothing.
	for _, d := range j.done {
		if d.w.key == "" || written[d.w] > 0 {
			continue
		}
		if n := len(r.stream.money[d.w.keyOf()]) + len(r.stream.stakes[d.w.keyOf()]); n > 0 {
			fs.add(problemPhantom, "%s %s %s on every copy, but in the stream %d times", d.w, d.answers[0], d.answers[0].body.Code, n)
		}
	}
	r.streamDuplicates(fs)
	r.unsent(j.sentKeys, fs)
	if final {
		f.bySystem = r.settledPlays(j.left, fs)
	}
	r.audit(fs)
	fs.counts[problemLost] = len(r.lost)
	f.problems = fs.counts
	var summary, shown []string
	for _, k := range problemKinds {
		if n := fs.counts[k]; n > 0 {
			summary = append(summary, fmt.Sprintf("%s %d", k, n))
		}
		for _, p := range fs.shown[k] {
			shown = append(shown, fmt.Sprintf("  %s: %s", k, p))
		}
	}
	if len(shown) > 0 {
		t.Errorf("%s: %s (seed %d); new:\n%s", label, strings.Join(summary, ", "), r.seed, strings.Join(shown, "\n"))
	}
	if !final {
		t.Logf("%s: %d events, %d acknowledged answers checked, lost %d, duplicates %d", label, f.events, f.checked, len(r.lost), fs.counts[problemDuplicate])
	}
	return f
}

// verifyAnswers checks each answer: the body the write should get, and for
// an acknowledged write its events in the stream. It returns, for each
// acknowledged write, how many of its answers were checked.
func (r *crashRun) verifyAnswers(answers []crashAnswer, fs *crashFindings) map[*crashWrite]int {
	written := map[*crashWrite]int{}
	created := map[*crashWrite]int{}
	for i, a := range answers {
		if a.bad != "" {
			fs.add(problemWrongAnswer, "%s %s: %s", a.w, a, a.bad)
			continue
		}
		if a.status/100 != 2 || a.w.kind == kindLimits {
			continue
		}
		written[a.w]++
		if a.status == http.StatusCreated {
			if created[a.w]++; created[a.w] == 2 {
				fs.add(problemDuplicate, "%s: two answers 201 created", a.w)
			}
		}
		switch verdict, detail := r.stream.verify(a); verdict {
		case verdictLost:
			r.lost[i] = true
			fs.add(problemLost, "%s %s, not in the stream: %s", a.w, a, detail)
		case verdictDuplicate:
			fs.add(problemDuplicate, "%s: %s", a.w, detail)
		case verdictMismatch:
			fs.add(problemMismatch, "%s %s: %s", a.w, a, detail)
		}
	}
	return written
}

// streamDuplicates finds what the stream holds more than once: a key of a
// player and kind, a play's unit, throw or settlement.
func (r *crashRun) streamDuplicates(fs *crashFindings) {
	dup := func(count int, format string, args ...any) {
		if count > 1 {
			fs.add(problemDuplicate, "the stream holds "+format+" %d times", append(args, count)...)
		}
	}
	x := r.stream
	for k, evs := range x.money {
		dup(len(evs), "%s key %q of %s", k.kind, k.key, k.player)
	}
	for k, evs := range x.stakes {
		dup(len(evs), "stake key %q of %s", k.key, k.player)
	}
	for p, evs := range x.units {
		dup(len(evs), "the unit of play %s", p)
	}
	for k, evs := range x.throws {
		dup(len(evs), "throw %d of play %s", k.n, k.play)
	}
	for p, evs := range x.settled {
		dup(len(evs), "the settlement of play %s", p)
	}
}

// unsent finds the keyed events of the stream no client sent.
func (r *crashRun) unsent(sent map[crashKey]bool, fs *crashFindings) {
	for _, k := range append(crashKeys(r.stream.money), crashKeys(r.stream.stakes)...) {
		if !sent[k] {
			fs.add(problemPhantom, "the stream holds a %s with key %q of %s that no client sent", k.kind, k.key, k.player)
		}
	}
}

func crashKeys[V any](m map[crashKey]V) []crashKey {
	out := make([]crashKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// settledPlays checks that every play of the stream is settled after its
// four throws, and those left by their players by the system; it returns
// how many the system completed.
func (r *crashRun) settledPlays(left []string, fs *crashFindings) (bySystem int) {
	x := r.stream
	for _, p := range x.plays {
		if len(x.settled[p]) == 0 {
			fs.add(problemUnsettled, "play %s is not settled", p)
			continue
		}
		if x.settled[p][0].BySystem {
			bySystem++
		}
		for n := 1; n <= domain.ThrowCount; n++ {
			if len(x.throws[playThrow{p, n}]) == 0 {
				fs.add(problemUnsettled, "play %s is settled without its throw %d", p, n)
			}
		}
	}
	for _, p := range left {
		if ps := x.settled[p]; len(ps) > 0 && !ps[0].BySystem {
			fs.add(problemUnsettled, "play %s, left by its player, settled but not by the system", p)
		}
	}
	return bySystem
}

// audit runs tresor audit on the data directory: it must exit 0.
func (r *crashRun) audit(fs *crashFindings) {
	stdout, stderr, code := run(r.t, append(append([]string{"audit", "--json", "--quiet"}, r.stored...), r.auditKey...)...)
	var rep auditJSON
	if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil || !rep.OK {
		fs.add(problemAudit, "exit %d, violations %v %.2000s %s", code, rep.ViolationCounts, stdout, stderr)
		return
	}
	r.audits++
}

// report prints the run's figures, those of the final check.
func (r *crashRun) report(f crashFigures, elapsed time.Duration) {
	var problems []string
	for _, k := range problemKinds {
		problems = append(problems, fmt.Sprintf("%s %d", k, f.problems[k]))
	}
	r.t.Logf("crash suite: %d cycles of kill -9 (%d while starting, %d restarts from a snapshot) in %s, %d clients: %d HTTP requests (retries included), "+
		"%d answers, %d acknowledged answers checked against the export (%d writes), %d events, "+
		"%d plays (%d completed by the system, %d left by their player), %d audits passed; %s",
		r.cycles, r.earlyKills, r.fromSnapshot, elapsed.Round(time.Second), r.clients, f.requests, f.answers, f.checked, f.writes, f.events,
		f.plays, f.bySystem, f.left, r.audits, strings.Join(problems, ", "))
}
