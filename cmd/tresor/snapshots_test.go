package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestServeStartsItsReadModelsFromTheirSnapshot: serve on the embedded
// default records plays, stops cleanly (its in-memory read models take a
// snapshot), and starts again: the read models come from that snapshot,
// not from the first event, and answer the same balances, histories,
// statements and blocks as before the stop.
func TestServeStartsItsReadModelsFromTheirSnapshot(t *testing.T) {
	data := t.TempDir()
	// given a serve that recorded plays, some finished, one in progress
	s := startServe(t, data)
	op, reg := s.token("operator", ""), s.token("regulator", "")
	s.must(201, call{"POST", "/v1/emissions", op, "", `{"price":"1.00","blocks":2}`})
	players := []string{"p-1", "p-2", "p-3"}
	for _, p := range players {
		tok := s.token("player", p)
		s.must(200, call{"PUT", "/v1/players/" + p, op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"100.00"}`})
		s.must(200, call{"POST", "/v1/players/" + p + "/deposits", op, "d-" + p, `{"amount":"30.00"}`})
		for i := range 3 {
			play := s.must(201, call{"POST", "/v1/players/" + p + "/plays", tok, fmt.Sprint("k", i), `{"stake":"1.00"}`})
			for range 4 - i/2 {
				s.must(200, call{"POST", "/v1/players/" + p + "/plays/" + play["play_id"].(string) + "/throws", tok, "", ""})
			}
		}
	}
	// A statement names the read models' position, which the seal
	// recorded at the clean stop moves on: everything else must agree.
	position := regexp.MustCompile(`,"seq":\d+}$`)
	reads := func(s *server) string {
		var b strings.Builder
		for _, p := range players {
			for _, path := range []string{"/account", "/plays?limit=50", "/statement"} {
				b.WriteString(position.ReplaceAllString(strings.TrimSpace(s.getText("/v1/players/"+p+path, reg)), "}") + "\n")
			}
		}
		b.WriteString(s.getText("/v1/blocks", reg))
		return b.String()
	}
	before := reads(s)
	// when it stops cleanly
	s.stop()
	if !strings.Contains(s.logs.String(), "no projections snapshot: applying the whole stream") {
		t.Fatalf("the first start found a projections snapshot:\n%s", s.logs)
	}
	taken := regexp.MustCompile(`projections snapshot taken.* seq=(\d+)`).FindStringSubmatch(s.logs.String())
	if taken == nil {
		t.Fatalf("no projections snapshot at the clean stop:\n%s", s.logs)
	}
	// then the next start's read models come from that snapshot
	again := startServe(t, data)
	after := reads(again)
	again.stop()
	logs := again.logs.String()
	if !strings.Contains(logs, `projections start from a snapshot" seq=`+taken[1]+" ") || strings.Contains(logs, "applying the whole stream") {
		t.Fatalf("the read models did not start from the snapshot at %s:\n%s", taken[1], logs)
	}
	// and answer as before the stop
	if after != before {
		t.Fatalf("reads differ after a start from the snapshot:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
