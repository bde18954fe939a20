package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
)

// tornPlaysMax bounds the plays made to find a winner, whose fourth throw
// is the append a torn prize needs; about one play in four wins.
const tornPlaysMax = 60

// tornShape is an append of several events that a power cut can tear at
// the chain's end, and the data directory of a serve killed right after
// the request that made it was answered.
type tornShape struct {
	name string
	// first is the type of the append's first event; kept, how many of
	// its events the cut keeps.
	first string
	kept  int
	data  string
	// play is the torn request's play; key, a stake's idempotency key.
	play, key string
	// balance is what the acknowledged writes before the torn request
	// leave the player.
	balance domain.Amount
}

// TestStorageFaultTornAppendsAreVoided tears the last append of each
// shape (a stake without its unit, a fourth throw without its settlement,
// a settlement without its prize) as a power cut would: the block file cut
// after a record of the append, the high-water mark at the append before
// it, the request never acknowledged. The audit names the torn append;
// serve voids it and starts, no part of it counts, and the stake's retry
// by its key makes a whole play.
func TestStorageFaultTornAppendsAreVoided(t *testing.T) {
	t.Parallel()
	for _, sh := range tornShapes(t) {
		t.Run(sh.name, func(t *testing.T) {
			if sh.data == "" {
				t.Skipf("no play won in %d: no settlement with a prize to tear", tornPlaysMax)
			}
			sh.check(t)
		})
	}
}

// tornPlayer plays on one serve, keeping the balance its acknowledged
// writes leave.
type tornPlayer struct {
	s          *server
	data, name string
	op, token  string
	balance    domain.Amount
	keys       int
}

// tornShapes makes each shape's request the last one of a serve it then
// kills, and copies the data directory it leaves.
func tornShapes(t *testing.T) []*tornShape {
	p := &tornPlayer{data: t.TempDir(), name: "torn-1"}
	p.s = startServe(t, p.data)
	p.op, p.token = p.s.token("operator", ""), p.s.token("player", p.name)
	p.s.must(201, call{"POST", "/v1/emissions", p.op, "torn-emission", `{"price":"` + crashStake.String() + `","blocks":1}`})
	p.s.must(200, call{"PUT", "/v1/players/" + p.name, p.op, "", crashLimits})
	deposit := domain.Amount(tornPlaysMax+2) * crashStake
	p.s.must(200, call{"POST", "/v1/players/" + p.name + "/deposits", p.op, "torn-deposit", `{"amount":"` + deposit.String() + `"}`})
	p.balance = deposit

	stake := &tornShape{name: "stake_without_its_unit", first: domain.TypeStakePlaced, kept: 1, balance: p.balance, key: p.key()}
	stake.play = p.stake(stake.key)
	stake.data = p.killAndCopy(t)

	throw := &tornShape{name: "throw_without_its_settlement", first: domain.TypeThrowMade, kept: 1, play: stake.play}
	prize := &tornShape{name: "settlement_without_its_prize", first: domain.TypeThrowMade, kept: 2}
	p.s = startServe(t, p.data)
	won := p.finish(stake.play, throw)
	throw.data = p.killAndCopy(t)
	if won {
		*prize = *throw
		prize.name, prize.kept, prize.data = "settlement_without_its_prize", 2, dataCopy(t, throw.data)
		return []*tornShape{stake, throw, prize}
	}
	p.s = startServe(t, p.data)
	for range tornPlaysMax {
		if p.finish(p.stake(p.key()), prize) {
			prize.data = p.killAndCopy(t)
			break
		}
	}
	return []*tornShape{stake, throw, prize}
}

func (p *tornPlayer) key() string {
	p.keys++
	return fmt.Sprintf("torn-stake-%d", p.keys)
}

// stake places a stake with key and returns its play.
func (p *tornPlayer) stake(key string) string {
	v := p.s.must(201, call{"POST", "/v1/players/" + p.name + "/plays", p.token, key, `{"stake":"` + crashStake.String() + `"}`})
	p.balance -= crashStake
	return v["play_id"].(string)
}

// finish throws the play's four throws; sh learns the play and the
// balance before the fourth. It reports whether the play won.
func (p *tornPlayer) finish(play string, sh *tornShape) bool {
	var v map[string]any
	for n := 1; n <= domain.ThrowCount; n++ {
		if n == domain.ThrowCount {
			sh.play, sh.balance = play, p.balance
		}
		v = p.s.must(200, call{"POST", "/v1/players/" + p.name + "/plays/" + play + "/throws", p.token, "", fmt.Sprintf(`{"throw":%d}`, n)})
	}
	prize, err := domain.ParseAmount(fmt.Sprint(v["prize"]))
	if err != nil {
		p.s.tb.Fatalf("fourth throw of %s: prize %v: %v", play, v["prize"], err)
	}
	p.balance += prize
	return prize > 0
}

// killAndCopy kills serve with SIGKILL, so that its last answered request
// is the stream's last append, and returns a copy of its data.
func (p *tornPlayer) killAndCopy(t *testing.T) string {
	p.s.kill()
	return dataCopy(t, p.data)
}

// check tears the shape's append in a copy of its data and checks the
// audit, serve's start and what the player is left with.
func (sh *tornShape) check(t *testing.T) {
	data := dataCopy(t, sh.data)
	before := sh.tear(t, data)
	rollBackHighWater(t, data, headBefore(t, sh.data, before))
	rep := auditReport(t, 1, "--data", data)
	if rep.ViolationCounts["append_torn"] == 0 {
		t.Errorf("audit of a torn append: violations %v, want append_torn", rep.ViolationCounts)
	}
	s := startServe(t, data)
	eventually(t, 10*time.Second, func() bool { return strings.Contains(s.logs.String(), "torn append voided") })
	op := s.token("operator", "")
	acct := s.must(200, call{"GET", "/v1/players/torn-1/account", op, "", ""})
	if got := fmt.Sprint(acct["balance"]); got != sh.balance.String() {
		t.Errorf("balance %s, want %s: the acknowledged movements alone", got, sh.balance)
	}
	if sh.key != "" {
		sh.retryStake(t, s)
	} else {
		v := s.must(200, call{"GET", "/v1/players/torn-1/plays/" + sh.play, op, "", ""})
		if throws, _ := v["throws"].([]any); len(throws) != domain.ThrowCount-1 || v["tier"] != nil {
			t.Errorf("play %s after its torn fourth throw: %s, want three throws and no settlement", sh.play, playSummary(v))
		}
	}
	s.stop()
	if paid := settledOutsideVoids(t, data, sh.play); sh.key == "" && paid != "" {
		t.Errorf("the stream holds, outside a void, %s of the play whose fourth throw was torn", paid)
	}
	auditReport(t, 0, "--data", data)
}

// tear cuts the newest block file right after the kept events of the
// stream's last append, which must be the shape's, and returns the
// sequence of the append's first event.
func (sh *tornShape) tear(t *testing.T, data string) uint64 {
	blk := newestBlock(t, data)
	recs := blockRecords(mustRead(t, blk))
	first := -1
	for i, r := range recs {
		if r.typ == sh.first && r.remaining > 0 && bytes.Contains(r.data, []byte(sh.play)) {
			first = i
		}
	}
	if first < 0 {
		t.Fatalf("no %s of play %s opening an append in %s", sh.first, sh.play, blk)
	}
	if recs[first].remaining < sh.kept {
		t.Fatalf("the append %s has %d events, too few to keep %d of them and lose the rest", recs[first], recs[first].remaining+1, sh.kept)
	}
	last := recs[first+sh.kept-1]
	for _, r := range recs[first+1:] {
		if r.seq > recs[first].seq+uint64(recs[first].remaining) && r.typ != eventstore.SealType {
			t.Fatalf("the append %s is not the stream's last: %s follows", recs[first], r)
		}
	}
	if err := os.Truncate(blk, last.off+last.size); err != nil {
		t.Fatal(err)
	}
	t.Logf("block %s cut after %s, the append begun at %s", filepath.Base(blk), last, recs[first])
	return recs[first].seq
}

// headBefore is the head of the chain of the event at stream sequence seq
// before it, read from an export of data.
func headBefore(t *testing.T, data string, seq uint64) eventstore.Head {
	evs := exportedEvents(t, data)
	at := slices.IndexFunc(evs, func(r eventstore.RecordedEvent) bool { return r.Sequence == seq })
	for i := at - 1; at > 0 && i >= 0; i-- {
		if r := evs[i]; r.Chain == evs[at].Chain {
			return eventstore.Head{Sequence: r.Sequence, ChainSeq: r.ChainSeq, Hash: r.Hash}
		}
	}
	t.Fatalf("no event of its chain before sequence %d", seq)
	return eventstore.Head{}
}

// exportedEvents exports the stream of data and reads it back.
func exportedEvents(t *testing.T, data string) []eventstore.RecordedEvent {
	out := filepath.Join(t.TempDir(), "stream.ndjson")
	exportFile(t, "--data", data, "--out", out)
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []eventstore.RecordedEvent
	if err := eventstore.ReadExport(f, func(r eventstore.RecordedEvent) error {
		evs = append(evs, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return evs
}

// rollBackHighWater writes the high-water mark a power cut that tore an
// unacknowledged append leaves: the head of the append before it.
func rollBackHighWater(t *testing.T, data string, head eventstore.Head) {
	path := filepath.Join(data, highWaterFile)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	hw, err := eventstore.OpenHighWaterFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hw.Advance(head)
	if err := hw.Close(); err != nil {
		t.Fatal(err)
	}
}

// retryStake retries the torn stake by its key: the answer is a whole
// play, its map and chests drawn from a unit.
func (sh *tornShape) retryStake(t *testing.T, s *server) {
	status, v := s.do(call{"POST", "/v1/players/torn-1/plays", s.token("player", "torn-1"), sh.key, `{"stake":"` + crashStake.String() + `"}`})
	m, _ := v["map"].(map[string]any)
	rows, _ := m["rows"].(float64)
	cols, _ := m["cols"].(float64)
	chests, _ := v["chests"].([]any)
	if status/100 != 2 || rows == 0 || cols == 0 || len(chests) == 0 || v["start"] == nil {
		t.Errorf("retry of the torn stake %q: %d %s, map %v, %d chests: want a whole play", sh.key, status, playSummary(v), m, len(chests))
	}
}

// settledOutsideVoids names the settlement or prize of play the stream of
// data holds outside a void, "" when none.
func settledOutsideVoids(t *testing.T, data, play string) string {
	found := ""
	read, _ := eventstore.WholeAppends(func(r eventstore.RecordedEvent) error {
		if r.LedgerFact() && (r.Type == domain.TypePlaySettled || r.Type == domain.TypePrizePaid) && bytes.Contains(r.Payload, []byte(`"`+play+`"`)) {
			found = fmt.Sprintf("a %s at sequence %d", r.Type, r.Sequence)
		}
		return nil
	}, nil)
	for _, r := range exportedEvents(t, data) {
		if err := read(r); err != nil {
			t.Fatal(err)
		}
	}
	return found
}
