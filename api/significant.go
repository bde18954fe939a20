package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// SignificantStore keeps the significant-event log: a store of its own,
// bounded, never the event log (docs/compliance.md says why).
type SignificantStore interface {
	// Append stores one entry of a kind and returns its sequence.
	Append(ctx context.Context, kind string, data []byte) (uint64, error)
	// Read returns up to limit entries after sequence after, recorded at
	// or after since (zero: any), oldest first.
	Read(ctx context.Context, after uint64, since time.Time, limit int) ([]StoredEntry, error)
}

// StoredEntry is an entry as the SignificantStore returns it.
type StoredEntry struct {
	Seq  uint64
	At   time.Time
	Kind string
	Data []byte
}

// Kinds of significant event.
const (
	// KindAuthenticationFailed: a request without a valid bearer token.
	KindAuthenticationFailed = "authentication_failed"
	// KindForbidden: a valid token refused by a role check (its role may
	// not use the endpoint, a player names another player, a token without
	// subject gives a command).
	KindForbidden = "forbidden"
	// KindSuppressed: how many entries the rate limits left out since the
	// last such entry.
	KindSuppressed = "suppressed"
)

// SignificantEvent is one entry of the significant-event log, as the API
// answers it. It never holds the token, nor anything of its claims when
// the token did not verify. Its JSON keys are a contract: add, never
// rename.
type SignificantEvent struct {
	Seq  uint64    `json:"seq"`
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// Method, Route (the endpoint's pattern), Path and RemoteAddr (the
	// peer's address as the server saw it) describe the request.
	Method     string `json:"method,omitempty"`
	Route      string `json:"route,omitempty"`
	Path       string `json:"path,omitempty"`
	RemoteAddr string `json:"remote_addr,omitempty"`
	// Reason says what failed, from a fixed set of sentences.
	Reason string `json:"reason"`
	// Role and Subject are the verified token's, for a refused role check.
	Role    string `json:"role,omitempty"`
	Subject string `json:"subject,omitempty"`
	// Count is, for a suppressed entry, how many entries were left out.
	Count int `json:"count,omitempty"`
}

// Limits of the significant-event log's writing: a flood of failed logins
// is recorded, bounded, and summarised rather than dropped silently.
const (
	// significantQueueMax bounds the entries waiting to be stored.
	significantQueueMax = 4096
	// significantPerAddr and significantPerAddrBurst bound the entries of
	// one remote address; significantRate and significantBurst all of them.
	significantPerAddr      = 5
	significantPerAddrBurst = 20
	significantRate         = 100
	significantBurst        = 1000
	// significantAddrsMax bounds the per-address limiters kept.
	significantAddrsMax = 100_000
	// significantFlushEvery is how often the count of entries left out is
	// recorded (when some were).
	significantFlushEvery = time.Second
	// significantPathMax bounds the request path an entry records.
	significantPathMax = 256
	// SignificantPageMax bounds one read of the log.
	SignificantPageMax = 1000
)

// Significant records the significant events of the API: it rates them,
// queues them and stores them in the background, so that no request waits
// for the log and no flood of them grows it past its limits.
type Significant struct {
	store  SignificantStore
	logger *slog.Logger
	queue  chan SignificantEvent
	global *rate.Limiter

	mu         sync.Mutex
	perAddr    map[string]*rate.Limiter
	suppressed int
	since      time.Time

	// recorded and left count entries, for /metrics.
	recorded, left atomic.Uint64
}

// NewSignificant returns the recorder over a store; Run stores what it
// records.
func NewSignificant(store SignificantStore, logger *slog.Logger) *Significant {
	if logger == nil {
		logger = slog.Default()
	}
	return &Significant{store: store, logger: logger, queue: make(chan SignificantEvent, significantQueueMax),
		global: rate.NewLimiter(significantRate, significantBurst), perAddr: map[string]*rate.Limiter{}}
}

// record queues an entry, unless the rate limits or a full queue leave it
// out, when it is counted for the next suppressed entry. It never blocks.
func (s *Significant) record(e SignificantEvent) {
	host, _, err := net.SplitHostPort(e.RemoteAddr)
	if err != nil {
		host = e.RemoteAddr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.perAddr[host]
	if l == nil {
		if len(s.perAddr) >= significantAddrsMax {
			clear(s.perAddr)
		}
		l = rate.NewLimiter(significantPerAddr, significantPerAddrBurst)
		s.perAddr[host] = l
	}
	if l.Allow() && s.global.Allow() {
		select {
		case s.queue <- e:
			return
		default:
		}
	}
	if s.suppressed == 0 {
		s.since = e.At
	}
	s.suppressed++
	s.left.Add(1)
}

// Run stores the queued entries, and every second the count of those left
// out, until ctx ends; then it stores what is queued, bounded by a few
// seconds.
func (s *Significant) Run(ctx context.Context) {
	tick := time.NewTicker(significantFlushEvery)
	defer tick.Stop()
	for {
		select {
		case e := <-s.queue:
			s.store1(ctx, e)
		case <-tick.C:
			s.flush(ctx)
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			for {
				select {
				case e := <-s.queue:
					s.store1(dctx, e)
				default:
					s.flush(dctx)
					return
				}
			}
		}
	}
}

// flush records how many entries were left out, if any.
func (s *Significant) flush(ctx context.Context) {
	s.mu.Lock()
	n, since := s.suppressed, s.since
	s.suppressed = 0
	s.mu.Unlock()
	if n > 0 {
		s.store1(ctx, SignificantEvent{At: time.Now().UTC(), Kind: KindSuppressed, Count: n,
			Reason: "entries over the rate limits since " + since.Format(time.RFC3339Nano) + " left out"})
	}
}

// store1 stores one entry; a failure is logged (the log is not the
// ledger: a lost entry loses no money and stops nothing).
func (s *Significant) store1(ctx context.Context, e SignificantEvent) {
	data, err := json.Marshal(e)
	if err == nil {
		_, err = s.store.Append(ctx, e.Kind, data)
	}
	if err != nil {
		s.logger.Error("significant-event log", "kind", e.Kind, "err", err)
		return
	}
	s.recorded.Add(1)
}

// Read returns up to limit entries after sequence after, recorded at or
// after since (zero: any), oldest first.
func (s *Significant) Read(ctx context.Context, after uint64, since time.Time, limit int) ([]SignificantEvent, error) {
	stored, err := s.store.Read(ctx, after, since, limit)
	if err != nil {
		return nil, err
	}
	out := make([]SignificantEvent, 0, len(stored))
	for _, st := range stored {
		var e SignificantEvent
		if err := json.Unmarshal(st.Data, &e); err != nil {
			e = SignificantEvent{Kind: st.Kind, Reason: "unreadable entry"}
		}
		e.Seq = st.Seq
		out = append(out, e)
	}
	return out, nil
}

// signal records a refused request: a failed authentication (claims nil)
// or a refused role check.
func (s *Server) signal(r *http.Request, kind, reason string, c *Claims) {
	if s.cfg.Significant == nil {
		return
	}
	path := r.URL.Path
	if len(path) > significantPathMax {
		path = path[:significantPathMax]
	}
	e := SignificantEvent{At: time.Now().UTC(), Kind: kind, Method: r.Method, Route: r.Pattern, Path: path,
		RemoteAddr: r.RemoteAddr, Reason: reason}
	if c != nil {
		e.Role, e.Subject = string(c.Role), c.Subject
		if e.Subject == "" {
			e.Subject = c.Player
		}
	}
	s.cfg.Significant.record(e)
}

// authFailure says why a token was refused, without anything of it.
func authFailure(err error) string {
	switch {
	case errors.Is(err, errNoToken):
		return "no bearer token"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "expired token"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "bad signature"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed token"
	case errors.Is(err, errRoleAndPlayer), errors.Is(err, errBadSubject):
		return "claims that do not agree"
	}
	return "invalid token"
}

// errNoToken is a request without a bearer token.
var errNoToken = errors.New("no bearer token")

// significantJSON is a page of the significant-event log.
type significantJSON struct {
	Events []SignificantEvent `json:"events"`
	// Next is the cursor (after) of the next page, absent when the page
	// was not full.
	Next string `json:"next,omitempty"`
}

// significantEvents answers GET /v1/significant-events?after=&since=&limit=.
func (s *Server) significantEvents(r *http.Request, _ *Claims) (int, any, error) {
	if s.cfg.Significant == nil {
		return 0, nil, &domain.Error{Code: domain.CodeNotFound, Message: "this server keeps no significant-event log"}
	}
	q := r.URL.Query()
	limit := 100
	var after uint64
	var since time.Time
	var err error
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > SignificantPageMax {
			return 0, nil, invalidf("limit %.32q: want 1 to %d", v, SignificantPageMax)
		}
	}
	if v := q.Get("after"); v != "" {
		if after, err = strconv.ParseUint(v, 10, 64); err != nil {
			return 0, nil, invalidf("after %.32q: want a sequence of the log", v)
		}
	}
	if v := q.Get("since"); v != "" {
		if since, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return 0, nil, invalidf("since %.64q: want an RFC 3339 time", v)
		}
	}
	events, err := s.cfg.Significant.Read(r.Context(), after, since, limit)
	if err != nil {
		return 0, nil, err
	}
	out := significantJSON{Events: events}
	if len(events) == limit {
		out.Next = strconv.FormatUint(events[len(events)-1].Seq, 10)
	}
	return http.StatusOK, out, nil
}
