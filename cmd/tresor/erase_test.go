package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/jackc/pgx/v5"
)

// personalTexts are what the erased persons' fields said: none may be
// found in clear anywhere once they are erased (and, sealed at the
// source, none ever was).
var personalTexts = []string{"alice@fdj.fr", "gambling problem reported by his mother", "ANJ-2026-0042",
	"moving abroad", "GDPR art. 17 request", "left the company"}

// TestErasingAPlayerAndAStaffSubject records a player's life with two
// staff members on PostgreSQL projections, erases the player and one staff
// member with tresor erase, and checks what erasure promises: every answer
// shows their fields erased while balances, plays and statements add up;
// tresor audit passes on the live stream and on an export; an independent
// verification of hashes and seals, written from docs/events.md, passes
// on the export; and no byte of the erased text is in the data directory,
// the PostgreSQL projections, the export or the snapshots taken after.
func TestErasingAPlayerAndAStaffSubject(t *testing.T) {
	t.Parallel()
	data, db := t.TempDir(), freshDatabase(t)
	s := startServe(t, data, "--database-url", db)
	alice, bob := s.staffToken("operator", "alice@fdj.fr"), s.staffToken("operator", "bob@fdj.fr")
	p42 := s.token("player", "p-42")
	s.must(201, call{"POST", "/v1/emissions", bob, "", `{"price":"1.00","blocks":1}`})
	s.must(200, call{"PUT", "/v1/players/p-42", alice, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"100.00"}`})
	s.must(200, call{"POST", "/v1/players/p-42/deposits", alice, "d1", `{"amount":"20.00"}`})
	play := s.must(201, call{"POST", "/v1/players/p-42/plays", p42, "s1", `{"stake":"1.00"}`})["play_id"].(string)
	for n := 1; n <= 4; n++ {
		s.must(200, call{"POST", "/v1/players/p-42/plays/" + play + "/throws", p42, "", `{"throw":` + strconv.Itoa(n) + `}`})
	}
	// A refused role check: the significant-event log records alice.
	s.problem(403, "forbidden", call{"GET", "/v1/reconciliation", alice, "", ""})
	s.must(201, call{"POST", "/v1/players/p-42/bans", alice, "", `{"reference":"ANJ-2026-0042","reason":"gambling problem reported by his mother"}`})
	bans := s.must(200, call{"GET", "/v1/players/p-42/bans", bob, "", ""})
	if !strings.Contains(fmt.Sprint(bans), "gambling problem reported by his mother") || !strings.Contains(fmt.Sprint(bans), "alice@fdj.fr") {
		t.Fatalf("before the erasure, the bans read %v: want the reason and who in clear", bans)
	}
	s.must(200, call{"DELETE", "/v1/players/p-42/bans/B1", bob, "", `{"reference":"ANJ-2026-0099","reason":"lifted by the regulator"}`})
	bal := s.must(200, call{"GET", "/v1/players/p-42/account", bob, "", ""})["balance"].(string)
	s.must(200, call{"POST", "/v1/players/p-42/withdrawals", bob, "w1", `{"amount":"` + bal + `"}`})
	s.must(200, call{"POST", "/v1/players/p-42/closure", alice, "", `{"reason":"asked by the player, moving abroad"}`})

	// Within the retention period: refused without a legal ground.
	// alice reads the player's data (the access log records her), then
	// leaves: her tokens are revoked before her data is erased.
	s.must(200, call{"GET", "/v1/players/p-42/statement", alice, "", ""})
	revoked := s.must(201, call{"POST", "/v1/token-revocations", bob, "r1", `{"subject":"alice@fdj.fr","reason":"alice@fdj.fr left the company"}`})
	s.problem(401, "token_revoked", call{"GET", "/v1/players/p-42/account" + "?min_seq=" + strconv.FormatFloat(revoked["seq"].(float64), 'f', 0, 64), alice, "", ""})
	if _, errOut, code := run(t, "erase", "--data", data, "--url", s.url, "--player", "p-42", "--as", "bob@fdj.fr"); code != 1 || !strings.Contains(errOut, "409 conflict") {
		t.Fatalf("erase without a legal ground: exit %d, %s", code, errOut)
	}
	// bob proposes each erasure; neither is recorded until dave, not bob,
	// approves it.
	erasure := eraseWith(t, data, s.url, "bob@fdj.fr", "--player", "p-42", "--legal-ground", "GDPR art. 17 request of 2026-12-01")
	if erasure["ground"] != "legal_ground" || erasure["legal_ground"] != "GDPR art. 17 request of 2026-12-01" || erasure["recorded"] != true ||
		erasure["state"] != "pending" || erasure["key_id"] == nil {
		t.Fatalf("erasure of p-42 proposed: %v", erasure)
	}
	if again := eraseWith(t, data, s.url, "bob@fdj.fr", "--player", "p-42", "--legal-ground", "GDPR art. 17 request of 2026-12-01"); again["recorded"] != false || again["id"] != erasure["id"] {
		t.Fatalf("the same proposal again: %v, want the pending one, not recorded again", again)
	}
	if pending := eraseWith(t, data, s.url, "dave@fdj.fr", "pending"); len(pending["erasures"].([]any)) != 1 {
		t.Fatalf("erasures awaiting dave: %v", pending)
	}
	if _, errOut, code := run(t, "erase", "approve", erasure["id"].(string), "--data", data, "--url", s.url, "--as", "bob@fdj.fr"); code != 1 || !strings.Contains(errOut, "403 four_eyes") {
		t.Fatalf("the proposer approving his own erasure: exit %d, %s", code, errOut)
	}
	if bans := fmt.Sprint(s.must(200, call{"GET", "/v1/players/p-42/bans", bob, "", ""})); !strings.Contains(bans, "gambling problem reported by his mother") {
		t.Fatalf("a proposed erasure erased already: the bans read %s", bans)
	}
	if approved := eraseWith(t, data, s.url, "dave@fdj.fr", "approve", erasure["id"].(string)); approved["state"] != "approved" ||
		approved["decided_by"].(map[string]any)["subject"] != "dave@fdj.fr" || approved["proposed_by"].(map[string]any)["subject"] != "bob@fdj.fr" {
		t.Fatalf("erasure of p-42 approved: %v", approved)
	}
	staff := eraseWith(t, data, s.url, "bob@fdj.fr", "--subject", "alice@fdj.fr", "--legal-ground", "left the company, asked for erasure")
	last := eraseWith(t, data, s.url, "dave@fdj.fr", "approve", staff["id"].(string))
	minSeq := "?min_seq=" + strconv.FormatFloat(last["decided_seq"].(float64), 'f', 0, 64)

	checkErasedAnswers(t, s, bob, minSeq)
	if sig := s.must(200, call{"GET", "/v1/significant-events", bob, "", ""}); !strings.Contains(fmt.Sprint(sig), "subject:[erased]") {
		t.Fatalf("the significant events after alice's erasure: %v, want her subject erased", sig)
	}
	// Her revocation outlives her erasure, and names her no more.
	s.problem(401, "token_revoked", call{"GET", "/v1/players/p-42/account", alice, "", ""})
	if rv := fmt.Sprint(s.must(200, call{"GET", "/v1/token-revocations", bob, "", ""})); !strings.Contains(rv, "subject:[erased]") || !strings.Contains(rv, "reason:[erased]") {
		t.Fatalf("the revocations after alice's erasure: %s", rv)
	}
	reads := fmt.Sprint(s.must(200, call{"GET", "/v1/access-log?player=p-42", s.staffToken("regulator", "rita@regulator.fr"), "", ""}))
	if !strings.Contains(reads, "subject:[erased]") || !strings.Contains(reads, "subject:bob@fdj.fr") {
		t.Fatalf("the access log after alice's erasure: %s", reads)
	}
	pub := hexKey(t, data)
	if r := auditReport(t, 0, "--data", data, "--public-key", pub); !r.OK {
		t.Fatalf("audit of the live stream after the erasures: %+v", r)
	}
	s.stop()
	// Exported once serve has sealed its chain as it stopped.
	exportPath := filepath.Join(t.TempDir(), "stream.ndjson")
	exportFile(t, "--data", data, "--out", exportPath)
	if r := auditReport(t, 0, "--file", exportPath, "--public-key", pub); !r.OK {
		t.Fatalf("audit of the export after the erasures: %+v", r)
	}
	export := mustRead(t, exportPath)
	verifyIndependently(t, export, pub)

	// A master key rotation, on in-memory read models, which replay the
	// stream and take new snapshots as serve stops: the writer rewraps
	// the data keys under the next key, then runs with it alone, and the
	// answers stay the same. No event before it is rewritten.
	keys := filepath.Join(data, "keys")
	placeKey(t, filepath.Join(keys, "master-next.key"), 32)
	s = startServe(t, data)
	checkErasedAnswers(t, s, s.staffToken("operator", "bob@fdj.fr"), minSeq)
	s.stop()
	if !strings.Contains(s.logs.String(), "data keys rewrapped under the next master key") {
		t.Fatalf("no rewrap in the writer's log:\n%s", s.logs)
	}
	if err := os.Rename(filepath.Join(keys, "master-next.key"), filepath.Join(keys, "master.key")); err != nil {
		t.Fatal(err)
	}
	s = startServe(t, data)
	checkErasedAnswers(t, s, s.staffToken("operator", "bob@fdj.fr"), minSeq)
	s.stop()
	rotated := filepath.Join(t.TempDir(), "rotated.ndjson")
	exportFile(t, "--data", data, "--out", rotated)
	if !bytes.HasPrefix(mustRead(t, rotated), export) {
		t.Fatal("the export after the master key rotation does not begin with the one before: events were rewritten")
	}
	// The searches can fail: the player's id, in clear, is found.
	if eventstoretest.FileHolding(t, data, []byte("p-42")) == "" || !bytes.Contains(export, []byte("p-42")) {
		t.Fatal("p-42 is found neither in the data directory nor in the export: the search cannot find anything")
	}
	for _, text := range personalTexts {
		if f := eventstoretest.FileHolding(t, data, []byte(text)); f != "" {
			t.Errorf("%q is in clear in %s", text, f)
		}
		if bytes.Contains(export, []byte(text)) {
			t.Errorf("%q is in clear in the export", text)
		}
	}
	checkNoTextInDatabase(t, db, personalTexts)
}

// eraseApproved proposes an erasure as bob and has dave approve it, and
// returns the erasure approved.
func eraseApproved(tb testing.TB, data, url string, args ...string) map[string]any {
	tb.Helper()
	proposed := eraseWith(tb, data, url, "bob@fdj.fr", args...)
	return eraseWith(tb, data, url, "dave@fdj.fr", "approve", proposed["id"].(string))
}

// eraseWith runs tresor erase (with a subcommand, if args begin with one)
// as a staff subject and returns its answer.
func eraseWith(tb testing.TB, data, url, as string, args ...string) map[string]any {
	tb.Helper()
	cmd := []string{"erase"}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = append(cmd, args[0]), args[1:]
	}
	out, errOut, code := run(tb, append(cmd, append([]string{"--data", data, "--url", url, "--as", as}, args...)...)...)
	if code != 0 {
		tb.Fatalf("tresor erase %v: exit %d: %s", args, code, errOut)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		tb.Fatalf("tresor erase %v printed %q: %v", args, out, err)
	}
	return m
}

// checkErasedAnswers reads p-42's bans, account, plays and statement: the
// erased fields read "[erased]", bob's stay his, and the money adds up.
func checkErasedAnswers(tb testing.TB, s *server, bob, minSeq string) {
	tb.Helper()
	bans := s.must(200, call{"GET", "/v1/players/p-42/bans" + minSeq, bob, "", ""})["bans"].([]any)
	b := bans[0].(map[string]any)
	if b["reason"] != "[erased]" || b["reference"] != "[erased]" || b["by"].(map[string]any)["subject"] != "[erased]" {
		tb.Errorf("the erased ban reads %v", b)
	}
	if b["lift_reason"] != "[erased]" || b["lifted_by"].(map[string]any)["subject"] != "bob@fdj.fr" {
		tb.Errorf("the lifting reads %v: want the player's reason erased, bob as he is", b)
	}
	acct := s.must(200, call{"GET", "/v1/players/p-42/account" + minSeq, bob, "", ""})
	if acct["balance"] != "0.00" || acct["closed_at"] == nil {
		tb.Errorf("the erased player's account: %v", acct)
	}
	plays := s.must(200, call{"GET", "/v1/players/p-42/plays" + minSeq, bob, "", ""})["plays"].([]any)
	if len(plays) != 1 || plays[0].(map[string]any)["status"] != "settled" {
		tb.Errorf("the erased player's plays: %v", plays)
	}
	st := s.must(200, call{"GET", "/v1/players/p-42/statement" + minSeq, bob, "", ""})
	credits, debits := 0.0, 0.0 // float-ok: a test's sum of two-decimal strings, compared to the cent
	for _, m := range st["movements"].([]any) {
		amt, _ := strconv.ParseFloat(strings.TrimPrefix(m.(map[string]any)["amount"].(string), "-"), 64)
		if strings.HasPrefix(m.(map[string]any)["amount"].(string), "-") {
			debits += amt
		} else {
			credits += amt
		}
	}
	if fmt.Sprintf("%.2f", credits-debits) != "0.00" {
		tb.Errorf("the statement's movements sum to %.2f, the balance is 0.00: %v", credits-debits, st["movements"])
	}
}

// verifyIndependently checks an export's hashes, chains and seals the way
// docs/events.md tells a regulator to, without Tresor's code: the
// canonical encoding's 13 length-prefixed fields, SHA-256, and Ed25519
// over the seal's signed bytes.
func verifyIndependently(tb testing.TB, export []byte, pubHex string) {
	tb.Helper()
	pub, err := hex.DecodeString(pubHex)
	if err != nil {
		tb.Fatal(err)
	}
	heads := map[string]string{}
	hashes := map[uint64]string{}
	seals, n := 0, 0
	sc := bufio.NewScanner(bytes.NewReader(export))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r struct {
			Seq           uint64          `json:"sequence"`
			Subject       string          `json:"subject"`
			ID            string          `json:"id"`
			Type          string          `json:"type"`
			Schema        uint64          `json:"schema_version"`
			ChainSeq      uint64          `json:"chain_seq"`
			RecordedAt    time.Time       `json:"recorded_at"`
			Correlation   string          `json:"correlation_id"`
			Causation     string          `json:"causation_id"`
			PrevHash      string          `json:"prev_hash"`
			Hash          string          `json:"hash"`
			Payload       json.RawMessage `json:"payload"`
			PayloadBase64 *string         `json:"payload_base64"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			tb.Fatalf("export line %d: %v", n+1, err)
		}
		n++
		if r.PayloadBase64 != nil {
			if r.Payload, err = base64.StdEncoding.DecodeString(*r.PayloadBase64); err != nil {
				tb.Fatalf("sequence %d: payload_base64: %v", r.Seq, err)
			}
		}
		tok := strings.Split(r.Subject, ".")
		if len(tok) != 4 {
			tb.Fatalf("sequence %d: subject %q", r.Seq, r.Subject)
		}
		chain := tok[1]
		var b []byte
		field := func(f []byte) { b = binary.BigEndian.AppendUint32(b, uint32(len(f))); b = append(b, f...) }
		integer := func(v uint64) { field(binary.BigEndian.AppendUint64(nil, v)) }
		prev, _ := hex.DecodeString(r.PrevHash)
		field([]byte("tresor-event-v1"))
		field([]byte(r.ID))
		field([]byte(r.Type))
		integer(r.Schema)
		field([]byte(chain))
		integer(r.ChainSeq)
		field([]byte(tok[2]))
		field([]byte(tok[3]))
		integer(uint64(r.RecordedAt.UnixNano()))
		field([]byte(r.Correlation))
		field([]byte(r.Causation))
		field(prev)
		field(r.Payload)
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != r.Hash {
			tb.Fatalf("sequence %d: hash %s recomputed, %s stored", r.Seq, got, r.Hash)
		}
		if want := heads[chain]; r.PrevHash != want && !(want == "" && r.ChainSeq == 1) {
			tb.Fatalf("sequence %d: prev_hash %s, the chain's head is %s", r.Seq, r.PrevHash, want)
		}
		heads[chain], hashes[r.ChainSeq] = r.Hash, r.Hash
		if r.Type == "eventstore.Seal" {
			seals++
			checkSealIndependently(tb, r.Payload, pub, hashes)
		}
	}
	if n == 0 || seals == 0 {
		tb.Fatalf("verified %d events and %d seals: want both", n, seals)
	}
}

// checkSealIndependently checks one seal's signature over its signed bytes
// and the head it names.
func checkSealIndependently(tb testing.TB, payload []byte, pub []byte, hashes map[uint64]string) {
	tb.Helper()
	var seal struct {
		Chain     string `json:"chain"`
		Sequence  uint64 `json:"sequence"`
		ChainSeq  uint64 `json:"chain_seq"`
		Hash      string `json:"hash"`
		Signature string `json:"signature"`
	}
	if err := json.Unmarshal(payload, &seal); err != nil {
		tb.Fatal(err)
	}
	var b []byte
	field := func(f []byte) { b = binary.BigEndian.AppendUint32(b, uint32(len(f))); b = append(b, f...) }
	integer := func(v uint64) { field(binary.BigEndian.AppendUint64(nil, v)) }
	h, _ := hex.DecodeString(seal.Hash)
	sig, _ := hex.DecodeString(seal.Signature)
	field([]byte("tresor-seal-v1"))
	field([]byte(seal.Chain))
	integer(seal.Sequence)
	integer(seal.ChainSeq)
	field(h)
	if !ed25519.Verify(pub, b, sig) {
		tb.Fatalf("seal of chain position %d: the signature does not verify", seal.ChainSeq)
	}
	if hashes[seal.ChainSeq] != seal.Hash {
		tb.Fatalf("seal of chain position %d names hash %s, the chain holds %s there", seal.ChainSeq, seal.Hash, hashes[seal.ChainSeq])
	}
}

// checkNoTextInDatabase searches every row of every table of the
// projections' database for each text.
func checkNoTextInDatabase(tb testing.TB, db string, texts []string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT quote_ident(table_schema)||'.'||quote_ident(table_name) FROM information_schema.tables
		WHERE table_schema NOT IN ('pg_catalog','information_schema') AND table_type = 'BASE TABLE'`)
	if err != nil {
		tb.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			tb.Fatal(err)
		}
		tables = append(tables, name)
	}
	if rows.Err() != nil || len(tables) == 0 {
		tb.Fatalf("no table found in the projections' database: %v", rows.Err())
	}
	holding := 0 // the search can fail: the player's id, in clear, is found
	for _, table := range tables {
		for _, text := range texts {
			if n := rowsHolding(tb, conn, table, text); n > 0 {
				tb.Errorf("%q is in clear in %d rows of %s", text, n, table)
			}
		}
		holding += rowsHolding(tb, conn, table, "p-42")
	}
	if holding == 0 {
		tb.Fatal("no row of the projections holds p-42: the search cannot find anything")
	}
}

// rowsHolding counts the rows of table whose text holds text.
func rowsHolding(tb testing.TB, conn *pgx.Conn, table, text string) int {
	tb.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+table+" t WHERE strpos(t::text, $1) > 0", text).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestRetentionListsThePlayersDue closes three accounts and erases one:
// tresor retention lists none today, and the two not erased once five
// years have passed since their closure.
func TestRetentionListsThePlayersDue(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	s := startServe(t, data)
	op := s.staffToken("operator", "erin@fdj.fr")
	for _, p := range []string{"p-50", "p-51", "p-52", "p-53"} {
		s.must(200, call{"PUT", "/v1/players/" + p, op, "", `{"weekly_deposit_limit":"10.00","weekly_stake_limit":"10.00"}`})
		if p != "p-53" {
			s.must(200, call{"POST", "/v1/players/" + p + "/closure", op, "", `{"reason":"dormant"}`})
		}
	}
	proposed := eraseWith(t, data, s.url, "erin@fdj.fr", "--player", "p-51", "--legal-ground", "request")
	if proposed["key_id"] == nil {
		t.Fatalf("erasure of p-51 proposed: %v", proposed)
	}
	eraseWith(t, data, s.url, "fred@fdj.fr", "approve", proposed["id"].(string))
	// p-50's erasure is rejected: p-50 stays due.
	p50 := eraseWith(t, data, s.url, "erin@fdj.fr", "--player", "p-50", "--legal-ground", "request")
	if _, errOut, code := run(t, "erase", "reject", p50["id"].(string), "--data", data, "--url", s.url, "--as", "fred@fdj.fr"); code != exitUsage {
		t.Fatalf("a rejection without a reason: exit %d, %s", code, errOut)
	}
	if r := eraseWith(t, data, s.url, "fred@fdj.fr", "reject", p50["id"].(string), "--reason", "no request on file"); r["state"] != "rejected" || r["decision_reason"] != "no request on file" {
		t.Fatalf("p-50's erasure rejected: %v", r)
	}
	all := s.must(200, call{"GET", "/v1/erasures", op, "", ""})["erasures"].([]any)
	if len(all) != 2 || all[0].(map[string]any)["state"] != "approved" || all[1].(map[string]any)["state"] != "rejected" {
		t.Fatalf("the erasures: %v", all)
	}
	s.stop()
	due := func(at string) []string {
		out, errOut, code := run(t, "retention", "--data", data, "--at", at)
		if code != 0 {
			t.Fatalf("tresor retention --at %s: exit %d: %s", at, code, errOut)
		}
		var rep struct {
			Years int `json:"retention_after_closure_years"`
			Due   []struct {
				Player string `json:"player"`
			} `json:"due"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Years != 5 {
			t.Fatalf("tresor retention printed %q (%v): want the retention of five years", out, err)
		}
		var players []string
		for _, d := range rep.Due {
			players = append(players, d.Player)
		}
		return players
	}
	now := time.Now().UTC()
	if got := due(now.Format(time.DateOnly)); len(got) != 0 {
		t.Fatalf("due today: %v, want none", got)
	}
	if got := fmt.Sprint(due(now.AddDate(5, 0, 1).Format(time.DateOnly))); got != "[p-50 p-52]" {
		t.Fatalf("due in five years and a day: %s, want [p-50 p-52] (p-51 erased, p-53 open)", got)
	}
	if _, errOut, code := run(t, "retention", "--data", data, "--at", "tomorrow"); code != exitUsage {
		t.Fatalf("--at tomorrow: exit %d, %s", code, errOut)
	}
}

// TestAnErasedProposerDecidesNothingOfHers erases a staff subject who has
// an adjustment pending. Four eyes compare sealed subjects, and once her
// data key is gone her subject seals under a new one: had the erasure
// gone through, her own token would approve her own proposal. So the
// erasure is refused, proposed or approved, while a proposal of hers is
// pending; once others have decided them it goes through, and her new
// proposals are still hers alone to not approve. The balance never moves
// and tresor audit passes.
func TestAnErasedProposerDecidesNothingOfHers(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	s := startServe(t, data)
	s.fundedPlayer() // 20.00 on p-42
	alice, bob, carol := s.staffToken("operator", "alice"), s.staffToken("operator", "bob"), s.staffToken("operator", "carol")
	propose := call{"POST", "/v1/players/p-42/adjustments", alice, "",
		`{"direction":"credit","kind":"goodwill","amount":"5.00","reference":"ticket-1","reason":"the game froze"}`}
	decide := func(what, id, verb, token string) call {
		c := call{"POST", "/v1/" + what + "/" + id + "/" + verb, token, "", ""}
		if verb == "reject" {
			c.body = `{"reason":"not asked for"}`
		}
		return c
	}
	eraseAlice := call{"POST", "/v1/erasures", bob, "", `{"subject":"alice","legal_ground":"left the company"}`}
	refusedNaming := func(c call, id string) {
		t.Helper()
		if m := s.must(409, c); m["code"] != "conflict" || !strings.Contains(m["detail"].(string), id) {
			t.Fatalf("%s %s: %v, want a conflict naming %s", c.method, c.path, m, id)
		}
	}

	a1 := s.must(202, propose)["id"].(string)
	refusedNaming(eraseAlice, a1)
	s.must(200, decide("adjustments", a1, "reject", carol))
	erasure := s.must(202, eraseAlice)["id"].(string)
	a2 := s.must(202, propose)["id"].(string)
	refusedNaming(decide("erasures", erasure, "approve", carol), a2)
	s.must(200, decide("adjustments", a2, "reject", carol))
	s.must(200, decide("erasures", erasure, "approve", carol))

	a3 := s.must(202, propose)["id"].(string)
	s.problem(403, "four_eyes", decide("adjustments", a3, "approve", alice))
	if acct := s.must(200, call{"GET", "/v1/players/p-42/account", bob, "", ""}); acct["balance"] != "20.00" {
		t.Fatalf("after the erasure of the adjustments' proposer: %v, want the balance 20.00", acct)
	}
	if types, _ := exportTypes(t, "--data", data); types["AdjustmentApproved"] != 0 || types["PersonalDataErased"] != 1 {
		t.Fatalf("the stream holds %v: want no approval and one erasure", types)
	}
	if r := auditReport(t, 0, "--data", data, "--public-key", hexKey(t, data)); !r.OK {
		t.Fatalf("audit: %+v", r)
	}
}
