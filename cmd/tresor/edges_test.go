package main

import (
	"bufio"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/settlement"
)

// bodyHangGuard bounds the wait for an answer to a body that never
// arrives in full. It is no speed claim: it only tells an answer given
// under the API's body deadline (2 s) from one given after the server's
// 10 s read timeout, or none.
const bodyHangGuard = 7 * time.Second

// fundedPlayer opens an emission of 1.00 and the account of p-42 (weekly
// limits 100.00 and 50.00, 20.00 deposited) and returns an operator's and
// p-42's tokens.
func (s *server) fundedPlayer() (op, p42 string) {
	s.tb.Helper()
	op, p42 = s.token("operator", ""), s.token("player", "p-42")
	s.must(201, call{"POST", "/v1/emissions", op, "", `{"price":"1.00","blocks":1}`})
	s.must(200, call{"PUT", "/v1/players/p-42", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"50.00"}`})
	s.must(200, call{"POST", "/v1/players/p-42/deposits", op, "d1", `{"amount":"20.00"}`})
	return op, p42
}

// writerSeq reads the writer's position from /v1/health.
func (s *server) writerSeq() any {
	s.tb.Helper()
	return s.must(200, call{"GET", "/v1/health", "", "", ""})["writer_seq"]
}

// TestJSONBodiesAreExact sends bodies that encoding/json alone would take
// (a key twice, a key differing from a field only in case, "ſ" folding to
// "s") and bodies declared as something else than JSON: each is refused,
// 400 invalid_request or 415 unsupported_media_type, and nothing is
// recorded. application/json with a charset is taken.
func TestJSONBodiesAreExact(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir())
	op, p42 := s.fundedPlayer()
	play := s.must(201, call{"POST", "/v1/players/p-42/plays", p42, "k1", `{"stake":"1.00"}`})["play_id"].(string)
	before := s.writerSeq()

	for i, c := range []call{
		{"POST", "/v1/players/p-42/deposits", op, "", `{"amount":"1.00","amount":"2.00"}`},
		{"POST", "/v1/players/p-42/deposits", op, "", `{"Amount":"1.00"}`},
		{"POST", "/v1/players/p-42/withdrawals", op, "", `{"AMOUNT":"1.00"}`},
		{"PUT", "/v1/players/p-42", op, "", `{"ſelf_excluded":true}`},
		{"PUT", "/v1/players/p-42", op, "", `{"Self_Excluded":true}`},
		{"PUT", "/v1/players/p-42", op, "", `{"weekly_deposit_limit":"10.00","weekly_deposit_limit":"90.00"}`},
		{"PUT", "/v1/players/p-42", op, "", `{"weekly_ſtake_limit":"1.00"}`},
		{"POST", "/v1/players/p-42/plays", p42, "", `{"Stake":"1.00"}`},
		{"POST", "/v1/players/p-42/plays", p42, "", `{"stake":"1.00","stake":"1.00"}`},
		{"POST", "/v1/emissions", op, "", `{"price":"1.00","blocks":1,"Blocks":2}`},
		{"POST", "/v1/emissions", op, "", `{"PRICE":"1.00","blocks":1}`},
		{"POST", "/v1/players/p-42/plays/" + play + "/throws", p42, "", `{"":{"a":1,"a":2}}`},
	} {
		if c.key == "" && c.method == "POST" && !strings.Contains(c.path, "emissions") && !strings.Contains(c.path, "throws") {
			c.key = fmt.Sprint("j", i)
		}
		s.problem(400, "invalid_request", c)
	}

	deposit := call{"POST", "/v1/players/p-42/deposits", op, "ct", `{"amount":"1.00"}`}
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/json; charset=iso-8859-1", "application/merge-patch+json", "json"} {
		if got, m := s.doWith(deposit, http.Header{"Content-Type": {ct}}); got != 415 || m["code"] != "unsupported_media_type" {
			t.Errorf("deposit with Content-Type %q: %d %v, want 415 unsupported_media_type", ct, got, m)
		}
	}
	if got, m := s.doWith(call{"POST", "/v1/emissions", op, "", `{"price":"1.00","blocks":1}`}, http.Header{"Content-Type": {"text/plain"}}); got != 415 {
		t.Errorf("emission as text/plain: %d %v, want 415", got, m)
	}
	if after := s.writerSeq(); after != before {
		t.Fatalf("refused bodies recorded events: writer at %v, was %v", after, before)
	}
	if got, m := s.doWith(deposit, http.Header{"Content-Type": {"application/json; charset=UTF-8"}}); got != 200 || m["balance"] != "20.00" {
		t.Errorf("deposit as application/json with a charset: %d %v, want 200 and a balance of 20.00", got, m)
	}
	s.stop()
}

// rawAnswer sends a raw HTTP/1.1 request on a connection it keeps open (a
// client that stalls), and reads the answer under bodyHangGuard.
func (s *server) rawAnswer(request string) (int, map[string]any) {
	s.tb.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		s.tb.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, request); err != nil {
		s.tb.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(bodyHangGuard))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		s.tb.Fatalf("no answer within %s (the server's read timeout is 10 s): %v\nrequest: %q", bodyHangGuard, err, request)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// TestBrokenBodiesAreA400 sends, over raw TCP, bodies shorter than their
// Content-Length and broken or stalled chunked bodies, keeping the
// connection open: each is answered 400 invalid_request under the body
// deadline, not 500 after the server's read timeout, and nothing is
// recorded.
func TestBrokenBodiesAreA400(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir())
	op, p42 := s.token("operator", ""), s.token("player", "p-42")
	s.must(200, call{"PUT", "/v1/players/p-42", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"50.00"}`})
	before := s.writerSeq()
	head := func(method, path, token, key string) string {
		return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: tresor\r\nAuthorization: Bearer %s\r\nIdempotency-Key: %s\r\nContent-Type: application/json\r\n", method, path, token, key)
	}
	deposit := head("POST", "/v1/players/p-42/deposits", op, "raw")
	for name, request := range map[string]string{
		"short body":             deposit + "Content-Length: 100\r\n\r\n" + `{"amount":"1.00"}`,
		"no body":                deposit + "Content-Length: 17\r\n\r\n",
		"bad chunk size":         deposit + "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + `{"amount":"1.00"}` + "\r\n0\r\n\r\n",
		"chunk longer than said": deposit + "Transfer-Encoding: chunked\r\n\r\n3\r\n" + `{"amount":"1.00"}` + "\r\n0\r\n\r\n",
		"stalled chunked body":   deposit + "Transfer-Encoding: chunked\r\n\r\n5\r\n" + `{"amo` + "\r\n",
		"short account body":     head("PUT", "/v1/players/p-42", op, "") + "Content-Length: 50\r\n\r\n" + `{"self_excluded":true}`,
		"short throw body":       head("POST", "/v1/players/p-42/plays/E0001-B001-U000000/throws", p42, "") + "Content-Length: 10\r\n\r\n{",
	} {
		if got, m := s.rawAnswer(request); got != 400 || m["code"] != "invalid_request" {
			t.Errorf("%s: %d %v, want 400 invalid_request", name, got, m)
		}
	}
	if after := s.writerSeq(); after != before {
		t.Fatalf("broken bodies recorded events: writer at %v, was %v", after, before)
	}
	// The same request with its whole body is served.
	if got, m := s.rawAnswer(deposit + "Content-Length: 17\r\nConnection: close\r\n\r\n" + `{"amount":"1.00"}`); got != 200 || m["balance"] != "1.00" {
		t.Errorf("whole body: %d %v, want 200 and a balance of 1.00", got, m)
	}
	s.stop()
}

// TestMinSeqBeyondTheHeadIsRefused asks reads for a position past the
// stream's head, by query and by header: an immediate 400, not a wait for a
// position no write has reached; the head itself, a closing seal included,
// is served.
func TestMinSeqBeyondTheHeadIsRefused(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	s := startServe(t, data)
	op := s.token("operator", "")
	s.must(200, call{"PUT", "/v1/players/p-1", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"50.00"}`})
	// After a restart the stream ends with the closing seal of the clean
	// shutdown: a position the head includes.
	s.stop()
	s = startServe(t, data)
	var head uint64
	for _, key := range []string{"projection_seq", "writer_seq"} {
		head = max(head, uint64(s.must(200, call{"GET", "/v1/health", "", "", ""})[key].(float64)))
	}
	for _, path := range []string{"/v1/players/p-1/account", "/v1/players/p-1/plays", "/v1/players/p-1/plays/last", "/v1/blocks", "/v1/blocks/E0001-B001", "/v1/reconciliation"} {
		token := op
		if strings.Contains(path, "reconciliation") {
			token = s.token("finance", "")
		}
		for _, beyond := range []uint64{head + 1, head + 1000, 1 << 63} {
			s.problem(400, "invalid_request", call{"GET", fmt.Sprintf("%s?min_seq=%d", path, beyond), token, "", ""})
			if got, m := s.doWith(call{"GET", path, token, "", ""}, http.Header{"Tresor-Min-Seq": {fmt.Sprint(beyond)}}); got != 400 || m["code"] != "invalid_request" {
				t.Errorf("GET %s with Tresor-Min-Seq %d: %d %v, want 400 invalid_request", path, beyond, got, m)
			}
		}
	}
	s.must(200, call{"GET", fmt.Sprintf("/v1/players/p-1/account?min_seq=%d", head), op, "", ""})
	s.stop()
}

// alternativeSpellings returns the four spellings of a JWT that verify: its
// signature's last base64url character carries two unused bits.
func alternativeSpellings(tb testing.TB, token string) []string {
	tb.Helper()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, token[len(token)-1])
	if last < 0 {
		tb.Fatalf("token %q does not end in base64url", token)
	}
	var out []string
	for bits := range 4 {
		out = append(out, token[:len(token)-1]+string(alphabet[last&^3|bits]))
	}
	return out
}

// TestRateLimitKeysOnTheTokensIdentity sends requests with the four
// spellings of one token, which the server all accepts: they share one
// budget, so that 4 × 39 requests, under the burst of 40 for each
// spelling, are rate limited. The rate is 1 a second so that a slow
// machine cannot refill the budget as fast as the test spends it (at the
// default 200 a second, it did once in CI).
func TestRateLimitKeysOnTheTokensIdentity(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir(), "--token-rate", "1", "--token-burst", "40")
	spellings := alternativeSpellings(t, s.token("operator", ""))
	for _, sp := range spellings {
		s.must(200, call{"GET", "/v1/blocks?limit=1", sp, "", ""})
	}
	var limited atomic.Bool
	var wg sync.WaitGroup
	for _, sp := range spellings {
		wg.Go(func() {
			for i := 1; i < 40 && !limited.Load(); i++ {
				got, m := s.do(call{"GET", "/v1/blocks?limit=1", sp, "", ""})
				switch {
				case got == 429 && m["code"] == "rate_limited":
					limited.Store(true)
				case got != 200:
					t.Errorf("spelling %s: %d %v", sp, got, m)
					return
				}
			}
		})
	}
	wg.Wait()
	if !limited.Load() {
		t.Fatal("four spellings of one token sent 4 × 39 requests and were never rate limited: each has its own budget")
	}
	s.stop()
}

// TestReconciliationFiltersByEmission checks ?emission= with every scope:
// emission rows keep that emission's, block rows that emission's blocks',
// day rows that emission's blocks' activity, and each emission's day rows
// add up to the day rows of every emission, in JSON and CSV; from and to
// filter day rows only. Both stores.
func TestReconciliationFiltersByEmission(t *testing.T) { testReconciliationFilters(t) }

func TestReconciliationFiltersByEmissionPostgres(t *testing.T) {
	testReconciliationFilters(t, "--database-url", freshDatabase(t))
}

func testReconciliationFilters(t *testing.T, args ...string) {
	t.Parallel()
	s := startServe(t, t.TempDir(), args...)
	op, fin := s.token("operator", ""), s.token("finance", "")
	e1 := s.must(201, call{"POST", "/v1/emissions", op, "", `{"price":"1.00","blocks":2}`})
	e2 := s.must(201, call{"POST", "/v1/emissions", op, "", `{"price":"2.00","blocks":1}`})
	keys := func(query string) []string {
		t.Helper()
		var out []string
		for _, r := range s.must(200, call{"GET", "/v1/reconciliation?" + query, fin, "", ""})["rows"].([]any) {
			out = append(out, r.(map[string]any)["key"].(string))
		}
		return out
	}
	id1, id2 := e1["emission_id"].(string), e2["emission_id"].(string)
	for query, want := range map[string][]string{
		"":                                        {id1, id2},
		"emission=" + id1:                         {id1},
		"scope=emission&emission=" + id2:          {id2},
		"scope=block":                             {e1["opened_blocks"].([]any)[0].(string), e2["opened_blocks"].([]any)[0].(string)},
		"scope=block&emission=" + id2:             {e2["opened_blocks"].([]any)[0].(string)},
		"scope=block&emission=E9999":              nil,
		"scope=emission&emission=E9999":           nil,
		"scope=day&from=2000-01-01&to=2000-01-02": nil,
	} {
		if got := keys(query); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("reconciliation?%s: rows %v, want %v", query, got, want)
		}
	}
	for _, query := range []string{"scope=day&emission=bad%20id", "scope=block&from=2000-01-01", "scope=emission&to=2000-01-01", "emission=bad%20id", "scope=week", "scope=day&emission=" + id1 + "&from=2000-1-1"} {
		s.problem(400, "invalid_request", call{"GET", "/v1/reconciliation?" + query, fin, "", ""})
	}

	// Both emissions sell: each one's day rows are its own activity, and
	// they add up, to the cent, to the day rows of every emission.
	p1 := s.token("player", "p-1")
	s.must(200, call{"PUT", "/v1/players/p-1", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"100.00"}`})
	s.must(200, call{"POST", "/v1/players/p-1/deposits", op, "d1", `{"amount":"50.00"}`})
	for i, stake := range []string{"1.00", "2.00", "1.00", "2.00", "1.00"} {
		play := s.must(201, call{"POST", "/v1/players/p-1/plays", p1, fmt.Sprint("s", i), `{"stake":"` + stake + `"}`})["play_id"].(string)
		for n := 1; n <= domain.ThrowCount; n++ {
			s.must(200, call{"POST", "/v1/players/p-1/plays/" + play + "/throws", p1, "", fmt.Sprintf(`{"throw":%d}`, n)})
		}
	}
	// Every read below waits for the projections to reach the last throw
	// (PostgreSQL's may lag the writer's answers).
	head := fmt.Sprintf("&min_seq=%.0f", s.writerSeq())
	rows := func(query string) []map[string]any {
		t.Helper()
		var out []map[string]any
		for _, r := range s.must(200, call{"GET", "/v1/reconciliation?" + query + head, fin, "", ""})["rows"].([]any) {
			out = append(out, r.(map[string]any))
		}
		return out
	}
	figures := []string{"sales", "prizes_paid", "prizes_owed", "prize_fund", "prize_fund_left", "house_margin", "difference"}
	add := func(sum map[string]domain.Amount, r map[string]any) {
		t.Helper()
		sum["units_sold"] += domain.Amount(r["units_sold"].(float64))
		for _, f := range figures {
			var a domain.Amount
			if err := a.UnmarshalText([]byte(r[f].(string))); err != nil {
				t.Fatalf("%s of %v: %v", f, r, err)
			}
			sum[f] += a
		}
	}
	perDay := map[string]map[string]domain.Amount{}
	for _, id := range []string{id1, id2} {
		days, total := rows("scope=day&emission="+id), map[string]domain.Amount{}
		if len(days) == 0 {
			t.Fatalf("emission %s sold and has no day rows", id)
		}
		for _, d := range days {
			add(total, d)
			if perDay[d["key"].(string)] == nil {
				perDay[d["key"].(string)] = map[string]domain.Amount{}
			}
			add(perDay[d["key"].(string)], d)
		}
		own := map[string]domain.Amount{}
		add(own, rows("emission=" + id)[0])
		if fmt.Sprint(total) != fmt.Sprint(own) {
			t.Errorf("emission %s: its days add up to %v, its row is %v", id, total, own)
		}
		first := days[0]["key"].(string)
		if got := rows("emission=" + id + "&from=" + first + "&to=" + first); len(got) != 1 || fmt.Sprint(got[0]) != fmt.Sprint(days[0]) {
			t.Errorf("emission %s from and to %s: %v, want %v", id, first, got, days[0])
		}
		csv, _ := s.getCSV("/v1/reconciliation?scope=day&emission="+id, fin)
		if len(csv) != len(days)+1 || csv[1][0] != "day" || csv[1][1] != first || csv[1][3] != days[0]["sales"] {
			t.Errorf("emission %s as CSV: %v, want the rows %v", id, csv, days)
		}
	}
	all := rows("scope=day")
	for _, d := range all {
		sum := map[string]domain.Amount{}
		add(sum, d)
		if fmt.Sprint(perDay[d["key"].(string)]) != fmt.Sprint(sum) {
			t.Errorf("day %s: the emissions' rows add up to %v, the day's row is %v", d["key"], perDay[d["key"].(string)], sum)
		}
	}
	if len(all) != len(perDay) {
		t.Errorf("days of every emission %v, of each %v", all, perDay)
	}
	s.stop()
}

func TestHistoryCursorsAtTheEdgesMemory(t *testing.T) { testHistoryCursors(t) }

func TestHistoryCursorsAtTheEdgesPostgres(t *testing.T) {
	testHistoryCursors(t, "--database-url", freshDatabase(t))
}

// testHistoryCursors pages a history with extreme cursors: the largest a
// cursor can spell answers the newest page, as no cursor does, in either
// store; a cursor out of range or not a number is a 400.
func testHistoryCursors(t *testing.T, args ...string) {
	t.Parallel()
	s := startServe(t, t.TempDir(), args...)
	op, p1 := s.token("operator", ""), s.token("player", "p-1")
	s.must(201, call{"POST", "/v1/emissions", op, "", `{"price":"1.00","blocks":1}`})
	s.must(200, call{"PUT", "/v1/players/p-1", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"50.00"}`})
	s.must(200, call{"POST", "/v1/players/p-1/deposits", op, "d1", `{"amount":"20.00"}`})
	for i := range 3 {
		s.must(201, call{"POST", "/v1/players/p-1/plays", p1, fmt.Sprint("k", i), `{"stake":"1.00"}`})
	}
	newest := s.must(200, call{"GET", "/v1/players/p-1/plays?limit=2", p1, "", ""})
	if len(newest["plays"].([]any)) != 2 || newest["next"] == nil {
		t.Fatalf("newest page: %v", newest)
	}
	for _, before := range []string{"18446744073709551615", "9223372036854775808", "9223372036854775807"} {
		if page := s.must(200, call{"GET", "/v1/players/p-1/plays?limit=2&before=" + before, p1, "", ""}); fmt.Sprint(page) != fmt.Sprint(newest) {
			t.Errorf("before=%s: %v, want the newest page %v", before, page, newest)
		}
	}
	if page := s.must(200, call{"GET", "/v1/players/p-1/plays?before=1", p1, "", ""}); len(page["plays"].([]any)) != 0 {
		t.Errorf("before=1: %v, want no play", page)
	}
	for _, before := range []string{"0", "18446744073709551616", "-1", "x", "1e3", "%2B5"} {
		s.problem(400, "invalid_request", call{"GET", "/v1/players/p-1/plays?before=" + before, p1, "", ""})
	}
	s.stop()
}

// TestNoCommandPrintsAPassword runs every command that takes a connection
// string with a password in it, by flag and by environment, on its way to
// success and to failure, and holds stdout, stderr and the logs to never
// showing the password.
func TestNoCommandPrintsAPassword(t *testing.T) {
	_, regulator, sealKey := regulatorStream(t)
	// The operator writes on a stream of its own: the regulator's has
	// blocks open under a master key this test does not hold.
	operator := (&url.URL{Scheme: "nats", User: url.UserPassword("tresor", "operator-secret"), Host: runAuthServer(t, regulatorConf(t))}).String()
	pub := hex.EncodeToString(sealPublicKey(t, sealKey))
	const pgSecret = "pg-s3cret"
	secrets := []string{"operator-secret", "regulator-secret", "wrong-secret", pgSecret}
	check := func(what, out string) {
		t.Helper()
		for _, secret := range secrets {
			if strings.Contains(out, secret) {
				t.Errorf("%s shows the password %q:\n%s", what, secret, out)
			}
		}
	}
	// runClean runs tresor and checks its exit status (-1: any failure)
	// and that its output shows no password.
	runClean := func(wantExit int, args ...string) string {
		t.Helper()
		stdout, stderr, code := run(t, args...)
		if code != wantExit && (wantExit >= 0 || code == 0) {
			t.Errorf("tresor %v: exit %d, want %d: %s", redactURL(strings.Join(args, " ")), code, wantExit, redactURL(stderr))
		}
		check(fmt.Sprintf("tresor %s", redactURL(strings.Join(args, " "))), stdout+stderr)
		return stdout
	}
	wrong := strings.Replace(regulator, "regulator-secret", "wrong-secret", 1)
	badPort := strings.Replace(regulator, "127.0.0.1:", "127.0.0.1:port", 1)
	export := filepath.Join(t.TempDir(), "export.ndjson")

	out := runClean(0, "audit", "--nats", regulator, "--inbox-prefix", "_INBOX_regulator", "--public-key", pub, "--quiet")
	if !strings.Contains(out, "nats nats://regulator:xxxxx@") {
		t.Errorf("audit's source line does not show the redacted URL:\n%s", out)
	}
	runClean(0, "audit", "--json", "--nats", regulator, "--inbox-prefix", "_INBOX_regulator", "--public-key", pub, "--quiet")
	runClean(0, "export", "--nats", regulator, "--inbox-prefix", "_INBOX_regulator", "--out", export, "--progress")
	runClean(1, "audit", "--nats", wrong, "--public-key", pub, "--quiet")
	runClean(1, "export", "--nats", badPort, "--out", export)

	t.Setenv("TRESOR_NATS_URL", regulator)
	out = runClean(0, "audit", "--inbox-prefix", "_INBOX_regulator", "--public-key", pub, "--quiet")
	if !strings.Contains(out, "nats nats://regulator:xxxxx@") {
		t.Errorf("audit by $TRESOR_NATS_URL: source line not redacted:\n%s", out)
	}
	if help := runClean(0, "audit", "--help"); !strings.Contains(help, "nats://regulator:xxxxx@") {
		t.Errorf("audit --help does not show the redacted default:\n%s", help)
	}
	t.Setenv("TRESOR_NATS_URL", badPort)
	runClean(1, "audit", "--public-key", pub, "--quiet")
	os.Unsetenv("TRESOR_NATS_URL")

	for _, db := range []string{
		"postgres://postgres:" + pgSecret + "@127.0.0.1:1/tresor?sslmode=disable",
		"postgres://postgres:" + pgSecret + "@127.0.0.1:port/tresor",
		"postgres://postgres@127.0.0.1:1/tresor?sslmode=disable&password=" + pgSecret,
		"host=127.0.0.1 port=1 user=postgres password=" + pgSecret + " sslmode=disable",
	} {
		runClean(-1, "migrate", "--database-url", db)
		runClean(-1, "projections", "rebuild", "--data", t.TempDir(), "--database-url", db)
		runClean(-1, "serve", "--data", t.TempDir(), "--http", "127.0.0.1:0", "--database-url", db)
		runClean(-1, "audit", "--nats", regulator, "--inbox-prefix", "_INBOX_regulator", "--public-key", pub, "--quiet", "--database-url", db)
		t.Setenv("TRESOR_DATABASE_URL", db)
		runClean(-1, "migrate")
		runClean(0, "serve", "--help")
		os.Unsetenv("TRESOR_DATABASE_URL")
	}

	// serve on the stream as the operator: its logs name no password.
	data := t.TempDir()
	if err := os.MkdirAll(filepath.Join(data, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int{"master.key": settlement.MasterKeySize, "seal.ed25519": ed25519.SeedSize, "token.key": 32} {
		if err := os.Rename(writeKey(t, size), filepath.Join(data, "keys", name)); err != nil {
			t.Fatal(err)
		}
	}
	s := startServe(t, data, "--nats", operator)
	s.must(200, call{"PUT", "/v1/players/p-9", s.token("operator", ""), "", `{"weekly_deposit_limit":"10.00","weekly_stake_limit":"10.00"}`})
	s.stop()
	check("serve's logs", s.logs.String())
	keys := filepath.Join(data, "keys")
	runClean(0, "simulate", "--nats", operator, "--master-key-file", filepath.Join(keys, "master.key"),
		"--seal-key-file", filepath.Join(keys, "seal.ed25519"), "--plays", "2", "--players", "1", "--quiet")
	runClean(1, "serve", "--data", data, "--http", "127.0.0.1:0", "--nats", strings.Replace(operator, "operator-secret", "wrong-secret", 1))
}
