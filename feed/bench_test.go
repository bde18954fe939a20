package feed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/feed"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

// benchPlays is the size of the benchmark's stream: each play is a stake
// (postings), four throws (no message), its settlement (play_settled)
// and, one play in four, a prize (postings), with a deposit every ten
// plays: 23 500 messages for 63 500 events.
const benchPlays = 10_000

// writeStream fills a fresh embedded stream with plays plays (benchPlays
// for the benchmark) in atomic appends of up to 1 000 events, and returns
// the store.
func writeStream(b testing.TB, plays int) eventstore.Store {
	b.Helper()
	ctx := context.Background()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Shutdown)
	nc, err := srv.Conn()
	if err != nil {
		b.Fatal(err)
	}
	store, err := eventstore.Open(ctx, nc, eventstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	// One request per command, as the writer makes them: the committer
	// merges them into atomic batches and marks where each ends.
	c, err := store.NewCommitter(ctx, "s0", eventstore.CommitterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	var results []<-chan eventstore.AppendResult
	command := func(player string, es ...domain.Event) {
		req := eventstore.AppendRequest{}
		for _, e := range es {
			payload, err := json.Marshal(e)
			if err != nil {
				b.Fatal(err)
			}
			req.Events = append(req.Events, eventstore.Event{Type: e.EventType(), SchemaVersion: 1,
				Aggregate: eventstore.Aggregate{Kind: "player", ID: player}, Payload: payload})
		}
		results = append(results, c.Submit(ctx, req))
	}
	const block = "E0001-B001"
	for i := range plays {
		player := fmt.Sprintf("p%d", i%256)
		play := fmt.Sprintf("%s-U%06d", block, i)
		if i%10 == 0 {
			command(player, &domain.FundsDeposited{Player: player, Amount: 1000, Key: fmt.Sprint("d", i), Balance: 1000})
		}
		command(player, &domain.StakePlaced{Play: play, Player: player, Block: block, Stake: 100, Key: play, Balance: 900})
		for t := 1; t <= 3; t++ {
			command(player, &domain.ThrowMade{Play: play, Player: player, Throw: t})
		}
		last := []domain.Event{&domain.ThrowMade{Play: play, Player: player, Throw: 4},
			&domain.PlaySettled{Play: play, Player: player, Block: block, Unit: uint32(i), Tier: domain.TierNone}}
		if i%4 == 0 {
			last[1] = &domain.PlaySettled{Play: play, Player: player, Block: block, Unit: uint32(i), Tier: domain.SkullX2, Prize: 200}
			last = append(last, &domain.PrizePaid{Play: play, Player: player, Block: block, Amount: 200, Balance: 1100})
		}
		command(player, last...)
	}
	// An adjustment: its proposal gives no message, its approval postings.
	by, checker := &domain.Actor{Role: domain.RoleOperator, Subject: "alice"}, &domain.Actor{Role: domain.RoleFinance, Subject: "fiona"}
	command("p0", &domain.AdjustmentProposed{Adjustment: "A1", Player: "p0", Direction: domain.Credit, Kind: domain.Goodwill,
		Amount: 500, Reference: "ticket-1", Reason: "the game froze", By: by})
	command("p0", &domain.AdjustmentApproved{Adjustment: "A1", Player: "p0", Direction: domain.Credit, Kind: domain.Goodwill,
		Amount: 500, Balance: 1500, ProposedBy: by, By: checker})
	for _, r := range results {
		if res := <-r; res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	if err := c.Close(); err != nil {
		b.Fatal(err)
	}
	return store
}

// benchMessages reads the stream's messages, as the feed builds them,
// for the yardstick to publish the same bytes.
func benchMessages(b *testing.B, store eventstore.Store) []*message.Message {
	b.Helper()
	db, table := benchDatabase(b), fmt.Sprintf("bench_messages_%d", time.Now().UnixNano())
	conn := pgConn(b, db)
	defer conn.Exec(context.Background(), `DROP TABLE IF EXISTS `+table)
	defer conn.Exec(context.Background(), `DELETE FROM `+feed.CheckpointsTable+` WHERE name = $1`, table)
	target, err := feed.NewSQLTarget(db, table, table)
	if err != nil {
		b.Fatal(err)
	}
	defer target.Close()
	if _, err := feed.Run(context.Background(), store, target, feed.Config{Name: table, UntilCaughtUp: true}); err != nil {
		b.Fatal(err)
	}
	rows, err := conn.Query(context.Background(), `SELECT uuid, payload::text, metadata::text FROM `+table+` ORDER BY "offset"`)
	if err != nil {
		b.Fatal(err)
	}
	var out []*message.Message
	for rows.Next() {
		var uuid, payload, meta string
		if err := rows.Scan(&uuid, &payload, &meta); err != nil {
			b.Fatal(err)
		}
		m := message.NewMessage(uuid, []byte(payload))
		if err := json.Unmarshal([]byte(meta), &m.Metadata); err != nil {
			b.Fatal(err)
		}
		out = append(out, m)
	}
	if rows.Err() != nil || len(out) != 23_500 {
		b.Fatalf("%d messages: %v", len(out), rows.Err())
	}
	return out
}

func benchDatabase(b *testing.B) string {
	b.Helper()
	u := os.Getenv("TRESOR_TEST_DATABASE_URL")
	if u == "" {
		u = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	return u
}

func pgConn(b *testing.B, url string) *pgx.Conn {
	b.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		b.Fatalf("the benchmark needs PostgreSQL at TRESOR_TEST_DATABASE_URL: %v", err)
	}
	b.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// BenchmarkFeed measures the feed's messages/s into each target against
// the yardstick of the same run: the raw watermill publisher, configured
// as the feed's, publishing the same messages in batches of the same size
// into the same target, with no stream, no checkpoint and no retry. For
// RabbitMQ that is the feed's own confirming publisher
// (feed.NewAMQPPublisher), and watermill-amqp's transactional publisher is
// measured too (watermill_tx), what the feed used before.
//
//	go test -run '^$' -bench BenchmarkFeed -benchtime 1x ./feed/
func BenchmarkFeed(b *testing.B) {
	store := writeStream(b, benchPlays)
	msgs := benchMessages(b, store)
	const batch = 500
	ctx := context.Background()
	amqpURL := os.Getenv("TRESOR_TEST_AMQP_URL")
	if amqpURL == "" {
		amqpURL = "amqp://guest:guest@127.0.0.1:5672/"
	}
	db := benchDatabase(b)
	conn := pgConn(b, db)

	publishAll := func(pub message.Publisher, err error) error {
		if err != nil {
			return err
		}
		defer pub.Close()
		for i := 0; i < len(msgs); i += batch {
			if err := pub.Publish("tresor.feed", msgs[i:min(i+batch, len(msgs))]...); err != nil {
				return err
			}
		}
		return nil
	}
	targets := []struct {
		name string
		raw  func(run string) error
		// tx, for AMQP, is watermill-amqp's own publisher with
		// transactions: what the feed used before confirms.
		tx    func(run string) error
		feed  func(run string) (feed.Target, error)
		clean func(run string)
	}{
		{"amqp", func(run string) error {
			return publishAll(feed.NewAMQPPublisher(amqpURL, run))
		}, func(run string) error {
			return publishAll(feed.NewAMQPTxPublisher(amqpURL, run))
		}, func(run string) (feed.Target, error) {
			return feed.NewAMQPTarget(amqpURL, run, run)
		}, func(run string) {
			c, err := amqp.Dial(amqpURL)
			if err != nil {
				return
			}
			defer c.Close()
			ch, _ := c.Channel()
			for _, q := range []string{feed.UnroutedQueue(run), "tresor.feed." + run + ".checkpoint"} {
				ch.QueueDelete(q, false, false, false)
			}
			ch.ExchangeDelete(run, false, false)
			ch.ExchangeDelete(feed.UnroutedQueue(run), false, false)
		}},
		{"sql", func(run string) error {
			schema := feed.NewOutboxSchema(run)
			queries, err := schema.SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams{Topic: run})
			if err != nil {
				return err
			}
			for _, q := range queries {
				if _, err := conn.Exec(ctx, q.Query, q.Args...); err != nil {
					return err
				}
			}
			for i := 0; i < len(msgs); i += batch {
				tx, err := conn.Begin(ctx)
				if err != nil {
					return err
				}
				pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: schema}, watermill.NopLogger{})
				if err != nil {
					return err
				}
				if err := pub.Publish(run, msgs[i:min(i+batch, len(msgs))]...); err != nil {
					return err
				}
				if err := tx.Commit(ctx); err != nil {
					return err
				}
			}
			return nil
		}, nil, func(run string) (feed.Target, error) {
			return feed.NewSQLTarget(db, run, run)
		}, func(run string) {
			conn.Exec(ctx, `DROP TABLE IF EXISTS `+run)
			conn.Exec(ctx, `DELETE FROM `+feed.CheckpointsTable+` WHERE name = $1`, run)
		}},
	}
	// The feed's ceiling on this machine: reading, checking and building
	// the messages into a target that takes them at once.
	// Its CPU time a message (this process's, the embedded nats-server's
	// included) tells more than its rate on a shared machine, where the
	// rate is whatever share of the cores the feed gets.
	b.Run("read_only", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			start, cpu := time.Now(), cpuTime(b)
			sum, err := feed.Run(ctx, store, discard{}, feed.Config{Name: "read_only", UntilCaughtUp: true, BatchMax: batch})
			if err != nil || sum.Messages != uint64(len(msgs)) {
				b.Fatalf("feed: %d messages: %v", sum.Messages, err)
			}
			b.ReportMetric(float64(sum.Messages)/time.Since(start).Seconds(), "feed_msgs/s")             // float-ok: a rate
			b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(sum.Messages), "cpu_us/msg") // float-ok: a mean
		}
	})
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				run := fmt.Sprintf("bench_%s_%d", tg.name, time.Now().UnixNano())
				start := time.Now()
				if err := tg.raw(run + "_raw"); err != nil {
					b.Fatal(err)
				}
				rawRate := float64(len(msgs)) / time.Since(start).Seconds() // float-ok: a rate
				tg.clean(run + "_raw")
				var txRate float64 // float-ok: a rate
				if tg.tx != nil {
					start = time.Now()
					if err := tg.tx(run + "_tx"); err != nil {
						b.Fatal(err)
					}
					txRate = float64(len(msgs)) / time.Since(start).Seconds() // float-ok: a rate
					tg.clean(run + "_tx")
				}

				target, err := tg.feed(run)
				if err != nil {
					b.Fatal(err)
				}
				start = time.Now()
				sum, err := feed.Run(ctx, store, target, feed.Config{Name: run, UntilCaughtUp: true, BatchMax: batch})
				elapsed := time.Since(start)
				target.Close()
				tg.clean(run)
				if err != nil || sum.Messages != uint64(len(msgs)) {
					b.Fatalf("feed: %d messages: %v", sum.Messages, err)
				}
				feedRate := float64(sum.Messages) / elapsed.Seconds() // float-ok: a rate
				b.ReportMetric(rawRate, "raw_msgs/s")
				b.ReportMetric(feedRate, "feed_msgs/s")
				b.ReportMetric(feedRate/rawRate, "x_yardstick")
				if tg.tx != nil {
					b.ReportMetric(txRate, "watermill_tx_msgs/s")
					b.ReportMetric(feedRate/txRate, "x_watermill_tx")
				}
			}
		})
	}
}

// cpuTime is the CPU time (user and system) this process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// discard is a target that confirms everything at once.
type discard struct{}

func (discard) Checkpoint(context.Context) (uint64, error)            { return 0, nil }
func (discard) Publish(context.Context, []feed.Message, uint64) error { return nil }
func (discard) Close() error                                          { return nil }
