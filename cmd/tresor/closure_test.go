package main

import (
	"testing"
)

// TestClosingAnAccountThroughTheAPI closes an account through the real
// binary, as a player leaving would: refused while it holds money or has a
// play in progress, closed once emptied, then refusing every movement and
// change while its account, history and statement stay readable; reopened
// by an operator only; and audited clean.
func TestClosingAnAccountThroughTheAPI(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	s := startServe(t, data)
	op, p42 := s.fundedPlayer()
	closeIt := call{"POST", "/v1/players/p-42/closure", p42, "", `{"reason":"I stop playing"}`}

	// Refused while it holds money, with a play in progress, without a
	// reason, for another player, or for no account.
	s.problem(409, "conflict", closeIt)
	play := s.must(201, call{"POST", "/v1/players/p-42/plays", p42, "s1", `{"stake":"1.00"}`})["play_id"].(string)
	s.must(200, call{"POST", "/v1/players/p-42/withdrawals", op, "w1", `{"amount":"19.00"}`})
	s.problem(409, "conflict", closeIt)
	for n := 1; n <= 4; n++ {
		s.must(200, call{"POST", "/v1/players/p-42/plays/" + play + "/throws", p42, "", `{"throw":` + string(rune('0'+n)) + `}`})
	}
	if bal := s.must(200, call{"GET", "/v1/players/p-42/account", op, "", ""})["balance"].(string); bal != "0.00" {
		s.must(200, call{"POST", "/v1/players/p-42/withdrawals", op, "w2", `{"amount":"` + bal + `"}`})
	}
	s.problem(400, "invalid_request", call{"POST", "/v1/players/p-42/closure", p42, "", `{}`})
	s.problem(403, "forbidden", call{"POST", "/v1/players/p-42/closure", s.token("player", "p-7"), "", `{"reason":"r"}`})
	s.problem(404, "not_found", call{"POST", "/v1/players/nobody/closure", op, "", `{"reason":"r"}`})

	// Closed: its time recorded, every movement and change refused.
	acct := s.must(200, closeIt)
	if acct["closed_at"] == nil || acct["balance"] != "0.00" {
		t.Fatalf("closed account: %v", acct)
	}
	s.must(200, closeIt) // a retry answers it
	s.problem(409, "account_closed", call{"POST", "/v1/players/p-42/deposits", op, "d2", `{"amount":"5.00"}`})
	s.problem(409, "account_closed", call{"POST", "/v1/players/p-42/withdrawals", op, "w3", `{"amount":"1.00"}`})
	s.problem(409, "account_closed", call{"POST", "/v1/players/p-42/plays", p42, "s2", `{"stake":"1.00"}`})
	s.problem(409, "account_closed", call{"PUT", "/v1/players/p-42", p42, "", `{"weekly_stake_limit":"5.00"}`})
	// and readable: the account, its history, its statement.
	if h := s.must(200, call{"GET", "/v1/players/p-42/plays", p42, "", ""}); len(h["plays"].([]any)) != 1 {
		t.Fatalf("history of a closed account: %v", h)
	}
	if st := s.must(200, call{"GET", "/v1/players/p-42/statement", op, "", ""}); len(st["movements"].([]any)) == 0 {
		t.Fatalf("statement of a closed account: %v", st)
	}

	// Reopened by an operator only, with a reason.
	s.problem(403, "forbidden", call{"DELETE", "/v1/players/p-42/closure", p42, "", `{"reason":"back"}`})
	s.problem(400, "invalid_request", call{"DELETE", "/v1/players/p-42/closure", op, "", `{}`})
	if a := s.must(200, call{"DELETE", "/v1/players/p-42/closure", op, "", `{"reason":"the player came back"}`}); a["closed_at"] != nil {
		t.Fatalf("reopened account: %v", a)
	}
	s.problem(409, "conflict", call{"DELETE", "/v1/players/p-42/closure", op, "", `{"reason":"again"}`})
	s.must(200, call{"POST", "/v1/players/p-42/deposits", op, "d2", `{"amount":"5.00"}`})
	s.stop()
	if r := auditReport(t, 0, "--data", data, "--public-key", hexKey(t, data)); !r.OK {
		t.Fatalf("audit: %+v", r)
	}
}
