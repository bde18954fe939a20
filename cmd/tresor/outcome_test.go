package main

import (
	"fmt"
	"testing"
)

// TestAPlayInProgressKeepsItsOutcomeHidden: through the real binary, no
// answer about a play in progress (the stake, each throw, the play read
// alone, as the last play, in the history list, by its player or by the
// operator) carries its tier, salt, proof or prize: they would tell its
// outcome before the chests are opened. The fourth throw settles it, and
// from then on the play carries them all.
func TestAPlayInProgressKeepsItsOutcomeHidden(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir())
	op, p42 := s.fundedPlayer()
	play := s.must(201, call{"POST", "/v1/players/p-42/plays", p42, "k1", `{"stake":"1.00"}`})
	id := play["play_id"].(string)
	// Reads are consistent from the position a write answered (min_seq):
	// without it a read may come before the projections apply the write.
	reads := func(when string, answer map[string]any) {
		t.Helper()
		for _, token := range []string{p42, op} {
			for _, path := range []string{"/v1/players/p-42/plays/" + id, "/v1/players/p-42/plays/last", "/v1/players/p-42/plays"} {
				outcomeHidden(t, fmt.Sprintf("%s: GET %s", when, path), s.must(200, call{"GET", path + atSeq(answer), token, "", ""}))
			}
		}
	}
	outcomeHidden(t, "the stake's answer", play)
	reads("after the stake", play)
	for n := 1; n <= 3; n++ {
		throw := s.must(200, call{"POST", "/v1/players/p-42/plays/" + id + "/throws", p42, "", fmt.Sprintf(`{"throw":%d}`, n)})
		outcomeHidden(t, fmt.Sprintf("throw %d's answer", n), throw)
		reads(fmt.Sprintf("after throw %d", n), throw)
	}
	last := s.must(200, call{"POST", "/v1/players/p-42/plays/" + id + "/throws", p42, "", `{"throw":4}`})
	if last["tier"] == nil || last["prize"] == nil {
		t.Fatalf("the fourth throw's answer settles nothing: %v", last)
	}
	settled := s.must(200, call{"GET", "/v1/players/p-42/plays/" + id + atSeq(last), p42, "", ""})
	proof, _ := settled["proof"].(map[string]any)
	if settled["tier"] != last["tier"] || settled["prize"] != last["prize"] || proof == nil || proof["salt"] == nil || proof["tier"] != last["tier"] {
		t.Fatalf("the settled play: tier %v prize %v proof %v; want the fourth throw's %v %v and its proof", settled["tier"], settled["prize"], settled["proof"], last["tier"], last["prize"])
	}
}

// atSeq is the query that reads from the position a write answered.
func atSeq(answer map[string]any) string {
	return fmt.Sprintf("?min_seq=%.0f", answer["seq"])
}

// outcomeHidden fails the test when v holds, at any depth, a key that
// tells a play's outcome: its tier, salt, proof or prize.
func outcomeHidden(t *testing.T, what string, v any) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			switch k {
			case "tier", "salt", "proof", "prize":
				t.Errorf("%s carries %q: %v", what, k, x)
			default:
				outcomeHidden(t, what, x)
			}
		}
	case []any:
		for _, x := range v {
			outcomeHidden(t, what, x)
		}
	}
}
