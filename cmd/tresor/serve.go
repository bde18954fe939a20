package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/cluster"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/projections/pgstore"
	"github.com/fdj/tresor/settlement"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// shutdownMax bounds the wait for in-flight requests on SIGTERM.
const shutdownMax = 20 * time.Second

// newServeCmd is the tresor serve command.
func newServeCmd() *cobra.Command {
	var cfg Config
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the settlement writer, the projections and the HTTP API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			if err := cfg.validateNode(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			stopTracing, err := startTracing(ctx, &cfg)
			if err != nil {
				return usagef("%v", err)
			}
			defer stopTracing()
			return serve(ctx, &cfg, slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)))
		},
	}
	bindWriterFlags(cmd, &cfg)
	bindTokenFlag(cmd, &cfg)
	bindIdentityFlags(cmd, &cfg)
	cmd.Flags().StringVar(&cfg.HTTP, "http", "127.0.0.1:8080", "address the HTTP API and the pages listen on ($TRESOR_HTTP)")
	withEnv(cmd.Flags(), "http")
	cmd.Flags().IntVar(&cfg.TokenRate, "token-rate", api.RatePerSecond, "requests per second one token may send on average; past it and its burst, 429 rate_limited ($TRESOR_TOKEN_RATE)")
	cmd.Flags().IntVar(&cfg.TokenBurst, "token-burst", api.RateBurst, "requests one token may send at once after a pause ($TRESOR_TOKEN_BURST)")
	withEnv(cmd.Flags(), "token-rate", "token-burst")
	cmd.Flags().DurationVar(&cfg.RevocationSkew, "revocation-clock-skew", api.RevocationSkewDefault, "how far a token issuer's clock may be ahead of the writer's: a subject's revocation covers the tokens issued (iat) up to that long after it ($TRESOR_REVOCATION_CLOCK_SKEW)")
	withEnv(cmd.Flags(), "revocation-clock-skew")
	cmd.Flags().StringVar(&cfg.OTLPEndpoint, "otlp-endpoint", "", "OTLP/HTTP traces endpoint of an OpenTelemetry collector, e.g. http://collector:4318/v1/traces; none sent when empty ($TRESOR_OTLP_ENDPOINT)")
	cmd.Flags().Float64Var(&cfg.TraceRatio, "trace-ratio", 1, "share of the requests traced, 0 to 1, with --otlp-endpoint; a caller's sampled traceparent is always followed ($TRESOR_TRACE_RATIO)")
	withEnv(cmd.Flags(), "otlp-endpoint", "trace-ratio")
	cmd.Flags().StringVar(&cfg.VaultCosignatures, "vault-cosignatures", "", "the regulator's vault's cosignatures.ndjson, as fetched from the vault, served at GET /v1/vault/cosignatures for players to check ($TRESOR_VAULT_COSIGNATURES)")
	cmd.Flags().StringVar(&cfg.VaultKey, "vault-key", "", "the regulator's vault's public key, as the regulator publishes it: 64 hex digits or a file, with --vault-cosignatures ($TRESOR_VAULT_KEY)")
	withEnv(cmd.Flags(), "vault-cosignatures", "vault-key")
	cmd.Flags().StringVar(&cfg.NodeName, "node-name", "", "name of this node among the writers of a NATS cluster (default <host name>/<pid>) ($TRESOR_NODE_NAME)")
	cmd.Flags().DurationVar(&cfg.LeaseTTL, "lease-ttl", 2*time.Second, "how long the writer lease lives without renewal on a NATS cluster: bounds a takeover ($TRESOR_LEASE_TTL)")
	withEnv(cmd.Flags(), "node-name", "lease-ttl")
	cmd.Flags().DurationVar(&cfg.SignificantMaxAge, "significant-max-age", 400*24*time.Hour, "how long the significant-event log keeps an entry (failed authentications, refused role checks)")
	cmd.Flags().DurationVar(&cfg.AccessLogMaxAge, "access-log-max-age", 400*24*time.Hour, "how long the access log keeps an entry (a staff read of a player's data)")
	cmd.Flags().Int64Var(&cfg.SignificantMaxBytes, "significant-max-bytes", 0, "bound of the significant-event log in bytes, and of the access log, past which their oldest entries go (default: a sixteenth of the data directory's free disk each, between 16 MiB and 1 GiB)")
	connectionFlag(cmd.Flags(), &cfg.DatabaseURL, "database-url", "PostgreSQL URL of the projections instead of memory ($TRESOR_DATABASE_URL; put a password there or in PGPASSWORD, not on the command line)")
	return cmd
}

// serve runs the service (serveOnce) until ctx ends or it fails. On the
// embedded default, a disk that filled up under a running service stops
// it without closing its port: it answers 503 with Retry-After, readiness
// "unavailable", until the disk has resumeFreeBytes free again, then
// starts again in this process. Its store refuses every write once one
// failed (nats-server keeps the error until it restarts), so the stream,
// the writer and the read models are opened anew, as by a restart, and
// nothing acknowledged is lost: the stream holds it, and the new writer
// rebuilds from it.
func serve(ctx context.Context, cfg *Config, log *slog.Logger) error {
	run := &serveRun{}
	defer run.close()
	var err error
	if run.provider, err = cfg.provider(ctx, log); err != nil {
		return err
	}
	for {
		err := serveOnce(ctx, cfg, log, run)
		if ctx.Err() != nil || !run.wrote || run.fr == nil || !errors.Is(err, eventstore.ErrNoSpace) {
			return noSpaceHint(cfg, err)
		}
		if !awaitSpace(ctx, log, cfg, run, err) {
			return nil
		}
	}
}

// serveRun is what outlives one run of serveOnce: its HTTP server,
// whether a writer ever ran, and the identity provider's verifier.
type serveRun struct {
	fr    *front
	pages http.Handler
	wrote bool
	// provider verifies the identity provider's tokens (nil without one);
	// its cached key set outlives a run.
	provider *api.Provider
}

// close shuts the HTTP server down, if one listens.
func (r *serveRun) close() {
	if r.fr != nil {
		r.fr.shutdown()
	}
}

// serveOnce runs the program until ctx ends or its writer stops, then stops
// in the order that loses nothing acknowledged: the HTTP server (in-flight
// requests finish), the writer (queued commands commit), the committer
// (its closing seal), the projections once they have applied all of it, the
// stream (program.close). A stopped writer makes it return an error: exit
// status 1.
//
// It listens before the writer has rebuilt its state, so that health and
// readiness answer during a long replay: every other endpoint answers 503
// unavailable until the service is ready (see readiness). On a cluster it
// listens before it opens anything (api.Opening meanwhile): each open may
// wait for the cluster's quorum.
func serveOnce(ctx context.Context, cfg *Config, log *slog.Logger, run *serveRun) error {
	p, err := newProgram(cfg, log, run)
	if err != nil {
		return err
	}
	failed := p.open(ctx)
	if failed == nil {
		failed = p.wait(ctx)
	}
	if err := p.close(ctx, failed); !errors.Is(err, errStartEnded) {
		return err
	}
	return nil
}

// errStartEnded is a start that ctx ended: serveOnce returns nil for it.
var errStartEnded = errors.New("serve stopped while it started")

// startFailed is what a step of serve's start returns when it failed with
// err: errStartEnded once ctx has ended (a SIGTERM while it waited for its
// stream, or for a restarting cluster's leaders: it has written nothing,
// and a supervisor stopping it should not read a failure), else err.
func startFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errStartEnded
	}
	return err
}

// storeWatch is the embedded server's refusal of a write: failed closes at
// the first, err says what it was, and hold keeps the HTTP server
// answering unavailable with a reason instead of shutting it down. Its
// zero value watches nothing.
type storeWatch struct {
	failed <-chan struct{}
	err    func() error
	hold   func()
	// full reports the data directory's disk as full: a batch the store
	// could not write in part is refused (an atomic batch incomplete)
	// without the server logging a write error.
	full func() bool
}

// diskFullFreeMax is the free space under --data below which a writer's
// failure is taken for a full disk.
const diskFullFreeMax = 1 << 20

// cause returns what made the writer's failure failed: the store's refused
// write, or a full disk, when there is one (eventstore.ErrNoSpace), else
// failed itself.
func (s storeWatch) cause(failed error) error {
	if failed == nil || s.err == nil {
		return failed
	}
	if err := s.err(); err != nil {
		return err
	}
	if s.full != nil && s.full() {
		return fmt.Errorf("%w: %w", eventstore.ErrNoSpace, failed)
	}
	return failed
}

// logStore adapts one of the event store's bounded logs (the
// significant-event log, the access log) to the API's LogStore.
type logStore struct{ log *eventstore.SignificantLog }

func (s logStore) Append(ctx context.Context, kind string, data []byte) (uint64, error) {
	return s.log.Append(ctx, kind, data)
}

func (s logStore) Read(ctx context.Context, kinds []string, after uint64, since time.Time, limit int) ([]api.StoredEntry, error) {
	entries, err := s.log.ReadKinds(ctx, kinds, after, since, limit)
	out := make([]api.StoredEntry, len(entries))
	for i, e := range entries {
		out[i] = api.StoredEntry{Seq: e.Seq, At: e.At, Kind: e.Kind, Data: e.Data}
	}
	return out, err
}

// catchUp waits, bounded by projections.WaitMax, until the projections have
// applied the stream's last sequence.
func catchUp(ctx context.Context, st *stream, store projections.Store) error {
	ctx = context.WithoutCancel(ctx)
	head, err := st.store.LastSequence(ctx)
	if err != nil {
		return err
	}
	return store.WaitFor(ctx, head)
}

// writerSide is what serve runs commands on: the settlement writer on the
// embedded default, the cluster node (writer or standby) with --nats.
type writerSide interface {
	api.Writer
	// Err says why it cannot take commands now, nil when it can.
	Err() error
}

// writerGate stands for the writer side in the API: until the writer has
// rebuilt its state (or the node has started), commands answer
// unavailable.
type writerGate struct {
	w atomic.Pointer[writerSide]
	// storeErr, when set, is the embedded store's refused write: no
	// command can be made durable after one.
	storeErr func() error
}

func (g *writerGate) open(w writerSide) { g.w.Store(&w) }

// Execute implements api.Writer.
func (g *writerGate) Execute(ctx context.Context, cmd domain.Command) (settlement.Result, error) {
	w := g.w.Load()
	if w == nil {
		return settlement.Result{}, fmt.Errorf("%w: the writer is rebuilding its state from the stream", api.ErrNotReady)
	}
	if g.storeErr != nil && g.storeErr() != nil {
		return settlement.Result{}, fmt.Errorf("%w: the store refused a write: %w", api.ErrNotReady, g.storeErr())
	}
	return (*w).Execute(ctx, cmd)
}

// LastSeq implements api.Writer.
func (g *writerGate) LastSeq() uint64 {
	if w := g.w.Load(); w != nil {
		return (*w).LastSeq()
	}
	return 0
}

// readiness follows serve on its way to consistent answers: the writer
// rebuilds its state, then the projections catch up with the head the
// writer started on (target). Once reached, the service is ready for good,
// but for the writer stopping or losing its connection to NATS, which make
// it unavailable.
type readiness struct {
	gate *writerGate
	// node is this process's cluster node with --nats, and claim its
	// claim on its name; nil otherwise.
	node   *cluster.Node
	claim  *eventstore.NameClaim
	runner *projections.Runner
	conn   *nats.Conn
	target atomic.Uint64
	ready  atomic.Bool
	// storeErr, when set, is the embedded store's refused write.
	storeErr func() error
	// rebuilding reports the in-memory read models dropping their rows
	// after a shard of their snapshot failed to load; nil otherwise.
	rebuilding func() bool
	// writerFailedAt is when the writer side was last seen unable to
	// take commands (Unix nanoseconds, 0 never): a cluster node's is ready
	// again only readyHold later, so that a takeover under way does not
	// flip a load balancer's check back and forth (an embedded writer
	// that fails stops the process).
	writerFailedAt atomic.Int64
}

// readyHold is how long a cluster node's commands must have been taken
// again before it says it is ready: while a takeover is under way its
// forward finds a writer, then none, then one again, and its readiness
// would change faster than a load balancer checks it.
const readyHold = 2 * time.Second

// state implements api.Config.Readiness; it does no I/O.
func (r *readiness) state() api.Readiness {
	w := r.gate.w.Load()
	rd := api.Readiness{ProjectionSeq: r.runner.Applied(), StartSeq: r.target.Load(), WriterSeq: r.gate.LastSeq(), SealSeq: r.runner.LastSeal()}
	if rd.WriterSeq > rd.ProjectionSeq {
		rd.Lag = rd.WriterSeq - rd.ProjectionSeq
	}
	// Each error is read once: a cluster node's changes under our feet,
	// and a second read could find it gone.
	var storeErr, writerErr error
	if r.storeErr != nil {
		storeErr = r.storeErr()
	}
	if w != nil {
		writerErr = (*w).Err()
	}
	switch {
	case w == nil:
		rd.Status, rd.Reason = api.StatusStarting, "the writer is rebuilding its state from the stream"
	case storeErr != nil:
		rd.Status, rd.Reason = api.StatusUnavailable, "the store refused a write: "+storeErr.Error()
	case writerErr != nil:
		rd.Status, rd.Reason = api.StatusUnavailable, writerErr.Error()
		r.writerFailedAt.Store(time.Now().UnixNano())
	case r.held():
		rd.Status, rd.Reason = api.StatusUnavailable, fmt.Sprintf("commands are taken again: ready once they have been for %s", readyHold)
	case r.rebuilding != nil && r.rebuilding():
		rd.Status, rd.Reason = api.StatusUnavailable, "the read models are being rebuilt from the stream: a shard of their snapshot failed to load"
	case !r.ready.Load() && rd.ProjectionSeq < rd.StartSeq:
		rd.Status, rd.Reason = api.StatusStarting, fmt.Sprintf("the projections are catching up: at %d of %d", rd.ProjectionSeq, rd.StartSeq)
	case r.conn.Status() != nats.CONNECTED:
		rd.Status, rd.Reason = api.StatusUnavailable, "the connection to NATS is "+strings.ToLower(r.conn.Status().String())
	case r.claim != nil && !r.claim.Held():
		// Cut off past the lease's TTL: another process may have
		// claimed the name meanwhile; the claim's next tick tells.
		rd.Status, rd.Reason = api.StatusUnavailable, "the claim on the node name lapsed while this process could not reach NATS: claiming it again"
	default:
		r.ready.Store(true)
		rd.Status = api.StatusReady
	}
	if w != nil && r.node != nil {
		s := r.node.Status()
		rd.Cluster = &api.ClusterStatus{Role: string(s.Role), LeaseHolder: s.Holder, Term: s.Term, StandbyLag: s.StandbyLag}
	}
	return rd
}

// held reports a cluster node whose writer side could not take commands
// less than readyHold ago.
func (r *readiness) held() bool {
	at := r.writerFailedAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < readyHold
}

// readyPoll is how often logWhenReady looks.
const readyPoll = 20 * time.Millisecond

// logWhenReady logs the time from start to ready, once.
func (r *readiness) logWhenReady(ctx context.Context, log *slog.Logger, started time.Time) {
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	for {
		if rd := r.state(); rd.Status == api.StatusReady {
			log.Info("ready", "after", time.Since(started).Round(time.Millisecond), "start_seq", rd.StartSeq, "projection_seq", rd.ProjectionSeq)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// openProjections opens PostgreSQL projections (migrated) with
// --database-url, the in-memory store otherwise.
func openProjections(ctx context.Context, cfg *Config, rules *domain.RuleSet) (projections.Store, error) {
	if cfg.DatabaseURL == "" {
		return memstore.New(rules), nil
	}
	pool, err := openDatabase(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if err := pgstore.Migrate(ctx, pool, pgstore.NamespaceDefault); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate projections: %w", err)
	}
	s, err := pgstore.Open(ctx, pool, pgstore.Config{Rules: rules})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return pooled{s, pool}, nil
}

// pooled closes the pool with the store.
type pooled struct {
	projections.Store
	pool interface{ Close() }
}

func (p pooled) Close() error {
	err := p.Store.Close()
	p.pool.Close()
	return err
}
