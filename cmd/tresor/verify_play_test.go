package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyPlayChecksServedPlays plays through the real `tresor serve`,
// saves the play as the API serves it and checks it with the real
// `tresor verify-play`: valid as served, against the block's published
// root and, once the block is closed, its seed; invalid once tampered with.
func TestVerifyPlayChecksServedPlays(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir())
	op, reg, p42 := s.token("operator", ""), s.token("regulator", ""), s.token("player", "p-42")
	em := s.must(201, call{"POST", "/v1/emissions", op, "", `{"price":"1.00","blocks":1}`})
	block := em["opened_blocks"].([]any)[0].(string)
	s.must(200, call{"PUT", "/v1/players/p-42", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"100.00"}`})
	s.must(200, call{"POST", "/v1/players/p-42/deposits", op, "d1", `{"amount":"20.00"}`})
	var ids []string
	for i, key := range []string{"k1", "k2"} {
		play := s.must(201, call{"POST", "/v1/players/p-42/plays", p42, key, `{"stake":"1.00"}`})
		ids = append(ids, play["play_id"].(string))
		// The second play stays in progress after one throw.
		for range 4 - 3*i {
			s.must(200, call{"POST", "/v1/players/p-42/plays/" + ids[i] + "/throws", p42, "", ""})
		}
	}
	var report struct {
		Commitment struct{ Root string } `json:"commitment"`
		Seed       string                `json:"seed"`
	}
	if err := json.Unmarshal([]byte(s.getText("/v1/blocks/"+block, reg)), &report); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	save := saver(t, dir)
	settled := s.getText("/v1/players/p-42/plays/"+ids[0], p42)
	played := save("play.json", settled)
	verify := func(want int, args ...string) string {
		t.Helper()
		out, errOut, code := run(t, append([]string{"verify-play"}, args...)...)
		if code != want {
			t.Fatalf("verify-play %v: exit %d, want %d\n%s%s", args, code, want, out, errOut)
		}
		return out
	}

	out := verify(0, "--file", played, "--root", report.Commitment.Root)
	for _, line := range []string{"play " + ids[0] + ": VALID", "root " + report.Commitment.Root + ": the published root given with --root (independent)",
		"pass  inclusion_proof", "pass  scenario ", "pass  throws", "pass  prize", "skip  deck"} {
		if !strings.Contains(out, line) {
			t.Errorf("verify-play output lacks %q:\n%s", line, out)
		}
	}
	if out := verify(0, "--file", played); !strings.Contains(out, "NOT checked against an independent value") || !strings.Contains(out, "skip  root") {
		t.Errorf("without --root the output does not say the root is the document's claim:\n%s", out)
	}
	var verdict struct {
		Valid bool
		Plays []struct {
			Valid      bool
			RootSource string `json:"root_source"`
			Checks     []struct{ Name, Status string }
		}
	}
	if err := json.Unmarshal([]byte(verify(0, "--file", played, "--root", report.Commitment.Root, "--json")), &verdict); err != nil {
		t.Fatal(err)
	}
	if !verdict.Valid || len(verdict.Plays) != 1 || verdict.Plays[0].RootSource != "independent" || len(verdict.Plays[0].Checks) != 9 {
		t.Fatalf("--json verdict: %+v", verdict)
	}
	history := save("history.json", s.getText("/v1/players/p-42/plays", reg))
	if out := verify(0, "--file", history, "--root", report.Commitment.Root); !strings.Contains(out, "2 plays: 2 valid, 0 invalid") {
		t.Errorf("history page:\n%s", out)
	}

	// Tampered documents and a wrong published root are invalid, naming
	// the check that fails.
	var doc map[string]any
	if err := json.Unmarshal([]byte(settled), &doc); err != nil {
		t.Fatal(err)
	}
	doc["prize"] = "10000.00"
	tampered, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if out := verify(1, "--file", save("tampered.json", string(tampered)), "--root", report.Commitment.Root); !strings.Contains(out, "INVALID") || !strings.Contains(out, "fail  prize") {
		t.Errorf("tampered prize:\n%s", out)
	}
	wrong := strings.Repeat("ab", 32)
	if out := verify(1, "--file", played, "--root", wrong); !strings.Contains(out, "fail  root") || !strings.Contains(out, "fail  inclusion_proof") {
		t.Errorf("wrong root:\n%s", out)
	}

	// Once the block is closed its seed rebuilds the deck.
	s.must(200, call{"POST", "/v1/players/p-42/plays/" + ids[1] + "/throws", p42, "", ""})
	s.must(200, call{"POST", "/v1/players/p-42/plays/" + ids[1] + "/throws", p42, "", ""})
	s.must(200, call{"POST", "/v1/players/p-42/plays/" + ids[1] + "/throws", p42, "", ""})
	s.must(200, call{"POST", "/v1/blocks/" + block + "/close", op, "", `{"reason":"verify-play test: reveal the seed"}`})
	if err := json.Unmarshal([]byte(s.getText("/v1/blocks/"+block, reg)), &report); err != nil || report.Seed == "" {
		t.Fatalf("closed block report: %+v, %v", report, err)
	}
	closed := save("closed.json", s.getText("/v1/players/p-42/plays/"+ids[0], p42))
	if out := verify(0, "--file", closed, "--root", report.Commitment.Root, "--seed", report.Seed); !strings.Contains(out, "pass  deck") || !strings.Contains(out, "seed: given with --seed (independent)") {
		t.Errorf("closed block with its seed:\n%s", out)
	}
	if out := verify(1, "--file", closed, "--seed", strings.Repeat("00", 32)); !strings.Contains(out, "fail  deck") {
		t.Errorf("closed block with another seed:\n%s", out)
	}

	// Usage errors and unreadable files exit 2.
	verify(2, "--file", filepath.Join(dir, "missing.json"))
	verify(2, "--file", save("garbage.json", "not json"))
	verify(2, "--file", played, "--root", "abc")
	verify(2, "--file", played, "--seed", "xyz")
	s.stop()
}
