package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/projections/projectionstest"
	"github.com/fdj/tresor/settlement"
)

// BenchmarkPlayersOwnReads measures the p99 latency of a player reading
// their own account through the API's handler, without the revocation
// check and the access log (the API as it was before them: both off) and
// with them (benchRevoked revocations, the access log on a real
// stream), in alternating rounds of the same run: the figure is the
// median over the rounds of the ratio of the two p99. Then the same for
// a staff read, which the access log records (its stores compete for the
// CPU afterwards, so the players' rounds come first).
func BenchmarkPlayersOwnReads(b *testing.B) {
	bare, full, players := readServers(b)
	for b.Loop() {
		for _, staff := range []bool{false, true} {
			before, after, ratio := alternate(b, bare, full, players, staff)
			name := map[bool]string{false: "own", true: "staff"}[staff]
			b.ReportMetric(float64(before.Microseconds()), name+"-p99-before-µs")
			b.ReportMetric(float64(after.Microseconds()), name+"-p99-after-µs")
			b.ReportMetric(ratio, name+"-p99-ratio")
		}
	}
}

// The benchmark's sizes: the plays in the read models, the revocations in
// the full API's set, the rounds of alternate, and the readers of a round
// with their reads each.
const (
	benchPlays    = 2000
	benchRevoked  = 1000
	benchRounds   = 8
	benchReaders  = 4
	benchReadsPer = 1000
)

// alternate drives reads through bare and full in benchRounds rounds, ABBA so that
// neither side always runs first, and returns the p99 of each side over
// all rounds and the median of the rounds' ratios (full over bare).
func alternate(b *testing.B, bare, full *Server, players []string, staff bool) (before, after time.Duration, ratio float64) {
	var all [2][]time.Duration
	var ratios []float64
	for round := range benchRounds {
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		var p [2]time.Duration
		for _, i := range order {
			lat := driveReads(b, [2]*Server{bare, full}[i], players, staff)
			p[i] = p99(lat)
			all[i] = append(all[i], lat...)
		}
		ratios = append(ratios, float64(p[1])/float64(p[0]))
	}
	slices.Sort(ratios)
	mid := len(ratios) / 2
	return p99(all[0]), p99(all[1]), (ratios[mid-1] + ratios[mid]) / 2
}

// readServers returns two APIs over the same read models of benchPlays plays:
// bare (no revocations, no access log) and full, and the players' ids.
func readServers(b *testing.B) (bare, full *Server, players []string) {
	rules, err := domain.DefaultRules()
	if err != nil {
		b.Fatal(err)
	}
	w := projectionstest.Busy(b, rules, benchPlays)
	store := memstore.New(rules)
	if err := projections.NewRunner(projectionstest.NewLog(w.Events), store).RunTo(context.Background(), uint64(len(w.Events))); err != nil {
		b.Fatal(err)
	}
	for p := range w.Ledger.Accounts {
		players = append(players, p)
	}
	key := make([]byte, TokenKeySize)
	tokens, err := NewTokens(key)
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Writer: readOnly(len(w.Events)), Store: store, Tokens: tokens, RatePerSecond: 1 << 30, RateBurst: 1 << 30}
	bare = NewServer(cfg)
	cfg.Registry, cfg.Revocations, cfg.AccessLog = nil, revokedSet(b), benchAccessLog(b)
	return bare, NewServer(cfg), players
}

// revokedSet is a set of benchRevoked revocations, tokens and subjects by
// halves, kept fresh as the follower keeps it, until the benchmark ends.
func revokedSet(b *testing.B) *Revocations {
	v := NewRevocations(RevocationSkewDefault)
	by := &domain.Actor{Role: domain.RoleOperator, Subject: "ops"}
	for i := range benchRevoked {
		e := &domain.TokenRevoked{JTI: fmt.Sprint("jti-", i), Reason: "bench", By: by}
		if i%2 == 1 {
			e = &domain.TokenRevoked{Subject: fmt.Sprint("leaver-", i), Reason: "bench", By: by}
		}
		v.Apply(uint64(i+1), time.Now(), e)
	}
	v.Fresh(time.Now(), benchRevoked)
	ctx, stop := context.WithCancel(context.Background())
	b.Cleanup(stop)
	go func() {
		t := time.NewTicker(RevocationsPollEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				v.Fresh(time.Now(), benchRevoked)
			}
		}
	}()
	return v
}

// benchAccessLog is an access log on a real stream, running until the
// benchmark ends.
func benchAccessLog(b *testing.B) *AccessLog {
	a := NewAccessLog(openAccessStore(b), nil)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(ctx)
	}()
	b.Cleanup(func() { stop(); <-done })
	return a
}

// driveReads reads accounts from benchReaders goroutines, benchReadsPer
// reads each, with each player's own token or an operator's, and returns
// the latencies. Each read names the first position, applied already, so
// that it waits for nothing: the API here has no writer.
func driveReads(b *testing.B, s *Server, players []string, asStaff bool) []time.Duration {
	const readers, reads = benchReaders, benchReadsPer
	lat := make([][]time.Duration, readers)
	var wg sync.WaitGroup
	for g := range readers {
		wg.Go(func() {
			for n := range reads {
				p := players[(g*reads+n)%len(players)]
				role, subject, player := RolePlayer, p, p
				if asStaff {
					role, subject, player = RoleOperator, "ops@bench", ""
				}
				token, err := s.cfg.Tokens.MintFor(role, subject, player, time.Hour, time.Now())
				if err != nil {
					b.Error(err)
					return
				}
				r := httptest.NewRequest(http.MethodGet, "/v1/players/"+p+"/account?min_seq=1", nil)
				r.Header.Set("Authorization", "Bearer "+token)
				w := httptest.NewRecorder()
				t0 := time.Now()
				s.ServeHTTP(w, r)
				lat[g] = append(lat[g], time.Since(t0))
				if w.Code != http.StatusOK {
					b.Errorf("read of %s: %d %s", p, w.Code, w.Body)
					return
				}
			}
		})
	}
	wg.Wait()
	return slices.Concat(lat...)
}

// readOnly stands for the writer of a stream of that many events that
// takes no command: the benchmark reads only.
type readOnly uint64

func (readOnly) Execute(context.Context, domain.Command) (settlement.Result, error) {
	return settlement.Result{}, ErrNotReady
}

func (w readOnly) LastSeq() uint64 { return uint64(w) }

// p99 is the 99th percentile of ds.
func p99(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)*99/100]
}
