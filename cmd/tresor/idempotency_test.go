package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// answered is one HTTP answer of a burst.
type answered struct {
	status int
	body   map[string]any
	err    error
}

// burst sends n copies of c at once, each on its own connection, and
// returns their answers.
func (s *server) burst(n int, c call) []answered {
	out := make([]answered, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i].status, out[i].body, out[i].err = s.send(c)
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// sameAnswers fails unless every answer of a burst succeeded with the same
// value of each key: the first result, whichever request made it.
func sameAnswers(tb testing.TB, what string, as []answered, keys ...string) map[string]any {
	tb.Helper()
	for i, a := range as {
		if a.err != nil || a.status/100 != 2 {
			tb.Fatalf("%s #%d: %d %v %v", what, i, a.status, a.body, a.err)
		}
		for _, k := range keys {
			if fmt.Sprint(a.body[k]) != fmt.Sprint(as[0].body[k]) {
				tb.Fatalf("%s #%d: %s %v, #0 answered %v", what, i, k, a.body[k], as[0].body[k])
			}
		}
	}
	return as[0].body
}

// TestIdenticalRequestsAtOnceGetTheFirstResult sends the same command many
// times at once with one key: each answer is the first command's result,
// once it is durable, and the stream holds it once.
func TestIdenticalRequestsAtOnceGetTheFirstResult(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir())
	op, p := s.token("operator", ""), s.token("player", "p1")

	// Emissions: the key makes a retry answer the same emission.
	ems := s.burst(5, call{"POST", "/v1/emissions", op, "em-1", `{"price":"1.00","blocks":2}`})
	em := sameAnswers(t, "emission", ems, "emission_id", "opened_blocks")
	created := 0
	for _, a := range ems {
		if a.status == 201 {
			created++
		}
	}
	if created != 1 || em["emission_id"] != "E0001" {
		t.Fatalf("%d emissions created, first answer %v", created, em)
	}
	s.problem(409, "conflict", call{"POST", "/v1/emissions", op, "em-1", `{"price":"1.00","blocks":3}`})
	if again := s.must(201, call{"POST", "/v1/emissions", op, "em-2", `{"price":"1.00","blocks":1}`}); again["emission_id"] != "E0002" || len(again["opened_blocks"].([]any)) != 0 {
		t.Fatalf("second emission: %v", again)
	}

	s.must(200, call{"PUT", "/v1/players/p1", op, "", `{"weekly_deposit_limit":"1000.00","weekly_stake_limit":"1000.00"}`})
	// Deposits: thirty at once, one deposit, every answer its balance.
	deps := s.burst(30, call{"POST", "/v1/players/p1/deposits", op, "dep-1", `{"amount":"50.00"}`})
	sameAnswers(t, "deposit", deps, "balance_after")
	if deps[0].body["balance_after"] != "50.00" {
		t.Fatalf("deposit answered %v", deps[0].body)
	}
	for _, a := range deps {
		if a.body["balance"] == "0.00" || a.body["deposited"] != "50.00" {
			t.Fatalf("a deposit answered before it was visible: %v", a.body)
		}
	}
	// A conflicting reuse of the key does not tell what the first was.
	_, conflict := s.do(call{"POST", "/v1/players/p1/deposits", op, "dep-1", `{"amount":"7.00"}`})
	if conflict["code"] != "conflict" || strings.Contains(fmt.Sprint(conflict["detail"]), "50.00") {
		t.Fatalf("conflict: %v", conflict)
	}

	// Stakes: twenty at once, one play.
	plays := s.burst(20, call{"POST", "/v1/players/p1/plays", p, "stake-1", `{"stake":"1.00"}`})
	play := sameAnswers(t, "stake", plays, "play_id", "unit", "block_id")
	id := play["play_id"].(string)

	// Throws: twenty copies of throw 1 at once make one throw.
	throws := s.burst(20, call{"POST", "/v1/players/p1/plays/" + id + "/throws", p, "", `{"throw":1}`})
	sameAnswers(t, "throw 1", throws, "throw", "direction", "steps", "pawn", "chest", "throws_left", "status")
	if throws[0].body["throw"] != 1.0 {
		t.Fatalf("throw 1 answered %v", throws[0].body)
	}
	s.problem(409, "throw_out_of_turn", call{"POST", "/v1/players/p1/plays/" + id + "/throws", p, "", `{"throw":3}`})
	s.problem(400, "invalid_request", call{"POST", "/v1/players/p1/plays/" + id + "/throws", p, "", `{"throw":5}`})
	// A request without the field still makes the next throw (one release).
	if th := s.must(200, call{"POST", "/v1/players/p1/plays/" + id + "/throws", p, "", ""}); th["throw"] != 2.0 {
		t.Fatalf("unnumbered throw: %v", th)
	}
	s.must(200, call{"POST", "/v1/players/p1/plays/" + id + "/throws", p, "", `{"throw":3}`})
	last := s.burst(10, call{"POST", "/v1/players/p1/plays/" + id + "/throws", p, "", `{"throw":4}`})
	fourth := sameAnswers(t, "throw 4", last, "throw", "pawn", "chest", "status", "tier", "prize")
	if fourth["status"] != "settled" || fourth["tier"] == nil {
		t.Fatalf("throw 4: %v", fourth)
	}
	// Retried later, throw 2 is still throw 2, not play_finished.
	if th := s.must(200, call{"POST", "/v1/players/p1/plays/" + id + "/throws", p, "", `{"throw":2}`}); th["throw"] != 2.0 || th["throws_left"] != 2.0 {
		t.Fatalf("late retry of throw 2: %v", th)
	}

	// The stream holds each command once.
	acct := s.must(200, call{"GET", "/v1/players/p1/account", op, "", ""})
	if acct["deposited"] != "50.00" || acct["plays"] != 1.0 || acct["staked"] != "1.00" {
		t.Fatalf("account after the bursts: %v", acct)
	}
	hist := s.must(200, call{"GET", "/v1/players/p1/plays", p, "", ""})
	if ps := hist["plays"].([]any); len(ps) != 1 || len(ps[0].(map[string]any)["throws"].([]any)) != 4 {
		t.Fatalf("history: %v", hist)
	}
}

// TestKeysAreScopedToThePlayerAndTheKindOfCommand: one key string used for a
// deposit, a withdrawal and a stake makes three commands.
func TestKeysAreScopedToThePlayerAndTheKindOfCommand(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir())
	op, p := s.token("operator", ""), s.token("player", "p1")
	s.must(201, call{"POST", "/v1/emissions", op, "k", `{"price":"1.00","blocks":1}`})
	s.must(200, call{"PUT", "/v1/players/p1", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"100.00"}`})
	s.must(200, call{"PUT", "/v1/players/p2", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"100.00"}`})
	s.must(200, call{"POST", "/v1/players/p1/deposits", op, "k", `{"amount":"10.00"}`})
	s.must(200, call{"POST", "/v1/players/p2/deposits", op, "k", `{"amount":"10.00"}`})
	s.must(200, call{"POST", "/v1/players/p1/withdrawals", op, "k", `{"amount":"1.00"}`})
	s.must(201, call{"POST", "/v1/players/p1/plays", p, "k", `{"stake":"1.00"}`})
	acct := s.must(200, call{"GET", "/v1/players/p1/account", op, "", ""})
	if acct["balance"] != "8.00" || acct["deposited"] != "10.00" || acct["withdrawn"] != "1.00" || acct["staked"] != "1.00" {
		t.Fatalf("account: %v", acct)
	}
}

// TestSelfExclusionRefusesDepositsNotWithdrawals: an excluded player's
// deposits and stakes are refused; withdrawals and a lowered limit are not;
// the exclusion is never lifted.
func TestSelfExclusionRefusesDepositsNotWithdrawals(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir())
	op := s.token("operator", "")
	s.must(200, call{"PUT", "/v1/players/p1", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"100.00"}`})
	s.must(200, call{"POST", "/v1/players/p1/deposits", op, "d1", `{"amount":"30.00"}`})
	s.must(200, call{"PUT", "/v1/players/p1", op, "", `{"self_excluded":true,"reason":"asked by phone"}`})
	s.problem(403, "self_excluded", call{"POST", "/v1/players/p1/deposits", op, "d2", `{"amount":"1.00"}`})
	// A retry of a deposit made before the exclusion still answers it.
	if a := s.must(200, call{"POST", "/v1/players/p1/deposits", op, "d1", `{"amount":"30.00"}`}); a["balance_after"] != "30.00" {
		t.Fatalf("retry of an earlier deposit: %v", a)
	}
	s.must(200, call{"POST", "/v1/players/p1/withdrawals", op, "w1", `{"amount":"10.00"}`})
	if a := s.must(200, call{"PUT", "/v1/players/p1", op, "", `{"weekly_stake_limit":"5.00"}`}); a["self_excluded"] != true {
		t.Fatalf("lowering a limit: %v", a)
	}
	s.problem(409, "conflict", call{"PUT", "/v1/players/p1", op, "", `{"self_excluded":false}`})
	acct := s.must(200, call{"GET", "/v1/players/p1/account", op, "", ""})
	if acct["balance"] != "20.00" || acct["self_excluded"] != true {
		t.Fatalf("account: %v", acct)
	}
}

// TestARefusalDoesNotTakeItsKey: a request refused (4xx) records nothing,
// its Idempotency-Key included: the same key sent again once the cause is
// gone takes effect, once, and its retries answer that effect.
func TestARefusalDoesNotTakeItsKey(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir())
	op := s.token("operator", "")
	s.problem(404, "not_found", call{"POST", "/v1/players/p1/deposits", op, "d1", `{"amount":"20.00"}`})
	s.must(200, call{"PUT", "/v1/players/p1", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"100.00"}`})
	s.problem(422, "insufficient_funds", call{"POST", "/v1/players/p1/withdrawals", op, "w1", `{"amount":"5.00"}`})
	var last map[string]any
	for range 2 {
		if a := s.must(200, call{"POST", "/v1/players/p1/deposits", op, "d1", `{"amount":"20.00"}`}); a["balance_after"] != "20.00" {
			t.Fatalf("the refused deposit's key, once the account is open: %v", a)
		}
		if last = s.must(200, call{"POST", "/v1/players/p1/withdrawals", op, "w1", `{"amount":"5.00"}`}); last["balance_after"] != "15.00" {
			t.Fatalf("the refused withdrawal's key, once funded: %v", last)
		}
	}
	if acct := s.must(200, call{"GET", fmt.Sprintf("/v1/players/p1/account?min_seq=%.0f", last["seq"]), op, "", ""}); acct["balance"] != "15.00" || acct["deposited"] != "20.00" || acct["withdrawn"] != "5.00" {
		t.Fatalf("account: %v", acct)
	}
}
