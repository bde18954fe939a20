package main

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
)

// The races of a start from snapshots, seen from outside: serve on the
// embedded default starts from the writer's snapshot (format 3) and the
// read models' (format 3: a hot section at the start, then 64 shards of
// settled history loaded by the warm-up, in order from shard 0, or earlier
// by a read or a batch that needs one). Everything below is fired while
// the shards load.
const (
	// racePlays of settled history over racePlayers spread it over the 64
	// shards (about 12 players each): long enough a history that the
	// warm-up is still loading the race's shards when the race fires (the
	// test fails otherwise), short enough to be built in seconds.
	racePlays   = "8000"
	racePlayers = "768"
	// raceShardFirst is the first shard the race touches: the warm-up
	// loads shards 0 to 31 first, so that the race's shards are still to
	// load when it fires.
	raceShardFirst = 32
	// raceShardWrite is the shard of the player written to at once: the
	// warm-up's last.
	raceShardWrite = 63
	// raceCopies of one write are sent at once with one key.
	raceCopies = 16
	// raceClients are crash clients depositing and playing all along, so
	// that the kills cut writes in flight.
	raceClients = 6
	// raceLoaded is the line serve logs once the warm-up has loaded every
	// shard.
	raceLoaded = `msg="projections snapshot shards loaded"`
)

// TestRacesWhileTheShardsLoad builds a stream of settled history, stops
// serve cleanly so that both snapshots exist, then starts serve again and,
// while its shards load: (a) sends one deposit and one stake raceCopies
// times at once each with one key, and reads the histories and statements
// of players in shards not loaded yet, (c) starts a second serve on the
// data directory, which must be refused naming the first; then (b) kills
// serve with SIGKILL while its shards load. Every acknowledged write is in
// the stream once with the answer given (the crash suite's check, against
// the export, and the audit); each read gave the answer of a full apply or
// 503 with Retry-After, never a part; the restart answers as a full apply.
func TestRacesWhileTheShardsLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a stream of settled history (-short)")
	}
	start := time.Now()
	r := newCrashRun(t)
	r.clients = raceClients
	if _, stderr, code := run(t, "simulate", "--data", r.data, "--price", "0.50", "--plays", racePlays, "--players", racePlayers,
		"--pipeline-depth", "16", "--sync-interval", "1s", "--quiet"); code != 0 {
		t.Fatalf("simulate: exit %d: %s", code, stderr)
	}
	readers := r.historyBefore()

	// The first start applies the whole stream: its reads are the
	// reference, and its clean stop takes both snapshots.
	s := startServe(t, r.data, r.serveArgs...)
	reg := s.token("regulator", "")
	writer := r.raceWriter(s)
	want := map[string]string{}
	for _, path := range raceReads(readers) {
		want[path] = raceBody(s.getText(path, reg))
	}
	writerHistory := "/v1/players/" + writer + "/plays?limit=50"
	wantWriter := s.getText(writerHistory, reg)
	r.setUp(s)
	s.stop()

	// (c) A second serve started by mistake while the first loads its
	// snapshots is refused naming it.
	first := startListening(t, r.data, r.serveArgs...)
	refused := make(chan time.Time, 1)
	go func() {
		refusedOneLine(t, r.data, first.cmd.Process.Pid, "tresor serve", "serve", "--data", r.data, "--http", "127.0.0.1:0")
		refused <- time.Now()
	}()
	writes := []*crashWrite{r.raceCall(first, writer, kindDeposit, "race-deposit", 500), r.raceCall(first, writer, kindStake, "race-stake", crashStake)}
	answers := make([][]answered, len(writes))
	first.waitReady(time.Minute)
	// (a) Fired at once as soon as it is ready, while the warm-up is at
	// its first shards.
	fired := time.Now()
	r.urls.Store(&[]string{first.url})
	var wg sync.WaitGroup
	for i, w := range writes {
		wg.Go(func() { answers[i] = first.burst(raceCopies, w.call) })
	}
	for _, path := range raceReads(readers) {
		wg.Go(func() { raceRead(t, first, reg, path, sameBody(want[path])) })
	}
	// The writer's history is read while its stake races: before it, or
	// after it with its play, never without the plays of its shard.
	var newPlays []string
	wg.Go(func() { raceRead(t, first, reg, writerHistory, sameHistoryBut(wantWriter, &newPlays)) })
	wg.Wait()
	raced := time.Now()
	for i, w := range writes {
		if id := r.raceCheck(w, answers[i]); id != "" {
			r.journal.abandon(id) // the system completes it
			if len(newPlays) > 0 && newPlays[0] != id {
				t.Errorf("the history read during the race showed play %s, the stake answered %s", newPlays[0], id)
			}
		}
	}
	secondExited := <-refused
	if lock := string(mustRead(t, filepath.Join(r.data, "jetstream", "tresor.lock"))); !strings.Contains(lock, fmt.Sprintf(`"pid":%d,`, first.cmd.Process.Pid)) {
		t.Fatalf("lock file after the second serve: %s", lock)
	}
	// (b) Killed at once, then again as soon as it is ready.
	r.kill(first)
	loaded := raceWarmedUp(t, first)
	ended := "not before the kill"
	if !loaded.IsZero() {
		ended = loaded.Sub(fired).Round(time.Millisecond).String() + " after firing"
	}
	t.Logf("fired %s after ready, answered in %s; the writer's history read showed %d new play; second serve refused %s before firing; warm-up ended %s",
		fired.Sub(raceReady(t, first)).Round(time.Millisecond), raced.Sub(fired).Round(time.Millisecond), len(newPlays),
		fired.Sub(secondExited).Round(time.Millisecond), ended)
	// The race was fired while the shards loaded, and the second serve
	// was refused meanwhile: the warm-up had not ended (it ends with the
	// shards it goes through last, 32 to 63, those of the race).
	if !loaded.IsZero() && (!loaded.After(fired) || !loaded.After(secondExited)) {
		t.Fatalf("the warm-up ended at %s, before the race fired at %s or the second serve was refused at %s: "+
			"the stream is too short to race the load on this machine", loaded, fired, secondExited)
	}
	again := startListening(t, r.data, r.serveArgs...)
	r.urls.Store(&[]string{again.url})
	again.waitReady(time.Minute)
	r.kill(again)
	if l := raceWarmedUp(t, again); !l.IsZero() {
		t.Fatalf("the warm-up ended at %s, before the kill: it was not killed while loading\n%s", l, again.logs)
	}
	for _, k := range []*server{first, again} {
		logs := k.logs.String()
		if !strings.Contains(logs, "projections start from a snapshot") || !strings.Contains(logs, "msg=\"starting from a snapshot\"") {
			t.Fatalf("serve did not start from both snapshots:\n%s", logs)
		}
	}
	// Both kills cut a start from the snapshots (for the report).
	r.cycles, r.earlyKills, r.fromSnapshot = 2, 2, 2

	// Back after the kills: every acknowledged write once, the audit
	// passes, and the reads agree with a full apply of the stream.
	last := startServe(t, r.data, r.serveArgs...)
	r.urls.Store(&[]string{last.url})
	r.stopClients()
	r.waitSettled(last)
	restarted := map[string]string{}
	for _, path := range raceReads(append(readers, writer)) {
		restarted[path] = raceBody(last.getText(path, reg))
	}
	last.stop()
	r.report(r.check("end", true), time.Since(start))
	full := startServe(t, r.data, append(slices.Clone(r.serveArgs), "--snapshots=false")...)
	for path, got := range restarted {
		if whole := raceBody(full.getText(path, reg)); got != whole {
			t.Errorf("GET %s after the kills differs from a full apply:\n%.1500s\nfull apply:\n%.1500s", path, got, whole)
		}
	}
	full.stop()
}

// historyBefore exports the stream written before the run (serve
// stopped): its keys count as sent, and it returns one of its funded
// players in each shard from raceShardFirst to the last.
func (r *crashRun) historyBefore() []string {
	r.t.Helper()
	if _, stderr, code := run(r.t, append([]string{"export", "--out", r.export}, r.stored...)...); code != 0 {
		r.t.Fatalf("export: exit %d: %s", code, stderr)
	}
	if err := r.stream.readExport(r.export); err != nil {
		r.t.Fatal(err)
	}
	byShard := map[int]string{}
	for k := range r.stream.money {
		r.journal.sentKeys[k] = true
		if s := raceShard(k.player); s >= raceShardFirst && (byShard[s] == "" || k.player < byShard[s]) {
			byShard[s] = k.player
		}
	}
	for k := range r.stream.stakes {
		r.journal.sentKeys[k] = true
	}
	// The simulated players' names are random: a shard may have none.
	var players []string
	for s := raceShardFirst; s <= raceShardWrite; s++ {
		if byShard[s] != "" {
			players = append(players, byShard[s])
		}
	}
	if len(players) < (raceShardWrite-raceShardFirst)/2 {
		r.t.Fatalf("simulated players in %d of the shards from %d: too few", len(players), raceShardFirst)
	}
	return players
}

// raceShard is the shard of a player's history in the read models'
// format 3 (docs/snapshots.md): FNV-1a of its account, modulo 64.
func raceShard(player string) int {
	h := fnv.New32a()
	h.Write([]byte(domain.PlayerAccount(player)))
	return int(h.Sum32() % 64)
}

// raceWriter opens the player the race writes to, in the shard the
// warm-up loads last, with two settled plays there.
func (r *crashRun) raceWriter(s *server) string {
	r.t.Helper()
	player := ""
	for i := 0; player == ""; i++ {
		if p := fmt.Sprintf("race-%d", i); raceShard(p) == raceShardWrite {
			player = p
		}
	}
	s.must(200, call{"PUT", "/v1/players/" + player, s.token("operator", ""), "", crashLimits})
	fund := r.raceCall(s, player, kindDeposit, "race-fund", 2000)
	r.raceCheck(fund, s.burst(raceCopies, fund.call))
	for i := range 2 {
		stake := r.raceCall(s, player, kindStake, fmt.Sprint("race-play-", i), crashStake)
		id := r.raceCheck(stake, s.burst(raceCopies, stake.call))
		for n := 1; n <= domain.ThrowCount; n++ {
			s.must(200, call{"POST", "/v1/players/" + player + "/plays/" + id + "/throws", stake.token, "", fmt.Sprintf(`{"throw":%d}`, n)})
		}
	}
	return player
}

// raceCall is a deposit (by the operator) or a stake (by the player) with
// key, recorded as sent in the crash journal.
func (r *crashRun) raceCall(s *server, player, kind, key string, amount domain.Amount) *crashWrite {
	r.t.Helper()
	c := call{"POST", "/v1/players/" + player + "/deposits", s.token("operator", ""), key, `{"amount":"` + amount.String() + `"}`}
	if kind == kindStake {
		c = call{"POST", "/v1/players/" + player + "/plays", s.token("player", player), key, `{"stake":"` + amount.String() + `"}`}
	}
	w := &crashWrite{call: c, kind: kind, player: player, amount: amount}
	r.journal.sending(w)
	return w
}

// raceCheck checks the answers to w sent raceCopies times at once: each
// is 2xx with the first result (a stake is created once); they go into the
// journal, for the crash check to find the write in the stream once, as
// answered. It returns the play of a stake.
func (r *crashRun) raceCheck(w *crashWrite, as []answered) (play string) {
	r.t.Helper()
	keys := map[string][]string{kindDeposit: {"balance_after"}, kindStake: {"play_id", "unit", "block_id"}}[w.kind]
	sameAnswers(r.t, w.String(), as, keys...)
	var answers []crashAnswer
	created := 0
	for _, a := range as {
		b, err := json.Marshal(a.body)
		if err != nil {
			r.t.Fatal(err)
		}
		ca := crashAnswer{w: w, status: a.status}
		ca.decode(b)
		r.journal.answered(ca)
		answers = append(answers, ca)
		if a.status == http.StatusCreated {
			created++
		}
	}
	r.journal.completed(w, answers)
	if w.kind != kindStake {
		return ""
	}
	if created != 1 {
		r.t.Errorf("%s: %d answers 201 created of %d", w, created, len(as))
	}
	return answers[0].body.PlayID
}

// raceReads are the reads of players' settled history: each needs its
// player's shard.
func raceReads(players []string) []string {
	var paths []string
	for _, p := range players {
		paths = append(paths, "/v1/players/"+p+"/plays?limit=50", "/v1/players/"+p+"/statement")
	}
	return paths
}

// raceBody is an answer without the statement's position, which the
// seals recorded since move on.
func raceBody(body string) string {
	return statementPosition.ReplaceAllString(strings.TrimSpace(body), "}")
}

// raceRead reads path while the shards load until match accepts the
// answer: 503 with Retry-After is retried, anything else fails.
func raceRead(t *testing.T, s *server, token, path string, match func(body string) error) {
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := s.probe(path, token)
		switch {
		case err != nil:
			t.Errorf("GET %s while the shards load: %v", path, err)
			return
		case p.status == http.StatusOK:
			if err := match(p.raw); err != nil {
				t.Errorf("GET %s while the shards load: %v", path, err)
			}
			return
		case p.status != http.StatusServiceUnavailable || p.retryAfter == "" || time.Now().After(deadline):
			t.Errorf("GET %s while the shards load: %d (Retry-After %q) %s", path, p.status, p.retryAfter, p.raw)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sameBody accepts the answer of a full apply.
func sameBody(want string) func(string) error {
	return func(body string) error {
		if got := raceBody(body); got != want {
			return fmt.Errorf("differs from a full apply:\n%.1500s\nfull apply:\n%.1500s", got, want)
		}
		return nil
	}
}

// sameHistoryBut accepts a history that is before's, or before's with
// one more play (a write racing the read), which it stores in added.
func sameHistoryBut(before string, added *[]string) func(string) error {
	return func(body string) error {
		var want, got map[string]any
		if err := json.Unmarshal([]byte(before), &want); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			return err
		}
		known := map[any]bool{}
		for _, p := range want["plays"].([]any) {
			known[p.(map[string]any)["play_id"]] = true
		}
		var kept []any
		*added = nil
		for _, p := range got["plays"].([]any) {
			if id := p.(map[string]any)["play_id"]; known[id] {
				kept = append(kept, p)
			} else {
				*added = append(*added, fmt.Sprint(id))
			}
		}
		got["plays"] = kept
		w, _ := json.Marshal(want)
		g, _ := json.Marshal(got)
		if len(*added) > 1 || string(g) != string(w) {
			return fmt.Errorf("neither the history before the race nor it with one play (%v):\n%.1500s\nbefore:\n%.1500s", *added, body, before)
		}
		return nil
	}
}

// raceLogTime is the time of a serve's log line matching re, zero if none.
func raceLogTime(t *testing.T, s *server, re *regexp.Regexp) time.Time {
	t.Helper()
	m := re.FindStringSubmatch(s.logs.String())
	if m == nil {
		return time.Time{}
	}
	at, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		t.Fatalf("log time %q: %v", m[1], err)
	}
	return at
}

var (
	raceReadyLine  = regexp.MustCompile(`(?m)^time=(\S+) level=INFO msg=ready `)
	raceLoadedLine = regexp.MustCompile(`(?m)^time=(\S+) level=INFO ` + regexp.QuoteMeta(raceLoaded))
)

// raceWarmedUp is when a serve, exited, logged its warm-up's end; zero if
// it did not (its logs are whole once it has exited).
func raceWarmedUp(t *testing.T, s *server) time.Time { return raceLogTime(t, s, raceLoadedLine) }

// raceReady is when a serve, exited, logged that it was ready.
func raceReady(t *testing.T, s *server) time.Time {
	at := raceLogTime(t, s, raceReadyLine)
	if at.IsZero() {
		t.Fatalf("no ready line:\n%s", s.logs)
	}
	return at
}
