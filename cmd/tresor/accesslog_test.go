package main

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// accessEntries reads the access log with the regulator's token and
// returns its entries as "subject role player route status".
func accessEntries(tb testing.TB, s *server, reg, query string) []string {
	tb.Helper()
	m := s.must(200, call{"GET", "/v1/access-log" + query, reg, "", ""})
	var out []string
	for _, x := range m["entries"].([]any) {
		e := x.(map[string]any)
		out = append(out, fmt.Sprintf("%v %v %v %v %v", e["subject"], e["role"], e["player"], e["route"], e["status"]))
	}
	return out
}

func TestStaffReadsAreInTheAccessLog(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir())
	op, p1 := staffToken(t, s, "operator", "alice@tests"), s.token("player", "p-1")
	fin, reg := staffToken(t, s, "finance", "bob@tests"), staffToken(t, s, "regulator", "anj@tests")
	for _, p := range []string{"p-1", "p-2"} {
		s.must(200, call{"PUT", "/v1/players/" + p, op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"50.00"}`})
	}
	start := time.Now().UTC()
	// The player's own reads are not logged; the staff's are, refused
	// ones included.
	s.must(200, call{"GET", "/v1/players/p-1/account", p1, "", ""})
	s.must(200, call{"GET", "/v1/players/p-1/plays", p1, "", ""})
	s.must(200, call{"GET", "/v1/players/p-1/account", op, "", ""})
	s.must(200, call{"GET", "/v1/players/p-1/statement", fin, "", ""})
	s.must(200, call{"GET", "/v1/players/p-2/plays", reg, "", ""})
	s.problem(403, "forbidden", call{"GET", "/v1/players/p-1/plays", fin, "", ""})
	s.must(200, call{"GET", "/v1/adjustments?player=p-1", fin, "", ""})
	s.must(200, call{"GET", "/v1/blocks", op, "", ""})
	want := []string{
		"alice@tests operator p-1 GET /v1/players/{player}/account 200",
		"bob@tests finance p-1 GET /v1/players/{player}/statement 200",
		"anj@tests regulator p-2 GET /v1/players/{player}/plays 200",
		"bob@tests finance p-1 GET /v1/adjustments 200",
	}
	var got []string
	eventually(t, 10*time.Second, func() bool {
		got = accessEntries(t, s, reg, "")
		return len(got) >= len(want)
	})
	if !slices.Equal(got, want) {
		t.Fatalf("access log:\n%v\nwant\n%v", got, want)
	}
	if got := accessEntries(t, s, reg, "?player=p-1&subject=bob@tests"); !slices.Equal(got, []string{want[1], want[3]}) {
		t.Fatalf("p-1's reads by bob: %v", got)
	}
	period := "?from=" + start.Add(-time.Hour).Format(time.RFC3339) + "&to=" + start.Format(time.RFC3339Nano)
	if got := accessEntries(t, s, reg, period); len(got) != 0 {
		t.Fatalf("reads before the first: %v", got)
	}
	if got := accessEntries(t, s, reg, "?limit=2"); !slices.Equal(got, want[:2]) {
		t.Fatalf("a page of 2: %v", got)
	}
	s.problem(403, "forbidden", call{"GET", "/v1/access-log", op, "", ""})
	s.problem(400, "invalid_request", call{"GET", "/v1/access-log?from=yesterday", reg, "", ""})
}
