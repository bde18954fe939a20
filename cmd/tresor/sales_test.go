package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// loadAnswer is one stake of the load: whether it was sent after the
// suspension was answered, and how it was answered.
type loadAnswer struct {
	afterSuspension bool
	status          int
	code            any
}

// stakeLoad has players stake 1 € units, each as fast as its answers come,
// until stop is closed; it returns their answers once they have stopped.
func stakeLoad(s *server, players []string, suspended *atomic.Bool, stop <-chan struct{}) func() ([]loadAnswer, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var answers []loadAnswer
	var failed error
	for _, p := range players {
		token := s.token("player", p)
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				after := suspended.Load()
				status, m, err := s.send(call{"POST", "/v1/players/" + p + "/plays", token, fmt.Sprint("load-", i), `{"stake":"1.00"}`})
				mu.Lock()
				if err != nil && failed == nil {
					failed = err
				}
				answers = append(answers, loadAnswer{afterSuspension: after, status: status, code: m["code"]})
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	return func() ([]loadAnswer, error) {
		wg.Wait()
		return answers, failed
	}
}

// TestSuspendingSalesUnderLoad drives a suspension of sales through the
// real binary, as an operator would: bad requests refused and nothing
// recorded, a suspension of the 1 € units while players stake from every
// side, 2 € stakes, throws, deposits and withdrawals going on, readiness
// and the list showing it, a restart from the writer's closing snapshot
// keeping it, then its end. The stream, exported, holds no 1
// € stake between the suspension and its end, and tresor audit passes.
func TestSuspendingSalesUnderLoad(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	s := startServe(t, data)
	op, fin := s.token("operator", ""), s.token("finance", "")
	s.must(201, call{"POST", "/v1/emissions", op, "e1", `{"price":"1.00","blocks":1}`})
	s.must(201, call{"POST", "/v1/emissions", op, "e2", `{"price":"2.00","blocks":1}`})
	players := []string{"p0", "p1", "p2", "p3", "p4", "p5"}
	for _, p := range append(players, "q") {
		s.must(200, call{"PUT", "/v1/players/" + p, op, "", `{"weekly_deposit_limit":"1000.00","weekly_stake_limit":"1000.00"}`})
		s.must(200, call{"POST", "/v1/players/" + p + "/deposits", op, "d1", `{"amount":"500.00"}`})
	}
	q := s.token("player", "q")
	bought := s.must(201, call{"POST", "/v1/players/q/plays", q, "before", `{"stake":"1.00"}`})["play_id"].(string)

	// Bad requests are refused, and record nothing.
	for _, c := range []struct {
		status int
		code   string
		c      call
	}{
		{400, "invalid_request", call{"POST", "/v1/sales/suspensions", op, "", `{"scope":"everything","reason":"r"}`}},
		{400, "invalid_request", call{"POST", "/v1/sales/suspensions", op, "", `{"scope":"price:abc","reason":"r"}`}},
		{400, "invalid_request", call{"POST", "/v1/sales/suspensions", op, "", `{"scope":"price:1.00"}`}},
		{400, "invalid_request", call{"POST", "/v1/sales/suspensions", op, "", `{"scope":"price:1.00","reason":""}`}},
		{400, "invalid_request", call{"POST", "/v1/sales/suspensions", op, "", `{"scope":"price:1.00","reason":"r","by":"me"}`}},
		{404, "not_found", call{"POST", "/v1/sales/suspensions", op, "", `{"scope":"price:3.00","reason":"r"}`}},
		{404, "not_found", call{"POST", "/v1/sales/suspensions", op, "", `{"scope":"block:E0001-B009","reason":"r"}`}},
		{404, "not_found", call{"POST", "/v1/sales/suspensions", op, "", `{"scope":"emission:E0009","reason":"r"}`}},
		{403, "forbidden", call{"POST", "/v1/sales/suspensions", fin, "", `{"scope":"all","reason":"r"}`}},
		{403, "forbidden", call{"POST", "/v1/sales/suspensions", q, "", `{"scope":"all","reason":"r"}`}},
		{404, "not_found", call{"DELETE", "/v1/sales/suspensions/S1", op, "", `{"reason":"r"}`}},
		{400, "invalid_request", call{"DELETE", "/v1/sales/suspensions/S.1", op, "", `{"reason":"r"}`}},
	} {
		s.problem(c.status, c.code, c.c)
	}
	if list := s.must(200, call{"GET", "/v1/sales/suspensions", fin, "", ""}); len(list["suspensions"].([]any)) != 0 {
		t.Fatalf("a refused request recorded a suspension: %v", list)
	}

	// Players stake 1 € units from every side; the operator suspends them
	// in the middle of it.
	var suspended atomic.Bool
	stop := make(chan struct{})
	load := stakeLoad(s, players, &suspended, stop)
	eventstoretest.Eventually(t, 30*time.Second, func() error {
		if st := s.must(200, call{"GET", "/v1/blocks/E0001-B001", op, "", ""}); st["sold"].(float64) < 60 {
			return fmt.Errorf("%v units sold", st["sold"])
		}
		return nil
	})
	sus := s.must(201, call{"POST", "/v1/sales/suspensions", op, "", `{"scope":"price:1","reason":"the 1 € screen shows the wrong chests"}`})
	suspended.Store(true)
	if sus["id"] != "S1" || sus["scope"] != "price:1.00" || sus["in_force"] != true || sus["by"].(map[string]any)["subject"] != "operator@tests" {
		t.Fatalf("suspension: %v", sus)
	}
	// While it holds: 1 € stakes refused naming it, the rest goes on.
	s.problem(409, "sales_suspended", call{"POST", "/v1/players/q/plays", q, "during", `{"stake":"1.00"}`})
	s.must(201, call{"POST", "/v1/players/q/plays", q, "two", `{"stake":"2.00"}`})
	s.must(200, call{"POST", "/v1/players/q/plays/" + bought + "/throws", q, "", `{"throw":1}`})
	s.must(200, call{"POST", "/v1/players/q/deposits", op, "d2", `{"amount":"5.00"}`})
	s.must(200, call{"POST", "/v1/players/q/withdrawals", op, "w1", `{"amount":"5.00"}`})
	if again := s.must(200, call{"POST", "/v1/sales/suspensions", op, "", `{"scope":"price:1.00","reason":"the 1 € screen shows the wrong chests"}`}); again["id"] != "S1" {
		t.Fatalf("the same suspension again: %v", again)
	}
	s.problem(409, "conflict", call{"POST", "/v1/sales/suspensions", op, "", `{"scope":"price:1.00","reason":"another"}`})
	rd := s.must(200, call{"GET", "/v1/ready", "", "", ""})
	if list, ok := rd["sales_suspended"].([]any); !ok || len(list) != 1 || list[0].(map[string]any)["id"] != "S1" {
		t.Fatalf("readiness while suspended: %v", rd)
	}
	close(stop)
	answers, err := load()
	if err != nil {
		t.Fatal(err)
	}
	before, refused := 0, 0
	for _, a := range answers {
		switch {
		case a.status == 429: // over the token's rate: recorded nothing
		case a.status == 201 && !a.afterSuspension:
			before++
		case a.status == 409 && a.code == "sales_suspended":
			refused++
		case a.afterSuspension:
			t.Fatalf("a stake sent after the suspension was answered: %d %v", a.status, a.code)
		default:
			t.Fatalf("a stake during the load: %d %v", a.status, a.code)
		}
	}
	t.Logf("%d stakes from %d players: %d taken before the suspension, %d refused by it", len(answers), len(players), before, refused)
	if before == 0 || refused == 0 {
		t.Fatalf("%d stakes taken before the suspension, %d refused after it: the load did not straddle it", before, refused)
	}

	// A restart, the writer from the snapshot it took as it stopped: the
	// suspension still holds.
	s.stop()
	s = startServe(t, data)
	if m := rebuiltLine.FindStringSubmatch(s.logs.String()); m == nil || m[1] == "0" || m[2] != "0" {
		t.Fatalf("the writer did not start from its closing snapshot: %v\n%s", m, s.logs)
	}
	s.problem(409, "sales_suspended", call{"POST", "/v1/players/q/plays", q, "after-restart", `{"stake":"1.00"}`})
	if rd := s.must(200, call{"GET", "/v1/ready", "", "", ""}); rd["sales_suspended"] == nil {
		t.Fatalf("readiness after the restart: %v", rd)
	}

	// Its end: 1 € stakes are taken again; a second end is refused.
	s.problem(400, "invalid_request", call{"DELETE", "/v1/sales/suspensions/S1", op, "", `{}`})
	end := s.must(200, call{"DELETE", "/v1/sales/suspensions/S1", op, "", `{"reason":"screen fixed"}`})
	if end["in_force"] != false || end["resume_reason"] != "screen fixed" || end["resumed_by"].(map[string]any)["subject"] != "operator@tests" {
		t.Fatalf("resumed: %v", end)
	}
	s.problem(409, "conflict", call{"DELETE", "/v1/sales/suspensions/S1", op, "", `{"reason":"again"}`})
	s.must(201, call{"POST", "/v1/players/q/plays", q, "after", `{"stake":"1.00"}`})
	if rd := s.must(200, call{"GET", "/v1/ready", "", "", ""}); rd["sales_suspended"] != nil {
		t.Fatalf("readiness once resumed: %v", rd)
	}
	if one := s.must(200, call{"GET", "/v1/sales/suspensions/S1", s.token("regulator", ""), "", ""}); one["resumed_seq"].(float64) <= one["seq"].(float64) {
		t.Fatalf("one suspension: %v", one)
	}
	rows, _ := s.getCSV("/v1/reports/suspensions", fin)
	if len(rows) != 2 || rows[1][0] != "S1" || rows[1][1] != "price:1.00" || rows[1][3] == "" || rows[1][5] != "operator@tests" {
		t.Fatalf("the suspensions report: %v", rows)
	}
	s.stop()

	// The stream, exported, holds no 1 € stake between the suspension and
	// its end, and 1 € stakes before and after.
	file := filepath.Join(t.TempDir(), "stream.ndjson")
	exportFile(t, "--data", data, "--out", file)
	phase, stakes := 0, [3]int{}
	for _, r := range verifyExport(t, mustRead(t, file), sealPublicKey(t, filepath.Join(data, "keys", "seal.ed25519"))) {
		if r.Type == eventstore.SealType {
			continue
		}
		e, err := domain.DecodeEvent(r.Type, r.Payload)
		if err != nil {
			t.Fatal(err)
		}
		switch e := e.(type) {
		case *domain.SalesSuspended:
			phase = 1
		case *domain.SalesResumed:
			phase = 2
		case *domain.StakePlaced:
			if e.Stake == 100 {
				stakes[phase]++
			}
		}
	}
	if stakes[0] != before+1 || stakes[1] != 0 || stakes[2] != 1 {
		t.Fatalf("1 € stakes before, during and after the suspension: %v; %d answered before it", stakes, before)
	}
	if r := auditReport(t, 0, "--data", data, "--public-key", hexKey(t, data)); !r.OK {
		t.Fatalf("audit: %+v", r)
	}
	if !bytes.Contains(mustRead(t, file), []byte(`"scope":"price:1.00"`)) {
		t.Fatal("the export does not carry the suspension's scope")
	}
}
