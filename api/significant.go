package api

import (
	"cmp"
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

	"github.com/MicahParks/keyfunc/v3"
	"github.com/fdj/tresor/domain"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// LogStore keeps a log of the API's own, the significant-event log or the
// access log: a store of its own, bounded, never the event log
// (docs/compliance.md and docs/security.md say why).
type LogStore interface {
	// Append stores one entry of a kind and returns its sequence.
	Append(ctx context.Context, kind string, data []byte) (uint64, error)
	// Read returns up to limit entries of kinds (nil: any; a kind may end
	// in the wildcard "*") after sequence after, recorded at or after
	// since (zero: any), oldest first.
	Read(ctx context.Context, kinds []string, after uint64, since time.Time, limit int) ([]StoredEntry, error)
}

// StoredEntry is an entry as the LogStore returns it.
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
	q      *logQueue[SignificantEvent]
	global *rate.Limiter

	mu         sync.Mutex
	perAddr    map[string]*rate.Limiter
	suppressed int
	since      time.Time

	// left counts the entries left out, for /metrics.
	left atomic.Uint64
}

// NewSignificant returns the recorder over a store; Run stores what it
// records.
func NewSignificant(store LogStore, logger *slog.Logger) *Significant {
	q := newLogQueue(store, logger, "significant-event log", significantQueueMax, func(e SignificantEvent) string { return e.Kind })
	return &Significant{q: q, global: rate.NewLimiter(significantRate, significantBurst), perAddr: map[string]*rate.Limiter{}}
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
	if l.Allow() && s.global.Allow() && s.q.offer(e) {
		return
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
func (s *Significant) Run(ctx context.Context) { s.q.run(ctx, significantFlushEvery, s.flush) }

// flush records how many entries were left out, if any.
func (s *Significant) flush(ctx context.Context) {
	s.mu.Lock()
	n, since := s.suppressed, s.since
	s.suppressed = 0
	s.mu.Unlock()
	if n > 0 {
		s.q.store1(ctx, SignificantEvent{At: time.Now().UTC(), Kind: KindSuppressed, Count: n,
			Reason: "entries over the rate limits since " + since.Format(time.RFC3339Nano) + " left out"})
	}
}

// Read returns up to limit entries after sequence after, recorded at or
// after since (zero: any), oldest first.
func (s *Significant) Read(ctx context.Context, after uint64, since time.Time, limit int) ([]SignificantEvent, error) {
	stored, err := s.q.store.Read(ctx, nil, after, since, limit)
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
		e.Role, e.Subject = string(c.Role), s.sealSubject(c)
	}
	s.cfg.Significant.record(e)
}

// sealSubject is the subject a significant event records: a player's id
// in clear, a staff subject sealed under its data key as on the stream
// (docs/privacy.md), or none when it cannot be sealed.
func (s *Server) sealSubject(c *Claims) string {
	if c.Subject == "" || c.Role == RolePlayer || s.cfg.Personal == nil {
		return cmp.Or(c.Subject, c.Player)
	}
	return s.storedSubject(c)
}

// storedSubject is a staff token's subject as the stream and the read
// models hold it: sealed under its data key, or "" when it cannot be.
func (s *Server) storedSubject(c *Claims) string { return s.sealedSubject(c.Subject) }

// sealedSubject is a staff subject as the stream holds it.
func (s *Server) sealedSubject(subject string) string {
	if s.cfg.Personal == nil || subject == "" {
		return subject
	}
	sealed, err := s.cfg.Personal.Seal(domain.Owner{Subject: subject}, subject)
	if err != nil {
		s.cfg.Logger.Error("a staff subject not sealed, left out", "err", err)
		return ""
	}
	return sealed
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
	case errors.Is(err, errRoleAndPlayer), errors.Is(err, errBadSubject), errors.Is(err, errNoRole):
		return "claims that do not agree"
	case errors.Is(err, errLifetime), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "no issue time, or too long a life"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "another issuer"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "another audience"
	case errors.Is(err, errKeyRetired):
		return "a replaced key past its grace"
	case errors.Is(err, errUnknownKeyID), errors.Is(err, errNoKeyID), errors.Is(err, keyfunc.ErrKeyfunc):
		return "unknown key"
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
	limit, after, err := pageQuery(q.Get("limit"), q.Get("after"), SignificantPageMax)
	if err != nil {
		return 0, nil, err
	}
	var since time.Time
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
