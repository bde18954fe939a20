package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/fdj/tresor/feed"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
)

// feedOptions are feed's own flags.
type feedOptions struct {
	amqpURL, exchange string
	sqlURL, table     string
	kinds             string
	from              uint64
	untilCaughtUp     bool
	name              string
	metrics           string
	progressEvery     time.Duration
	batchMax          int
	outageMax         time.Duration
	inboxPrefix       string
}

// feedNamePattern is what --name accepts: it names AMQP queues and a SQL
// row.
var feedNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// newFeedCmd is the tresor feed command.
func newFeedCmd() *cobra.Command {
	// The connection flags' keys are their flag names (connectionStrings
	// redacts them); the others are prefixed, since flags such as --from
	// and --name mean other things in other commands.
	for key, v := range map[string]string{
		"amqp-url": "TRESOR_FEED_AMQP_URL", "sql-url": "TRESOR_FEED_SQL_URL",
		"feed-exchange": "TRESOR_FEED_EXCHANGE", "feed-table": "TRESOR_FEED_TABLE", "feed-kinds": "TRESOR_FEED_KINDS",
		"feed-from": "TRESOR_FEED_FROM", "feed-until-caught-up": "TRESOR_FEED_UNTIL_CAUGHT_UP",
		"feed-name": "TRESOR_FEED_NAME", "feed-metrics": "TRESOR_FEED_METRICS",
	} {
		env[key] = v
	}
	connectionFlags = append(connectionFlags, "amqp-url", "sql-url")

	var cfg Config
	var o feedOptions
	cmd := &cobra.Command{
		Use:   "feed (--amqp-url URL --exchange NAME | --sql-url URL --table NAME) [--name NAME] [--kinds postings,plays] [--from SEQ] [--until-caught-up]",
		Short: "Publish the journal's postings and settled plays to RabbitMQ or PostgreSQL for finance systems",
		Long: "feed follows the stream (the embedded server on --data, or --nats URL) read-only from its checkpoint and\n" +
			"publishes, through watermill, one message per event that moves money (its postings) and one per settled\n" +
			"play, in stream order, to a RabbitMQ exchange or a PostgreSQL outbox table. Message UUIDs derive from event\n" +
			"ids; the checkpoint, named by --name, lives with the target and moves only once the target confirms\n" +
			"(docs/feed.md). It runs until stopped, or with --until-caught-up up to the stream's head at start.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(&cfg, cmd); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runFeed(ctx, &cfg, o, cmd.ErrOrStderr())
		},
	}
	bindStreamFlags(cmd, &cfg)
	f := cmd.Flags()
	connectionFlag(f, &o.amqpURL, "amqp-url", "RabbitMQ to publish to, e.g. amqp://user:password@host:5672/ ($TRESOR_FEED_AMQP_URL)")
	f.StringVar(&o.exchange, "exchange", envOr("feed-exchange", "tresor.feed"), "RabbitMQ exchange (headers type) with --amqp-url ($TRESOR_FEED_EXCHANGE)")
	connectionFlag(f, &o.sqlURL, "sql-url", "PostgreSQL to publish to ($TRESOR_FEED_SQL_URL)")
	f.StringVar(&o.table, "table", envOr("feed-table", "tresor_feed"), "outbox table with --sql-url ($TRESOR_FEED_TABLE)")
	f.StringVar(&o.kinds, "kinds", envOr("feed-kinds", "postings,plays"), "message kinds: postings, plays or both ($TRESOR_FEED_KINDS)")
	from, _ := strconv.ParseUint(envOr("feed-from", "0"), 10, 64)
	f.Uint64Var(&o.from, "from", from, "replay from this stream sequence instead of the checkpoint ($TRESOR_FEED_FROM)")
	until, _ := strconv.ParseBool(envOr("feed-until-caught-up", "false"))
	f.BoolVar(&o.untilCaughtUp, "until-caught-up", until, "publish up to the stream's head at start, then exit ($TRESOR_FEED_UNTIL_CAUGHT_UP)")
	f.StringVar(&o.name, "name", envOr("feed-name", "finance"), "feed name: its checkpoint, so that feeds run side by side ($TRESOR_FEED_NAME)")
	f.StringVar(&o.metrics, "metrics", envOr("feed-metrics", ""), "serve Prometheus metrics on ADDR/metrics, e.g. 127.0.0.1:9464 ($TRESOR_FEED_METRICS)")
	f.DurationVar(&o.progressEvery, "progress-every", 10*time.Second, "print position, lag, msgs/s and errors this often on stderr")
	f.IntVar(&o.batchMax, "batch", 500, "messages confirmed at once before the checkpoint moves (1 to 10000)")
	f.DurationVar(&o.outageMax, "outage-max", 5*time.Minute, "give up when the target stays unreachable this long")
	f.StringVar(&o.inboxPrefix, "inbox-prefix", nats.InboxPrefix[:len(nats.InboxPrefix)-1],
		"reply subject prefix with --nats: the one the NATS user may subscribe to (docs/export.md)")
	return cmd
}

// validate checks the flags before anything is opened.
func (o *feedOptions) validate(cfg *Config, cmd *cobra.Command) error {
	_, err := feed.ParseKinds(o.kinds)
	switch {
	case (o.amqpURL == "") == (o.sqlURL == ""):
		return usagef("want one target: --amqp-url URL (with --exchange) or --sql-url URL (with --table)")
	case o.sqlURL != "" && cmd.Flags().Changed("exchange"), o.amqpURL != "" && cmd.Flags().Changed("table"):
		return usagef("--exchange goes with --amqp-url, --table with --sql-url")
	case o.sqlURL != "" && !feed.ValidTable(o.table):
		return usagef("--table %q: want a lowercase identifier of letters, digits and _ (not %s)", o.table, feed.CheckpointsTable)
	case err != nil:
		return usagef("--kinds: %v", err)
	case !feedNamePattern.MatchString(o.name):
		return usagef("--name %q: want 1 to 64 of A-Z a-z 0-9 _ -", o.name)
	case cfg.NATSURL == "" && cfg.Data == "":
		return usagef("--data: empty data directory")
	case o.batchMax < 1 || o.batchMax > 10_000:
		return usagef("--batch %d: want 1 to 10000", o.batchMax)
	case o.outageMax < time.Second:
		return usagef("--outage-max %s: at least 1s", o.outageMax)
	case o.progressEvery < 0:
		return usagef("--progress-every %s: negative", o.progressEvery)
	}
	return nil
}

// target opens the feed's target.
func (o *feedOptions) target() (feed.Target, error) {
	if o.amqpURL != "" {
		return feed.NewAMQPTarget(o.amqpURL, o.exchange, o.name)
	}
	return feed.NewSQLTarget(o.sqlURL, o.table, o.name)
}

// runFeed opens the stream read-only and runs the feed until ctx ends or,
// with --until-caught-up, it reaches the head. Stopped by a signal, it
// exits 0: its checkpoint says where the next run resumes.
func runFeed(ctx context.Context, cfg *Config, o feedOptions, stderr io.Writer) error {
	kinds, _ := feed.ParseKinds(o.kinds)
	fc := feed.Config{Name: o.name, Kinds: kinds, From: o.from, UntilCaughtUp: o.untilCaughtUp,
		BatchMax: o.batchMax, OutageMax: o.outageMax, Progress: stderr, ProgressEvery: o.progressEvery}
	if o.progressEvery == 0 {
		fc.ProgressEvery = 24 * time.Hour
	}
	if o.metrics != "" {
		reg := prometheus.NewRegistry()
		fc.Metrics = feed.NewMetrics(reg)
		stop, err := serveMetrics(o.metrics, reg, stderr)
		if err != nil {
			return err
		}
		defer stop()
	}
	st, err := openStreamReadOnly(ctx, cfg, nats.CustomInboxPrefix(o.inboxPrefix))
	if err != nil {
		return err
	}
	defer st.Close()
	target, err := o.target()
	if err != nil {
		return usageError{err}
	}
	defer func() {
		// RabbitMQ confirms a checkpoint with the next batch: the last
		// one is awaited here.
		if err := target.Close(); err != nil {
			fmt.Fprintf(stderr, "feed %s: the last checkpoint is not confirmed, the next run may repeat one batch: %v\n", o.name, err)
		}
	}()
	_, err = feed.Run(ctx, st.store, target, fc)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// serveMetrics serves reg on addr/metrics and prints where.
func serveMetrics(addr string, reg *prometheus.Registry, stderr io.Writer) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usagef("--metrics %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	fmt.Fprintf(stderr, "feed: metrics on http://%s/metrics\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}
