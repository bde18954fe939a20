package settlement

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/projections/projectionstest"
)

// node is a real embedded nats-server on a test directory, with the store
// and the shard's writer on it.
type node struct {
	tb    testing.TB
	dir   string
	srv   *eventstore.EmbeddedServer
	store *eventstore.NATSStore
	log   *EventLog
	w     *Writer
}

var testMasterKey = []byte("0123456789abcdef0123456789abcdef")

// testSealKey is a fixed Ed25519 key for Seal events.
var testSealKey = ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))

// startNode starts (or restarts, on the same dir) a server and a writer.
func startNode(tb testing.TB, dir string, mod func(*Config)) *node {
	tb.Helper()
	return startNodeWith(tb, dir, func(_ *node, c *Config) {
		if mod != nil {
			mod(c)
		}
	})
}

// startNodeWith is startNode with a configuration that may use the node's
// store.
func startNodeWith(tb testing.TB, dir string, mod func(*node, *Config)) *node {
	tb.Helper()
	n := &node{tb: tb, dir: dir}
	var err error
	n.srv, err = eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: filepath.Join(dir, "jetstream")})
	if err != nil {
		tb.Fatal(err)
	}
	nc, err := n.srv.Conn()
	if err != nil {
		tb.Fatal(err)
	}
	reg, err := NewRegistry()
	if err != nil {
		tb.Fatal(err)
	}
	ctx := eventstoretest.Ctx(tb, time.Minute)
	if n.store, err = eventstore.Open(ctx, nc, eventstore.Config{Registry: reg}); err != nil {
		tb.Fatal(err)
	}
	n.w = n.openWriter(func(c *Config) { mod(n, c) })
	tb.Cleanup(n.stop)
	return n
}

// openWriter opens one more writer on the node's store.
func (n *node) openWriter(mod func(*Config)) *Writer {
	n.tb.Helper()
	rules, err := domain.DefaultRules()
	if err != nil {
		n.tb.Fatal(err)
	}
	sealer, err := NewSealer(testMasterKey)
	if err != nil {
		n.tb.Fatal(err)
	}
	cfg := Config{Rules: rules, Sealer: sealer, SweepEvery: 20 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	ctx := eventstoretest.Ctx(n.tb, time.Minute)
	log, err := OpenEventLog(ctx, n.store, eventstore.CommitterConfig{SealKey: testSealKey, SealEvery: 500})
	if err != nil {
		n.tb.Fatal(err)
	}
	if n.log == nil {
		n.log = log
	}
	w, err := Open(ctx, log, cfg)
	if err != nil {
		n.tb.Fatal(err)
	}
	return w
}

// stop closes the writer, the store and the server, as a clean shutdown.
func (n *node) stop() {
	if n.srv == nil {
		return
	}
	n.w.Close()
	n.log.Close()
	n.store.Close()
	n.store.Conn().Close()
	n.srv.Shutdown()
	n.srv = nil
}

// crash stops the server under the writer, as a power cut would: whatever
// was not acknowledged may be lost; what was acknowledged must not be.
func (n *node) crash() {
	n.srv.Shutdown()
	n.srv = nil
	n.w.Close()
	n.log.Close()
	n.store.Close()
}

// replay reads the whole stream into fresh books and a fresh ledger.
func (n *node) replay() (*domain.Books, *domain.Ledger, []domain.Event) {
	n.tb.Helper()
	rules, _ := domain.DefaultRules()
	books, l := domain.NewBooks(), domain.NewLedger(rules)
	var all []domain.Event
	verifier := eventstore.NewVerifier(testSealKey.Public().(ed25519.PublicKey))
	// Ten minutes: three sold-out blocks are about ten million events.
	_, err := n.store.ReadFrom(eventstoretest.Ctx(n.tb, 10*time.Minute), 1, func(r eventstore.RecordedEvent) error {
		if err := verifier.Check(r); err != nil {
			return err
		}
		if r.Type == eventstore.SealType {
			return nil
		}
		e, err := domain.DecodeEvent(r.Type, r.Payload)
		if err != nil {
			return err
		}
		if err := books.Apply(e); err != nil {
			return err
		}
		all = append(all, e)
		return l.Evolve(r.RecordedAt, e)
	})
	if err != nil {
		n.tb.Fatalf("replay: %v", err)
	}
	if _, err := books.Check(); err != nil {
		n.tb.Fatalf("books: %v", err)
	}
	return books, l, all
}

// waitAllSettled waits until the stream itself (not the writer's state,
// which runs ahead of its commits) holds no play in progress.
func (n *node) waitAllSettled() {
	n.tb.Helper()
	eventstoretest.Eventually(n.tb, 10*time.Second, func() error {
		if _, l, _ := n.replay(); len(l.Plays) > 0 {
			return fmt.Errorf("%d plays still in progress in the stream", len(l.Plays))
		}
		return nil
	})
}

// waitClosed waits until the writer has closed want blocks, which a sweep
// does once their last plays settle, then executes one more command: the
// chain commits in order, so once it is acknowledged the closes are in the
// stream too.
func (n *node) waitClosed(want int) {
	n.tb.Helper()
	eventstoretest.Eventually(n.tb, 10*time.Second, func() error {
		closed := 0
		err := n.w.Inspect(context.Background(), func(l *domain.Ledger) {
			for _, b := range l.Blocks {
				if b.State == domain.BlockStateClosed {
					closed++
				}
			}
		})
		if err == nil && closed < want {
			err = fmt.Errorf("%d blocks closed, want %d", closed, want)
		}
		return err
	})
	lim := domain.Amount(100)
	exec(n.tb, n.w, domain.ConfigureAccount{Player: "barrier", DepositLimit: &lim})
}

func exec(tb testing.TB, w *Writer, c domain.Command) Result {
	tb.Helper()
	r, err := w.Execute(eventstoretest.Ctx(tb, time.Minute), c)
	if err != nil {
		tb.Fatalf("%T: %v", c, err)
	}
	return r
}

// fundedPlayer opens a player with generous limits and deposits amount.
func fundedPlayer(tb testing.TB, w *Writer, player string, amount domain.Amount) {
	lim := domain.Amount(1_000_000_00)
	exec(tb, w, domain.ConfigureAccount{Player: player, DepositLimit: &lim, StakeLimit: &lim})
	exec(tb, w, domain.Deposit{Player: player, Amount: amount, Key: "fund-" + player})
}

// checkUnits asserts that every block's units were assigned once each, in
// deck order, from 0 up to its sales.
func checkUnits(tb testing.TB, events []domain.Event, l *domain.Ledger) {
	tb.Helper()
	next := map[string]uint32{}
	for _, e := range events {
		if u, ok := e.(*domain.UnitAssigned); ok {
			if u.Proof.Unit != next[u.Block] {
				tb.Fatalf("block %s: unit %d assigned when %d was next", u.Block, u.Proof.Unit, next[u.Block])
			}
			next[u.Block]++
			b := l.Blocks[u.Block]
			if err := domain.VerifyUnitProof(b.Commitment.Root, b.Commitment.Units, u.Proof); err != nil {
				tb.Fatal(err)
			}
		}
	}
	for id, b := range l.Blocks {
		if int(next[id]) != b.Sold {
			tb.Fatalf("block %s: %d units assigned, %d sold", id, next[id], b.Sold)
		}
	}
}

func TestConcurrentStakesNeverOverdrawAndKeysAnswerOnce(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	exec(t, n.w, domain.CreateEmission{Price: 200, Blocks: 1})
	// given a player who can afford exactly 10 stakes of 2 €
	fundedPlayer(t, n.w, "p1", 2000)
	// when 40 stakes race, 8 of them retries of the same key
	var ok, poor, replays atomic.Int32
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("stake-", i)
			if i < 8 {
				key = "same-key"
			}
			r, err := n.w.Execute(context.Background(), domain.PlaceStake{Player: "p1", Stake: 200, Key: key})
			switch {
			case err == nil && r.Replay != nil:
				replays.Add(1)
			case err == nil:
				ok.Add(1)
			case errors.Is(err, domain.ErrInsufficientFunds):
				poor.Add(1)
			default:
				t.Errorf("stake %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	// then exactly 10 stakes were placed, the balance is zero, the same
	// key placed one stake, and the stream agrees
	if ok.Load() != 10 {
		t.Fatalf("%d stakes placed (%d refused, %d replays), want 10", ok.Load(), poor.Load(), replays.Load())
	}
	books, l, events := n.replay()
	if books.Balances[domain.PlayerAccount("p1")] != 0 || l.Accounts["p1"].Balance != 0 || books.Stakes != 2000 {
		t.Fatalf("balance %s, stakes %s", books.Balances[domain.PlayerAccount("p1")], books.Stakes)
	}
	checkUnits(t, events, l)
}

func TestAbandonedPlayIsCompletedBySystemAndPaid(t *testing.T) {
	// The writer's clock is the test's: a play is abandoned when the test
	// says so, however slowly a loaded machine runs the plays before.
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	n := startNode(t, t.TempDir(), func(c *Config) {
		c.AbandonAfter = 10 * time.Minute
		c.Clock = func() time.Time { return time.Unix(0, clock.Load()) }
	})
	exec(t, n.w, domain.CreateEmission{Price: 100, Blocks: 1})
	fundedPlayer(t, n.w, "p1", 10000)
	// given 30 plays, each left after one throw
	for i := range 30 {
		r := exec(t, n.w, domain.PlaceStake{Player: "p1", Stake: 100, Key: fmt.Sprint(i)})
		exec(t, n.w, domain.MakeThrow{Player: "p1", Play: r.Events[0].(*domain.StakePlaced).Play})
	}
	// when their players stay away longer than AbandonAfter
	clock.Add(int64(11 * time.Minute))
	// then the system completes and settles every one of them
	n.waitAllSettled()
	books, l, events := n.replay()
	var bySystem, settled int
	var prizes domain.Amount
	for _, e := range events {
		switch e := e.(type) {
		case *domain.ThrowMade:
			if e.BySystem {
				bySystem++
			}
		case *domain.PlaySettled:
			settled++
			prizes += e.Prize
			if !e.BySystem {
				t.Fatalf("play %s settled without the system mark", e.Play)
			}
		}
	}
	if settled != 30 || bySystem != 90 || books.Prizes != prizes || l.Accounts["p1"].Balance != 10000-3000+prizes {
		t.Fatalf("settled %d, system throws %d, prizes %s/%s", settled, bySystem, books.Prizes, prizes)
	}
}

func TestSecondWriterIsFencedAndTheLogNeverForks(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	exec(t, n.w, domain.CreateEmission{Price: 100, Blocks: 1})
	fundedPlayer(t, n.w, "p1", 100000)
	// given a second writer started by mistake on the same stream
	second := n.openWriter(nil)
	defer second.Close()
	// when both write
	_, err1 := n.w.Execute(context.Background(), domain.PlaceStake{Player: "p1", Stake: 100, Key: "a"})
	_, err2 := second.Execute(context.Background(), domain.PlaceStake{Player: "p1", Stake: 100, Key: "b"})
	// then the second is fenced off and says so; the first goes on
	if err1 != nil {
		t.Fatalf("first writer: %v", err1)
	}
	if !errors.Is(err2, ErrStopped) || !errors.Is(err2, eventstore.ErrFenced) {
		t.Fatalf("second writer: %v, want ErrStopped wrapping ErrFenced", err2)
	}
	<-second.Done()
	if err := second.Err(); !errors.Is(err, eventstore.ErrFenced) {
		t.Fatalf("second writer's Err: %v, want ErrFenced", err)
	}
	if n.w.Err() != nil {
		t.Fatalf("first writer's Err: %v, want nil while it runs", n.w.Err())
	}
	if _, err := n.w.Execute(context.Background(), domain.PlaceStake{Player: "p1", Stake: 100, Key: "c"}); err != nil {
		t.Fatalf("first writer after the fence: %v", err)
	}
	_, l, events := n.replay() // the chain verifies: no fork
	checkUnits(t, events, l)
	if l.Blocks["E0001-B001"].Sold != 2 {
		t.Fatalf("%d units sold, want 2", l.Blocks["E0001-B001"].Sold)
	}
}

func TestCrashLosesNothingAcknowledged(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir, func(c *Config) { c.AbandonAfter = 200 * time.Millisecond })
	exec(t, n.w, domain.CreateEmission{Price: 50, Blocks: 1})
	players := make([]string, 32)
	for i := range players {
		players[i] = fmt.Sprint("p", i)
		fundedPlayer(t, n.w, players[i], 100000)
	}
	// given players playing when the server dies under the writer
	var mu sync.Mutex
	acked := map[string]int{} // play → throws acknowledged
	var wg sync.WaitGroup
	var stakes atomic.Int32
	crashed := make(chan struct{})
	for _, p := range players {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				r, err := n.w.Execute(context.Background(), domain.PlaceStake{Player: p, Stake: 50, Key: fmt.Sprint(i)})
				if err != nil {
					return
				}
				play := r.Events[0].(*domain.StakePlaced).Play
				mu.Lock()
				acked[play] = 0
				mu.Unlock()
				if stakes.Add(1) == 400 {
					go func() {
						n.crash()
						close(crashed)
					}()
				}
				for range domain.ThrowCount {
					if _, err := n.w.Execute(context.Background(), domain.MakeThrow{Player: p, Play: play}); err != nil {
						return
					}
					mu.Lock()
					acked[play]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	// The players stop at the first refusal, while the crash may still be
	// closing the store: the data directory is free once it has.
	<-crashed
	// when the writer restarts on the same data
	n = startNode(t, dir, func(c *Config) { c.AbandonAfter = 200 * time.Millisecond })
	// then every acknowledged play is there, and the system completes the
	// ones left in progress
	n.waitAllSettled()
	_, l, events := n.replay()
	throws := map[string]int{}
	settled := map[string]bool{}
	for _, e := range events {
		switch e := e.(type) {
		case *domain.ThrowMade:
			throws[e.Play]++
		case *domain.PlaySettled:
			settled[e.Play] = true
		}
	}
	if len(acked) < 400 {
		t.Fatalf("only %d plays acknowledged before the crash", len(acked))
	}
	for play, n := range acked {
		if !settled[play] || throws[play] != domain.ThrowCount || throws[play] < n {
			t.Fatalf("acknowledged play %s (%d throws acked): settled %t, %d throws in the stream", play, n, settled[play], throws[play])
		}
	}
	checkUnits(t, events, l)
}

// sellOutPrices are the prices TestSellOutOfABlockOfEachPricePaysArticle3
// sells a block of: TRESOR_SELLOUT_PRICES ("0.50,1,2" with `make sellout`),
// one price by default, so that `make test` stays bounded (a sold-out block
// is 3.3 million events, minutes to write and as long again to replay).
func sellOutPrices(tb testing.TB) []domain.Amount {
	v := os.Getenv("TRESOR_SELLOUT_PRICES")
	if v == "" {
		v = "0.50"
	}
	var out []domain.Amount
	for _, p := range strings.Split(v, ",") {
		a, err := domain.ParseAmount(strings.TrimSpace(p))
		if err != nil {
			tb.Fatalf("TRESOR_SELLOUT_PRICES=%q: %v", v, err)
		}
		out = append(out, a)
	}
	return out
}

func TestSellOutOfABlockOfEachPricePaysArticle3(t *testing.T) {
	if testing.Short() {
		t.Skip("sells out blocks of 450 000 units: run without -short")
	}
	n := startNode(t, t.TempDir(), nil)
	rules, _ := domain.DefaultRules()
	prices := sellOutPrices(t)
	for _, price := range prices {
		table, _ := rules.Table(price)
		res, err := Simulate(context.Background(), n.w, SimConfig{Price: price, Plays: rules.BlockUnits, Players: 1024})
		if err != nil {
			t.Fatal(err)
		}
		if res.Tiers != table.LotCounts() || res.PrizesTotal != table.Total || res.StakesTotal != table.Sales(rules.BlockUnits) {
			t.Fatalf("price %s: tiers %v prizes %s stakes %s; want %v %s %s", price, res.Tiers, res.PrizesTotal, res.StakesTotal,
				table.LotCounts(), table.Total, table.Sales(rules.BlockUnits))
		}
		t.Logf("price %s: %d plays in %s (%.0f plays/s, p99 %s)", price, res.Plays, res.Elapsed.Round(time.Millisecond),
			float64(res.Plays)/res.Elapsed.Seconds(), Percentile(res.Latencies, 99))
	}
	n.waitClosed(len(prices))
	books, l, events := n.replay()
	checkUnits(t, events, l)
	for _, b := range l.Blocks {
		table, _ := rules.Table(b.Price)
		if b.State != domain.BlockStateClosed || b.Sold != rules.BlockUnits || b.TierSold != table.LotCounts() || b.Prizes != table.Total {
			t.Fatalf("block %s: %s, sold %d, tiers %v, prizes %s", b.ID, b.State, b.Sold, b.TierSold, b.Prizes)
		}
	}
	for _, e := range events {
		if c, ok := e.(*domain.BlockClosed); ok {
			b := l.Blocks[c.Block]
			table, _ := rules.Table(b.Price)
			if err := domain.VerifyReveal(c.Seed, table.LotCounts(), b.Commitment); err != nil {
				t.Fatal(err)
			}
		}
	}
	for acct, bal := range books.Balances {
		if a, ok := l.Accounts[acct[len("player."):]]; ok && a.Balance != bal {
			t.Fatalf("%s: ledger %s, books %s", acct, a.Balance, bal)
		}
	}
}

func TestSoldOutBlocksCloseRevealingTheirSeedAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	small := func(c *Config) { c.Rules = projectionstest.SmallRules(t) }
	n := startNode(t, dir, small)
	// given an emission of three blocks of 12 units
	exec(t, n.w, domain.CreateEmission{Price: 100, Blocks: 3})
	fundedPlayer(t, n.w, "p1", 100000)
	// when the first block sells out, then the writer restarts mid-way
	// through the second
	res, err := Simulate(context.Background(), n.w, SimConfig{Price: 100, Plays: 18, Players: 3})
	if err != nil {
		t.Fatal(err)
	}
	n.stop()
	n = startNode(t, dir, small)
	if _, err := Simulate(context.Background(), n.w, SimConfig{Price: 100, Plays: 6, Players: 2}); err != nil {
		t.Fatal(err)
	}
	// then both sold-out blocks are closed, by a sweep once their last
	// plays settle, and their seeds match their commitments; the third
	// block is on sale
	n.waitClosed(2)
	_, l, events := n.replay()
	checkUnits(t, events, l)
	if closed := closedBlocks(t, events, l); closed != 2 || l.OpenBlock(100) == nil || l.OpenBlock(100).ID != "E0001-B003" {
		t.Fatalf("%d blocks closed, open block %+v (first run paid %s)", closed, l.OpenBlock(100), res.PrizesTotal)
	}
}

// closedBlocks counts the BlockClosed events and checks that each revealed
// seed reproduces its block's commitment.
func closedBlocks(t *testing.T, events []domain.Event, l *domain.Ledger) int {
	t.Helper()
	closed := 0
	for _, e := range events {
		if c, ok := e.(*domain.BlockClosed); ok {
			b := l.Blocks[c.Block]
			if err := domain.VerifyReveal(c.Seed, projectionstest.SmallRules(t).Tables[1].LotCounts(), b.Commitment); err != nil {
				t.Fatal(err)
			}
			closed++
		}
	}
	return closed
}

// heldLog is the real event log with a hold on the answers of its appends:
// each append is submitted at once and in order, but its outcome reaches
// the writer only once the hold in force when it was submitted is released,
// and then reports lost (the outcome a lost stream leader gives) if asked
// to. It opens the window in which a retry meets a command still committing.
type heldLog struct {
	*EventLog
	mu   sync.Mutex
	hold chan struct{}
	lose bool
}

func (h *heldLog) Append(ctx context.Context, recs []Record, done func(AppendResult)) {
	h.mu.Lock()
	hold := h.hold
	h.mu.Unlock()
	h.EventLog.Append(ctx, recs, func(r AppendResult) {
		// Held off the committer's goroutine, which answers every append.
		go func() {
			if hold != nil {
				<-hold
			}
			h.mu.Lock()
			if h.lose {
				r = AppendResult{Err: eventstore.ErrOutcomeUnknown}
			}
			h.mu.Unlock()
			done(r)
		}()
	})
}

// holdAnswers holds the answers of the appends submitted from now on until
// the returned function is called (with lose: reported as lost).
func (h *heldLog) holdAnswers() (release func(lose bool)) {
	c := make(chan struct{})
	h.mu.Lock()
	h.hold = c
	h.mu.Unlock()
	var once sync.Once
	return func(lose bool) {
		once.Do(func() {
			h.mu.Lock()
			h.hold, h.lose = nil, lose
			h.mu.Unlock()
			close(c)
		})
	}
}

// openHeld opens a writer on the node's store through a heldLog.
func (n *node) openHeld() (*Writer, *heldLog) {
	n.tb.Helper()
	rules, _ := domain.DefaultRules()
	sealer, _ := NewSealer(testMasterKey)
	ctx := eventstoretest.Ctx(n.tb, time.Minute)
	el, err := OpenEventLog(ctx, n.store, eventstore.CommitterConfig{})
	if err != nil {
		n.tb.Fatal(err)
	}
	h := &heldLog{EventLog: el}
	w, err := Open(ctx, h, Config{Rules: rules, Sealer: sealer})
	if err != nil {
		n.tb.Fatal(err)
	}
	n.tb.Cleanup(func() { w.Close(); el.Close() })
	return w, h
}

// answer is one Execute's outcome.
type answer struct {
	res Result
	err error
}

func executeAsync(w *Writer, c domain.Command) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		r, err := w.Execute(context.Background(), c)
		out <- answer{r, err}
	}()
	return out
}

// decided waits until the writer's ledger shows what ok looks for: the
// command sent before has been decided (its answer still on its way).
func decided(tb testing.TB, w *Writer, ok func(*domain.Ledger) bool) {
	tb.Helper()
	eventstoretest.Eventually(tb, 10*time.Second, func() error {
		seen := false
		if err := w.Inspect(context.Background(), func(l *domain.Ledger) { seen = ok(l) }); err != nil || seen {
			return err
		}
		return errors.New("not decided yet")
	})
}

// notYet fails if an answer arrives within a short while: the command it
// answers must still be waiting.
func notYet(tb testing.TB, what string, c <-chan answer) {
	tb.Helper()
	select {
	case a := <-c:
		tb.Fatalf("%s answered while its original was still committing: %+v %v", what, a.res, a.err)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestARetryIsAnsweredOnlyOnceItsOriginalIsDurable(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	n.w.Close()
	w, h := n.openHeld()
	fundedPlayer(t, w, "p1", 10_000)
	exec(t, w, domain.CreateEmission{Price: 100, Blocks: 1})

	// given a deposit and a stake whose appends are not yet acknowledged
	release := h.holdAnswers()
	defer release(false)
	deposit := domain.Deposit{Player: "p1", Amount: 500, Key: "d"}
	stake := domain.PlaceStake{Player: "p1", Stake: 100, Key: "s"}
	first, firstStake := executeAsync(w, deposit), executeAsync(w, stake)
	decided(t, w, func(l *domain.Ledger) bool {
		return l.Key("p1", domain.KeyDeposit, "d") != nil && l.Key("p1", domain.KeyStake, "s") != nil
	})
	// when they are retried, and another command is refused on their account
	retry, retryStake := executeAsync(w, deposit), executeAsync(w, stake)
	refused := executeAsync(w, domain.Withdraw{Player: "p1", Amount: 1_000_000, Key: "w"})
	// then no answer comes before the originals are durable
	notYet(t, "the deposit's retry", retry)
	notYet(t, "the stake's retry", retryStake)
	notYet(t, "a refusal decided on them", refused)
	release(false)
	a, b := <-first, <-retry
	if a.err != nil || b.err != nil || b.res.Replay == nil || b.res.Replay.Balance != a.res.Events[0].(*domain.FundsDeposited).Balance {
		t.Fatalf("deposit %+v %v, retry %+v %v", a.res, a.err, b.res, b.err)
	}
	a, b = <-firstStake, <-retryStake
	if a.err != nil || b.err != nil || b.res.Replay == nil || b.res.Replay.Play != a.res.Events[0].(*domain.StakePlaced).Play {
		t.Fatalf("stake %+v %v, retry %+v %v", a.res, a.err, b.res, b.err)
	}
	if r := <-refused; !errors.Is(r.err, domain.ErrInsufficientFunds) {
		t.Fatalf("withdrawal: %v", r.err)
	}
	// and a retried throw waits for its throw too
	play := a.res.Events[0].(*domain.StakePlaced).Play
	release = h.holdAnswers()
	defer release(false)
	throw := executeAsync(w, domain.MakeThrow{Player: "p1", Play: play, Throw: 1})
	decided(t, w, func(l *domain.Ledger) bool { return l.Plays[play].Throws == 1 })
	again := executeAsync(w, domain.MakeThrow{Player: "p1", Play: play, Throw: 1})
	notYet(t, "the throw's retry", again)
	release(false)
	if a, b := <-throw, <-again; a.err != nil || b.err != nil || b.res.Replay == nil || b.res.Replay.Throw != 1 {
		t.Fatalf("throw %+v %v, retry %+v %v", a.res, a.err, b.res, b.err)
	}
}

// TestARetryIsAnsweredAtAPositionThatShowsItsOriginal: the answer to a
// retry carries the writer's position when it answered, at or past its
// original's events, from the writer that recorded them and from one
// rebuilt from the stream that has appended nothing yet: the API waits
// for it before it reads the answer's play or balance, whatever the node
// has become meanwhile.
func TestARetryIsAnsweredAtAPositionThatShowsItsOriginal(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	fundedPlayer(t, n.w, "p1", 10_000)
	exec(t, n.w, domain.CreateEmission{Price: 100, Blocks: 1})
	deposit := domain.Deposit{Player: "p1", Amount: 500, Key: "d"}
	stake := domain.PlaceStake{Player: "p1", Stake: 100, Key: "s"}
	originals := map[string]Result{"deposit": exec(t, n.w, deposit), "stake": exec(t, n.w, stake)}
	throw := domain.MakeThrow{Player: "p1", Play: originals["stake"].Events[0].(*domain.StakePlaced).Play, Throw: 1}
	originals["throw"] = exec(t, n.w, throw)
	retries := map[string]domain.Command{"deposit": deposit, "stake": stake, "throw": throw}
	check := func(writer string, w *Writer) {
		t.Helper()
		for name, c := range retries {
			r := exec(t, w, c)
			if r.Replay == nil || r.LastSeq() < originals[name].LastSeq() {
				t.Fatalf("%s: retry of the %s: %+v at %d, want a replay at %d or later", writer, name, r, r.LastSeq(), originals[name].LastSeq())
			}
		}
	}
	check("the writer that recorded them", n.w)
	n.w.Close()
	w := n.openWriter(nil)
	defer w.Close()
	check("a writer rebuilt from the stream", w)
}

func TestARetryOfALostAppendIsNeverAnsweredFromMemory(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir, nil)
	n.w.Close()
	w, h := n.openHeld()
	fundedPlayer(t, w, "p1", 10_000)

	// given a deposit whose append's outcome is lost (it did land)
	release := h.holdAnswers()
	deposit := domain.Deposit{Player: "p1", Amount: 500, Key: "d"}
	first := executeAsync(w, deposit)
	decided(t, w, func(l *domain.Ledger) bool { return l.Key("p1", domain.KeyDeposit, "d") != nil })
	retry := executeAsync(w, deposit)
	notYet(t, "the retry", retry)
	release(true)
	// then the original and its retry both fail: the writer stopped
	for name, c := range map[string]<-chan answer{"original": first, "retry": retry} {
		if a := <-c; !errors.Is(a.err, ErrStopped) {
			t.Fatalf("%s: %+v %v, want the writer stopped", name, a.res, a.err)
		}
	}
	// and a writer rebuilt from the stream answers the retry with what
	// the stream holds
	w2 := n.openWriter(nil)
	defer w2.Close()
	r := exec(t, w2, deposit)
	if r.Replay == nil || r.Replay.Balance != 10_500 {
		t.Fatalf("retry after the restart: %+v", r)
	}
}

// TestAnAnswerFromTheLedgerAloneNeedsTheWriterInCharge: a refusal, the
// retry of a remembered key and a throw already made are decided on the
// ledger alone, with no append a fence could refuse; once the writer may
// no longer be in charge (Config.MayAnswer: a lease not renewed in time)
// they are answered with the writer's stop (503), never from its ledger,
// which may miss what another writer recorded since. A command that
// appends is not asked (the committer's check before each batch, and the
// stream's fence, guard it), and the answers come back once the writer is
// in charge again.
func TestAnAnswerFromTheLedgerAloneNeedsTheWriterInCharge(t *testing.T) {
	errLost := errors.New("lease not renewed in time")
	var lost atomic.Bool
	n := startNode(t, t.TempDir(), func(c *Config) {
		c.MayAnswer = func() error {
			if lost.Load() {
				return errLost
			}
			return nil
		}
	})
	fundedPlayer(t, n.w, "p1", 10_000)
	ctx := eventstoretest.Ctx(t, time.Minute)
	ledgerOnly := map[string]domain.Command{
		"a refusal":                     domain.MakeThrow{Player: "p1", Play: "no-such-play", Throw: 1},
		"the retry of a remembered key": domain.Deposit{Player: "p1", Amount: 10_000, Key: "fund-p1"},
	}
	for name, c := range ledgerOnly {
		if _, err := n.w.Execute(ctx, c); errors.Is(err, ErrStopped) {
			t.Fatalf("%s in charge: %v", name, err)
		}
	}
	lost.Store(true)
	for name, c := range ledgerOnly {
		if r, err := n.w.Execute(ctx, c); !errors.Is(err, ErrStopped) || !errors.Is(err, errLost) {
			t.Fatalf("%s once not in charge: %+v %v, want the writer's stop", name, r, err)
		}
	}
	if r := exec(t, n.w, domain.Deposit{Player: "p1", Amount: 100, Key: "new"}); len(r.Seqs) != 1 {
		t.Fatalf("an appending command: %+v", r)
	}
	lost.Store(false)
	var de *domain.Error
	if _, err := n.w.Execute(ctx, ledgerOnly["a refusal"]); !errors.As(err, &de) || de.Code != domain.CodeNotFound {
		t.Fatalf("the refusal in charge again: %v", err)
	}
	if r := exec(t, n.w, ledgerOnly["the retry of a remembered key"]); r.Replay == nil {
		t.Fatalf("the retry in charge again: %+v", r)
	}
}

// TestSimulateOpenLoopKeepsItsPace starts plays at a fixed rate whatever
// the answers: the run lasts as long as the schedule says, every play
// settles within its player's funded share, and each stake's latency is
// counted from when its play was due.
func TestSimulateOpenLoopKeepsItsPace(t *testing.T) {
	n := startNode(t, t.TempDir(), func(c *Config) { c.Rules = projectionstest.SmallRules(t) })
	exec(t, n.w, domain.CreateEmission{Price: 100, Blocks: 3})
	const plays, rate = 30, 100
	res, err := Simulate(context.Background(), n.w, SimConfig{Price: 100, Plays: plays, Players: 4, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	if res.Plays != plays || res.StakesTotal != plays*100 {
		t.Fatalf("%d plays, stakes %s: want %d plays of 1.00", res.Plays, res.StakesTotal, plays)
	}
	if schedule := time.Duration(plays-1) * time.Second / rate; res.Elapsed < schedule {
		t.Fatalf("open loop of %d plays at %d a second took %s, less than its schedule %s", plays, rate, res.Elapsed, schedule)
	}
	if res.CommandLatencies[0] <= 0 || len(res.CommandLatencies) != plays*(1+domain.ThrowCount) {
		t.Fatalf("command latencies %v", res.CommandLatencies[:3])
	}
}
