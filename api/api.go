// Package api is Tresor's HTTP API (/v1): players' plays and history,
// finance's reports and operators' commands, over the settlement writer and
// the projections. It is JSON in, JSON out, with RFC 9457 problem details
// carrying the stable codes of domain.Error, so that clients branch on a
// code and never on a message.
package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/settlement"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"
)

// Limits of the API: every request is bounded in size, time and rate.
const (
	// BodyMaxBytes bounds a request body; every body of the API is tiny.
	BodyMaxBytes = 4 << 10
	// BodyReadTimeout bounds the time a body takes to arrive once the
	// headers are in: a few KiB take milliseconds, so a body shorter than
	// its Content-Length or a stalled chunked body is a 400 within it, not
	// a request held until the server's read timeout.
	BodyReadTimeout = 2 * time.Second
	// bodyDepthMax bounds the nesting of a JSON body; the API's bodies
	// are flat objects.
	bodyDepthMax = 16
	// RequestTimeout bounds one request, the read-your-writes wait included.
	RequestTimeout = 15 * time.Second
	// RatePerSecond and RateBurst bound one token's requests by default
	// (Config.Rate).
	RatePerSecond = 200
	// RateBurst lets a client catch up after a pause.
	RateBurst = 400
	// limitersMax bounds the per-token limiter table; past it the table is
	// reset, which at worst grants a fresh burst.
	limitersMax = 100_000
	// emissionBlocksMax bounds one emission request.
	emissionBlocksMax = 1000
)

// Writer is the write side as the API sees it: the settlement writer, or
// whatever stands for it while it starts or lives elsewhere.
type Writer interface {
	// Execute decides a command and returns once its events are durable
	// (for a refusal or a retry, once what it was decided on is durable).
	// Errors: *domain.Error for a refusal, settlement.ErrStopped or
	// ErrNotReady when no writer can take it now, or the context's.
	Execute(ctx context.Context, cmd domain.Command) (settlement.Result, error)
	// LastSeq is the stream sequence of the last event known durable.
	LastSeq() uint64
}

// ErrNotReady is returned by a Writer that cannot take commands now: the
// service is starting, or has lost its stream. It is answered 503
// unavailable, with its message. It is settlement.ErrNotReady, which the
// cluster's writer side returns too.
var ErrNotReady = settlement.ErrNotReady

// ReadyStatus is where the service is on its way to answering consistently.
type ReadyStatus string

// Readiness statuses. A service is starting until its writer has rebuilt its
// state and its projections have caught up with the writer's head as it was
// then; it is ready afterwards, and unavailable (never starting again) while
// its writer has stopped or cannot reach the stream.
const (
	StatusStarting    ReadyStatus = "starting"
	StatusReady       ReadyStatus = "ready"
	StatusUnavailable ReadyStatus = "unavailable"
)

// Readiness is the service's readiness with the positions behind it.
type Readiness struct {
	Status ReadyStatus `json:"status"`
	// Reason says why the service is not ready ("" when it is).
	Reason string `json:"reason,omitempty"`
	// WriterSeq is the writer's last durable sequence, StartSeq the head
	// the projections must reach before the service is first ready, and
	// ProjectionSeq where they are.
	WriterSeq     uint64 `json:"writer_seq"`
	StartSeq      uint64 `json:"start_seq"`
	ProjectionSeq uint64 `json:"projection_seq"`
	// Lag is how many sequences the projections are behind the writer.
	Lag uint64 `json:"lag"`
	// SealSeq is the sequence of the last Seal the projections applied in
	// this process (0 before the first): where the chain was last signed.
	SealSeq uint64 `json:"seal_seq"`
	// Cluster is the node's place among the writers on a NATS cluster
	// (absent on the embedded default).
	Cluster *ClusterStatus `json:"cluster,omitempty"`
	// SalesSuspended are the suspensions of sales in force, once the
	// service is ready (absent when none is): a service whose sales are
	// stopped is ready, and says so.
	SalesSuspended []projections.Suspension `json:"sales_suspended,omitempty"`
}

// ClusterStatus is a node's place among the writers of a chain on a NATS
// cluster.
type ClusterStatus struct {
	// Role is "writer" or "standby".
	Role string `json:"role"`
	// LeaseHolder is the node holding the writer lease ("" during a
	// takeover) and Term the lease's term: it grows with each new writer.
	LeaseHolder string `json:"lease_holder"`
	Term        uint64 `json:"term"`
	// StandbyLag is how many sequences a standby's state is behind the
	// stream's head: what a takeover would replay.
	StandbyLag uint64 `json:"standby_lag"`
}

// Config is what the API stands on.
type Config struct {
	// Writer executes commands; every write of the API goes through it.
	Writer Writer
	// Readiness tells, without I/O, whether the service is ready; nil means
	// always ready. Until the service is first ready every endpoint but
	// health, readiness and metrics answers 503 unavailable.
	Readiness func() Readiness
	// Store is the projections every read is answered from.
	Store projections.Store
	// Runner gives the projection lag for /metrics; nil leaves it out.
	Runner *projections.Runner
	// Tokens verifies bearer tokens signed by Tresor's own keys.
	Tokens *Tokens
	// Provider verifies the tokens of the operator's identity provider;
	// nil accepts only Tresor's own.
	Provider *Provider
	// Logger receives internal errors, which answers never show.
	Logger *slog.Logger
	// Registry receives the API's metrics; nil uses a fresh registry.
	Registry *prometheus.Registry
	// Revocations is the set of revoked tokens every request's token is
	// checked against, fed from the stream; nil checks none (tests of
	// the API over read models alone).
	Revocations *Revocations
	// AccessLog records the staff's reads of players' data and reads them
	// back (GET /v1/access-log); nil keeps none.
	AccessLog *AccessLog
	// Significant records failed authentications and refused role checks
	// and reads them back (GET /v1/significant-events); nil keeps none.
	Significant *Significant
	// Rules is the rule set the reports compute theoretical returns from
	// (the default rule set when nil).
	Rules *domain.RuleSet
	// Clustered adds the metrics of the node's place on a NATS cluster
	// (role, lease term, standby lag), read from Readiness().Cluster.
	Clustered bool
	// Pages serves the web pages (/, /play, /history, /console and their
	// static files); nil serves none.
	Pages http.Handler
	// RatePerSecond and RateBurst bound one token's requests (every
	// spelling of it: Claims.identity); zero takes the package's defaults.
	RatePerSecond int
	RateBurst     int
	// Witness, when set, answers GET /v1/vault/cosignatures: the
	// regulator's vault's cosignatures the operator relays beside its
	// commitments, as the vault answers them (docs/vault.md); nil answers
	// 404 not_found.
	Witness func() ([]byte, error)
	// FreeBytes reads the free space under the data directory, for
	// tresor_data_free_bytes; nil leaves it out (on a cluster the stream's
	// disks are the NATS servers').
	FreeBytes func() (int64, error)
	// Personal opens the sealed personal fields of every answer, and
	// seals the staff subjects the significant-event log records
	// (docs/privacy.md); nil leaves both as they are.
	Personal Personal
}

// Server is the API's http.Handler.
type Server struct {
	cfg      Config
	mux      *http.ServeMux
	routes   []string
	limiters sync.Map
	nLimit   int64
	limitMu  sync.Mutex

	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	batch    prometheus.Histogram
	appendS  prometheus.Histogram
}

// NewServer builds the API over its dependencies.
func NewServer(cfg Config) *Server {
	s := newServer(cfg)
	cfg = s.cfg
	if cfg.Revocations != nil && cfg.Personal != nil {
		cfg.Revocations.matchBy(s.pseudonym)
	}
	s.registerComponentMetrics()
	s.registerServiceMetrics()
	if cfg.Clustered {
		s.registerClusterMetrics()
	}
	s.handle("GET /v1/health", nil, s.health)
	s.handle("GET /v1/ready", nil, s.ready)
	s.handle("GET /v1/me", roles(RolePlayer, RoleOperator, RoleFinance, RoleRegulator), s.me)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	s.routes = append(s.routes, "GET /metrics")
	s.handle("PUT /v1/players/{player}", roles(RoleOperator, RolePlayer), s.configure)
	s.handle("POST /v1/players/{player}/deposits", roles(RoleOperator), s.deposit)
	s.handle("POST /v1/players/{player}/withdrawals", roles(RoleOperator), s.withdraw)
	s.handle("GET /v1/players/{player}/account", roles(RolePlayer, RoleOperator, RoleFinance, RoleRegulator), s.account)
	s.handle("POST /v1/players/{player}/plays", roles(RolePlayer), s.play)
	s.handle("POST /v1/players/{player}/plays/{play}/throws", roles(RolePlayer), s.throw)
	s.handle("GET /v1/players/{player}/plays", roles(RolePlayer, RoleOperator, RoleRegulator), s.history)
	s.handle("GET /v1/players/{player}/plays/last", roles(RolePlayer, RoleOperator, RoleRegulator), s.lastPlay)
	s.handle("GET /v1/players/{player}/plays/{play}", roles(RolePlayer, RoleOperator, RoleRegulator), s.getPlay)
	s.handle("GET /v1/blocks", roles(RoleOperator, RoleFinance, RoleRegulator), s.blocks)
	s.handle("GET /v1/blocks/{block}", roles(RoleOperator, RoleFinance, RoleRegulator), s.block)
	s.handle("POST /v1/emissions", roles(RoleOperator), s.emission)
	s.handle("POST /v1/blocks/{block}/close", roles(RoleOperator), s.closeBlock)
	s.handle("GET /v1/reconciliation", roles(RoleFinance, RoleRegulator), s.reconciliation)
	// Responsible gaming and reporting: bans, statements, the report pack,
	// the significant-event log.
	s.handle("POST /v1/players/{player}/bans", roles(RoleOperator), s.ban)
	s.handle("DELETE /v1/players/{player}/bans/{ban}", roles(RoleOperator), s.liftBan)
	s.handle("GET /v1/players/{player}/bans", roles(RoleOperator, RoleRegulator), s.bans)
	s.handle("GET /v1/players/{player}/bans/{ban}", roles(RoleOperator, RoleRegulator), s.getBan)
	s.handle("GET /v1/players/{player}/statement", roles(RolePlayer, RoleOperator, RoleFinance, RoleRegulator), s.statement)
	for _, kind := range reportKinds {
		s.handle("GET /v1/reports/"+kind, roles(RoleFinance, RoleRegulator), s.report(kind))
	}
	s.handle("GET /v1/significant-events", roles(RoleOperator, RoleRegulator), s.significantEvents)
	// Revocations of tokens: an operator withdraws them, the regulator
	// sees who did and why.
	s.handle("GET /v1/access-log", roles(RoleRegulator), s.accessLogRead)
	s.handle("POST /v1/token-revocations", roles(RoleOperator), s.revoke)
	s.handle("GET /v1/token-revocations", roles(RoleOperator, RoleRegulator), s.revocations)
	// Closures: the player or the operator closes an account, the
	// operator reopens it.
	s.handle("POST /v1/players/{player}/closure", roles(RoleOperator, RolePlayer), s.closeAccount)
	s.handle("DELETE /v1/players/{player}/closure", roles(RoleOperator), s.reopenAccount)
	s.handle("POST /v1/erasures", roles(RoleOperator), s.erase)
	s.handle("POST /v1/erasures/{erasure}/approve", roles(RoleOperator), s.approveErasure)
	s.handle("POST /v1/erasures/{erasure}/reject", roles(RoleOperator), s.rejectErasure)
	s.handle("GET /v1/erasures", roles(RoleOperator, RoleRegulator), s.erasures)
	s.handle("GET /v1/erasures/{erasure}", roles(RoleOperator, RoleRegulator), s.getErasure)
	// Suspensions of sales: the operator stops and resumes a faulty game.
	s.handle("POST /v1/sales/suspensions", roles(RoleOperator), s.suspend)
	s.handle("DELETE /v1/sales/suspensions/{suspension}", roles(RoleOperator), s.resume)
	s.handle("GET /v1/sales/suspensions", roles(RoleOperator, RoleFinance, RoleRegulator), s.suspensions)
	s.handle("GET /v1/sales/suspensions/{suspension}", roles(RoleOperator, RoleFinance, RoleRegulator), s.getSuspension)
	// Adjustments: proposed by one staff subject, decided by another.
	s.handle("POST /v1/players/{player}/adjustments", roles(RoleOperator, RoleFinance), s.proposeAdjustment)
	s.handle("POST /v1/adjustments/{adjustment}/approve", roles(RoleOperator, RoleFinance), s.approveAdjustment)
	s.handle("POST /v1/adjustments/{adjustment}/reject", roles(RoleOperator, RoleFinance), s.rejectAdjustment)
	s.handle("GET /v1/adjustments", roles(RoleOperator, RoleFinance, RoleRegulator), s.adjustments)
	s.handle("GET /v1/adjustments/{adjustment}", roles(RoleOperator, RoleFinance, RoleRegulator), s.getAdjustment)
	s.handlePublic("GET /v1/commitments", s.commitments)
	s.handlePublic("GET /v1/commitments.ndjson", s.commitmentsFile)
	s.handlePublic("GET /v1/commitments/{block}", s.commitment)
	s.handlePublic("GET /v1/vault/cosignatures", s.witness)
	s.handlePages()
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.problem(w, r, &domain.Error{Code: domain.CodeNotFound, Message: "no such endpoint"})
	})
	return s
}

// registerComponentMetrics registers the metrics of the components the
// server was given: the compliance logs, the token revocations and the
// projections.
func (s *Server) registerComponentMetrics() {
	cfg := s.cfg
	if sig := cfg.Significant; sig != nil {
		cfg.Registry.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tresor_significant_events_total", Help: "Significant events stored (failed authentications, refused role checks)."},
				func() float64 { return float64(sig.q.recorded.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tresor_significant_events_left_out_total", Help: "Significant events over the rate limits, counted in suppressed entries."},
				func() float64 { return float64(sig.left.Load()) }))
	}
	if a := cfg.AccessLog; a != nil {
		cfg.Registry.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tresor_access_log_entries_total", Help: "Staff reads of players' data stored in the access log."},
				func() float64 { return float64(a.q.recorded.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tresor_access_log_dropped_total", Help: "Staff reads answered whose access-log entry was dropped (its queue full), counted in dropped entries."},
				func() float64 { return float64(a.droppedTotal.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tresor_access_log_failed_total", Help: "Access-log entries the log's stream refused."},
				func() float64 { return float64(a.q.failed.Load()) }))
	}
	if v := cfg.Revocations; v != nil {
		cfg.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tresor_token_revocations_age_seconds", Help: "Seconds since this node last read the token revocations in full (-1 before the first read); past 1.5 every token is refused."},
			func() float64 {
				age, read := v.age(time.Now())
				if !read {
					return -1
				}
				return age.Seconds() // float-ok: seconds, a duration
			}))
	}
	if cfg.Runner != nil {
		cfg.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tresor_projection_lag_events", Help: "Events the projections have yet to apply."}, func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			lag, err := cfg.Runner.Lag(ctx)
			if err != nil {
				return -1
			}
			return float64(lag.Events())
		}))
	}
}

// newServer is a Server with its defaults and its HTTP metrics, and no
// endpoint yet.
func newServer(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tresor_http_requests_total", Help: "HTTP requests by route and status code."}, []string{"route", "code"})
	s.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tresor_http_request_seconds", Help: "HTTP request latency by route.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"route"})
	s.batch = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tresor_append_events", Help: "Events appended per command.", Buckets: prometheus.LinearBuckets(1, 1, 8)})
	s.appendS = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tresor_append_seconds", Help: "Time from command to durable append.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
	cfg.Registry.MustRegister(s.requests, s.latency, s.batch, s.appendS)
	return s
}

// handlePages serves the pages, if any. They are static files and
// templates, not read models: they are served whatever the readiness, and
// say "starting" themselves while the API answers 503.
func (s *Server) handlePages() {
	if s.cfg.Pages == nil {
		return
	}
	for _, p := range []string{"GET /{$}", "GET /play", "GET /history", "GET /console", "GET /static/"} {
		s.mux.Handle(p, s.cfg.Pages)
	}
}

// Opening answers for a service whose Server cannot be built yet, its
// stream, buckets or read models still opening (on a NATS cluster without
// its quorum, for tens of seconds): health 200 with its readiness
// "starting", readiness 503 with reason() as its reason, the pages, and
// every other request 503 unavailable with Retry-After, as a Server answers
// while it starts, before any authentication, since nothing is read.
// Without it the port stayed closed meanwhile, and a load balancer's check
// saw a refused connection rather than a service on its way.
func Opening(pages http.Handler, reason func() string) http.Handler {
	return holding(pages, StatusStarting, reason)
}

// Unavailable answers as Opening does, with readiness "unavailable": for a
// service that stopped its writer and waits, listening, until it can start
// it again (a full disk), so that a client reads 503 and Retry-After
// rather than a refused connection.
func Unavailable(pages http.Handler, reason func() string) http.Handler {
	return holding(pages, StatusUnavailable, reason)
}

// holding answers health, readiness (status, reason()) and the pages, and
// every other request 503 unavailable with Retry-After.
func holding(pages http.Handler, status ReadyStatus, reason func() string) http.Handler {
	s := newServer(Config{Pages: pages, Readiness: func() Readiness { return Readiness{Status: status, Reason: reason()} }})
	s.handle("GET /v1/health", nil, s.health)
	s.handle("GET /v1/ready", nil, s.ready)
	s.handlePages()
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.problem(w, r, fmt.Errorf("%w: %s: %s", ErrNotReady, status, reason()))
	})
	return s
}

// Routes lists the registered "METHOD /path" patterns, for the test that
// holds the OpenAPI document to them.
func (s *Server) Routes() []string { return append([]string(nil), s.routes...) }

// tracer makes the API's spans; it does nothing unless serve was given an
// OTLP endpoint.
var tracer = otel.Tracer("github.com/fdj/tresor/api")

// ServeHTTP serves one request, bounded in time, counted by route and
// traced: a caller's traceparent header, if any, is the trace's parent.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), RequestTimeout)
	defer cancel()
	ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
	ctx, span := tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	rec := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	r = r.WithContext(ctx)
	s.mux.ServeHTTP(rec, r)
	route := r.Pattern
	if route == "" || route == "/" {
		route = "unmatched"
	}
	// The route's pattern, never its path: a path names the player.
	span.SetName(route)
	span.SetAttributes(attribute.String("http.route", route), attribute.Int("http.response.status_code", rec.code))
	if rec.code >= http.StatusInternalServerError {
		span.SetStatus(codes.Error, http.StatusText(rec.code))
	}
	s.requests.WithLabelValues(route, strconv.Itoa(rec.code)).Inc()
	s.latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
}

// statusWriter remembers the status code for the metrics.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// answered is the status w was answered with, 0 when w does not tell (a
// test calling the mux directly).
func answered(w http.ResponseWriter) int {
	if sw, ok := w.(*statusWriter); ok {
		return sw.code
	}
	return 0
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// deadlineBody is a request body read under BodyReadTimeout. The deadline
// is lifted once the body has been read to its end: net/http cancels a
// request whose connection read fails, and the handler's work after the
// body must not be cut short by a deadline meant for the body. After a
// failed read it stays, so that net/http's discarding of the unread rest
// before it answers fails at once too, instead of waiting for a body that
// is not coming.
type deadlineBody struct {
	io.ReadCloser
	rc *http.ResponseController
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// withBodyDeadline puts a request's body, if it has one, under
// BodyReadTimeout (where the connection allows it: not in tests that call
// ServeHTTP directly).
func withBodyDeadline(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 {
		return
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(BodyReadTimeout)) == nil {
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
	}
}

// handler is an endpoint: it returns the answer, or an error for a problem.
type handler func(r *http.Request, c *Claims) (status int, body any, err error)

// handle registers an endpoint behind authentication (when allowed is not
// nil), the per-token rate limit and the player-ownership check.
func (s *Server) handle(pattern string, allowed map[Role]bool, h handler) {
	s.routes = append(s.routes, pattern)
	logged := allowed != nil && s.cfg.AccessLog != nil && accessLogged(pattern)
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		withBodyDeadline(w, r)
		if err := refuseSealedInput(r); err != nil {
			s.problem(w, r, err)
			return
		}
		var claims *Claims
		if allowed != nil {
			c, err := s.authorize(r, allowed)
			if err != nil {
				s.problem(w, r, err)
				return
			}
			claims = c
			// A staff read of a player's data is recorded once answered;
			// a player's own read costs this one comparison.
			if logged && c.Role != RolePlayer {
				defer func() { s.logAccess(r, c, answered(w)) }()
			}
			// Nothing is answered from read models that have not caught
			// up with the log yet: stale data would pass for current.
			if rd := s.readiness(); rd.Status == StatusStarting {
				s.problem(w, r, fmt.Errorf("%w: starting: %s", ErrNotReady, rd.Reason))
				return
			}
		}
		status, body, err := h(r, claims)
		if err != nil {
			s.problem(w, r, err)
			return
		}
		if text, ok := body.(csvBody); ok {
			body = csvAnswer{body: string(text)}
		}
		if ans, ok := body.(csvAnswer); ok {
			for k, v := range ans.header {
				w.Header()[k] = v
			}
			w.Header().Set("Content-Type", "text/csv; charset=utf-8")
			w.WriteHeader(status)
			w.Write(s.reveal(r.Context(), []byte(ans.body), revealCSV))
			return
		}
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(body); err != nil {
			s.problem(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(status)
		w.Write(s.reveal(r.Context(), buf.Bytes(), revealJSON))
	})
}

// authorize checks the token, the role, the rate and, for a player, that
// the path's player is the token's: a player never learns anything about
// another, so the check comes before any read.
func (s *Server) authorize(r *http.Request, allowed map[Role]bool) (*Claims, error) {
	// The scheme's name is case-insensitive (RFC 9110 11.1).
	scheme, raw, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || raw == "" {
		s.signal(r, KindAuthenticationFailed, authFailure(errNoToken), nil)
		return nil, errUnauthorized
	}
	c, err := s.verifyToken(r.Context(), raw)
	if errors.Is(err, errProviderUnreachable) {
		return nil, &domain.Error{Code: codeUnavailable, Message: err.Error()}
	}
	if err != nil {
		s.signal(r, KindAuthenticationFailed, authFailure(err), nil)
		return nil, errUnauthorized
	}
	if v := s.cfg.Revocations; v != nil {
		if err := v.check(c, time.Now()); err != nil {
			if errors.Is(err, errTokenRevoked) {
				s.signal(r, KindAuthenticationFailed, "revoked token", c)
			}
			return nil, err
		}
	}
	id, err := c.identity()
	if err != nil {
		return nil, err
	}
	if !s.limiter(id).Allow() {
		return nil, errRateLimited
	}
	if !allowed[c.Role] {
		s.signal(r, KindForbidden, "role "+string(c.Role)+" may not use this endpoint", c)
		return nil, &domain.Error{Code: domain.CodeForbidden, Message: "role " + string(c.Role) + " may not do this"}
	}
	if c.Role == RolePlayer && strings.Contains(r.Pattern, "{player}") && r.PathValue("player") != c.Player {
		s.signal(r, KindForbidden, "a player names another player", c)
		return nil, &domain.Error{Code: domain.CodeForbidden, Message: "a player acts only on their own account"}
	}
	return c, nil
}

// actor is who a command of the request's token is recorded as given by.
// A token of the operator's staff without a subject gives no command:
// forbidden (recorded), since every command records who gave it.
func (s *Server) actor(r *http.Request, c *Claims) (*domain.Actor, error) {
	if a := c.Actor(); a != nil {
		return a, nil
	}
	s.signal(r, KindForbidden, "a command from a token without subject", c)
	return nil, &domain.Error{Code: domain.CodeForbidden, Message: "this token names no subject, and every command records who gave it: mint one with tresor token --subject"}
}

// limiter returns the rate limiter of a token's identity (Claims.identity).
func (s *Server) limiter(identity string) *rate.Limiter {
	if l, ok := s.limiters.Load(identity); ok {
		return l.(*rate.Limiter)
	}
	s.limitMu.Lock()
	defer s.limitMu.Unlock()
	if s.nLimit >= limitersMax {
		s.limiters.Clear()
		s.nLimit = 0
	}
	l, loaded := s.limiters.LoadOrStore(identity, rate.NewLimiter(rate.Limit(cmp.Or(s.cfg.RatePerSecond, RatePerSecond)), cmp.Or(s.cfg.RateBurst, RateBurst)))
	if !loaded {
		s.nLimit++
	}
	return l.(*rate.Limiter)
}

func roles(rs ...Role) map[Role]bool {
	m := make(map[Role]bool, len(rs))
	for _, r := range rs {
		m[r] = true
	}
	return m
}

// API-only codes, beside domain's.
const (
	codeUnauthorized domain.Code = "unauthorized"
	codeRateLimited  domain.Code = "rate_limited"
	// codeUnavailable: the request could not be served now, and a retry
	// (with the same idempotency key for a write) is safe.
	codeUnavailable domain.Code = "unavailable"
	// codeUnsupportedMediaType: a body declared as something else than
	// JSON.
	codeUnsupportedMediaType domain.Code = "unsupported_media_type"
	// codeTokenRevoked: a token that verifies, but that an operator
	// revoked.
	codeTokenRevoked domain.Code = "token_revoked"
)

var (
	errUnauthorized = &domain.Error{Code: codeUnauthorized, Message: "missing, invalid or expired bearer token"}
	errRateLimited  = &domain.Error{Code: codeRateLimited, Message: "too many requests for this token"}
	errAddrLimited  = &domain.Error{Code: codeRateLimited, Message: "too many requests from this address"}
)

// statusOf is the one table from error code to HTTP status.
var statusOf = map[domain.Code]int{
	domain.CodeInvalidRequest:    http.StatusBadRequest,
	domain.CodeInvalidStake:      http.StatusUnprocessableEntity,
	domain.CodeInsufficientFunds: http.StatusUnprocessableEntity,
	domain.CodeLimitExceeded:     http.StatusUnprocessableEntity,
	domain.CodeSelfExcluded:      http.StatusForbidden,
	domain.CodeBanned:            http.StatusForbidden,
	domain.CodeNotFound:          http.StatusNotFound,
	domain.CodeConflict:          http.StatusConflict,
	domain.CodeNoOpenBlock:       http.StatusConflict,
	domain.CodePlayFinished:      http.StatusConflict,
	domain.CodeThrowOutOfTurn:    http.StatusConflict,
	domain.CodeSalesSuspended:    http.StatusConflict,
	domain.CodeAccountClosed:     http.StatusConflict,
	domain.CodeFourEyes:          http.StatusForbidden,
	domain.CodeAdjustmentExpired: http.StatusConflict,
	domain.CodeErasureExpired:    http.StatusConflict,
	domain.CodeForbidden:         http.StatusForbidden,
	domain.CodeInternal:          http.StatusInternalServerError,
	codeUnauthorized:             http.StatusUnauthorized,
	codeTokenRevoked:             http.StatusUnauthorized,
	codeRateLimited:              http.StatusTooManyRequests,
	codeUnavailable:              http.StatusServiceUnavailable,
	codeUnsupportedMediaType:     http.StatusUnsupportedMediaType,
}

// problemJSON is an RFC 9457 problem detail with Tresor's stable code.
type problemJSON struct {
	Type   string      `json:"type"`
	Title  string      `json:"title"`
	Status int         `json:"status"`
	Code   domain.Code `json:"code"`
	Detail string      `json:"detail"`
}

// problem writes err as a problem detail; anything that is not a
// domain.Error (or a projections sentinel) is internal: logged, not shown.
func (s *Server) problem(w http.ResponseWriter, r *http.Request, err error) {
	var de *domain.Error
	switch {
	case errors.As(err, &de):
	case errors.Is(err, projections.ErrNotFound):
		de = &domain.Error{Code: domain.CodeNotFound, Message: "not found"}
	case errors.Is(err, projections.ErrInvalid):
		de = &domain.Error{Code: domain.CodeInvalidRequest, Message: err.Error()}
	case errors.Is(err, ErrNotReady):
		de = &domain.Error{Code: codeUnavailable, Message: "the service is not ready (" + strings.TrimPrefix(err.Error(), ErrNotReady.Error()+": ") + "); retry shortly, with the same idempotency key for a write"}
	case errors.Is(err, settlement.ErrStopped):
		s.cfg.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		de = &domain.Error{Code: codeUnavailable, Message: "the settlement writer has stopped; retry with the same idempotency key once the service is back"}
	case errors.Is(err, projections.ErrNotReached):
		de = &domain.Error{Code: codeUnavailable, Message: "recorded, but the projections have not caught up yet; read again shortly"}
	case errors.Is(err, context.DeadlineExceeded):
		de = &domain.Error{Code: codeUnavailable, Message: "no answer in time; the command may have been recorded: retry with the same idempotency key to learn its outcome"}
	default:
		s.cfg.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		de = &domain.Error{Code: domain.CodeInternal, Message: "internal error"}
	}
	status, ok := statusOf[de.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	switch status {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="tresor"`)
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		// A limited client's budget refills a request within a second at
		// the slowest rate allowed (--token-rate 1).
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(problemJSON{Type: "about:blank", Title: http.StatusText(status), Status: status, Code: de.Code, Detail: s.revealString(r.Context(), de.Message)})
}

// invalidf is an invalid_request problem.
func invalidf(format string, args ...any) error {
	return &domain.Error{Code: domain.CodeInvalidRequest, Message: fmt.Sprintf(format, args...)}
}

// decode reads exactly one JSON object of a bounded body into v, a pointer
// to a struct. Besides what encoding/json refuses (malformed JSON, unknown
// fields, wrong types), it refuses what encoding/json would quietly accept:
// a body declared as something else than JSON (415), a key repeated in an
// object at any depth (encoding/json keeps the last one) and a key that
// names a field of v only when case is ignored ("Amount" for "amount", or
// "ſ" folding to "s"). A body that does not arrive in full (shorter than
// its Content-Length, a broken chunked encoding, stalled past
// BodyReadTimeout) is a 400 too: the client's doing, never an internal error.
func decode(r *http.Request, v any) error {
	if err := jsonContent(r); err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, BodyMaxBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		var netErr net.Error
		switch {
		case errors.As(err, &tooBig):
			return invalidf("body over %d bytes", BodyMaxBytes)
		case errors.As(err, &netErr) && netErr.Timeout():
			return invalidf("body not received in full within %s", BodyReadTimeout)
		case errors.As(err, &netErr):
			return invalidf("body not received in full: the connection failed")
		}
		return invalidf("body not received in full: %v", err)
	}
	if err := checkKeys(body, jsonFields(reflect.TypeOf(v).Elem())); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalidf("malformed JSON body: %v", err)
	}
	return nil
}

// errSealedInput refuses a request that holds a sealed field's prefix. The
// answers open every sealed field they hold (reveal), so a sealed value
// copied from an export into a path, a header or a body that an answer
// echoes (a problem's detail, say) would come back opened: the API would
// decrypt anyone's data for whoever holds its ciphertext.
var errSealedInput = invalidf("no part of a request may hold a sealed field's prefix")

// refuseSealedInput refuses a path, query or header that holds a sealed
// field's prefix (decoded: percent-escapes are no way around it); decode
// refuses a body's strings.
func refuseSealedInput(r *http.Request) error {
	query, err := url.QueryUnescape(r.URL.RawQuery)
	if err != nil {
		query = r.URL.RawQuery
	}
	if strings.Contains(r.URL.Path, domain.SealedPrefix) || strings.Contains(query, domain.SealedPrefix) {
		return errSealedInput
	}
	for _, vs := range r.Header {
		for _, v := range vs {
			if strings.Contains(v, domain.SealedPrefix) {
				return errSealedInput
			}
		}
	}
	return nil
}

func isString(tok json.Token) bool {
	_, ok := tok.(string)
	return ok
}

// jsonContent refuses a body declared as anything but JSON in UTF-8
// (RFC 8259): application/json, with or without a charset parameter. A
// body without Content-Type is read as JSON.
func jsonContent(r *http.Request) error {
	cts := r.Header.Values("Content-Type")
	if len(cts) == 0 {
		return nil
	}
	if len(cts) == 1 {
		mt, params, err := mime.ParseMediaType(cts[0])
		cs, hasCharset := params["charset"]
		if err == nil && mt == "application/json" && (!hasCharset || strings.EqualFold(cs, "utf-8")) {
			return nil
		}
	}
	return &domain.Error{Code: codeUnsupportedMediaType, Message: fmt.Sprintf("Content-Type %.64q: want application/json", strings.Join(cts, ", "))}
}

// checkKeys walks body's tokens: it must be one JSON object, no object in it
// may repeat a key, and the keys of the top-level object must each be
// exactly one of fields. The walk is bounded by the body's size and by
// bodyDepthMax.
func checkKeys(body []byte, fields map[string]bool) error {
	// object is an open JSON object: its keys so far, and whether its next
	// token is a key (or its closing brace). An open array is a nil object.
	type object struct {
		keys   map[string]bool
		keyNow bool
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var open []*object
	for done := false; ; {
		tok, err := dec.Token()
		switch {
		case errors.Is(err, io.EOF) && done:
			return nil
		case errors.Is(err, io.EOF):
			return invalidf("body must be a JSON object")
		case err != nil:
			return invalidf("malformed JSON body: %v", err)
		case done:
			return invalidf("body must hold exactly one JSON value")
		case isString(tok) && strings.Contains(tok.(string), domain.SealedPrefix):
			return errSealedInput
		case len(open) == 0 && tok != json.Delim('{'):
			return invalidf("body must be a JSON object")
		}
		if n := len(open); n > 0 && open[n-1] != nil && open[n-1].keyNow {
			if tok != json.Delim('}') {
				o, k := open[n-1], tok.(string) // the decoder allows only a string here
				switch {
				case o.keys[k]:
					return invalidf("key %.64q appears twice in one object", k)
				case n == 1 && !fields[k]:
					return invalidf("unknown field %.64q (field names are case-sensitive)", k)
				}
				o.keys[k], o.keyNow = true, false
				continue
			}
			open = open[:n-1]
		} else {
			switch tok {
			case json.Delim('{'), json.Delim('['):
				if len(open) == bodyDepthMax {
					return invalidf("body nested deeper than %d", bodyDepthMax)
				}
				var o *object
				if tok == json.Delim('{') {
					o = &object{keys: map[string]bool{}, keyNow: true}
				}
				open = append(open, o)
				continue
			case json.Delim(']'):
				open = open[:len(open)-1]
			}
		}
		// A value has ended: the object holding it expects a key next.
		if n := len(open); n == 0 {
			done = true
		} else if open[n-1] != nil {
			open[n-1].keyNow = true
		}
	}
}

// jsonFields lists the names encoding/json gives the fields of struct type
// t (the API's request bodies are flat structs).
func jsonFields(t reflect.Type) map[string]bool {
	fields := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case !f.IsExported() || name == "-":
		case name == "":
			fields[f.Name] = true
		default:
			fields[name] = true
		}
	}
	return fields
}

// amount parses a decimal string amount strictly.
func amount(field, s string) (domain.Amount, error) {
	a, err := domain.ParseAmount(s)
	if err != nil {
		return 0, invalidf("%s %q: want a decimal string with at most two decimals", field, s)
	}
	return a, nil
}

// idempotencyKey returns the required Idempotency-Key header. Two of them
// are refused: which one the client meant is not ours to guess.
func idempotencyKey(r *http.Request) (string, error) {
	if n := len(r.Header.Values("Idempotency-Key")); n > 1 {
		return "", invalidf("one Idempotency-Key header, not %d", n)
	}
	k := r.Header.Get("Idempotency-Key")
	if k == "" || len(k) > 128 {
		return "", invalidf("Idempotency-Key header required, at most 128 characters")
	}
	return k, nil
}

// player returns the path's player id, checked.
func player(r *http.Request) (string, error) {
	p := r.PathValue("player")
	if !domain.ValidID(p) {
		return "", invalidf("player id %.80q is not valid", p)
	}
	return p, nil
}

// playID returns the path's play id, checked: a block id, "-U" and a
// six-digit unit (domain.PlayID).
func playID(r *http.Request) (string, error) {
	id := r.PathValue("play")
	if block, _, ok := domain.ParsePlayID(id); !ok || !domain.ValidID(block) {
		return "", invalidf("play id %.80q is not valid", id)
	}
	return id, nil
}

// execute runs a command until durable and records its append metrics.
func (s *Server) execute(ctx context.Context, cmd domain.Command) (settlement.Result, error) {
	start := time.Now()
	res, err := s.cfg.Writer.Execute(ctx, cmd)
	if err != nil {
		return res, fmt.Errorf("execute %T: %w", cmd, err)
	}
	if len(res.Events) > 0 {
		s.appendS.Observe(time.Since(start).Seconds())
		s.batch.Observe(float64(len(res.Events)))
	}
	return res, nil
}

// waitFor waits until the projections show seq, or, for seq 0 (an answer
// that carries no position), everything the writer has recorded.
func (s *Server) waitFor(ctx context.Context, seq uint64) error {
	if seq == 0 {
		seq = s.cfg.Writer.LastSeq()
	}
	ctx, span := tracer.Start(ctx, "projections.wait", trace.WithAttributes(attribute.Int64("tresor.seq", int64(seq))))
	defer span.End()
	if err := s.cfg.Store.WaitFor(ctx, seq); err != nil {
		return fmt.Errorf("read your writes at %d: %w", seq, err)
	}
	return nil
}

// registerServiceMetrics exports what the alert rules shipped with Tresor
// (deploy/prometheus) watch besides the requests: readiness and the
// positions behind it, finance's reconciliation and the data disk.
func (s *Server) registerServiceMetrics() {
	rd := func(f func(Readiness) float64) func() float64 {
		return func() float64 { return f(s.readiness()) }
	}
	s.cfg.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tresor_ready", Help: "1 while /v1/ready answers 200 (ready), 0 while starting or unavailable."},
			rd(func(r Readiness) float64 {
				if r.Status == StatusReady {
					return 1
				}
				return 0
			})),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tresor_writer_seq", Help: "The writer's last durable stream sequence, as this node knows it."},
			rd(func(r Readiness) float64 { return float64(r.WriterSeq) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tresor_projection_seq", Help: "The last stream sequence the read models applied."},
			rd(func(r Readiness) float64 { return float64(r.ProjectionSeq) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tresor_seal_seq", Help: "Sequence of the last Seal the read models applied in this process (0 before the first)."},
			rd(func(r Readiness) float64 { return float64(r.SealSeq) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tresor_reconciliation_difference_cents", Help: "Sum of the absolute differences of finance's reconciliation over every emission, in cents: 0 unless something is to investigate; -1 when it cannot be read."},
			func() float64 {
				cents, err := s.reconciliationDifference()
				if err != nil {
					return -1
				}
				return float64(cents) // float-ok: Prometheus's value type, holding whole cents (exact up to 2^53)
			}))
	if free := s.cfg.FreeBytes; free != nil {
		s.cfg.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tresor_data_free_bytes", Help: "Free space left to Tresor under its data directory (-1 when it cannot be read)."},
			func() float64 {
				n, err := free()
				if err != nil {
					return -1
				}
				return float64(n)
			}))
	}
}

// reconciliationDifference adds the absolute differences of the emission
// rows: 0 unless the books disagree somewhere.
func (s *Server) reconciliationDifference() (domain.Amount, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rows, err := s.cfg.Store.Reconciliation(ctx, projections.ScopeEmission, "")
	if err != nil {
		return 0, err
	}
	var sum domain.Amount
	for _, r := range rows {
		sum += max(r.Difference, -r.Difference)
	}
	return sum, nil
}

// registerClusterMetrics exports the node's role, the lease's term and the
// standby's lag.
func (s *Server) registerClusterMetrics() {
	cluster := func(f func(*ClusterStatus) float64) func() float64 {
		return func() float64 {
			if c := s.readiness().Cluster; c != nil {
				return f(c)
			}
			return 0
		}
	}
	s.cfg.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tresor_cluster_writer", Help: "1 while this node is the chain's writer (holds the lease), 0 on a standby."},
			cluster(func(c *ClusterStatus) float64 {
				if c.Role == "writer" {
					return 1
				}
				return 0
			})),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tresor_cluster_lease_term", Help: "Term of the writer lease as this node last saw it (0 during a takeover)."},
			cluster(func(c *ClusterStatus) float64 { return float64(c.Term) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tresor_cluster_standby_lag_events", Help: "Sequences the standby's state is behind the stream's head (what a takeover replays)."},
			cluster(func(c *ClusterStatus) float64 { return float64(c.StandbyLag) })))
}

// readiness returns the service's readiness: ready when nothing tells (an
// API over read models alone, as in tests).
func (s *Server) readiness() Readiness {
	if s.cfg.Readiness == nil {
		return Readiness{Status: StatusReady}
	}
	return s.cfg.Readiness()
}

// health is liveness: the process answers. It stays cheap and 200 whatever
// the readiness, which it shows beside the positions.
func (s *Server) health(r *http.Request, _ *Claims) (int, any, error) {
	rd := s.readiness()
	out := map[string]any{"status": "ok", "readiness": rd.Status, "projection_seq": rd.ProjectionSeq, "writer_seq": rd.WriterSeq}
	if rd.Cluster != nil {
		out["cluster"] = rd.Cluster
	}
	return http.StatusOK, out, nil
}

// ready is readiness: 200 once the writer has rebuilt its state and the
// projections have caught up with its head as it was then, 503 with
// Retry-After before that and while the writer has stopped or lost the
// stream.
func (s *Server) ready(r *http.Request, _ *Claims) (int, any, error) {
	rd := s.readiness()
	if rd.Status != StatusReady {
		return http.StatusServiceUnavailable, rd, nil
	}
	rd.SalesSuspended = s.salesSuspended(r.Context())
	return http.StatusOK, rd, nil
}

// csvBody is an answer written as text/csv.
type csvBody string
