package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"golang.org/x/time/rate"
)

// The torn-read probe's size: a few hundred plays by players playing at
// once, so that batches of the projection hold appends of several players,
// in a few seconds.
const (
	tornPlayers   = 12
	tornPlaysEach = 25
	// tornBurst is how many reads follow each stake and each fourth throw
	// at once.
	tornBurst = 8
	// tornRatePerSecond and tornRateBurst pace one player's requests,
	// writes and reads together, under the API's per-token limit (200/s
	// after a burst of 400), so that the probe measures reads, never 429s.
	tornRatePerSecond = 190
	tornRateBurst     = 100
	// tornReportMax bounds the torn answers a failure quotes.
	tornReportMax = 5
)

// TestReadsNeverShowHalfAnAppendMemory and ...Postgres play a few hundred
// plays through the real binary while a second connection per player reads
// the play, without min_seq, right after each stake and each fourth throw
// is answered: an answer shows a stake with its unit or no play at all,
// four throws with their settlement (and a winner's prize paid) or three
// throws without it, never the part of one command's events that the read
// models happened to have applied.
func TestReadsNeverShowHalfAnAppendMemory(t *testing.T) { testTornReads(t) }

func TestReadsNeverShowHalfAnAppendPostgres(t *testing.T) {
	testTornReads(t, "--database-url", freshDatabase(t))
}

func testTornReads(t *testing.T, args ...string) {
	t.Parallel()
	s := startServe(t, t.TempDir(), args...)
	op := s.token("operator", "")
	s.must(201, call{"POST", "/v1/emissions", op, "", `{"price":"0.50","blocks":1}`})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var reads, answered atomic.Int64
	var mu sync.Mutex
	var torn []string
	errs := make(chan error, tornPlayers*2)
	var wg sync.WaitGroup
	for i := range tornPlayers {
		p := fmt.Sprintf("torn-%02d", i)
		s.must(200, call{"PUT", "/v1/players/" + p, op, "", `{"weekly_deposit_limit":"1000.00","weekly_stake_limit":"1000.00"}`})
		s.must(200, call{"POST", "/v1/players/" + p + "/deposits", op, "d1", `{"amount":"500.00"}`})
		lim := rate.NewLimiter(tornRatePerSecond, tornRateBurst)
		tok := s.token("player", p)
		// Writer and reader use a connection each: the reader's requests
		// never queue behind the writer's.
		w := &prober{url: s.url, player: p, token: tok, lim: lim, hc: &http.Client{Transport: &http.Transport{}}}
		r := &prober{url: s.url, player: p, token: tok, lim: lim, hc: &http.Client{Transport: &http.Transport{}}}
		var cur atomic.Pointer[stakeAnswer]
		kick := make(chan struct{}, 1)
		done := make(chan struct{})
		wg.Go(func() {
			defer close(done)
			if err := w.play(ctx, tornPlaysEach, &cur, kick); err != nil {
				errs <- err
			}
		})
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				case <-kick:
				}
				for n := range tornBurst {
					path := "/last"
					c := cur.Load()
					if n%2 == 1 && c != nil {
						path = "/" + c.id
					}
					status, v, err := r.send(ctx, "GET", "/v1/players/"+p+"/plays"+path, "", "")
					reads.Add(1)
					switch {
					case err != nil:
						errs <- err
						return
					case status == http.StatusNotFound:
						continue
					case status != http.StatusOK:
						errs <- fmt.Errorf("GET %s play%s: %d %v", p, path, status, v)
						return
					}
					answered.Add(1)
					if what := tornPlay(v, c); what != "" {
						mu.Lock()
						torn = append(torn, what+": "+playSummary(v))
						mu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d reads, %d plays answered, %d torn", reads.Load(), answered.Load(), len(torn))
	if answered.Load() < tornPlayers*tornPlaysEach {
		t.Errorf("%d reads answered a play, want at least one per play (%d): the probe read nothing", answered.Load(), tornPlayers*tornPlaysEach)
	}
	if len(torn) > 0 {
		t.Errorf("%d answers showed part of one command's events, the first ones:\n%s",
			len(torn), strings.Join(torn[:min(len(torn), tornReportMax)], "\n"))
	}
	s.stop()
}

// stakeAnswer is what the writer learnt from a stake's answer: the play and
// the balance right after the stake, which a paid prize adds to.
type stakeAnswer struct {
	id      string
	balance domain.Amount
}

// tornPlay says which half of a command a play answer shows, "" when it is
// whole. c, when it is the answered play's stake, also checks that a
// winner's balance includes the prize settled with it.
func tornPlay(v map[string]any, c *stakeAnswer) string {
	throws, _ := v["throws"].([]any)
	settled := v["tier"] != nil
	switch {
	case v["start"] == nil:
		// The map's start is drawn from the unit: no start, no unit.
		return "a stake without its unit"
	case len(throws) == domain.ThrowCount && !settled, v["throws_left"] == 0.0 && !settled:
		return "four throws without the settlement"
	case settled && (len(throws) != domain.ThrowCount || v["status"] == "in_progress"):
		return "a settlement without its throws"
	case !settled || c == nil || v["play_id"] != c.id:
		return ""
	}
	prize, err1 := domain.ParseAmount(fmt.Sprint(v["prize"]))
	balance, err2 := domain.ParseAmount(fmt.Sprint(v["balance"]))
	if err1 != nil || err2 != nil || balance != c.balance+prize {
		return fmt.Sprintf("a settlement without its prize paid (balance after the stake %s)", c.balance)
	}
	return ""
}

// playSummary is what a torn answer shows, in one line.
func playSummary(v map[string]any) string {
	throws, _ := v["throws"].([]any)
	return fmt.Sprintf("play %v at seq %v: %d throws, throws_left %v, status %v, tier %v, prize %v, balance %v, start %v",
		v["play_id"], v["seq"], len(throws), v["throws_left"], v["status"], v["tier"], v["prize"], v["balance"], v["start"])
}

// prober sends one player's requests on its own connection, paced by a
// limiter it may share, and returns errors instead of failing the test, so
// that goroutines can use it.
type prober struct {
	url, player, token string
	lim                *rate.Limiter
	hc                 *http.Client
}

// send sends one request (key is the Idempotency-Key, "" for none) and
// returns the status and the decoded answer.
func (p *prober) send(ctx context.Context, method, path, key, body string) (int, map[string]any, error) {
	if err := p.lim.Wait(ctx); err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.url+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return 0, nil, fmt.Errorf("%s %s: %d %q: %w", method, path, resp.StatusCode, b, err)
	}
	return resp.StatusCode, m, nil
}

// play makes plays whole plays, one after the other: a stake, then its four
// throws. After the stake's answer and after the fourth throw's it kicks
// the reader, and cur names the play being thrown.
func (p *prober) play(ctx context.Context, plays int, cur *atomic.Pointer[stakeAnswer], kick chan<- struct{}) error {
	must := func(want int, method, path, key, body string) (map[string]any, error) {
		status, v, err := p.send(ctx, method, path, key, body)
		if err == nil && status != want {
			err = fmt.Errorf("%s %s: %d %v, want %d", method, path, status, v, want)
		}
		return v, err
	}
	poke := func() {
		select {
		case kick <- struct{}{}:
		default: // the reader has a kick pending: it reads anyway
		}
	}
	base := "/v1/players/" + p.player + "/plays"
	for n := range plays {
		v, err := must(http.StatusCreated, "POST", base, fmt.Sprintf("k%d", n), `{"stake":"0.50"}`)
		if err != nil {
			return err
		}
		balance, err := domain.ParseAmount(fmt.Sprint(v["balance"]))
		if err != nil {
			return fmt.Errorf("stake answer %v: %w", v, err)
		}
		id := fmt.Sprint(v["play_id"])
		cur.Store(&stakeAnswer{id: id, balance: balance})
		poke()
		for range domain.ThrowCount {
			if _, err := must(http.StatusOK, "POST", base+"/"+id+"/throws", "", ""); err != nil {
				return err
			}
		}
		poke()
	}
	return nil
}
