package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fdj/tresor/domain"
)

// Limits of the access log: staff reads are recorded off the requests'
// path, and a flood of them is counted rather than waited for.
const (
	// accessQueueMax bounds the entries waiting to be stored; past it a
	// read is answered all the same and its entry counted as dropped.
	accessQueueMax = 8192
	// accessFlushEvery is how often the count of dropped entries is
	// recorded (when some were).
	accessFlushEvery = time.Second
	// accessScanMax bounds the entries one read of the log looks at when
	// it filters by subject: a page may then hold fewer than its limit,
	// with a next cursor.
	accessScanMax = 10_000
	// AccessPageMax bounds one page of GET /v1/access-log.
	AccessPageMax = 1000
	// accessStoredAfterMax bounds how long after a read its entry is
	// stored (its queue, then the store's timeout): a read of the log
	// from a time starts that much earlier among the stored entries, and
	// keeps those read from that time.
	accessStoredAfterMax = time.Minute
)

// Kinds of access-log entry: a staff read, and a count of reads whose
// entry was dropped.
const (
	AccessRead    = "read"
	AccessDropped = "dropped"
)

// AccessEntry is one entry of the access log: a read of a player's data
// with a staff token (operator, finance, regulator), or a count of such
// reads left out. Its JSON keys are a contract: add, never rename.
type AccessEntry struct {
	Seq  uint64    `json:"seq"`
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// Subject and Role are the token's: who read.
	Subject string `json:"subject,omitempty"`
	Role    string `json:"role,omitempty"`
	// Player is whose data was read ("" for a listing of several
	// players' data that names none).
	Player string `json:"player,omitempty"`
	// Method, Route (the endpoint's pattern), Path and Status describe the
	// request and its answer.
	Method string `json:"method,omitempty"`
	Route  string `json:"route,omitempty"`
	Path   string `json:"path,omitempty"`
	Status int    `json:"status,omitempty"`
	// Count and Since are, for a dropped entry, how many reads were left
	// out of the log, since when.
	Count int        `json:"count,omitempty"`
	Since *time.Time `json:"since,omitempty"`
}

// accessKind is the subject tokens an entry is stored under: a player's
// reads on their own, so that the reads of one player are read alone.
func accessKind(e AccessEntry) string {
	switch {
	case e.Kind == AccessDropped:
		return "dropped.all"
	case e.Player != "":
		return "player." + e.Player
	}
	return "listing.all"
}

// AccessLog records staff reads of players' data and reads them back
// (GET /v1/access-log): a request offers its entry and never waits.
type AccessLog struct {
	q *logQueue[AccessEntry]

	mu      sync.Mutex
	dropped int
	since   time.Time
	// droppedTotal counts the entries dropped, for /metrics.
	droppedTotal atomic.Uint64
}

// NewAccessLog returns the access log over a store; Run stores what it
// records.
func NewAccessLog(store LogStore, logger *slog.Logger) *AccessLog {
	return newAccessLog(store, logger, accessQueueMax)
}

// newAccessLog is NewAccessLog with a queue of size entries.
func newAccessLog(store LogStore, logger *slog.Logger, size int) *AccessLog {
	return &AccessLog{q: newLogQueue(store, logger, "access log", size, accessKind)}
}

// Run stores the queued entries, and every second the count of those
// dropped, until ctx ends.
func (a *AccessLog) Run(ctx context.Context) { a.q.run(ctx, accessFlushEvery, a.flush) }

// record queues an entry, or counts it as dropped when the queue is full.
func (a *AccessLog) record(e AccessEntry) {
	if a.q.offer(e) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dropped == 0 {
		a.since = e.At
	}
	a.dropped++
	a.droppedTotal.Add(1)
}

// flush records how many entries were dropped, if any, so that a reader
// of the log learns that reads are missing from it, and since when.
func (a *AccessLog) flush(ctx context.Context) {
	a.mu.Lock()
	n, since := a.dropped, a.since
	a.dropped = 0
	a.mu.Unlock()
	if n > 0 {
		a.q.store1(ctx, AccessEntry{At: time.Now().UTC(), Kind: AccessDropped, Count: n, Since: &since})
	}
}

// AccessQuery selects entries of the access log.
type AccessQuery struct {
	// Player and Subject keep the reads of one player, by one subject
	// ("": any); dropped entries are kept whatever they say.
	Player, Subject string
	// sealed is Subject as the log records it since staff subjects are
	// sealed (docs/privacy.md); entries from before hold it in clear.
	sealed string
	// From and To bound the reads' times, [From, To) (zero: open).
	From, To time.Time
	After    uint64
	Limit    int
}

// accessPageJSON is a page of the access log.
type accessPageJSON struct {
	Entries []AccessEntry `json:"entries"`
	// Next is the cursor (after) of the next page, absent at the end.
	Next string `json:"next,omitempty"`
}

// Read returns a page of the entries q selects, oldest first, looking at
// no more than accessScanMax entries.
func (a *AccessLog) Read(ctx context.Context, q AccessQuery) (accessPageJSON, error) {
	var kinds []string
	if q.Player != "" {
		kinds = []string{accessKind(AccessEntry{Player: q.Player}), accessKind(AccessEntry{Kind: AccessDropped})}
	}
	var storedFrom time.Time
	if !q.From.IsZero() {
		storedFrom = q.From.Add(-accessStoredAfterMax)
	}
	out := accessPageJSON{Entries: []AccessEntry{}}
	after := q.After
	for scanned := 0; scanned < accessScanMax; {
		stored, err := a.q.store.Read(ctx, kinds, after, storedFrom, q.Limit)
		if err != nil {
			return accessPageJSON{}, err
		}
		for _, st := range stored {
			scanned, after = scanned+1, st.Seq
			var e AccessEntry
			if err := json.Unmarshal(st.Data, &e); err != nil {
				e = AccessEntry{At: st.At, Kind: AccessRead, Route: "unreadable entry"}
			}
			e.Seq = st.Seq
			switch {
			case !q.To.IsZero() && !e.At.Before(q.To.Add(accessStoredAfterMax)):
				// Stored in the order they were read, give or take the
				// queue: no entry after this one was read before To.
				return out, nil
			case !q.To.IsZero() && !e.At.Before(q.To), e.At.Before(q.From),
				q.Subject != "" && e.Kind == AccessRead && e.Subject != q.Subject && e.Subject != q.sealed:
				continue
			}
			if out.Entries = append(out.Entries, e); len(out.Entries) == q.Limit {
				out.Next = strconv.FormatUint(after, 10)
				return out, nil
			}
		}
		if len(stored) < q.Limit {
			return out, nil
		}
	}
	out.Next = strconv.FormatUint(after, 10)
	return out, nil
}

// accessListings are the endpoints, besides those of a player's path,
// whose answers hold players' data.
var accessListings = map[string]bool{
	"GET /v1/adjustments":              true,
	"GET /v1/adjustments/{adjustment}": true,
	"GET /v1/erasures":                 true,
	"GET /v1/erasures/{erasure}":       true,
	"GET /v1/reports/large-wins":       true,
}

// accessLogged reports whether a staff read of the endpoint is recorded:
// a read of a player's data.
func accessLogged(pattern string) bool {
	return strings.HasPrefix(pattern, "GET ") && (strings.Contains(pattern, "{player}") || accessListings[pattern])
}

// logAccess records a staff read of a player's data, answered status. A
// player's own reads never come here.
func (s *Server) logAccess(r *http.Request, c *Claims, status int) {
	p := r.PathValue("player")
	if p == "" && domain.ValidID(r.URL.Query().Get("player")) {
		p = r.URL.Query().Get("player")
	}
	path := r.URL.Path
	if len(path) > significantPathMax {
		path = path[:significantPathMax]
	}
	s.cfg.AccessLog.record(AccessEntry{At: time.Now().UTC(), Kind: AccessRead, Subject: s.storedSubject(c), Role: string(c.Role),
		Player: p, Method: r.Method, Route: r.Pattern, Path: path, Status: status})
}

// accessLogRead answers GET /v1/access-log?player=&subject=&from=&to=&after=&limit=.
func (s *Server) accessLogRead(r *http.Request, _ *Claims) (int, any, error) {
	if s.cfg.AccessLog == nil {
		return 0, nil, &domain.Error{Code: domain.CodeNotFound, Message: "this server keeps no access log"}
	}
	v := r.URL.Query()
	q := AccessQuery{Player: v.Get("player"), Subject: v.Get("subject")}
	var err error
	if q.Limit, q.After, err = pageQuery(v.Get("limit"), v.Get("after"), AccessPageMax); err != nil {
		return 0, nil, err
	}
	if q.Player != "" && !domain.ValidID(q.Player) {
		return 0, nil, invalidf("player id %.80q is not valid", q.Player)
	}
	if q.Subject != "" && !domain.ValidSubject(q.Subject) {
		return 0, nil, invalidf("subject %.80q is not valid", q.Subject)
	}
	q.sealed = s.sealedSubject(q.Subject)
	for name, t := range map[string]*time.Time{"from": &q.From, "to": &q.To} {
		if text := v.Get(name); text != "" {
			if *t, err = time.Parse(time.RFC3339Nano, text); err != nil {
				return 0, nil, invalidf("%s %.64q: want an RFC 3339 time", name, text)
			}
		}
	}
	page, err := s.cfg.AccessLog.Read(r.Context(), q)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, page, nil
}
