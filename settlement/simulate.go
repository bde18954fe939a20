package settlement

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fdj/tresor/domain"
)

// SimConfig describes a simulated load: Players funded players playing
// Plays plays of Price, each with its four throws, all at once.
type SimConfig struct {
	Price   domain.Amount
	Plays   int
	Players int
	// Rate, when set, starts that many plays a second whatever the
	// answers (an open loop: latency then includes any queueing, measured
	// from when each play was due), play i by player i mod Players as soon
	// as that player's previous play is over. 0 has every player play as
	// fast as it is answered (a closed loop: the maximum rate).
	Rate int
	// OnPlay, when set, is called after each settled play (progress bars).
	OnPlay func()
	// Snapshots, when set, tells what the writer's snapshotter was doing
	// at a time (recorded through Config.SnapshotObserver): the commands'
	// latencies are then also split by whether a snapshot was being taken
	// when they were clicked.
	Snapshots SnapshotTimeline
	// Measure, when set, is called as the plays start (the players are
	// funded by then), and the function it returns once the last play has
	// settled: a profile or a counter it starts covers the plays alone.
	Measure func() (done func())
}

// SimResult is what a simulation did, measured on the writer's answers.
type SimResult struct {
	Plays       int
	StakesTotal domain.Amount
	PrizesTotal domain.Amount
	Tiers       [domain.TierCount]int
	// Events counts the events the plays recorded.
	Events int
	// Elapsed covers the plays only, not the funding of the players.
	Elapsed time.Duration
	// Latencies holds every play's time from « Jouer » to its settlement,
	// sorted.
	Latencies []time.Duration
	// CommandLatencies holds every command's time from the player's click
	// (« Jouer » or « Lancer ») to its durable answer, sorted.
	CommandLatencies []time.Duration
	// CommandLatenciesBySnapshot splits CommandLatencies (each sorted) by
	// what the writer's snapshotter was doing at the click (not at any
	// time until the answer, which would count slow commands as during a
	// snapshot more often than quick ones); set with SimConfig.Snapshots.
	CommandLatenciesBySnapshot map[SnapshotPhase][]time.Duration
	// CommandQueued, CommandHeld and CommandCommitted split each recording
	// command's latency by where it went in the log (CommitTiming), and
	// CommandOutside is the rest: the player's scheduling, the writer's
	// queue and decider, the answer's way back. Each is sorted.
	CommandQueued, CommandHeld, CommandCommitted, CommandOutside []time.Duration
}

// Percentile returns the latency below which p percent of sorted durations
// fall.
func Percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// Simulate drives the real write path: it makes sure enough units are on
// sale (creating an emission if needed), opens and funds cfg.Players new
// players, and has them play cfg.Plays plays concurrently, each a stake
// then four throws, every command waiting for its events to be durable.
// It returns when every play has settled and every block it sold out has
// closed.
func Simulate(ctx context.Context, w *Writer, cfg SimConfig) (*SimResult, error) {
	if cfg.Plays < 1 || cfg.Players < 1 || cfg.Players > cfg.Plays {
		return nil, fmt.Errorf("simulate %d plays with %d players: want 1 ≤ players ≤ plays", cfg.Plays, cfg.Players)
	}
	if cfg.Rate < 0 {
		return nil, fmt.Errorf("simulate at %d plays a second: negative rate", cfg.Rate)
	}
	if err := ensureUnits(ctx, w, cfg.Price, cfg.Plays); err != nil {
		return nil, err
	}
	players, err := fundPlayers(ctx, w, cfg.Price, cfg.Plays, cfg.Players)
	if err != nil {
		return nil, err
	}
	res := &SimResult{Plays: cfg.Plays, Latencies: make([]time.Duration, cfg.Plays),
		CommandLatencies: make([]time.Duration, cfg.Plays*(1+domain.ThrowCount))}
	clicks := make([]time.Time, len(res.CommandLatencies))
	commits := make([]CommitTiming, len(res.CommandLatencies))
	var mu sync.Mutex
	var firstErr error
	// play makes play i as player, clicked « Jouer » at t0; false stops.
	play := func(i int, player string, t0 time.Time) bool {
		settled, n, err := playOnce(ctx, w, player, cfg.Price, fmt.Sprintf("sim-%d", i), t0,
			res.CommandLatencies[i*(1+domain.ThrowCount):], clicks[i*(1+domain.ThrowCount):], commits[i*(1+domain.ThrowCount):])
		res.Latencies[i] = time.Since(t0)
		mu.Lock()
		defer mu.Unlock()
		res.Events += n
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("play %d of %s: %w", i, player, err)
			}
			return false
		}
		res.StakesTotal += cfg.Price
		res.PrizesTotal += settled.Prize
		res.Tiers[settled.Tier]++
		if cfg.OnPlay != nil {
			cfg.OnPlay()
		}
		return true
	}
	done := func() {}
	if cfg.Measure != nil {
		done = cfg.Measure()
	}
	start := time.Now()
	var wg sync.WaitGroup
	if cfg.Rate > 0 {
		openLoop(ctx, cfg, players, start, &wg, play)
	} else {
		closedLoop(ctx, cfg, players, &wg, play)
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	done()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.splitTimings(cfg.Snapshots, clicks, commits)
	// Sold-out blocks close once their last play settles; wait for that so
	// that the stream left behind reveals their seeds to the audit.
	if err := waitClosed(ctx, w, 30*time.Second); err != nil {
		return nil, err
	}
	return res, nil
}

// closedLoop has every player play as fast as the writer answers: player
// p plays plays p, p+n, p+2n…, exactly its funded share, within its
// weekly limits, whatever the others' pace. It stops a player's plays
// once one fails.
func closedLoop(ctx context.Context, cfg SimConfig, players []string, wg *sync.WaitGroup, play func(int, string, time.Time) bool) {
	for p, player := range players {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < cfg.Plays && ctx.Err() == nil; i += len(players) {
				if !play(i, player, time.Now()) {
					return
				}
			}
		}()
	}
}

// splitTimings splits each command's latency by the snapshot phase it
// was clicked in (when snapshots observes them) and into its parts
// (commits, the writer's), then sorts every list for its percentiles.
func (res *SimResult) splitTimings(snapshots SnapshotTimeline, clicks []time.Time, commits []CommitTiming) {
	if snapshots != nil {
		res.CommandLatenciesBySnapshot = map[SnapshotPhase][]time.Duration{}
		for i, d := range res.CommandLatencies {
			p := snapshots.At(clicks[i])
			res.CommandLatenciesBySnapshot[p] = append(res.CommandLatenciesBySnapshot[p], d)
		}
		for _, l := range res.CommandLatenciesBySnapshot {
			slices.Sort(l)
		}
	}
	for i, c := range commits {
		if c == (CommitTiming{}) {
			continue // recorded nothing, or not played
		}
		res.CommandQueued = append(res.CommandQueued, c.Queued)
		res.CommandHeld = append(res.CommandHeld, c.Held)
		res.CommandCommitted = append(res.CommandCommitted, c.Committed)
		res.CommandOutside = append(res.CommandOutside, res.CommandLatencies[i]-c.Queued-c.Held-c.Committed)
	}
	for _, l := range [][]time.Duration{res.Latencies, res.CommandLatencies, res.CommandQueued, res.CommandHeld, res.CommandCommitted, res.CommandOutside} {
		slices.Sort(l)
	}
}

// openLoop starts play i when it is due, at cfg.Rate plays a second from
// start, by player i mod n once that player's previous play is over (the
// share it was funded for). It stops starting plays once one fails.
func openLoop(ctx context.Context, cfg SimConfig, players []string, start time.Time, wg *sync.WaitGroup, play func(int, string, time.Time) bool) {
	idle := make([]chan struct{}, len(players))
	for p := range idle {
		idle[p] = make(chan struct{}, 1)
		idle[p] <- struct{}{}
	}
	var failed sync.Once
	stop := make(chan struct{})
	every := time.Second / time.Duration(cfg.Rate)
	for i := range cfg.Plays {
		due := start.Add(time.Duration(i) * every)
		p := i % len(players)
		select {
		case <-time.After(time.Until(due)):
		case <-ctx.Done():
			return
		case <-stop:
			return
		}
		select {
		case <-idle[p]:
		case <-ctx.Done():
			return
		case <-stop:
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !play(i, players[p], due) {
				failed.Do(func() { close(stop) })
			}
			idle[p] <- struct{}{}
		}()
	}
}

// ensureUnits makes sure enough units of the price are on sale or queued:
// it creates an emission of the blocks missing.
func ensureUnits(ctx context.Context, w *Writer, price domain.Amount, plays int) error {
	var left, blockUnits int
	if err := w.Inspect(ctx, func(l *domain.Ledger) {
		blockUnits = l.Rules.BlockUnits
		if b := l.OpenBlock(price); b != nil {
			left += blockUnits - b.Sold
		}
		for _, e := range l.Emissions {
			if e.Price == price {
				left += (e.Blocks - e.Opened) * blockUnits
			}
		}
	}); err != nil {
		return err
	}
	if left >= plays {
		return nil
	}
	blocks := (plays - left + blockUnits - 1) / blockUnits
	_, err := w.Execute(ctx, domain.CreateEmission{Price: price, Blocks: blocks})
	return err
}

// fundPlayers opens n new players with weekly limits and deposits enough
// for their share of the plays.
func fundPlayers(ctx context.Context, w *Writer, price domain.Amount, plays, n int) ([]string, error) {
	var run [4]byte
	if _, err := rand.Read(run[:]); err != nil {
		return nil, err
	}
	prefix := "sim-" + hex.EncodeToString(run[:])
	share := domain.Amount((plays+n-1)/n) * price
	players := make([]string, n)
	for i := range players {
		players[i] = fmt.Sprintf("%s-%d", prefix, i)
		if _, err := w.Execute(ctx, domain.ConfigureAccount{Player: players[i], DepositLimit: &share, StakeLimit: &share}); err != nil {
			return nil, fmt.Errorf("open %s: %w", players[i], err)
		}
		if _, err := w.Execute(ctx, domain.Deposit{Player: players[i], Amount: share, Key: "fund"}); err != nil {
			return nil, fmt.Errorf("fund %s: %w", players[i], err)
		}
	}
	return players, nil
}

// playOnce is one play as a player makes it: « Jouer », then four
// « Lancer ». It returns the settlement and the number of events recorded,
// and writes each command's latency into lat and its click into clicks,
// the stake's from t0, when the player clicked « Jouer ».
func playOnce(ctx context.Context, w *Writer, player string, price domain.Amount, key string, t0 time.Time, lat []time.Duration, clicks []time.Time, commits []CommitTiming) (*domain.PlaySettled, int, error) {
	res, err := w.Execute(ctx, domain.PlaceStake{Player: player, Stake: price, Key: key})
	if err != nil {
		return nil, 0, err
	}
	lat[0], clicks[0], commits[0] = time.Since(t0), t0, res.Commit
	n := len(res.Events)
	play := res.Events[0].(*domain.StakePlaced).Play
	for k := range domain.ThrowCount {
		t0 = time.Now()
		res, err = w.Execute(ctx, domain.MakeThrow{Player: player, Play: play})
		if err != nil {
			return nil, n, err
		}
		lat[1+k], clicks[1+k], commits[1+k] = time.Since(t0), t0, res.Commit
		n += len(res.Events)
	}
	for _, e := range res.Events {
		if s, ok := e.(*domain.PlaySettled); ok {
			return s, n, nil
		}
	}
	return nil, n, fmt.Errorf("play %s: no settlement after %d throws", play, domain.ThrowCount)
}

// waitClosed waits, bounded, until no block is sold out and still
// unclosed (the writer closes one once its plays have all settled).
func waitClosed(ctx context.Context, w *Writer, max time.Duration) error {
	deadline := time.Now().Add(max)
	for {
		pending := 0
		if err := w.Inspect(ctx, func(l *domain.Ledger) {
			for _, b := range l.Blocks {
				if b.State == domain.BlockStateExhausted {
					pending++
				}
			}
		}); err != nil {
			return err
		}
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d sold-out blocks still not closed after %s", pending, max)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
