package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/feed"
	"github.com/fdj/tresor/projections"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

// feedMsg is a feed message as a consumer reads it.
type feedMsg struct {
	UUID      string `json:"-"`
	Payload   string `json:"-"`
	Kind      string `json:"kind"`
	Seq       uint64 `json:"seq"`
	EventID   string `json:"event_id"`
	EventType string `json:"event_type"`
	At        time.Time
	Lines     []struct {
		Account string `json:"account"`
		Side    string `json:"side"`
		Amount  string `json:"amount"`
	} `json:"lines"`
	Play     string `json:"play"`
	Player   string `json:"player"`
	Block    string `json:"block"`
	Unit     uint32 `json:"unit"`
	Stake    string `json:"stake"`
	Tier     string `json:"tier"`
	Prize    string `json:"prize"`
	BySystem bool   `json:"by_system"`
	// Adjustment names the approved adjustment of its postings.
	Adjustment string `json:"adjustment"`
}

func parseFeedMsg(tb testing.TB, uuid string, payload []byte) feedMsg {
	tb.Helper()
	var m feedMsg
	if err := json.Unmarshal(payload, &m); err != nil {
		tb.Fatalf("message %s: %v: %s", uuid, err, payload)
	}
	m.UUID, m.Payload = uuid, string(payload)
	if want := feed.MessageUUID(feed.Kind(m.Kind), m.EventID); uuid != want {
		tb.Fatalf("message of event %s has UUID %s, want %s", m.EventID, uuid, want)
	}
	return m
}

// reconRow is what a feed consumer can rebuild of a reconciliation row.
type reconRow struct {
	UnitsSold                 int
	Sales, PrizesPaid, Settle domain.Amount
}

// feedFixture is a simulated stream, what serve's projections say about
// it, and a reference run of the feed into PostgreSQL.
type feedFixture struct {
	data, db, amqp string
	// balances, blocks and days are the projections' figures.
	balances     map[string]domain.Amount
	blocks, days map[string]reconRow
	// ref is every message of a feed run start to end, in order.
	ref []feedMsg
}

// amqpTestURL is the RabbitMQ the tests use; they fail, never skip,
// without it.
func amqpTestURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("TRESOR_TEST_AMQP_URL")
	if u == "" {
		u = "amqp://guest:guest@127.0.0.1:5672/"
	}
	conn, err := amqp.Dial(u)
	if err != nil {
		tb.Fatalf("feed tests need RabbitMQ at TRESOR_TEST_AMQP_URL (%s): %v", redactURL(u), err)
	}
	conn.Close()
	return u
}

func newFeedFixture(t *testing.T) *feedFixture {
	f := &feedFixture{data: filepath.Join(t.TempDir(), "data"), db: freshDatabase(t), amqp: amqpTestURL(t)}
	if _, stderr, code := run(t, "simulate", "--data", f.data, "--plays", "2000", "--players", "16", "--quiet"); code != 0 {
		t.Fatalf("simulate: exit %d: %s", code, stderr)
	}
	f.feed(t, 0, "--sql-url", f.db, "--table", "feed_ref", "--name", "ref", "--until-caught-up")
	f.ref = readTable(t, f.db, "feed_ref")

	s := startServe(t, f.data)
	fin := s.token("finance", "")
	f.blocks, f.days = map[string]reconRow{}, map[string]reconRow{}
	for scope, rows := range map[string]map[string]reconRow{"block": f.blocks, "day": f.days} {
		m := s.must(200, call{"GET", "/v1/reconciliation?scope=" + scope, fin, "", ""})
		for _, r := range m["rows"].([]any) {
			r := r.(map[string]any)
			if r["difference"] != "0.00" {
				t.Fatalf("reconciliation row %v has a difference", r)
			}
			rows[r["key"].(string)] = reconRow{UnitsSold: int(r["units_sold"].(float64)),
				Sales: amount(t, r["sales"]), PrizesPaid: amount(t, r["prizes_paid"]), Settle: amount(t, r["prizes_paid"])}
		}
	}
	f.balances = map[string]domain.Amount{}
	for _, m := range f.ref {
		if m.Player != "" {
			f.balances[m.Player] = 0
		}
	}
	for p := range f.balances {
		acct := s.must(200, call{"GET", "/v1/players/" + p + "/account", fin, "", ""})
		f.balances[p] = amount(t, acct["balance"])
	}
	s.stop()
	if len(f.ref) < 4000 || len(f.blocks) == 0 || len(f.balances) != 16 {
		t.Fatalf("fixture: %d messages, %d blocks, %d players", len(f.ref), len(f.blocks), len(f.balances))
	}
	return f
}

func amount(tb testing.TB, v any) domain.Amount {
	tb.Helper()
	s, _ := v.(string)
	a, err := domain.ParseAmount(strings.TrimPrefix(s, "-"))
	if err != nil {
		tb.Fatalf("amount %v: %v", v, err)
	}
	if strings.HasPrefix(s, "-") {
		return -a
	}
	return a
}

// feed runs tresor feed on the fixture's stream to the end and checks its
// exit status.
func (f *feedFixture) feed(tb testing.TB, want int, args ...string) string {
	tb.Helper()
	_, stderr, code := run(tb, append([]string{"feed", "--data", f.data}, args...)...)
	if code != want {
		tb.Fatalf("feed %v: exit %d, want %d: %s", args, code, want, stderr)
	}
	return stderr
}

// withConn runs fn on a connection to db.
func withConn(tb testing.TB, db string, fn func(context.Context, *pgx.Conn)) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	fn(ctx, conn)
}

// readTable reads a feed's outbox table as finance would, in order.
func readTable(tb testing.TB, db, table string) (out []feedMsg) {
	tb.Helper()
	withConn(tb, db, func(ctx context.Context, conn *pgx.Conn) {
		rows, err := conn.Query(ctx, `SELECT uuid, payload::text, metadata->>'seq' FROM `+table+` ORDER BY "offset"`)
		if err != nil {
			tb.Fatal(err)
		}
		for rows.Next() {
			var uuid, payload, seq string
			if err := rows.Scan(&uuid, &payload, &seq); err != nil {
				tb.Fatal(err)
			}
			m := parseFeedMsg(tb, uuid, []byte(payload))
			if seq != strconv.FormatUint(m.Seq, 10) {
				tb.Fatalf("message %s: metadata seq %s, payload seq %d", uuid, seq, m.Seq)
			}
			out = append(out, m)
		}
		if err := rows.Err(); err != nil {
			tb.Fatal(err)
		}
	})
	return out
}

// sqlExec runs statements on db.
func sqlExec(tb testing.TB, db string, stmts ...string) {
	tb.Helper()
	withConn(tb, db, func(ctx context.Context, conn *pgx.Conn) {
		for _, s := range stmts {
			if _, err := conn.Exec(ctx, s); err != nil {
				tb.Fatalf("%s: %v", s, err)
			}
		}
	})
}

// sqlCheckpoint is a feed's checkpoint row (0 when missing).
func sqlCheckpoint(tb testing.TB, db, name string) (seq uint64) {
	tb.Helper()
	withConn(tb, db, func(ctx context.Context, conn *pgx.Conn) {
		err := conn.QueryRow(ctx, `SELECT seq FROM `+feed.CheckpointsTable+` WHERE name = $1`, name).Scan(&seq)
		if err != nil && err != pgx.ErrNoRows {
			tb.Fatal(err)
		}
	})
	return seq
}

// dedupe keeps the first message of each UUID, checking that every
// duplicate is the same message, and returns how many it dropped.
func dedupe(tb testing.TB, msgs []feedMsg) ([]feedMsg, int) {
	tb.Helper()
	seen := map[string]string{}
	var out []feedMsg
	for _, m := range msgs {
		if p, ok := seen[m.UUID]; ok {
			if p != m.Payload {
				tb.Fatalf("UUID %s carries two payloads:\n%s\n%s", m.UUID, p, m.Payload)
			}
			continue
		}
		seen[m.UUID] = m.Payload
		out = append(out, m)
	}
	return out, len(msgs) - len(out)
}

// sameAsRef checks that msgs, deduplicated, are the reference run's
// messages (from index from on), in the same order, byte for byte.
func sameAsRef(tb testing.TB, got, ref []feedMsg) {
	tb.Helper()
	if len(got) != len(ref) {
		tb.Fatalf("%d messages, want %d", len(got), len(ref))
	}
	for i := range ref {
		if got[i].UUID != ref[i].UUID || got[i].Payload != ref[i].Payload {
			tb.Fatalf("message %d: %s %s, want %s %s", i, got[i].UUID, got[i].Payload, ref[i].UUID, ref[i].Payload)
		}
	}
}

// checkRebuild rebuilds every player's balance and the reconciliation's
// sales and prizes per block and per day from the messages, as a finance
// consumer would, and compares them with the projections to the cent.
func (f *feedFixture) checkRebuild(t *testing.T, msgs []feedMsg) {
	t.Helper()
	balances := map[string]domain.Amount{}
	blocks, days := map[string]reconRow{}, map[string]reconRow{}
	add := func(block string, at time.Time, d reconRow) {
		for k, rows := range map[string]map[string]reconRow{block: blocks, projections.DayKey(at): days} {
			r := rows[k]
			r.UnitsSold += d.UnitsSold
			r.Sales += d.Sales
			r.PrizesPaid += d.PrizesPaid
			r.Settle += d.Settle
			rows[k] = r
		}
	}
	var prev uint64
	for _, m := range msgs {
		if m.Seq <= prev {
			t.Fatalf("message of sequence %d after %d: out of stream order", m.Seq, prev)
		}
		prev = m.Seq
		switch m.Kind {
		case "postings":
			var debits, credits domain.Amount
			for _, l := range m.Lines {
				a := amount(t, l.Amount)
				switch {
				case l.Side == "debit":
					debits += a
				case l.Side == "credit":
					credits += a
				default:
					t.Fatalf("line side %q", l.Side)
				}
				if p, ok := strings.CutPrefix(l.Account, "player."); ok {
					if l.Side == "debit" {
						a = -a
					}
					balances[p] += a
				}
				switch {
				case l.Account == domain.BlockSalesAccount(m.Block) && l.Side == "credit":
					add(m.Block, m.At, reconRow{UnitsSold: 1, Sales: a})
				case l.Account == domain.BlockPrizeAccount(m.Block) && l.Side == "debit":
					add(m.Block, m.At, reconRow{PrizesPaid: a})
				}
			}
			if debits != credits || len(m.Lines) != 2 {
				t.Fatalf("postings %s: debits %s, credits %s, %d lines", m.EventID, debits, credits, len(m.Lines))
			}
		case "play_settled":
			if amount(t, m.Stake) != 100 || m.Tier == "" {
				t.Fatalf("play_settled %s: stake %s tier %q", m.Play, m.Stake, m.Tier)
			}
			add(m.Block, m.At, reconRow{Settle: amount(t, m.Prize)})
		default:
			t.Fatalf("message kind %q", m.Kind)
		}
	}
	for p, want := range f.balances {
		if balances[p] != want {
			t.Errorf("player %s: feed balance %s, projection %s", p, balances[p], want)
		}
	}
	for scope, pair := range map[string][2]map[string]reconRow{"block": {blocks, f.blocks}, "day": {days, f.days}} {
		got, want := pair[0], pair[1]
		if len(got) != len(want) {
			t.Errorf("%d %s rows from the feed, %d in the reconciliation", len(got), scope, len(want))
		}
		for k, w := range want {
			g := got[k]
			if g.UnitsSold != w.UnitsSold || g.Sales != w.Sales || g.PrizesPaid != w.PrizesPaid || g.Settle != w.PrizesPaid {
				t.Errorf("%s %s: feed %+v, reconciliation %+v", scope, k, g, w)
			}
		}
	}
}

// feedProc is a tresor feed running in the background.
type feedProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan error
}

func startFeed(tb testing.TB, args ...string) *feedProc {
	tb.Helper()
	p := &feedProc{cmd: exec.Command(tresorBin, append([]string{"feed"}, args...)...), done: make(chan error, 1)}
	pipe, err := p.cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
		p.done <- p.cmd.Wait()
	}()
	tb.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
		}
	})
	return p
}

func (p *feedProc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// stop sends sig and waits for the exit.
func (p *feedProc) stop(tb testing.TB, sig os.Signal) error {
	tb.Helper()
	p.cmd.Process.Signal(sig)
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		tb.Fatalf("feed still running 30s after %s:\n%s", sig, p.logs())
		return nil
	}
}

// amqpQueue declares the feed's exchange and a queue bound to it with
// args (every message when nil), deleted with the exchange and the feed
// queues of name at the end of the test.
func amqpQueue(tb testing.TB, url, exchange, name string, qargs, bind amqp.Table) string {
	tb.Helper()
	ch, done := amqpChannel(tb, url)
	if err := feed.DeclareTopology(ch, exchange); err != nil {
		tb.Fatal(err)
	}
	q := fmt.Sprintf("%s.test%d", exchange, time.Now().UnixNano())
	if _, err := ch.QueueDeclare(q, true, false, false, false, qargs); err != nil {
		tb.Fatal(err)
	}
	if err := ch.QueueBind(q, "", exchange, false, bind); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ch.QueueDelete(q, false, false, false)
		done()
	})
	amqpCleanup(tb, url, exchange, name)
	return q
}

// amqpCleanup deletes, at the end of the test, the exchange and the
// queues a feed of that name declares.
func amqpCleanup(tb testing.TB, url, exchange, name string) {
	tb.Cleanup(func() {
		ch, done := amqpChannel(tb, url)
		defer done()
		for _, q := range []string{feed.UnroutedQueue(exchange), "tresor.feed." + name + ".checkpoint"} {
			ch.QueueDelete(q, false, false, false)
		}
		ch.ExchangeDelete(exchange, false, false)
		ch.ExchangeDelete(feed.UnroutedQueue(exchange), false, false)
	})
}

// amqpChannel opens a channel on a new connection; done closes both.
func amqpChannel(tb testing.TB, url string) (ch *amqp.Channel, done func()) {
	tb.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		tb.Fatal(err)
	}
	if ch, err = conn.Channel(); err != nil {
		conn.Close()
		tb.Fatal(err)
	}
	return ch, func() { conn.Close() }
}

// drain takes every message of a queue: those it holds when called.
func drain(tb testing.TB, url, queue string) []feedMsg {
	tb.Helper()
	n := queueDepth(tb, url, queue)
	ch, done := amqpChannel(tb, url)
	defer done()
	if err := ch.Qos(1000, 0, false); err != nil {
		tb.Fatal(err)
	}
	deliveries, err := ch.Consume(queue, "", true, true, false, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	var out []feedMsg
	for len(out) < n {
		var d amqp.Delivery
		select {
		case d = <-deliveries:
		case <-time.After(30 * time.Second):
			tb.Fatalf("%d of %d messages of %s after 30s", len(out), n, queue)
		}
		if d.Headers["_watermill_message_uuid"] != d.MessageId || d.DeliveryMode != amqp.Persistent || d.Headers["kind"] != d.Type {
			tb.Fatalf("message %s: headers %v, delivery mode %d, type %s", d.MessageId, d.Headers, d.DeliveryMode, d.Type)
		}
		out = append(out, parseFeedMsg(tb, d.MessageId, d.Body))
	}
	return out
}

// queueDepth is how many messages wait in a queue.
func queueDepth(tb testing.TB, url, queue string) int {
	tb.Helper()
	ch, done := amqpChannel(tb, url)
	defer done()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return q.Messages
}

// summaryErrors reads the error count of a feed's summary line.
var summaryErrors = regexp.MustCompile(`msgs/s, (\d+) errors; checkpoint (\d+)`)

func TestFeed(t *testing.T) {
	f := newFeedFixture(t)

	t.Run("SQLRebuildsBalancesAndReconciliation", func(t *testing.T) {
		f.checkRebuild(t, f.ref)
		got, dups := dedupe(t, f.ref)
		if dups != 0 || len(got) != len(f.ref) {
			t.Fatalf("the outbox holds %d duplicates", dups)
		}
		// The checkpoint sits at the last event read, in the same
		// transaction as the rows.
		if cp := sqlCheckpoint(t, f.db, "ref"); cp < f.ref[len(f.ref)-1].Seq {
			t.Fatalf("checkpoint %d before the last message %d", cp, f.ref[len(f.ref)-1].Seq)
		}
		// Run again: caught up, nothing published.
		out := f.feed(t, 0, "--sql-url", f.db, "--table", "feed_ref", "--name", "ref", "--until-caught-up")
		if !strings.Contains(out, "published 0 messages") || len(readTable(t, f.db, "feed_ref")) != len(f.ref) {
			t.Fatalf("second run: %s", out)
		}
	})

	t.Run("AMQPRebuildsBalancesAndReconciliation", func(t *testing.T) {
		ex := fmt.Sprintf("test.feed.%d", time.Now().UnixNano())
		all := amqpQueue(t, f.amqp, ex, "amqp1", nil, nil)
		plays := amqpQueue(t, f.amqp, ex, "amqp1", nil, amqp.Table{"x-match": "all", "kind": "play_settled"})
		f.feed(t, 0, "--amqp-url", f.amqp, "--exchange", ex, "--name", "amqp1", "--until-caught-up")
		got, dups := dedupe(t, drain(t, f.amqp, all))
		if dups != 0 {
			t.Errorf("%d duplicates without a failure", dups)
		}
		sameAsRef(t, got, f.ref)
		f.checkRebuild(t, got)
		for _, m := range drain(t, f.amqp, plays) {
			if m.Kind != "play_settled" {
				t.Fatalf("a queue bound to kind play_settled got %s", m.Kind)
			}
		}
	})

	t.Run("KilledMidwayResumesWithoutGap", func(t *testing.T) {
		// PostgreSQL: exactly once, whatever the moment of the kill.
		p := startFeed(t, "--data", f.data, "--sql-url", f.db, "--table", "feed_kill", "--name", "kill", "--batch", "50")
		eventually(t, 60*time.Second, func() bool { return sqlCheckpoint(t, f.db, "kill") > 0 })
		p.cmd.Process.Kill()
		<-p.done
		if cp := sqlCheckpoint(t, f.db, "kill"); cp >= f.ref[len(f.ref)-1].Seq {
			t.Fatalf("the feed was done (checkpoint %d) before it was killed", cp)
		}
		f.feed(t, 0, "--sql-url", f.db, "--table", "feed_kill", "--name", "kill", "--until-caught-up")
		got := readTable(t, f.db, "feed_kill")
		if _, dups := dedupe(t, got); dups != 0 {
			t.Fatalf("%d duplicates in the outbox after a kill", dups)
		}
		sameAsRef(t, got, f.ref)

		// RabbitMQ: no gap, duplicates only of the same message.
		ex := fmt.Sprintf("test.feed.%d", time.Now().UnixNano())
		q := amqpQueue(t, f.amqp, ex, "kill", nil, nil)
		p = startFeed(t, "--data", f.data, "--amqp-url", f.amqp, "--exchange", ex, "--name", "kill", "--batch", "50")
		eventually(t, 60*time.Second, func() bool { return queueDepth(t, f.amqp, q) > 0 })
		p.cmd.Process.Kill()
		<-p.done
		if n := queueDepth(t, f.amqp, q); n >= len(f.ref) {
			t.Fatalf("the feed was done (%d messages) before it was killed", n)
		}
		f.feed(t, 0, "--amqp-url", f.amqp, "--exchange", ex, "--name", "kill", "--until-caught-up")
		got, dups := dedupe(t, drain(t, f.amqp, q))
		sameAsRef(t, got, f.ref)
		t.Logf("after a kill: %d duplicates, all of the same UUID and payload", dups)
	})

	t.Run("AMQPConnectionDroppedMidway", func(t *testing.T) {
		ex := fmt.Sprintf("test.feed.%d", time.Now().UnixNano())
		q := amqpQueue(t, f.amqp, ex, "drop", nil, nil)
		u, err := url.Parse(f.amqp)
		if err != nil {
			t.Fatal(err)
		}
		px := eventstoretest.StartProxy(t, u.Host)
		u.Host = px.Addr
		p := startFeed(t, "--data", f.data, "--amqp-url", u.String(), "--exchange", ex, "--name", "drop", "--batch", "50",
			"--metrics", "127.0.0.1:0", "--progress-every", "100ms")
		eventually(t, 60*time.Second, func() bool { return queueDepth(t, f.amqp, q) > 0 })
		if px.Cut() == 0 {
			t.Fatal("no connection to cut")
		}
		if n := queueDepth(t, f.amqp, q); n >= len(f.ref) {
			t.Fatalf("the feed was done (%d messages) before the drop", n)
		}
		metrics := regexp.MustCompile(`metrics on (http://\S+)`).FindStringSubmatch(p.logs())
		if metrics == nil {
			t.Fatalf("no metrics address in %s", p.logs())
		}
		last := f.ref[len(f.ref)-1].Seq
		eventually(t, 60*time.Second, func() bool {
			return scrape(t, metrics[1], "tresor_feed_position") >= float64(last) // float-ok: a metric
		})
		if lag := scrape(t, metrics[1], "tresor_feed_lag_events"); lag != 0 {
			t.Errorf("lag %v once caught up", lag)
		}
		if err := p.stop(t, syscall.SIGTERM); err != nil {
			t.Fatalf("feed after SIGTERM: %v\n%s", err, p.logs())
		}
		m := summaryErrors.FindStringSubmatch(p.logs())
		if m == nil || m[1] == "0" || !strings.Contains(p.logs(), ", lag ") {
			t.Fatalf("want failed attempts in the summary and progress lines:\n%s", p.logs())
		}
		got, dups := dedupe(t, drain(t, f.amqp, q))
		sameAsRef(t, got, f.ref)
		t.Logf("after the drop: %s errors, %d duplicates, all of the same UUID and payload", m[1], dups)
	})

	t.Run("FromReplaysIdentically", func(t *testing.T) {
		from := f.ref[len(f.ref)/3].Seq
		f.feed(t, 0, "--sql-url", f.db, "--table", "feed_from", "--name", "from", "--from", strconv.FormatUint(from, 10), "--until-caught-up")
		sameAsRef(t, readTable(t, f.db, "feed_from"), f.ref[len(f.ref)/3:])
		// Replayed into the same table, the range comes again, identical.
		f.feed(t, 0, "--sql-url", f.db, "--table", "feed_from", "--name", "from", "--from", strconv.FormatUint(from, 10), "--until-caught-up")
		got, dups := dedupe(t, readTable(t, f.db, "feed_from"))
		if dups != len(f.ref)-len(f.ref)/3 {
			t.Fatalf("%d duplicates, want the whole range again", dups)
		}
		sameAsRef(t, got, f.ref[len(f.ref)/3:])
		// --kinds postings leaves the settled plays out.
		f.feed(t, 0, "--sql-url", f.db, "--table", "feed_postings", "--name", "postings", "--kinds", "postings", "--until-caught-up")
		var want []feedMsg
		for _, m := range f.ref {
			if m.Kind == "postings" {
				want = append(want, m)
			}
		}
		sameAsRef(t, readTable(t, f.db, "feed_postings"), want)
	})

	t.Run("PoisonMessageStopsTheFeedNamingIt", func(t *testing.T) {
		mid := len(f.ref) / 2
		poison := f.ref[mid]
		named := fmt.Sprintf("event %d (%s %s", poison.Seq, poison.EventType, poison.EventID)

		sqlExec(t, f.db, `CREATE TABLE feed_poison (LIKE feed_ref INCLUDING ALL)`,
			`ALTER TABLE feed_poison ADD CONSTRAINT no_poison CHECK (payload::jsonb->>'event_id' <> '`+poison.EventID+`')`)
		out := f.feed(t, 1, "--sql-url", f.db, "--table", "feed_poison", "--name", "poison", "--until-caught-up")
		if !strings.Contains(out, named) || !strings.Contains(out, "no_poison") {
			t.Fatalf("the error does not name the event (%s): %s", named, out)
		}
		sameAsRef(t, readTable(t, f.db, "feed_poison"), f.ref[:mid])
		if cp := sqlCheckpoint(t, f.db, "poison"); cp < f.ref[mid-1].Seq || cp >= poison.Seq {
			t.Fatalf("checkpoint %d, want from %d to before %d", cp, f.ref[mid-1].Seq, poison.Seq)
		}
		sqlExec(t, f.db, `ALTER TABLE feed_poison DROP CONSTRAINT no_poison`)
		f.feed(t, 0, "--sql-url", f.db, "--table", "feed_poison", "--name", "poison", "--until-caught-up")
		sameAsRef(t, readTable(t, f.db, "feed_poison"), f.ref)

		// RabbitMQ: a queue that refuses the one message.
		ex := fmt.Sprintf("test.feed.%d", time.Now().UnixNano())
		q := amqpQueue(t, f.amqp, ex, "poison", nil, nil)
		amqpQueue(t, f.amqp, ex, "poison", amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"},
			amqp.Table{"x-match": "all", "event_id": poison.EventID})
		out = f.feed(t, 1, "--amqp-url", f.amqp, "--exchange", ex, "--name", "poison", "--until-caught-up")
		if !strings.Contains(out, named) {
			t.Fatalf("the error does not name the event (%s): %s", named, out)
		}
		// The queues that took the poison message keep it when another
		// refuses it (RabbitMQ nacks it), and so the messages after it
		// in its batch. Every message before the poison one arrived, in
		// order.
		got, _ := dedupe(t, drain(t, f.amqp, q))
		if len(got) < mid {
			t.Fatalf("%d messages before the poison one, want %d", len(got), mid)
		}
		sameAsRef(t, got[:mid], f.ref[:mid])
	})

	t.Run("FlagsAreChecked", func(t *testing.T) {
		for _, args := range [][]string{
			{},
			{"--amqp-url", f.amqp, "--sql-url", f.db},
			{"--sql-url", f.db, "--table", "Bad-Name"},
			{"--sql-url", f.db, "--exchange", "x"},
			{"--sql-url", f.db, "--kinds", "postings,prizes"},
			{"--sql-url", f.db, "--name", "a b"},
		} {
			_, stderr, code := run(t, append([]string{"feed", "--data", f.data, "--until-caught-up"}, args...)...)
			if code != 2 || strings.Contains(stderr, "guest:guest") {
				t.Errorf("%v: exit %d: %s", args, code, stderr)
			}
		}
	})
}

// scrape reads one unlabelled-by-kind gauge from a /metrics page.
func scrape(tb testing.TB, url, name string) float64 { // float-ok: a metric
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + `\{feed="[^"]+"\} (\S+)$`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}
